/**
 * The in-process contenders that need only PostgreSQL: each wraps the same business transaction
 * (./business.ts). The Redis-backed peers are in ./peers.ts.
 *
 *   unguarded  the business transaction alone;
 *   ours       executeIdempotent with a one-phase handler over createPostgresIdempotencyStore, through the
 *              package's public entries only (@payonce/idempotency), with its default options — so
 *              whatever the core does today is what is measured;
 *   seed       the seed article's sequence, as bench/router.ts runs it over HTTP, on the same
 *              bench_naive_keys table: SELECT, INSERT … ON CONFLICT DO NOTHING, the business
 *              transaction, then a separate UPDATE storing the answer.
 */
import { createHash } from 'node:crypto';
import type postgres from 'postgres';
import { DEFAULT_IDEMPOTENCY_OPTIONS, executeIdempotent, KeyReusedError, RequestInProgressError, respond } from '@payonce/idempotency';
import { createPostgresIdempotencyStore } from '@payonce/idempotency/postgres';
import {
  businessStatements,
  businessTransaction,
  INPROC_PATH,
  INPROC_SCOPE,
  SEED_PATH,
  type BusinessInput,
  type BusinessResult,
} from './business';

/** What one call asks for. `worker` picks the account row the business transaction updates. */
export interface Call {
  key: string;
  worker: number;
  input: BusinessInput;
}

/** `ran`: this call ran the business transaction; `replayed`: it got a stored answer without running it. */
export interface CallResult {
  outcome: 'ran' | 'replayed';
  body: BusinessResult;
}

export interface Contender {
  id: string;
  /** One line for the method: what it does per call. */
  describe: string;
  call(call: Call): Promise<CallResult>;
  /** Whether `error` is this contender's refusal "another call is working on this key". */
  isInProgress(error: unknown): boolean;
  close(): Promise<void>;
}

/** Raised in place of a guard's write of its answer after the business commit (./lost-answer.ts). */
export class InjectedAnswerWriteFailure extends Error {
  constructor() {
    super('injected: the answer was not stored (as if the process had died after the business commit)');
    this.name = 'InjectedAnswerWriteFailure';
  }
}

const never = () => false;
const nothing = async () => {};

export function unguardedContender(sql: postgres.Sql): Contender {
  return {
    id: 'unguarded',
    describe: 'the business transaction alone (BEGIN, INSERT, UPDATE, COMMIT)',
    async call({ worker, input }) {
      return { outcome: 'ran', body: await businessTransaction(sql, 'unguarded', input, worker) };
    },
    isInProgress: never,
    close: nothing,
  };
}

/**
 * Our guard. `handler`: `phased` (the default, what checkout.createOrder uses) is a one-phase handler:
 * no claim row, the key read on its own and inserted with its answer before the COMMIT; `function`
 * is a phases handler, claimed first by a statement of its own, then one atomic phase — what an app
 * gets from `idempotent(resolver)`. `replayCache: false` turns the
 * in-process cache of completed answers off (replayCacheSize 0), so every replay reads PostgreSQL.
 */
export function oursContender(
  sql: postgres.Sql,
  id = 'ours',
  variant: { handler?: 'phased' | 'function'; replayCache?: boolean } = {},
): Contender {
  const store = createPostgresIdempotencyStore(sql, {
    // The business code writes with the phase transaction's own postgres.js handle.
    transactionHandle: (tx: postgres.TransactionSql) => tx,
  });
  const options = variant.replayCache === false ? { ...DEFAULT_IDEMPOTENCY_OPTIONS, replayCacheSize: 0 } : DEFAULT_IDEMPOTENCY_OPTIONS;
  const functionHandler = variant.handler === 'function';
  return {
    id,
    describe: functionHandler
      ? 'executeIdempotent with a plain function handler: the claim as a statement of its own (its own transaction, ' +
        'synchronous_commit off), then one atomic phase with the business statements and respond(201, …) stored with the COMMIT'
      : 'executeIdempotent(createPostgresIdempotencyStore(sql), …, DEFAULT_IDEMPOTENCY_OPTIONS) with a one-phase handler: the key ' +
        'read on its own, BEGIN with the first business statement, and the key inserted with its answer with the COMMIT' +
        (variant.replayCache === false ? '; replayCacheSize 0, so a replay reads PostgreSQL (one statement)' : ''),
    async call({ key, worker, input }) {
      const result = await executeIdempotent(
        store,
        { scope: INPROC_SCOPE, key, path: INPROC_PATH, input },
        functionHandler
          ? async (owned) => (await owned.atomicPhase(async (tx) => respond(201, await businessStatements(tx, id, input, worker)))).response
          : // One phase: BEGIN + the key's read, the business statements, the key's insert + COMMIT.
            { onePhase: async (tx) => respond(201, await businessStatements(tx, id, input, worker)) },
        options,
      );
      return { outcome: result.replayed ? 'replayed' : 'ran', body: result.body as BusinessResult };
    },
    isInProgress: (error) => error instanceof RequestInProgressError,
    close: nothing,
  };
}

interface NaiveKeyRow {
  request_hash: string;
  response_status: number | null;
  response_body: BusinessResult | null;
  completed_at: Date | null;
}

/**
 * The seed's IdempotencyGuard, statement for statement (bench/router.ts `naive`), in process.
 * `failAnswerWrite` (the lost-answer probe only): true makes the UPDATE storing the answer fail, as
 * a crash between the business commit and that UPDATE would.
 */
export function seedContender(sql: postgres.Sql, options: { failAnswerWrite?: () => boolean; id?: string } = {}): Contender {
  return {
    id: options.id ?? 'seed',
    describe:
      'the seed’s sequence on bench_naive_keys (global UNIQUE key, no lease): SELECT, INSERT … ON CONFLICT DO NOTHING, ' +
      'the business transaction, then a separate UPDATE storing the answer',
    async call({ key, worker, input }) {
      const requestHash = createHash('sha256').update(JSON.stringify(input)).digest('hex');
      // get_idempotency_record
      const [record] = await sql<NaiveKeyRow[]>`
        select request_hash, response_status, response_body, locked_at, completed_at
          from bench_naive_keys where key = ${key} and expires_at > now()`;
      if (record) {
        if (record.request_hash !== requestHash) throw new KeyReusedError();
        if (record.completed_at !== null) return { outcome: 'replayed', body: record.response_body! };
        throw new RequestInProgressError(1);
      }
      // acquire_idempotency_lock
      const acquired = await sql`
        insert into bench_naive_keys (key, request_path, request_hash, locked_at)
        values (${key}, ${SEED_PATH}, ${requestHash}, now())
        on conflict (key) do nothing`;
      if (acquired.count !== 1) throw new RequestInProgressError(1);
      let written: BusinessResult;
      try {
        written = await businessTransaction(sql, 'seed', input, worker);
      } catch (error) {
        // The seed deletes the key on failure so that a retry can run.
        await sql`delete from bench_naive_keys where key = ${key}`;
        throw error;
      }
      if (options.failAnswerWrite?.()) throw new InjectedAnswerWriteFailure();
      // complete_idempotency_key: after the business transaction, as the seed does. The body goes as
      // text cast in SQL (plain postgres.js would JSON-encode a jsonb parameter's string a second time).
      await sql`
        update bench_naive_keys
           set response_status = 201, response_body = ${JSON.stringify(written)}::text::jsonb, completed_at = now()
         where key = ${key}`;
      return { outcome: 'ran', body: written };
    },
    isInProgress: (error) => error instanceof RequestInProgressError,
    close: nothing,
  };
}
