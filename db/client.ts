/**
 * The database connection: one postgres.js pool per process, wrapped by Drizzle.
 *
 * You probably don't need to edit this file unless you change drivers. The pool is created lazily on
 * first use (Next evaluates route modules during `next build`, when there is no database) and cached
 * on `globalThis`, because Next loads instrumentation and route handlers as separate module instances
 * and dev-mode hot reloads would otherwise open a new pool on every edit.
 */
import net from 'node:net';
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

const globalForDb = globalThis as unknown as { __payonceDb?: DatabaseHandle; __payonceStatements?: StatementCount };

/**
 * What this process has sent to PostgreSQL, counted only when BENCH=1 (the benchmark reads it through
 * `bench.roundTrips`; nothing is counted, or wrapped, otherwise). Counted on the wire, where counting
 * costs a byte comparison per message (postgres.js's `debug` hook would capture a stack trace per
 * query, which costs more than the guard being measured):
 *   total            statements executed: every Execute and simple Query message written;
 *   begin/commit/    transactions, counted where postgres.js opens them (`sql.begin`, which sends
 *   rollback         BEGIN, then COMMIT or ROLLBACK as statements of their own);
 *   roundTrips       exchanges the client waits on: every write to the socket that ends with a
 *                    Sync, Flush or simple Query message. A statement costs one once it is prepared
 *                    on its connection (see preparedStatements below); its first use there costs two
 *                    (describe, then execute). Statements sent together (postgres.js pipelines what is
 *                    queued on a connection into one write) share one.
 */
export interface StatementCount {
  total: number;
  begin: number;
  commit: number;
  rollback: number;
  roundTrips: number;
}

export function statementCount(): StatementCount | undefined {
  return globalForDb.__payonceStatements;
}

const counts = () => (globalForDb.__payonceStatements ??= { total: 0, begin: 0, commit: 0, rollback: 0, roundTrips: 0 });

/** A plain TCP (or unix) socket whose writes are scanned for statements and for the messages that end a client turn. */
function countingSocket(options: { host: string[]; port: number[]; path?: string | false }): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = options.path ? net.connect(options.path) : net.connect(options.port[0]!, options.host[0]!);
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.off('error', reject);
      const write = socket.write.bind(socket) as (chunk: unknown, ...rest: unknown[]) => boolean;
      socket.write = ((chunk: unknown, ...rest: unknown[]) => {
        // Frontend messages are a type byte and a length that counts itself (the startup message,
        // which has no type byte, reads as one oversized message and ends the scan).
        if (Buffer.isBuffer(chunk)) {
          const count = counts();
          let awaitsAnswer = false;
          for (let i = 0; i + 5 <= chunk.length; i += 1 + chunk.readInt32BE(i + 1)) {
            const type = chunk[i];
            if (type === 0x45 /* Execute */ || type === 0x51 /* Query */) count.total++;
            if (type === 0x53 /* Sync */ || type === 0x48 /* Flush */ || type === 0x51 /* Query */) awaitsAnswer = true;
          }
          if (awaitsAnswer) count.roundTrips++;
        }
        return write(chunk, ...rest);
      }) as typeof socket.write;
      resolve(socket);
    });
  });
}

/** The counting socket for BENCH=1; none otherwise, so a normal process pays nothing. */
function benchCounting(url: string, counting: boolean): Partial<postgres.Options<Record<string, postgres.PostgresType>>> {
  if (!counting) return {};
  // Over TLS the socket carries ciphertext: nothing can be counted there.
  const tls = /[?&]sslmode=(require|verify-ca|verify-full|prefer)/.test(url);
  return tls ? {} : ({ socket: countingSocket } as object);
}

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
  const counting = process.env.BENCH === '1';
  const sql = postgres(url, {
    // Enough for the guard's claim, the business transaction and a notification at once per core;
    // an app instance behind a pooler can raise it with DB_POOL_MAX.
    max: options.max ?? Number(process.env.DB_POOL_MAX ?? 10),
    // NOTICE messages (e.g. "relation already exists, skipping") are noise in the app's log.
    onnotice: () => {},
    connection: { application_name: 'payonce' },
    // Only the benchmark pays for counting.
    ...benchCounting(url, counting),
  });
  return { db: drizzle(preparedStatements(sql, counting), { schema, casing: 'snake_case' }), sql, url };
}

type Unsafe = postgres.Sql['unsafe'];

/**
 * Drizzle asks postgres.js for unnamed statements (`prepare: false`) unless a query is explicitly
 * `.prepare()`d, and postgres.js must then describe each parameterised statement before executing
 * it: two round trips per statement, and a parse and plan on the server every time. Named prepared
 * statements, cached per connection by their text, cost one round trip after the first use — which
 * is what keeps the guard at one round trip for the claim and one for the completion. The set of
 * statement texts is small and fixed (the queries are code), so the cache stays bounded.
 */
function preparedStatements<T extends postgres.Sql | postgres.TransactionSql>(sql: T, countTransactions = false): T {
  const unsafe = sql.unsafe.bind(sql) as Unsafe;
  (sql as { unsafe: Unsafe }).unsafe = ((query: string, parameters?: never[], options?: postgres.UnsafeQueryOptions) =>
    unsafe(query, parameters, { ...options, prepare: true })) as Unsafe;
  if ('begin' in sql) {
    const begin = sql.begin.bind(sql) as (...args: unknown[]) => unknown;
    (sql as { begin: unknown }).begin = (...args: unknown[]) => {
      const fn = args.pop() as (tx: postgres.TransactionSql) => unknown;
      const transaction = begin(...args, (tx: postgres.TransactionSql) => fn(preparedStatements(tx))) as Promise<unknown>;
      if (!countTransactions) return transaction;
      // postgres.js sends BEGIN, the callback's statements, then COMMIT (or ROLLBACK if it threw).
      counts().begin++;
      return transaction.then(
        (value) => {
          counts().commit++;
          return value;
        },
        (error: unknown) => {
          counts().rollback++;
          throw error;
        },
      );
    };
  }
  if ('savepoint' in sql) {
    const savepoint = sql.savepoint.bind(sql) as (...args: unknown[]) => unknown;
    (sql as { savepoint: unknown }).savepoint = (...args: unknown[]) => {
      const fn = args.pop() as (tx: postgres.TransactionSql) => unknown;
      return savepoint(...args, (tx: postgres.TransactionSql) => fn(preparedStatements(tx)));
    };
  }
  return sql;
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
