/**
 * Applies the committed migrations in db/migrations at start-up.
 *
 * Drizzle's migrate() takes no lock of its own, so two app instances starting together would both
 * try to apply the same migration. The whole run — Drizzle's bookkeeping table, its read of the last
 * migration applied, every pending migration — is one transaction that first takes a
 * transaction-scoped advisory lock: every other starter waits at the lock, then finds nothing left
 * to do.
 *
 * Transaction-scoped, not a session lock (pg_advisory_lock), because the URL may be a transaction
 * pooler (PgBouncer pool_mode = transaction, docs/scaling.md): there each statement outside a
 * transaction may run on another server connection, so a session lock would be taken on one backend,
 * "released" on another (which holds nothing), and left held on the first for as long as PgBouncer
 * keeps it open — blocking every later start — while a second starter handed that same backend
 * would take the lock again (advisory locks are re-entrant per session) and migrate alongside the
 * first. A transaction keeps one server connection from BEGIN to COMMIT on any pooler, and the lock
 * ends with it, even if the process dies. PostgreSQL's DDL is transactional, so a migration that
 * fails leaves nothing half-applied (Drizzle runs them in one transaction anyway).
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
  // prepare: false — a handful of statements once per start, so named statements save nothing, and
  // a transaction pooler before PgBouncer 1.21 cannot keep them.
  const sql = postgres(url, { max: 1, prepare: false, onnotice: () => {} });
  try {
    await sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(${MIGRATION_LOCK_ID.toString()}::bigint)`;
      await migrate(drizzle(asDrizzleClient(tx)), { migrationsFolder });
    });
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/**
 * Drizzle over an open transaction. Its migrator opens a transaction of its own (`client.begin`),
 * which inside ours is a savepoint; and Drizzle writes its value parsers to the client's `options`,
 * which a transaction handle does not have (it parses with its pool's, as in db/client.ts).
 */
function asDrizzleClient(tx: postgres.TransactionSql): postgres.Sql {
  const options = { parsers: {}, serializers: {} };
  return new Proxy(tx, {
    get(target, property, receiver) {
      if (property === 'options') return options;
      if (property === 'begin') return (fn: (savepoint: postgres.TransactionSql) => unknown) => target.savepoint(fn);
      return Reflect.get(target, property, receiver);
    },
  }) as unknown as postgres.Sql;
}
