/**
 * The database connection: one postgres.js pool per process, wrapped by Drizzle.
 *
 * You probably don't need to edit this file unless you change drivers. The pool is created lazily on
 * first use (Next evaluates route modules during `next build`, when there is no database) and cached
 * on `globalThis`, because Next loads instrumentation and route handlers as separate module instances
 * and dev-mode hot reloads would otherwise open a new pool on every edit.
 */
import { drizzle, type PostgresJsDatabase, type PostgresJsQueryResultHKT } from 'drizzle-orm/postgres-js';
import type { PgDatabase } from 'drizzle-orm/pg-core';
import postgres from 'postgres';
import { poolerSafeSocket, type SocketFactory } from './pooler-socket';
import { postgresUrlParts } from './url';
import { drizzleTransactionHandle, withPreparedStatements } from '@payonce/idempotency/drizzle';

export type Database = PostgresJsDatabase;
/**
 * What a transaction's code writes with: Drizzle's `tx` in `db.transaction(async (tx) => …)`, or the
 * handle an idempotency phase gets (Drizzle over that phase's transaction, see `transactionDatabase`).
 */
export type Transaction = PgDatabase<PostgresJsQueryResultHKT>;
/** Anything that can run a query: the database itself or an open transaction. */
export type Executor = Database | Transaction;

export interface DatabaseHandle {
  db: Database;
  /** The postgres.js pool under `db`: the idempotency store speaks to it directly. */
  sql: postgres.Sql;
  url: string;
}

type ConnectionOptions = Partial<postgres.Options<Record<string, postgres.PostgresType>>> & {
  /** A custom socket factory: documented in postgres.js's README ("socket: fn"), missing from its types. */
  socket?: unknown;
};

const globalForDb = globalThis as unknown as { __payonceDb?: DatabaseHandle; __payonceDbOptions?: ConnectionOptions };

/**
 * Extra postgres.js options for every pool this process opens from now on (e.g. the benchmark's
 * counting `socket`). Call it before the first query; a pool already open keeps its options.
 */
export function configureConnections(options: ConnectionOptions): void {
  globalForDb.__payonceDbOptions = { ...globalForDb.__payonceDbOptions, ...options };
}

/** Drizzle over one transaction's postgres.js handle, with named statements: what an idempotency phase's code writes with. */
export const transactionDatabase = drizzleTransactionHandle({ casing: 'snake_case' }) as (tx: postgres.TransactionSql) => Transaction;

/**
 * The database to use. The app server passes its validated configuration (server/config/env.ts); scripts
 * and tools that run without it fall back to DATABASE_URL as it is.
 */
export function databaseUrl(configured: string | undefined = process.env.DATABASE_URL): string {
  const url = configured;
  if (!url) {
    throw new Error(
      'DATABASE_URL is not set. Start the app with `npm run dev` (it starts an embedded PostgreSQL ' +
        'and sets it), or point DATABASE_URL at an existing PostgreSQL server.',
    );
  }
  return url;
}

/**
 * What the URL points at (DATABASE_POOLING, server/config/env.ts). `session`: every connection is one
 * PostgreSQL session — the server itself, or a pooler in session mode. `transaction`: a transaction
 * pooler (PgBouncer pool_mode = transaction before 1.21, or without max_prepared_statements), which
 * gives each transaction whichever server connection is free, so a statement prepared on one
 * connection is missing on the next (docs/scaling.md).
 */
export type DatabasePooling = 'session' | 'transaction';

/** Like databaseUrl: the app passes its validated configuration, scripts fall back to the variable. */
export function databasePooling(configured: string | undefined = process.env.DATABASE_POOLING): DatabasePooling {
  const value = configured?.trim() || 'session';
  if (value !== 'session' && value !== 'transaction') {
    throw new Error(`DATABASE_POOLING=${JSON.stringify(configured)} is not valid: expected session or transaction`);
  }
  return value;
}

export function openDatabase(url: string, options: { max?: number; pooling?: DatabasePooling } = {}): DatabaseHandle {
  const pooling = options.pooling ?? 'session';
  const sql = postgres(url, {
    // Enough for the guard's claim, the business transaction and a notification at once per core;
    // an app instance behind a pooler can raise it with DB_POOL_MAX.
    max: options.max ?? 10,
    // Behind a transaction pooler, no named statements at all: postgres.js's pool-level `prepare: false`
    // overrides the per-query `prepare: true` that withPreparedStatements and the idempotency store
    // ask for (connection.js: `q.prepare = options.prepare && (…)`). Each parameterised statement is
    // then parsed unnamed and described before it runs: one more round trip, on the same server
    // connection (Parse, Describe and Flush, no Sync, so the pooler keeps it linked). Statements without
    // parameters still go in one message and still pipeline.
    // And a socket that never sends a statement's description behind an unanswered query
    // (./pooler-socket.ts): PgBouncer 1.18 would answer it to nobody.
    ...(pooling === 'transaction' ? { prepare: false } : {}),
    // NOTICE messages (e.g. "relation already exists, skipping") are noise in the app's log.
    onnotice: () => {},
    connection: { application_name: 'payonce' },
    ...globalForDb.__payonceDbOptions,
    ...(pooling === 'transaction' ? poolerSocketFor(url, globalForDb.__payonceDbOptions?.socket as SocketFactory | undefined) : {}),
  });
  return { db: drizzle(withPreparedStatements(sql), { casing: 'snake_case' }), sql, url };
}

/**
 * The pooler-safe socket, over TCP without TLS (the socket is the one postgres.js would open itself;
 * over TLS it would wrap a socket of its own). One host: a transaction pooler is one address.
 */
function poolerSocketFor(url: string, inner: SocketFactory | undefined): { socket?: SocketFactory } {
  const sslmode = postgresUrlParts(url)?.firstHostUrl.searchParams.get('sslmode');
  return !sslmode || sslmode === 'disable' ? { socket: poolerSafeSocket(inner) } : {};
}

/** The process-wide database, opened on first use. */
export function getDatabase(config: { url?: string; max?: number; pooling?: DatabasePooling } = {}): DatabaseHandle {
  const url = databaseUrl(config.url);
  const pooling = config.pooling ?? databasePooling();
  const cached = globalForDb.__payonceDb;
  if (cached && cached.url === url) return cached;
  const handle = openDatabase(url, { max: config.max, pooling });
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
