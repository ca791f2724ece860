/**
 * The PostgreSQL store on node-postgres (`pg`): the same table, statements and reading of a row as
 * the postgres.js store (./postgres-store.ts; the SQL is ./postgres-sql.ts), over a pg.Pool used
 * through its public API only. You probably don't need to edit this file unless you port the store to
 * another driver.
 *
 * Where the drivers differ: node-postgres sends a client's next statement only once the last one has
 * answered (its `pipeline` mode is opt-in, and this store must work on any pool it is handed), so the
 * key's closing write costs a round trip of its own before the COMMIT, where postgres.js sends it with
 * the COMMIT (./postgres-pipelining.ts).
 *
 * LIBRARY BEHAVIOUR RELIED ON — pg's default type parsers give the record's columns the types `readOf`
 * expects, as postgres.js does: float8 and int4 as numbers, jsonb parsed, boolean, uuid as text.
 * Scenario 9 of the package's test/postgres/store-contract.test.ts fails if an upgrade changes
 * them; an app that replaces one of these parsers globally (pg.types) breaks the store.
 */
import type pg from 'pg';
import { LeaseLostError } from './errors.js';
import {
  CLAIM_SQL,
  closingStatement,
  COMPLETE_SQL,
  DELETE_EXPIRED_SQL,
  DELETE_REPLACEABLE_SQL,
  FORGET_SQL,
  INSERT_COMPLETED_SQL,
  int,
  isServerError,
  LEASE_LOST_SQLSTATE,
  LEASES_HELD_SQL,
  LOCK_TIMEOUT,
  lockTimeout,
  READ_SQL,
  readOf,
  RELEASE_SQL,
  SAVE_RECOVERY_POINT_SQL,
  sqlstate,
  TAKE_OVER_SQL,
  UNIQUE_VIOLATION,
  type RecordRow,
} from './postgres-sql.js';
import type { CompletedKey, IdempotencyStore, KeyRead, OnePhaseEnd, OnePhasePlan, ScopedKey } from './store.js';

export interface PgStoreOptions<Tx> {
  /** What business code writes with, made from the transaction's client (`(client) => drizzle(client)`; default: the client). */
  transactionHandle?: (client: pg.PoolClient) => Tx;
}

/**
 * One fixed name per statement text: a connection parses each once, then binds and executes it in one
 * round trip. Prefixed, because the names share each connection with the app's own named statements.
 */
const STATEMENT_NAMES = new Map<string, string>([
  [READ_SQL, 'payonce_idempotency_read'],
  [CLAIM_SQL, 'payonce_idempotency_claim'],
  [TAKE_OVER_SQL, 'payonce_idempotency_take_over'],
  [SAVE_RECOVERY_POINT_SQL, 'payonce_idempotency_save_recovery_point'],
  [COMPLETE_SQL, 'payonce_idempotency_complete'],
  [INSERT_COMPLETED_SQL, 'payonce_idempotency_insert_completed'],
  [DELETE_REPLACEABLE_SQL, 'payonce_idempotency_delete_replaceable'],
  [FORGET_SQL, 'payonce_idempotency_forget'],
  [RELEASE_SQL, 'payonce_idempotency_release'],
  [DELETE_EXPIRED_SQL, 'payonce_idempotency_delete_expired'],
  [LEASES_HELD_SQL, 'payonce_idempotency_leases_held'],
]);

type Parameter = string | number | null | string[];

/** A pool or a checked-out client: both answer the same query config. */
interface Queryable {
  query<T extends pg.QueryResultRow>(config: pg.QueryConfig<Parameter[]>): Promise<pg.QueryResult<T>>;
}

const run = async <T extends pg.QueryResultRow>(db: Queryable, text: string, values: Parameter[]): Promise<T[]> =>
  (await db.query<T>({ name: STATEMENT_NAMES.get(text), text, values })).rows;

export function createPgIdempotencyStore<Tx = pg.PoolClient>(pool: pg.Pool, options: PgStoreOptions<Tx> = {}): IdempotencyStore<Tx> {
  const handleOf = options.transactionHandle ?? ((client: pg.PoolClient) => client as unknown as Tx);

  const read = async ({ scope, key }: ScopedKey) => readOf((await run<RecordRow>(pool, READ_SQL, [scope, key]))[0]);

  return {
    read,

    async claim(c) {
      const parameters = [c.scope, c.key, c.path, c.fingerprint, int(c.leaseMs), c.leaseToken, int(c.ttlMs), lockTimeout(c.waitMs)];
      let row: (RecordRow & { claimed: boolean }) | undefined;
      try {
        [row] = await run<RecordRow & { claimed: boolean }>(pool, CLAIM_SQL, parameters);
      } catch (error) {
        if (sqlstate(error) === LOCK_TIMEOUT) return { kind: 'busy' };
        throw error;
      }
      if (row?.claimed) return { kind: 'inserted', id: row.id };
      return { kind: 'exists', read: row ? readOf(row) : await read(c) };
    },

    async takeOver(c, observedToken) {
      const parameters = [c.scope, c.key, int(c.leaseMs), c.leaseToken, observedToken];
      const [row] = await run<{ id: string; recovery_point: string }>(pool, TAKE_OVER_SQL, parameters);
      return row && { id: row.id, recoveryPoint: row.recovery_point };
    },

    async atomicPhase(ref, fn, closingWrite) {
      try {
        return await inTransaction(pool, async (client) => {
          const value = await fn(handleOf(client));
          const write = closingWrite(value);
          // Its own round trip, awaited before the COMMIT (node-postgres does not pipeline by
          // default): a lost lease fails it with IK001, and the transaction rolls back.
          if (write) await run(client, ...closingStatement(ref, write));
          await client.query('commit');
          return value;
        });
      } catch (error) {
        throw sqlstate(error) === LEASE_LOST_SQLSTATE ? new LeaseLostError() : error;
      }
    },

    onePhase: (key, plan) => onePhase(pool, handleOf, key, plan),

    async release(ref, { forget }) {
      const owner = [ref.scope, ref.key, ref.leaseToken];
      if (forget && (await run(pool, FORGET_SQL, owner)).length === 1) return;
      await run(pool, RELEASE_SQL, owner);
    },
    deleteExpired: async (batchSize) => (await run(pool, DELETE_EXPIRED_SQL, [batchSize])).length,

    async leasesHeld(records) {
      if (records.length === 0) return new Set();
      const rows = await run<{ id: string }>(pool, LEASES_HELD_SQL, [records.map((r) => r.scope), records.map((r) => r.id)]);
      return new Set(rows.map((row) => row.id));
    },
  };
}

/**
 * Runs `body` between a BEGIN and the COMMIT that `body` sends, on a client of its own. On a throw it
 * rolls back and rethrows. The client goes back to the pool unless its connection broke: judged by
 * the ROLLBACK, not by the error thrown, since business code throws errors of its own (no `severity`)
 * on a connection that is fine.
 */
async function inTransaction<R>(pool: pg.Pool, body: (client: pg.PoolClient) => Promise<R>): Promise<R> {
  const client = await pool.connect();
  let broken: Error | undefined;
  // The pool stops listening to a client it has lent out: unheard, a connection that drops meanwhile
  // would end the process.
  const onError = (error: Error) => (broken ??= error);
  client.on('error', onError);
  try {
    await client.query('begin');
    return await body(client);
  } catch (error) {
    await client.query('rollback').catch((rollbackError: unknown) => {
      if (!isServerError(rollbackError)) broken ??= rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
    });
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}

/**
 * A one-phase request: the key's read on its own through the pool (a replay costs this one statement
 * and no transaction), then, if the work runs, the completing transaction on a client of its own.
 */
async function onePhase<Tx, D>(
  pool: pg.Pool,
  handleOf: (client: pg.PoolClient) => Tx,
  key: ScopedKey & { waitMs: number },
  plan: (read: KeyRead) => OnePhasePlan<D, Tx>,
): Promise<OnePhaseEnd<D>> {
  const [row] = await run<RecordRow>(pool, READ_SQL, [key.scope, key.key]);
  const next = plan(readOf(row));
  if (next.kind === 'answer') return { kind: 'answered', value: next.value };
  const replaces = row !== undefined;
  return inTransaction(pool, async (client) => {
    const completed = await next.work(handleOf(client));
    const refused = await writeCompleted(client, completed, { replaces, waitMs: key.waitMs });
    // A refused key write aborted the transaction: the work's effects go with it.
    await client.query(refused ? 'rollback' : 'commit');
    return refused ?? { kind: 'committed' };
  });
}

/**
 * The completed record, as the transaction's last writes; answers why PostgreSQL refused it (a
 * concurrent duplicate committed or stayed uncommitted `waitMs`), or undefined once it is written.
 * Only these writes' errors mean a duplicate: the same SQLSTATE from the work is the work's own.
 */
async function writeCompleted(
  client: pg.PoolClient,
  r: CompletedKey,
  { replaces, waitMs }: { replaces: boolean; waitMs: number },
): Promise<{ kind: 'conflict' } | { kind: 'busy' } | undefined> {
  const body = JSON.stringify(r.response.body ?? null);
  try {
    if (replaces) await run(client, DELETE_REPLACEABLE_SQL, [r.scope, r.key]);
    await run(client, INSERT_COMPLETED_SQL, [
      r.scope,
      r.key,
      r.path,
      r.fingerprint,
      r.response.status,
      body,
      int(r.ttlMs),
      lockTimeout(waitMs),
    ]);
  } catch (error) {
    if (sqlstate(error) === UNIQUE_VIOLATION) return { kind: 'conflict' };
    if (sqlstate(error) === LOCK_TIMEOUT) return { kind: 'busy' };
    throw error;
  }
  return undefined;
}
