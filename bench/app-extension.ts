/**
 * What an app process started with BENCH=1 adds for the benchmark, and nothing else ever loads:
 * instrumentation.ts imports this file only under BENCH=1, before the first request and the first
 * database connection. It counts the process's statements on the wire (./wire-count.ts) and serves
 * the bench procedures (./router.ts) beside the product's.
 */
import { configureConnections, databaseUrl } from '../db/client';
import { extendAppRouter } from '../server/trpc/root';
import { benchRouter } from './router';
import { countingConnectionOptions } from './wire-count';

export function installBenchExtension(): void {
  configureConnections(countingConnectionOptions(databaseUrl()));
  extendAppRouter({ bench: benchRouter });
}
