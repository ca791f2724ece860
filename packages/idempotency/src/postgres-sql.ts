/**
 * The statements of the PostgreSQL stores, shared by the one on postgres.js (./postgres-store.ts) and
 * the one on node-postgres (./pg-store.ts): the same SQL, the same parameters, the same reading of a
 * row, so the two differ only in how they talk to their driver.
 */
import type { ClosingWrite, KeyRead, KeyRef } from './store.js';

export interface RecordRow {
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
export const READ_SQL = `select ${RECORD_COLUMNS} from idempotency_keys where ${KEY}`;

/**
 * A fresh claim (replacing a record past its life), or else the record there, in one round trip; a
 * row committed by a concurrent claim after the statement began is invisible to both halves (then
 * `claim` reads again). No WAL flush (synchronous_commit off): nothing durable happens under a claim
 * until the first atomic phase, whose synchronous commit flushes the claim too. An uncommitted
 * concurrent claim makes it wait at most lock_timeout ($8; then 55P03: busy).
 * $1 scope, $2 key, $3 path, $4 fingerprint, $5 lease ms, $6 lease token, $7 ttl ms, $8 wait ms.
 */
export const CLAIM_SQL = `
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
export const TAKE_OVER_SQL = `
  update idempotency_keys set locked_at = now(), lease_expires_at = now() + ${ms(3)}, lease_token = $4::uuid
   where ${KEY} and lease_token is not distinct from $5::uuid and completed_at is null
     and (lease_expires_at is null or lease_expires_at <= now())
  returning id, recovery_point`;

/** An UPDATE of the row this lease holds, fenced: if it matches no row, it raises (./schema-sql.ts). */
const OWNED_ROW = `${KEY} and lease_token = $3::uuid and completed_at is null`;
const fenced = (update: string) => `with fenced as (${update} returning 1) select idempotency_assert_owned(count(*)) from fenced`;
export const LEASE_LOST_SQLSTATE = 'IK001';
export const SAVE_RECOVERY_POINT_SQL = fenced(`update idempotency_keys set recovery_point = $4 where ${OWNED_ROW}`);
/** The body travels as JSON text cast in SQL: a jsonb parameter would meet the pool's serializer, which apps configure differently. */
export const COMPLETE_SQL = fenced(`
  update idempotency_keys
     set response_status = $4::int, response_body = $5::text::jsonb, completed_at = now(),
         lease_expires_at = null, lease_token = null
   where ${OWNED_ROW}`);

/**
 * A one-phase record, complete from birth, as the transaction's last statement: an uncommitted
 * duplicate makes it wait (lock_timeout $8), a committed one fails it with 23505.
 * $1 scope, $2 key, $3 path, $4 fingerprint, $5 status, $6 body text, $7 ttl ms, $8 wait ms.
 */
export const INSERT_COMPLETED_SQL = `
  with bounded as materialized (select set_config('lock_timeout', $8::text, true))
  insert into idempotency_keys (scope, key, request_path, request_hash, response_status, response_body, completed_at, expires_at)
  select $1::text, $2::text, $3::text, $4::text, $5::int, $6::text::jsonb, now(), now() + ${ms(7)} from bounded`;
/** Sent before it when the read found a record (so one past its life): that record goes if it still may. */
export const DELETE_REPLACEABLE_SQL = `delete from idempotency_keys k where ${KEY} and ${REPLACEABLE}`;

/** Nothing durable happened under the key: delete it, so the next request starts clean. */
export const FORGET_SQL = `delete from idempotency_keys where ${OWNED_ROW} and recovery_point = 'started' returning 1`;
/** Keep the record and its recovery point; only the lease goes, so a retry resumes at once. */
export const RELEASE_SQL = `update idempotency_keys set locked_at = null, lease_expires_at = null, lease_token = null where ${OWNED_ROW}`;

/** SKIP LOCKED: several instances clean at once without waiting on each other. $1 batch size. */
export const DELETE_EXPIRED_SQL = `
  with doomed as (select scope, key from idempotency_keys k where ${REPLACEABLE} limit $1::int for update skip locked)
  delete from idempotency_keys k using doomed where k.scope = doomed.scope and k.key = doomed.key
  returning 1`;

/** $1 scopes, $2 ids: found through the key's index by scope, then by id. */
export const LEASES_HELD_SQL = `
  select k.id from unnest($1::text[], $2::uuid[]) as wanted(scope, id)
    join idempotency_keys k on k.scope = wanted.scope and k.id = wanted.id
   where k.lease_expires_at > now()`;

export const sqlstate = (error: unknown) => (error as { code?: string } | null)?.code;
/** An error PostgreSQL answered with (the connection is fine), not a broken connection. */
export const isServerError = (error: unknown) => typeof (error as { severity?: unknown } | null)?.severity === 'string';
/** unique_violation: a one-phase duplicate committed the key first. */
export const UNIQUE_VIOLATION = '23505';
/** lock_not_available: a write waited its `waitMs` on a concurrent request's uncommitted row. */
export const LOCK_TIMEOUT = '55P03';
export const int = Math.round;
export const lockTimeout = (waitMs: number) => String(Math.max(1, int(waitMs)));

/** The store's clock reads 0 at the statement's now(): every time in a record is relative to it. */
export const readOf = (row: RecordRow | undefined): KeyRead => ({
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

/** A phase's closing write as a statement and its parameters. */
export function closingStatement(ref: KeyRef, write: ClosingWrite): [string, (string | number | null)[]] {
  const owner = [ref.scope, ref.key, ref.leaseToken];
  if ('recoveryPoint' in write) return [SAVE_RECOVERY_POINT_SQL, [...owner, write.recoveryPoint]];
  return [COMPLETE_SQL, [...owner, write.response.status, JSON.stringify(write.response.body ?? null)]];
}
