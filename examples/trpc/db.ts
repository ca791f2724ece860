/**
 * The tRPC example's database in a Next.js app: one postgres.js pool per process, on `globalThis` so
 * that the module instances Next makes of it (route handlers, instrumentation, development reloads)
 * share it, and opened on the first request, never at module top level (Next evaluates route modules
 * during `next build`, when there is no database). The first request also makes the tables — the
 * package's `applyIdempotencySchema` (under an advisory lock, so instances may start together) and
 * the example's charges table — and every request waits for that to be done.
 */
import postgres from 'postgres';
import { applyIdempotencySchema } from '@payonce/idempotency/postgres';
import { CHARGES_TABLE_SQL } from '../route-handler/db';
import { createExampleApp } from './server';

type ExampleApp = ReturnType<typeof createExampleApp>;
interface ExampleDatabase {
  sql: postgres.Sql;
  /** The tables made and the app built, once. */
  ready?: Promise<ExampleApp>;
}

const globalForExample = globalThis as unknown as { __trpcExample?: ExampleDatabase };

export function exampleApp(): Promise<ExampleApp> {
  const example = (globalForExample.__trpcExample ??= ((): ExampleDatabase => {
    const url = process.env.DATABASE_URL;
    if (!url) throw new Error('DATABASE_URL is not set');
    return { sql: postgres(url, { max: 5, onnotice: () => {} }) };
  })());
  return (example.ready ??= (async () => {
    await applyIdempotencySchema(example.sql);
    await example.sql.unsafe(CHARGES_TABLE_SQL);
    return createExampleApp(example.sql);
  })().catch((error: unknown) => {
    // A database that was down: the next request tries again.
    example.ready = undefined;
    throw error;
  }));
}
