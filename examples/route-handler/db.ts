/**
 * The example's database: one postgres.js pool per process, on `globalThis` so that a framework
 * loading the route module twice (Next does, in development) shares it, and created on first use
 * (Next evaluates route modules during `next build`, when there is no database).
 */
import postgres from 'postgres';
import { type IdempotencyStore } from '@payonce/idempotency';
import { createPostgresIdempotencyStore } from '@payonce/idempotency/postgres';

const globalForExample = globalThis as unknown as {
  __routeHandlerExample?: { sql: postgres.Sql; store: IdempotencyStore<postgres.TransactionSql> };
};

export function exampleDatabase() {
  return (globalForExample.__routeHandlerExample ??= (() => {
    const url = process.env.DATABASE_URL;
    if (!url) throw new Error('DATABASE_URL is not set');
    const sql = postgres(url, { max: 5, onnotice: () => {} });
    // No ORM: each phase writes with the transaction's own postgres.js handle.
    return { sql, store: createPostgresIdempotencyStore(sql) };
  })());
}

/** The business table; the idempotency table comes from applyIdempotencySchema. */
export const CHARGES_TABLE_SQL = `
  create table if not exists example_charges (
    id uuid primary key default gen_random_uuid(),
    customer text not null,
    amount_minor integer not null check (amount_minor > 0),
    created_at timestamptz not null default now()
  )`;
