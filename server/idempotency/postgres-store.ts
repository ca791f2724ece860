/**
 * The PostgreSQL store behind the guard: the seed's dedupe table, claimed with one
 * INSERT … ON CONFLICT DO NOTHING, leased with a fencing token, completed inside the business
 * transaction.
 */
import { sql } from 'drizzle-orm';
import type postgres from 'postgres';
import type { Database, Transaction } from '../../db/client';
import { LeaseLostError } from './errors';
import type {
  ClaimOutcome,
  ClaimRequest,
  IdempotencyStore,
  KeyRef,
  StoredResponse,
} from './store';

interface ClaimRow extends Record<string, unknown> {
  id: string;
  claimed: boolean;
  request_path: string;
  request_hash: string;
  response_status: number | null;
  response_body: unknown;
  lease_token: string | null;
  recovery_point: string;
  completed_at: Date | string | null;
  expired: boolean;
  lease_remaining_ms: number;
}

/** How often a claim re-reads when the row it saw changed under it before giving up with a 409. */
const MAX_CLAIM_ROUNDS = 5;

/** Raised by idempotency_assert_owned (db/migrations/0003_idempotency_fence.sql). */
const LEASE_LOST_SQLSTATE = 'IK001';

/**
 * The postgres.js handle under a Drizzle transaction. The fence goes through it directly because it
 * must be on the connection before the COMMIT: postgres.js queues statements in the order they are
 * started, and Drizzle's own execute starts a statement a few microtasks after it is called, late
 * enough for the COMMIT that follows the phase to overtake it.
 */
function connectionOf(tx: Transaction): postgres.TransactionSql {
  const client = (tx as unknown as { session?: { client?: postgres.TransactionSql } }).session?.client;
  if (typeof client?.unsafe !== 'function') {
    throw new Error('drizzle-orm changed: a postgres-js transaction no longer exposes session.client');
  }
  return client;
}

/**
 * Sends the phase's closing write (fenced by the lease token, checked by idempotency_assert_owned)
 * without waiting for its answer: the COMMIT that follows goes out in the same write, so the fence
 * costs no round trip of its own. If the lease was lost the statement fails, PostgreSQL aborts the
 * transaction, the COMMIT becomes a rollback, and the returned promise rejects with LeaseLostError.
 */
function sendFenced(tx: Transaction, text: string, parameters: (string | number | null)[]): Promise<void> {
  const query = connectionOf(tx).unsafe(text, parameters, { prepare: true });
  query.execute();
  return query.then(
    () => undefined,
    (error: unknown) => {
      throw (error as { code?: string }).code === LEASE_LOST_SQLSTATE ? new LeaseLostError() : error;
    },
  );
}

/** An UPDATE of the key's row, fenced: it must match exactly the row this lease holds, or it raises. */
const fenced = (update: string) => `
  with fenced as (${update} returning 1)
  select idempotency_assert_owned(count(*)) from fenced`;

const OWNED_ROW = 'id = $1::uuid and lease_token = $2::uuid and completed_at is null';

const SAVE_RECOVERY_POINT_SQL = fenced(`update idempotency_keys set recovery_point = $3 where ${OWNED_ROW}`);

const COMPLETE_SQL = fenced(`
  update idempotency_keys
     set response_status = $3::int, response_body = $4::jsonb,
         completed_at = now(), recovery_point = 'finished',
         lease_expires_at = null, lease_token = null
   where ${OWNED_ROW}`);

export function createPostgresIdempotencyStore(db: Database): IdempotencyStore<Transaction> {
  const interval = (ms: number) => sql`(${Math.round(ms)}::bigint * interval '1 millisecond')`;

  /**
   * Insert-or-read in one statement: the happy path and the replay path each cost one round trip.
   * The read half sees the snapshot taken when the statement began, so a row committed by a
   * concurrent claim after that instant may be invisible to both halves; `readOnly` covers it.
   *
   * The claim commits without waiting for its WAL flush (synchronous_commit off for this one
   * statement's transaction), which saves a disk sync per request. That loses nothing: the only
   * thing a claim does is say "someone is working on this key", and nothing durable happens under it
   * until the handler's first atomic phase, whose synchronous commit flushes the WAL up to and
   * including the claim (WAL is flushed in order). If PostgreSQL crashes before then, the claim is
   * gone and so is everything done under it: the key reads as absent and the retry claims it afresh,
   * exactly as if the first request had never arrived. Completions and recovery points, which do
   * record work, keep the server's synchronous_commit.
   */
  async function insertOrRead(request: ClaimRequest): Promise<ClaimRow | undefined> {
    const rows = await db.execute<ClaimRow>(sql`
      with async_commit as (
        -- is_local: for this statement's own transaction only; the connection's setting is untouched.
        select set_config('synchronous_commit', 'off', true)
      ),
      claimed as (
        insert into idempotency_keys
          (scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token, expires_at)
        select ${request.scope}::text, ${request.key}::text, ${request.path}::text, ${request.fingerprint}::text,
               now(), now() + ${interval(request.leaseMs)}, ${request.leaseToken}::uuid,
               now() + ${interval(request.ttlMs)}
          from async_commit
        on conflict (scope, key) do nothing
        returning id, true as claimed, request_path, request_hash, response_status, response_body,
                  lease_token, recovery_point, completed_at, false as expired,
                  0::float8 as lease_remaining_ms
      )
      select * from claimed
      union all
      select id, false, request_path, request_hash, response_status, response_body, lease_token,
             recovery_point, completed_at, expires_at <= now(),
             coalesce(extract(epoch from (lease_expires_at - now())) * 1000, 0)::float8
        from idempotency_keys
       where scope = ${request.scope} and key = ${request.key}
         and not exists (select 1 from claimed)`);
    return rows[0];
  }

  async function readOnly(request: ClaimRequest): Promise<ClaimRow | undefined> {
    const rows = await db.execute<ClaimRow>(sql`
      select id, false as claimed, request_path, request_hash, response_status, response_body,
             lease_token, recovery_point, completed_at, expires_at <= now() as expired,
             coalesce(extract(epoch from (lease_expires_at - now())) * 1000, 0)::float8 as lease_remaining_ms
        from idempotency_keys
       where scope = ${request.scope} and key = ${request.key}`);
    return rows[0];
  }

  /** An expired record counts as absent: reset it in place for the new request. */
  async function takeOverExpired(request: ClaimRequest, id: string): Promise<boolean> {
    const rows = await db.execute(sql`
      update idempotency_keys
         set request_path = ${request.path}, request_hash = ${request.fingerprint},
             response_status = null, response_body = null, completed_at = null,
             recovery_point = 'started', locked_at = now(),
             lease_expires_at = now() + ${interval(request.leaseMs)},
             lease_token = ${request.leaseToken}::uuid,
             created_at = now(), expires_at = now() + ${interval(request.ttlMs)}
       where id = ${id}::uuid and expires_at <= now()
         and (completed_at is not null or lease_expires_at is null or lease_expires_at <= now())
      returning id`);
    return rows.length === 1;
  }

  /**
   * A record nobody is working on (lease stale or released): exactly one contender wins this
   * conditional UPDATE, because it requires the token it observed to still be there.
   */
  async function takeOverIdle(
    request: ClaimRequest,
    id: string,
    observedToken: string | null,
  ): Promise<string | undefined> {
    const rows = await db.execute<{ recovery_point: string }>(sql`
      update idempotency_keys
         set locked_at = now(), lease_expires_at = now() + ${interval(request.leaseMs)},
             lease_token = ${request.leaseToken}::uuid
       where id = ${id}::uuid and completed_at is null
         and lease_token is not distinct from ${observedToken}::uuid
         and (lease_expires_at is null or lease_expires_at <= now())
      returning recovery_point`);
    return rows[0]?.recovery_point;
  }

  return {
    async claim(request): Promise<ClaimOutcome> {
      let row = await insertOrRead(request);
      for (let round = 0; round < MAX_CLAIM_ROUNDS; round++) {
        row ??= await readOnly(request);
        if (!row) {
          // Deleted between our statements (released with `forget`): claim afresh.
          row = await insertOrRead(request);
          continue;
        }
        if (row.claimed) {
          return { kind: 'owned', id: row.id, recoveryPoint: row.recovery_point, acquisition: 'new' };
        }
        if (row.expired) {
          if (await takeOverExpired(request, row.id)) {
            return { kind: 'owned', id: row.id, recoveryPoint: 'started', acquisition: 'expired_record' };
          }
          row = undefined;
          continue;
        }
        if (row.request_hash !== request.fingerprint || row.request_path !== request.path) {
          return { kind: 'mismatch' };
        }
        if (row.completed_at !== null) {
          return {
            kind: 'completed',
            response: { status: row.response_status ?? 200, body: row.response_body ?? null },
          };
        }
        if (row.lease_remaining_ms > 0) {
          return { kind: 'in_progress', retryAfterMs: row.lease_remaining_ms };
        }
        const recoveryPoint = await takeOverIdle(request, row.id, row.lease_token);
        if (recoveryPoint !== undefined) {
          return {
            kind: 'owned',
            id: row.id,
            recoveryPoint,
            acquisition: row.lease_token === null ? 'released' : 'stale_lease',
          };
        }
        // Someone else won the takeover (or finished): look again.
        row = undefined;
      }
      // The record kept changing under us: another request is clearly active on this key.
      return { kind: 'in_progress', retryAfterMs: 1000 };
    },

    transaction(fn) {
      return db.transaction(fn);
    },

    saveRecoveryPoint(tx, ref: KeyRef, recoveryPoint: string) {
      return sendFenced(tx, SAVE_RECOVERY_POINT_SQL, [ref.id, ref.leaseToken, recoveryPoint]);
    },

    complete(tx, ref: KeyRef, response: StoredResponse) {
      return sendFenced(tx, COMPLETE_SQL, [
        ref.id,
        ref.leaseToken,
        response.status,
        JSON.stringify(response.body ?? null),
      ]);
    },

    async release(ref: KeyRef, { forget }) {
      if (forget) {
        const deleted = await db.execute(sql`
          delete from idempotency_keys
           where id = ${ref.id}::uuid and lease_token = ${ref.leaseToken}::uuid
             and completed_at is null and recovery_point = 'started'
          returning 1`);
        if (deleted.length === 1) return;
      }
      await db.execute(sql`
        update idempotency_keys set locked_at = null, lease_expires_at = null, lease_token = null
         where id = ${ref.id}::uuid and lease_token = ${ref.leaseToken}::uuid and completed_at is null`);
    },

    async deleteExpired(batchSize: number) {
      // SKIP LOCKED lets several instances clean at once without waiting on each other; a record
      // whose owner is still inside its lease is left for a later pass.
      const rows = await db.execute(sql`
        with doomed as (
          select id from idempotency_keys
           where expires_at <= now()
             and (completed_at is not null or lease_expires_at is null or lease_expires_at <= now())
           order by expires_at
           limit ${batchSize}
           for update skip locked
        )
        delete from idempotency_keys k using doomed where k.id = doomed.id
        returning 1`);
      return rows.length;
    },
  };
}
