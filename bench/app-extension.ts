/**
 * What an app process built and started with BENCH=1 adds for the benchmark, through the product's
 * extension seam (server/app/extension.ts): next.config.mjs resolves `#app-extension` to this file
 * in a BENCH=1 build, and instrumentation.ts installs it before the first request and the first
 * database connection. It counts the process's statements on the wire (./wire-count.ts) and serves
 * the bench procedures (./router.ts) beside the product's.
 */
import { configureConnections, databaseUrl } from '@/db/client';
import type { AppExtension } from '@/server/app/extension';
import { extendAppRouter } from '@/server/trpc/root';
import { benchRouter } from './router';
import { countingConnectionOptions } from './wire-count';

const benchExtension: AppExtension = {
  install() {
    configureConnections(countingConnectionOptions(databaseUrl()));
    extendAppRouter({ bench: benchRouter });
  },
};
export default benchExtension;
