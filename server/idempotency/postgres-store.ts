/**
 * The PostgreSQL store behind the guard: the classic dedupe table (./schema.ts), claimed with one
 * INSERT … ON CONFLICT DO NOTHING, leased with a fencing token, completed inside the business
 * transaction.
 *
 * It needs one thing from the app: a postgres.js `Sql` pool. Every statement goes through its public
 * API (`unsafe` with named prepared statements, `begin`); the business code of a phase gets the
 * transaction in whatever form the app writes with, through `transactionHandle` (e.g. Drizzle over the
 * transaction's connection). You probably don't need to edit this file unless you port the store to
 * another database.
 */
import type postgres from 'postgres';
import { LeaseLostError } from './errors';
import { startBeforeCommit } from './postgres-pipelining';
import type {
  ClaimOutcome,
  ClaimRequest,
  ClosingWrite,
  IdempotencyStore,
  KeyRef,
  KeySummary,
  PhaseClaimOutcome,
  PhaseClaimRequest,
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
  expires_in_ms: number;
}

/** How often a claim re-reads when the row it saw changed under it before giving up with a 409. */
const MAX_CLAIM_ROUNDS = 5;

/** Raised by idempotency_assert_owned (./schema-sql.ts). */
const LEASE_LOST_SQLSTATE = 'IK001';

/** An UPDATE of the key's row, fenced: it must match exactly the row this lease holds, or it raises. */
const fenced = (update: string) => `
  with fenced as (${update} returning 1)
  select idempotency_assert_owned(count(*)) from fenced`;

const OWNED_ROW = 'id = $1::uuid and lease_token = $2::uuid and completed_at is null';

/** PostgreSQL's lock_not_available: the claim waited its `waitMs` on a concurrent claim's row. */
const LOCK_TIMEOUT_SQLSTATE = '55P03';

const sqlstate = (error: unknown) => (error as { code?: string } | null)?.code;
const isLeaseLost = (error: unknown) => sqlstate(error) === LEASE_LOST_SQLSTATE;
const isLockTimeout = (error: unknown) => sqlstate(error) === LOCK_TIMEOUT_SQLSTATE;
/** An error PostgreSQL answered with (the connection is fine), not a broken connection. */
const isServerError = (error: unknown) => typeof (error as { severity?: unknown } | null)?.severity === 'string';

const SAVE_RECOVERY_POINT_SQL = fenced(`update idempotency_keys set recovery_point = $3 where ${OWNED_ROW}`);

/**
 * The body travels as canonical JSON text and is cast in SQL: a jsonb parameter would go through the
 * pool's serializer, which apps configure differently (Drizzle makes it pass strings through; plain
 * postgres.js would encode the text a second time).
 */
const COMPLETE_SQL = fenced(`
  update idempotency_keys
     set response_status = $3::int, response_body = $4::text::jsonb,
         completed_at = now(), recovery_point = 'finished',
         lease_expires_at = null, lease_token = null
   where ${OWNED_ROW}`);

export interface PostgresStoreOptions<Tx> {
  /**
   * What a phase's business code writes with, made from the transaction's postgres.js handle: Drizzle
   * (`(tx) => drizzle(tx)`), Kysely, or the handle itself (the default). It must run every statement on
   * that handle, so the phase's writes and the fenced closing write share one transaction.
   */
  transactionHandle?: (tx: postgres.TransactionSql) => Tx;
}

/** `$n` as a duration in milliseconds. */
const ms = (n: number) => `($${n}::bigint * interval '1 millisecond')`;

/** The columns a claim reads from a record it did not insert ($1 scope, $2 key). */
const EXISTING_RECORD = `
  select id, false as claimed, request_path, request_hash, response_status, response_body, lease_token,
         recovery_point, completed_at, expires_at <= now() as expired,
         coalesce(extract(epoch from (lease_expires_at - now())) * 1000, 0)::float8 as lease_remaining_ms,
         (extract(epoch from (expires_at - now())) * 1000)::float8 as expires_in_ms
    from idempotency_keys
   where scope = $1::text and key = $2::text`;

/**
 * Insert-or-read in one statement: the happy path and the replay path each cost one round trip.
 * The read half sees the snapshot taken when the statement began, so a row committed by a concurrent
 * claim after that instant may be invisible to both halves; READ_ONLY_SQL covers it.
 *
 * The claim commits without waiting for its WAL flush (synchronous_commit off for this one
 * statement's transaction), which saves a disk sync per request. That loses nothing: the only thing
 * a claim does is say "someone is working on this key", and nothing durable happens under it until
 * the handler's first atomic phase, whose synchronous commit flushes the WAL up to and including the
 * claim (WAL is flushed in order). If PostgreSQL crashes before then, the claim is gone and so is
 * everything done under it: the key reads as absent and the retry claims it afresh, exactly as if the
 * first request had never arrived. Completions and recovery points, which do record work, keep the
 * server's synchronous_commit.
 *
 * A row that a concurrent claim inserted and has not committed makes the INSERT wait for that claim's
 * transaction; lock_timeout ($8) bounds the wait (then 55P03: in progress).
 *
 * $1 scope, $2 key, $3 path, $4 fingerprint, $5 lease ms, $6 lease token, $7 ttl ms, $8 wait ms.
 */
const INSERT_OR_READ_SQL = `
  with async_commit as (
    -- is_local: for this statement's own transaction only; the connection's settings are untouched.
    select set_config('synchronous_commit', 'off', true), set_config('lock_timeout', $8::text, true)
  ),
  claimed as (
    insert into idempotency_keys
      (scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token, expires_at)
    select $1::text, $2::text, $3::text, $4::text, now(), now() + ${ms(5)}, $6::uuid, now() + ${ms(7)}
      from async_commit
    on conflict (scope, key) do nothing
    returning id
  )
  select id, true as claimed, null::text as request_path, null::text as request_hash, null::int as response_status,
         null::jsonb as response_body, null::uuid as lease_token, 'started' as recovery_point,
         null::timestamptz as completed_at, false as expired, 0::float8 as lease_remaining_ms, 0::float8 as expires_in_ms
    from claimed
  union all
  ${EXISTING_RECORD} and not exists (select 1 from claimed)`;

/**
 * The claim as the first statement of an atomic phase's own transaction, sent together with its BEGIN:
 * a fresh key costs no round trip of its own, and the record commits with the phase's effects (or
 * not at all). The id is chosen by the caller ($9), so the phase can refer to its key before anything
 * is committed.
 *
 * The wait on a concurrent claim's uncommitted row is bounded by lock_timeout ($8) for this statement
 * only: the RETURNING puts the transaction's previous lock_timeout back once the row is in, so the
 * business statements after it wait as they always would. No synchronous_commit change here: this
 * transaction carries business effects.
 *
 * $1 scope, $2 key, $3 path, $4 fingerprint, $5 lease ms, $6 lease token, $7 ttl ms, $8 wait ms, $9 id.
 */
const CLAIM_IN_PHASE_SQL = `
  with prior as materialized (
    select current_setting('lock_timeout') as lock_timeout
  ),
  bounded as materialized (
    select set_config('lock_timeout', $8::text, true) as lock_timeout from prior
  ),
  claimed as (
    insert into idempotency_keys
      (id, scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token, expires_at)
    select $9::uuid, $1::text, $2::text, $3::text, $4::text, now(), now() + ${ms(5)}, $6::uuid, now() + ${ms(7)}
      from bounded
    on conflict (scope, key) do nothing
    returning id, set_config('lock_timeout', (select lock_timeout from prior), true) as lock_timeout_restored
  )
  select id, lock_timeout_restored is not null as claimed, null::text as request_path, null::text as request_hash,
         null::int as response_status, null::jsonb as response_body, null::uuid as lease_token,
         'started' as recovery_point, null::timestamptz as completed_at, false as expired,
         0::float8 as lease_remaining_ms, 0::float8 as expires_in_ms
    from claimed
  union all
  ${EXISTING_RECORD} and not exists (select 1 from claimed)`;

/** $1 scope, $2 key. */
const READ_ONLY_SQL = EXISTING_RECORD;

/**
 * An expired record counts as absent: reset it in place for the new request.
 * $1 id, $2 path, $3 fingerprint, $4 lease ms, $5 lease token, $6 ttl ms.
 */
const TAKE_OVER_EXPIRED_SQL = `
  update idempotency_keys
     set request_path = $2::text, request_hash = $3::text,
         response_status = null, response_body = null, completed_at = null,
         recovery_point = 'started', locked_at = now(),
         lease_expires_at = now() + ${ms(4)}, lease_token = $5::uuid,
         created_at = now(), expires_at = now() + ${ms(6)}
   where id = $1::uuid and expires_at <= now()
     and (completed_at is not null or lease_expires_at is null or lease_expires_at <= now())
  returning id`;

/**
 * A record nobody is working on (lease stale or released): exactly one contender wins this
 * conditional UPDATE, because it requires the token it observed to still be there.
 * $1 id, $2 lease ms, $3 new lease token, $4 observed token (or null).
 */
const TAKE_OVER_IDLE_SQL = `
  update idempotency_keys
     set locked_at = now(), lease_expires_at = now() + ${ms(2)}, lease_token = $3::uuid
   where id = $1::uuid and completed_at is null
     and lease_token is not distinct from $4::uuid
     and (lease_expires_at is null or lease_expires_at <= now())
  returning recovery_point`;

/** Nothing durable happened under the key: delete it, so the next request starts clean. */
const FORGET_SQL = `
  delete from idempotency_keys
   where id = $1::uuid and lease_token = $2::uuid and completed_at is null and recovery_point = 'started'
  returning 1`;

/** Keep the record and its recovery point; only the lease goes, so a retry resumes at once. */
const RELEASE_SQL = `
  update idempotency_keys set locked_at = null, lease_expires_at = null, lease_token = null
   where id = $1::uuid and lease_token = $2::uuid and completed_at is null`;

/**
 * SKIP LOCKED lets several instances clean at once without waiting on each other; a record whose
 * owner is still inside its lease is left for a later pass. $1 batch size.
 */
const DELETE_EXPIRED_SQL = `
  with doomed as (
    select id from idempotency_keys
     where expires_at <= now()
       and (completed_at is not null or lease_expires_at is null or lease_expires_at <= now())
     order by expires_at
     limit $1::int
     for update skip locked
  )
  delete from idempotency_keys k using doomed where k.id = doomed.id
  returning 1`;

/** $1 ids (uuid[]). */
const LEASES_HELD_SQL = `
  select id from idempotency_keys where id = any($1::uuid[]) and lease_expires_at > now()`;

/** $1 scope, $2 path or null for every path. */
const LIST_KEYS_SQL = `
  select key, request_path as path, response_status as status, recovery_point as "recoveryPoint",
         completed_at is not null as completed, coalesce(lease_expires_at > now(), false) as "leaseHeld",
         created_at as "createdAt"
    from idempotency_keys
   where scope = $1::text and ($2::text is null or request_path = $2::text)
   order by created_at`;

/**
 * A concurrent claim has inserted the row and not committed within the wait: its request is running
 * (a one-phase request commits in milliseconds; this one is slow). Ask again in a second.
 */
const inProgressWhileUncommitted = { kind: 'in_progress', retryAfterMs: 1000 } as const;

/**
 * What an existing, unexpired record with the same request answers by itself: its stored response, or
 * "in progress" while its owner's lease is live. `undefined` for a record nobody is working on.
 */
function settledOutcome(row: ClaimRow): Exclude<ClaimOutcome, { kind: 'owned' }> | undefined {
  if (row.completed_at !== null) {
    return {
      kind: 'completed',
      response: { status: row.response_status ?? 200, body: row.response_body ?? null },
      expiresInMs: row.expires_in_ms,
    };
  }
  if (row.lease_remaining_ms > 0) return { kind: 'in_progress', retryAfterMs: row.lease_remaining_ms };
  return undefined;
}

export function createPostgresIdempotencyStore<Tx = postgres.TransactionSql>(
  sql: postgres.Sql,
  options: PostgresStoreOptions<Tx> = {},
): IdempotencyStore<Tx> {
  const handleOf = options.transactionHandle ?? ((tx: postgres.TransactionSql) => tx as unknown as Tx);
  // Named prepared statements: parsed once per connection, then one round trip each.
  const run = <T extends object>(text: string, parameters: (string | number | boolean | null | string[])[]) =>
    sql.unsafe<T[]>(text, parameters as never[], { prepare: true });

  const claimParameters = (request: ClaimRequest) => [
    request.scope,
    request.key,
    request.path,
    request.fingerprint,
    Math.round(request.leaseMs),
    request.leaseToken,
    Math.round(request.ttlMs),
    String(Math.max(1, Math.round(request.waitMs))),
  ];

  /** `null`: the wait on a concurrent claim's uncommitted row ran out. */
  async function insertOrRead(request: ClaimRequest): Promise<ClaimRow | undefined | null> {
    try {
      return (await run<ClaimRow>(INSERT_OR_READ_SQL, claimParameters(request)))[0];
    } catch (error) {
      if (isLockTimeout(error)) return null;
      throw error;
    }
  }

  async function readOnly(request: ClaimRequest): Promise<ClaimRow | undefined> {
    return (await run<ClaimRow>(READ_ONLY_SQL, [request.scope, request.key]))[0];
  }

  async function takeOverExpired(request: ClaimRequest, id: string): Promise<boolean> {
    const rows = await run(TAKE_OVER_EXPIRED_SQL, [
      id,
      request.path,
      request.fingerprint,
      Math.round(request.leaseMs),
      request.leaseToken,
      Math.round(request.ttlMs),
    ]);
    return rows.length === 1;
  }

  async function takeOverIdle(request: ClaimRequest, id: string, observedToken: string | null) {
    const rows = await run<{ recovery_point: string }>(TAKE_OVER_IDLE_SQL, [
      id,
      Math.round(request.leaseMs),
      request.leaseToken,
      observedToken,
    ]);
    return rows[0]?.recovery_point;
  }

  function closingStatement(ref: KeyRef, write: ClosingWrite): [string, (string | number | null)[]] {
    if ('recoveryPoint' in write) return [SAVE_RECOVERY_POINT_SQL, [ref.id, ref.leaseToken, write.recoveryPoint]];
    return [COMPLETE_SQL, [ref.id, ref.leaseToken, write.response.status, JSON.stringify(write.response.body ?? null)]];
  }

  return {
    async claim(request): Promise<ClaimOutcome> {
      let row = await insertOrRead(request);
      for (let round = 0; round < MAX_CLAIM_ROUNDS; round++) {
        if (row === null) return inProgressWhileUncommitted;
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
        const settled = settledOutcome(row);
        if (settled) return settled;
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

    async atomicPhase<R>(ref: KeyRef, fn: (tx: Tx) => Promise<R>, closingWrite: (result: R) => ClosingWrite | undefined): Promise<R> {
      let fence: Promise<unknown> | undefined;
      let value!: R;
      try {
        await sql.begin(async (tx) => {
          value = await fn(handleOf(tx));
          const write = closingWrite(value);
          if (write) {
            // The transaction's last statement, sent with the COMMIT (./postgres-pipelining.ts); a lost
            // lease fails it, which turns the COMMIT into a rollback.
            fence = startBeforeCommit(tx, ...closingStatement(ref, write));
            fence.catch(() => {}); // awaited below, once the transaction has settled
          }
        });
        await fence;
      } catch (error) {
        throw isLeaseLost(error) ? new LeaseLostError() : error;
      }
      return value;
    },

    async claimingPhase<R>(
      request: PhaseClaimRequest,
      fn: (tx: Tx) => Promise<R>,
      closingWrite: (result: R) => ClosingWrite | undefined,
      afterClaim?: () => Promise<void>,
    ): Promise<PhaseClaimOutcome<R>> {
      // A connection of our own for the transaction (postgres.js `reserve`, not `begin`): `begin` waits
      // for the BEGIN's answer before it runs anything, which would cost the round trip this saves.
      const connection = await sql.reserve();
      const tx = connection as unknown as postgres.TransactionSql;
      let open = true;
      /** False once the connection is gone: postgres.js has taken it back as closed, so it is not released. */
      let usable = true;
      /** The not-claimed path hands the connection back itself, once its unawaited ROLLBACK is done. */
      let handedBack = false;
      const end = async (statement: 'commit' | 'rollback') => {
        open = false;
        try {
          await connection.unsafe(statement);
        } catch (error) {
          usable = isServerError(error);
          if (statement === 'commit') throw error;
        }
      };
      try {
        // BEGIN and the claim leave in one write: one round trip for both.
        const begin = connection.unsafe('begin');
        begin.execute();
        let row: ClaimRow | undefined;
        try {
          [row] = await connection.unsafe<ClaimRow[]>(CLAIM_IN_PHASE_SQL, [...claimParameters(request), request.id] as never[], {
            prepare: true,
          });
          await begin;
        } catch (error) {
          if (!isLockTimeout(error)) throw error;
          await end('rollback');
          return { kind: 'found', outcome: inProgressWhileUncommitted };
        }
        if (!row?.claimed) {
          // Nothing was written and the answer needs nothing more from this transaction, so its
          // ROLLBACK is not waited for: the connection goes back to the pool once it is done.
          open = false;
          handedBack = true;
          connection.unsafe('rollback').then(
            () => connection.release(),
            (error: unknown) => {
              if (isServerError(error)) connection.release();
            },
          );
          const outcome =
            row && !row.expired
              ? row.request_hash !== request.fingerprint || row.request_path !== request.path
                ? ({ kind: 'mismatch' } as const)
                : settledOutcome(row)
              : undefined;
          return outcome ? { kind: 'found', outcome } : { kind: 'busy' };
        }
        await afterClaim?.();
        const value = await fn(handleOf(tx));
        const write = closingWrite(value);
        // As in atomicPhase: the closing write goes out with the COMMIT, fenced by the lease token.
        const ref = { id: request.id, leaseToken: request.leaseToken };
        const fence = write ? startBeforeCommit(tx, ...closingStatement(ref, write)) : undefined;
        fence?.catch(() => {}); // awaited below, once the transaction has settled
        await end('commit');
        await fence;
        return { kind: 'owned', value };
      } catch (error) {
        if (open) await end('rollback');
        throw isLeaseLost(error) ? new LeaseLostError() : error;
      } finally {
        if (!handedBack && usable) connection.release();
      }
    },

    async release(ref: KeyRef, { forget }) {
      if (forget && (await run(FORGET_SQL, [ref.id, ref.leaseToken])).length === 1) return;
      await run(RELEASE_SQL, [ref.id, ref.leaseToken]);
    },

    async deleteExpired(batchSize: number) {
      return (await run(DELETE_EXPIRED_SQL, [batchSize])).length;
    },

    async leasesHeld(ids) {
      if (ids.length === 0) return new Set();
      const rows = await run<{ id: string }>(LEASES_HELD_SQL, [[...ids]]);
      return new Set(rows.map((row) => row.id));
    },

    async listKeys(scope, options = {}) {
      return [...(await run<KeySummary>(LIST_KEYS_SQL, [scope, options.path ?? null]))];
    },
  };
}
