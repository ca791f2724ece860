/**
 * The PostgreSQL store: the classic dedupe table (./drizzle.ts), one row per scoped key, over a
 * postgres.js pool used through its public API only. Each method is one or two statements. You
 * probably don't need to edit this file unless you port the store to another database.
 */
import type postgres from 'postgres';
import { LeaseLostError } from './errors.js';
import { startBeforeCommit } from './postgres-pipelining.js';
import {
  CLAIM_SQL,
  closingStatement,
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
  sqlstate,
  TAKE_OVER_SQL,
  UNIQUE_VIOLATION,
  type RecordRow,
} from './postgres-sql.js';
import type { CompletedKey, IdempotencyStore, KeyRead, OnePhaseEnd, OnePhasePlan, ScopedKey } from './store.js';

export interface PostgresStoreOptions<Tx> {
  /** What business code writes with, made from the transaction's handle (`(tx) => drizzle(tx)`; default: the handle). */
  transactionHandle?: (tx: postgres.TransactionSql) => Tx;
}

const ignore = () => {};

type Parameter = string | number | null | string[];

export function createPostgresIdempotencyStore<Tx = postgres.TransactionSql>(
  sql: postgres.Sql,
  options: PostgresStoreOptions<Tx> = {},
): IdempotencyStore<Tx> {
  const handleOf = options.transactionHandle ?? ((tx: postgres.TransactionSql) => tx as unknown as Tx);
  // Named prepared statements: parsed once per connection, then one round trip each.
  const run = <T extends object>(text: string, parameters: Parameter[]) => sql.unsafe<T[]>(text, parameters as never[], { prepare: true });

  const read = async ({ scope, key }: ScopedKey) => readOf((await run<RecordRow>(READ_SQL, [scope, key]))[0]);

  return {
    read,

    async claim(c) {
      const parameters = [c.scope, c.key, c.path, c.fingerprint, int(c.leaseMs), c.leaseToken, int(c.ttlMs), lockTimeout(c.waitMs)];
      let row: (RecordRow & { claimed: boolean }) | undefined;
      try {
        [row] = await run<RecordRow & { claimed: boolean }>(CLAIM_SQL, parameters);
      } catch (error) {
        if (sqlstate(error) === LOCK_TIMEOUT) return { kind: 'busy' };
        throw error;
      }
      if (row?.claimed) return { kind: 'inserted', id: row.id };
      return { kind: 'exists', read: row ? readOf(row) : await read(c) };
    },

    async takeOver(c, observedToken) {
      const parameters = [c.scope, c.key, int(c.leaseMs), c.leaseToken, observedToken];
      const [row] = await run<{ id: string; recovery_point: string }>(TAKE_OVER_SQL, parameters);
      return row && { id: row.id, recoveryPoint: row.recovery_point };
    },

    async atomicPhase(ref, fn, closingWrite) {
      let fence: Promise<unknown> | undefined;
      let value!: Awaited<ReturnType<typeof fn>>;
      try {
        await sql.begin(async (tx) => {
          value = await fn(handleOf(tx));
          const write = closingWrite(value);
          // The transaction's last statement, sent with the COMMIT (./postgres-pipelining.ts); a lost
          // lease fails it, which turns the COMMIT into a rollback.
          if (write) (fence = startBeforeCommit(tx, ...closingStatement(ref, write))).catch(() => {}); // awaited below
        });
        await fence;
      } catch (error) {
        throw sqlstate(error) === LEASE_LOST_SQLSTATE ? new LeaseLostError() : error;
      }
      return value;
    },

    onePhase: (key, plan) => onePhase(sql, handleOf, key, plan),

    async release(ref, { forget }) {
      const owner = [ref.scope, ref.key, ref.leaseToken];
      if (forget && (await run(FORGET_SQL, owner)).length === 1) return;
      await run(RELEASE_SQL, owner);
    },
    deleteExpired: async (batchSize) => (await run(DELETE_EXPIRED_SQL, [batchSize])).length,

    async leasesHeld(records) {
      if (records.length === 0) return new Set();
      const rows = await run<{ id: string }>(LEASES_HELD_SQL, [records.map((r) => r.scope), records.map((r) => r.id)]);
      return new Set(rows.map((row) => row.id));
    },
  };
}

/**
 * A one-phase request: the key's read on its own through the pool (a replay costs this one statement
 * and no transaction), then, if the work runs, the completing transaction on a connection of its own.
 */
async function onePhase<Tx, D>(
  sql: postgres.Sql,
  handleOf: (tx: postgres.TransactionSql) => Tx,
  key: ScopedKey & { waitMs: number },
  plan: (read: KeyRead) => OnePhasePlan<D, Tx>,
): Promise<OnePhaseEnd<D>> {
  const [row] = await sql.unsafe<RecordRow[]>(READ_SQL, [key.scope, key.key], { prepare: true });
  const next = plan(readOf(row));
  if (next.kind === 'answer') return { kind: 'answered', value: next.value };
  // `reserve`, not `begin`: `begin` waits for the BEGIN's answer before it runs anything (a round trip).
  const connection = await sql.reserve();
  const state = { usable: true };
  try {
    return await completingTransaction(connection, state, handleOf, next.work, { replaces: row !== undefined, waitMs: key.waitMs });
  } finally {
    // postgres.js has taken a broken connection back as closed; only a live one is released.
    if (state.usable) connection.release();
  }
}

/** Rethrows a statement's error, noting first whether it took the connection with it. */
const lost =
  (state: { usable: boolean }) =>
  (error: unknown): never => {
    if (!isServerError(error)) state.usable = false;
    throw error;
  };

/**
 * The one-phase transaction: BEGIN leaves with the work's first statement (postgres.js writes what one
 * tick queued in one write), the completed record with the COMMIT. A failed insert aborts the
 * transaction, so the COMMIT rolls the work back.
 */
async function completingTransaction<Tx>(
  connection: postgres.ReservedSql,
  state: { usable: boolean },
  handleOf: (tx: postgres.TransactionSql) => Tx,
  work: (tx: Tx) => Promise<CompletedKey>,
  { replaces, waitMs }: { replaces: boolean; waitMs: number },
): Promise<OnePhaseEnd<never>> {
  const tx = connection as unknown as postgres.TransactionSql;
  // Not awaited: a failed BEGIN fails the statements behind it, which report it.
  void connection.unsafe('begin').execute().catch(ignore);
  let r: CompletedKey;
  try {
    r = await work(handleOf(tx));
  } catch (error) {
    await connection.unsafe('rollback').catch(lost(state)).catch(ignore);
    throw error;
  }
  const body = JSON.stringify(r.response.body ?? null);
  const writes = [
    ...(replaces ? [startBeforeCommit(tx, DELETE_REPLACEABLE_SQL, [r.scope, r.key])] : []),
    startBeforeCommit(tx, INSERT_COMPLETED_SQL, [
      r.scope,
      r.key,
      r.path,
      r.fingerprint,
      r.response.status,
      body,
      int(r.ttlMs),
      lockTimeout(waitMs),
    ]),
  ];
  writes.forEach((write) => write.catch(ignore)); // awaited below, once the COMMIT has settled
  await connection.unsafe('commit').catch(lost(state));
  try {
    await Promise.all(writes);
  } catch (error) {
    if (sqlstate(error) === UNIQUE_VIOLATION) return { kind: 'conflict' };
    if (sqlstate(error) === LOCK_TIMEOUT) return { kind: 'busy' };
    throw error;
  }
  return { kind: 'committed' };
}
