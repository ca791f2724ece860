/**
 * Applies the committed migrations in db/migrations at start-up.
 *
 * Drizzle's migrate() takes no lock of its own, so two app instances starting together would both
 * try to apply the same migration. A session-level advisory lock on a dedicated connection makes
 * every other starter wait, then find nothing left to do.
 */
import path from 'node:path';
import { drizzle } from 'drizzle-orm/postgres-js';
import { migrate } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';

/** Any fixed 64-bit number works; this one spells "payonce" closely enough to recognise in pg_locks. */
const MIGRATION_LOCK_ID = 7_240_100_110_099_001n;

// Resolved from the working directory, not import.meta.url: Next bundles this module for
// instrumentation, and a bundled module no longer sits next to its migrations.
export const MIGRATIONS_FOLDER = path.join(process.cwd(), 'db', 'migrations');

export async function runMigrations(url: string, migrationsFolder = MIGRATIONS_FOLDER): Promise<void> {
  // One connection, so the advisory lock and the migration share a session.
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql`select pg_advisory_lock(${MIGRATION_LOCK_ID.toString()}::bigint)`;
    try {
      await migrate(drizzle(sql), { migrationsFolder });
    } finally {
      await sql`select pg_advisory_unlock(${MIGRATION_LOCK_ID.toString()}::bigint)`;
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
}
