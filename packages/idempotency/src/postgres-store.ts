/**
 * The PostgreSQL store: the classic dedupe table (./schema.ts), one row per scoped key, over a
 * postgres.js pool used through its public API only. Each method is one or two statements. You
 * probably don't need to edit this file unless you port the store to another database.
 */
import type postgres from 'postgres';
import { LeaseLostError } from './errors.js';
import { startBeforeCommit } from './postgres-pipelining.js';
import type { ClosingWrite, CompletedKey, IdempotencyStore, KeyRead, KeyRef, OnePhaseEnd, OnePhasePlan, ScopedKey } from './store.js';

export interface PostgresStoreOptions<Tx> {
  /** What business code writes with, made from the transaction's handle (`(tx) => drizzle(tx)`; default: the handle). */
  transactionHandle?: (tx: postgres.TransactionSql) => Tx;
}

interface RecordRow {
  id: string;
  request_path: string;
  request_hash: string;
  response_status: number | null;
  response_body: unknown;
  completed: boolean;
  recovery_point: string;
  lease_token: string | null;
  /** Milliseconds from the statement's now(): the store's clock reads 0 at that instant. */
  lease_left_ms: number | null;
  expires_in_ms: number;
}

/** `$n` as a duration in milliseconds. */
const ms = (n: number) => `($${n}::bigint * interval '1 millisecond')`;
const msFromNow = (column: string) => `(extract(epoch from (${column} - now())) * 1000)::float8`;
const KEY = 'scope = $1::text and key = $2::text';
/** Expired, and nobody works under it: a new record may replace it. */
const REPLACEABLE = 'k.expires_at <= now() and (k.lease_expires_at is null or k.lease_expires_at <= now())';

/** A record's columns as the engine reads them, times relative to now(). */
const RECORD_COLUMNS = `id, request_path, request_hash, response_status, response_body, completed_at is not null as completed,
  recovery_point, lease_token, ${msFromNow('lease_expires_at')} as lease_left_ms, ${msFromNow('expires_at')} as expires_in_ms`;
const READ_SQL = `select ${RECORD_COLUMNS} from idempotency_keys where ${KEY}`;

/**
 * A fresh claim (replacing a record past its life), or else the record there, in one round trip; a
 * row committed by a concurrent claim after the statement began is invisible to both halves (then
 * `claim` reads again). No WAL flush (synchronous_commit off): nothing durable happens under a claim
 * until the first atomic phase, whose synchronous commit flushes the claim too. An uncommitted
 * concurrent claim makes it wait at most lock_timeout ($8; then 55P03: busy).
 * $1 scope, $2 key, $3 path, $4 fingerprint, $5 lease ms, $6 lease token, $7 ttl ms, $8 wait ms.
 */
const CLAIM_SQL = `
  with settings as (select set_config('synchronous_commit', 'off', true), set_config('lock_timeout', $8::text, true)),
  claimed as (
    insert into idempotency_keys as k (scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token, expires_at)
    select $1::text, $2::text, $3::text, $4::text, now(), now() + ${ms(5)}, $6::uuid, now() + ${ms(7)} from settings
    on conflict (scope, key) do update
       set id = excluded.id, request_path = excluded.request_path, request_hash = excluded.request_hash,
           response_status = null, response_body = null, completed_at = null, recovery_point = 'started',
           locked_at = now(), lease_expires_at = excluded.lease_expires_at, lease_token = excluded.lease_token,
           created_at = now(), expires_at = excluded.expires_at
     where ${REPLACEABLE}
    returning id
  )
  select true as claimed, id, null::text as request_path, null::text as request_hash, null::int as response_status,
         null::jsonb as response_body, false as completed, null::text as recovery_point, null::uuid as lease_token,
         null::float8 as lease_left_ms, null::float8 as expires_in_ms
    from claimed
  union all
  select false, ${RECORD_COLUMNS} from idempotency_keys where ${KEY} and not exists (select 1 from claimed)`;

/**
 * An unanswered record nobody holds, whose token is still the one the engine saw: of several
 * contenders exactly one matches. $1 scope, $2 key, $3 lease ms, $4 new token, $5 observed token.
 */
const TAKE_OVER_SQL = `
  update idempotency_keys set locked_at = now(), lease_expires_at = now() + ${ms(3)}, lease_token = $4::uuid
   where ${KEY} and lease_token is not distinct from $5::uuid and completed_at is null
     and (lease_expires_at is null or lease_expires_at <= now())
  returning id, recovery_point`;

/** An UPDATE of the row this lease holds, fenced: if it matches no row, it raises (./schema-sql.ts). */
const OWNED_ROW = `${KEY} and lease_token = $3::uuid and completed_at is null`;
const fenced = (update: string) => `with fenced as (${update} returning 1) select idempotency_assert_owned(count(*)) from fenced`;
const LEASE_LOST_SQLSTATE = 'IK001';
const SAVE_RECOVERY_POINT_SQL = fenced(`update idempotency_keys set recovery_point = $4 where ${OWNED_ROW}`);
/** The body travels as JSON text cast in SQL: a jsonb parameter would meet the pool's serializer, which apps configure differently. */
const COMPLETE_SQL = fenced(`
  update idempotency_keys
     set response_status = $4::int, response_body = $5::text::jsonb, completed_at = now(), recovery_point = 'finished',
         lease_expires_at = null, lease_token = null
   where ${OWNED_ROW}`);

/**
 * A one-phase record, complete from birth, as the transaction's last statement: an uncommitted
 * duplicate makes it wait (lock_timeout $8), a committed one fails it with 23505.
 * $1 scope, $2 key, $3 path, $4 fingerprint, $5 status, $6 body text, $7 ttl ms, $8 wait ms.
 */
const INSERT_COMPLETED_SQL = `
  with bounded as materialized (select set_config('lock_timeout', $8::text, true))
  insert into idempotency_keys (scope, key, request_path, request_hash, response_status, response_body, recovery_point, completed_at, expires_at)
  select $1::text, $2::text, $3::text, $4::text, $5::int, $6::text::jsonb, 'finished', now(), now() + ${ms(7)} from bounded`;
/** Sent before it when the read found a record (so one past its life): that record goes if it still may. */
const DELETE_REPLACEABLE_SQL = `delete from idempotency_keys k where ${KEY} and ${REPLACEABLE}`;

/** Nothing durable happened under the key: delete it, so the next request starts clean. */
const FORGET_SQL = `delete from idempotency_keys where ${OWNED_ROW} and recovery_point = 'started' returning 1`;
/** Keep the record and its recovery point; only the lease goes, so a retry resumes at once. */
const RELEASE_SQL = `update idempotency_keys set locked_at = null, lease_expires_at = null, lease_token = null where ${OWNED_ROW}`;

/** SKIP LOCKED: several instances clean at once without waiting on each other. $1 batch size. */
const DELETE_EXPIRED_SQL = `
  with doomed as (select scope, key from idempotency_keys k where ${REPLACEABLE} limit $1::int for update skip locked)
  delete from idempotency_keys k using doomed where k.scope = doomed.scope and k.key = doomed.key
  returning 1`;

/** $1 scopes, $2 ids: found through the key's index by scope, then by id. */
const LEASES_HELD_SQL = `
  select k.id from unnest($1::text[], $2::uuid[]) as wanted(scope, id)
    join idempotency_keys k on k.scope = wanted.scope and k.id = wanted.id
   where k.lease_expires_at > now()`;

const sqlstate = (error: unknown) => (error as { code?: string } | null)?.code;
/** unique_violation: a one-phase duplicate committed the key first. */
const UNIQUE_VIOLATION = '23505';
/** lock_not_available: a write waited its `waitMs` on a concurrent request's uncommitted row. */
const LOCK_TIMEOUT = '55P03';
/** An error PostgreSQL answered with (the connection is fine), not a broken connection. */
const isServerError = (error: unknown) => typeof (error as { severity?: unknown } | null)?.severity === 'string';
const int = Math.round;
const lockTimeout = (waitMs: number) => String(Math.max(1, int(waitMs)));
const ignore = () => {};

/** The store's clock reads 0 at the statement's now(): every time in a record is relative to it. */
const readOf = (row: RecordRow | undefined): KeyRead => ({
  now: 0,
  record: row && {
    id: row.id,
    path: row.request_path,
    fingerprint: row.request_hash,
    response: row.completed ? { status: row.response_status ?? 200, body: row.response_body ?? null } : null,
    recoveryPoint: row.recovery_point,
    leaseToken: row.lease_token,
    leaseExpiresAt: row.lease_left_ms,
    expiresAt: row.expires_in_ms,
  },
});

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

function closingStatement(ref: KeyRef, write: ClosingWrite): [string, (string | number | null)[]] {
  const owner = [ref.scope, ref.key, ref.leaseToken];
  if ('recoveryPoint' in write) return [SAVE_RECOVERY_POINT_SQL, [...owner, write.recoveryPoint]];
  return [COMPLETE_SQL, [...owner, write.response.status, JSON.stringify(write.response.body ?? null)]];
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
