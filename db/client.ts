/**
 * The database connection: one postgres.js pool per process, wrapped by Drizzle.
 *
 * You probably don't need to edit this file unless you change drivers. The pool is created lazily on
 * first use (Next evaluates route modules during `next build`, when there is no database) and cached
 * on `globalThis`, because Next loads instrumentation and route handlers as separate module instances
 * and dev-mode hot reloads would otherwise open a new pool on every edit.
 */
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import * as schema from './schema';

export type Database = PostgresJsDatabase<typeof schema>;
/** A transaction handle as Drizzle passes it to `db.transaction(async (tx) => …)`. */
export type Transaction = Parameters<Parameters<Database['transaction']>[0]>[0];
/** Anything that can run a query: the database itself or an open transaction. */
export type Executor = Database | Transaction;

interface DatabaseHandle {
  db: Database;
  sql: postgres.Sql;
  url: string;
}

const globalForDb = globalThis as unknown as { __payonceDb?: DatabaseHandle };

export function databaseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) {
    throw new Error(
      'DATABASE_URL is not set. Start the app with `npm run dev` (it starts an embedded PostgreSQL ' +
        'and sets it), or point DATABASE_URL at an existing PostgreSQL server.',
    );
  }
  return url;
}

export function openDatabase(url: string, options: { max?: number } = {}): DatabaseHandle {
  const sql = postgres(url, {
    // Enough for the guard's claim, the business transaction and a notification at once per core;
    // an app instance behind a pooler can raise it with DB_POOL_MAX.
    max: options.max ?? Number(process.env.DB_POOL_MAX ?? 10),
    // NOTICE messages (e.g. "relation already exists, skipping") are noise in the app's log.
    onnotice: () => {},
    connection: { application_name: 'payonce' },
  });
  return { db: drizzle(sql, { schema, casing: 'snake_case' }), sql, url };
}

/** The process-wide database, opened on first use. */
export function getDatabase(): DatabaseHandle {
  const url = databaseUrl();
  const cached = globalForDb.__payonceDb;
  if (cached && cached.url === url) return cached;
  const handle = openDatabase(url);
  globalForDb.__payonceDb = handle;
  return handle;
}

export function getDb(): Database {
  return getDatabase().db;
}

export async function closeDatabase(): Promise<void> {
  const cached = globalForDb.__payonceDb;
  globalForDb.__payonceDb = undefined;
  await cached?.sql.end({ timeout: 5 });
}
