/**
 * The node-postgres example's database: one pg.Pool per process, on `globalThis` (a framework may
 * load a module twice) and created on first use (none at build time). The key table is created from
 * the migration file the package ships, as a DBA or a migration tool would run it.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import pg from 'pg';
import type { IdempotencyStore } from '@payonce/idempotency';
import { createPgIdempotencyStore } from '@payonce/idempotency/pg';

const globalForExample = globalThis as unknown as {
  __nodePostgresExample?: { pool: pg.Pool; store: IdempotencyStore<pg.PoolClient> };
};

export function exampleDatabase() {
  return (globalForExample.__nodePostgresExample ??= (() => {
    const connectionString = process.env.DATABASE_URL;
    if (!connectionString) throw new Error('DATABASE_URL is not set');
    const pool = new pg.Pool({ connectionString, max: 5 });
    // No ORM: each phase writes with the transaction's own pg client.
    return { pool, store: createPgIdempotencyStore(pool) };
  })());
}

/** The package's migration, then the business table. Every statement may run again. */
export async function migrate(pool: pg.Pool): Promise<void> {
  const file = createRequire(import.meta.url).resolve('@payonce/idempotency/migrations/0001_idempotency_keys.sql');
  await pool.query(await readFile(file, 'utf8'));
  await pool.query(`
    create table if not exists example_transfers (
      id uuid primary key default gen_random_uuid(),
      customer text not null,
      amount_minor integer not null check (amount_minor > 0),
      created_at timestamptz not null default now()
    )`);
}
