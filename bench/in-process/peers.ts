/**
 * The Redis-backed peers, each wrapping the same business transaction (./business.ts) as their docs
 * show, on a private redis-server (./redis.ts):
 *
 *   powertools        @aws-lambda-powertools/idempotency: makeIdempotent(fn) with CachePersistenceLayer on
 *                     @redis/client, keyed on the call's key (eventKeyJmesPath 'key'). fn is called as a
 *                     Lambda handler, (event, context), with a stand-in Lambda context whose
 *                     getRemainingTimeInMillis() is our lease (30 s): without one the library cannot
 *                     tell a live INPROGRESS record from an orphan and runs the work a second time
 *                     (`powertools-no-context`, measured only in the one-key race to show it).
 *   node-idempotency  @node-idempotency/core with @node-idempotency/storage-adapter-redis: onRequest, the
 *                     business transaction, onResponse (its README's flow).
 *
 * Both write their answer to Redis after the business transaction has committed.
 */
import { IdempotencyAlreadyInProgressError, IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import type { CacheClient } from '@aws-lambda-powertools/idempotency/cache/types';
import { Idempotency, IdempotencyError, IdempotencyErrorCodes, type IdempotencyParams } from '@node-idempotency/core';
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis';
import { createClient } from '@redis/client';
import type postgres from 'postgres';
import { DEFAULT_IDEMPOTENCY_OPTIONS } from '@payonce/idempotency';
import { businessTransaction, INPROC_PATH, type BusinessInput, type BusinessResult } from './business';
import { InjectedAnswerWriteFailure, type Contender } from './contenders';

interface PowertoolsEvent {
  key: string;
  worker: number;
  input: BusinessInput;
}

/** What a Lambda invocation gets as its context, as far as Powertools reads it; `ran` is ours. */
interface StandInContext {
  callbackWaitsForEmptyEventLoop: boolean;
  functionName: string;
  functionVersion: string;
  invokedFunctionArn: string;
  memoryLimitInMB: string;
  awsRequestId: string;
  logGroupName: string;
  logStreamName: string;
  getRemainingTimeInMillis(): number;
  done(): void;
  fail(): void;
  succeed(): void;
  /** Set by the wrapped function: this invocation ran the business transaction. */
  ran: boolean;
}

const remainingMs = () => DEFAULT_IDEMPOTENCY_OPTIONS.leaseMs;
const noop = () => {};

function standInContext(requestId: string, remaining: () => number): StandInContext {
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName: 'payonce-bench',
    functionVersion: '$LATEST',
    invokedFunctionArn: 'arn:aws:lambda:local:000000000000:function:payonce-bench',
    memoryLimitInMB: '1024',
    awsRequestId: requestId,
    logGroupName: '/aws/lambda/payonce-bench',
    logStreamName: 'local',
    getRemainingTimeInMillis: remaining,
    done: noop,
    fail: noop,
    succeed: noop,
    ran: false,
  };
}

/** Test hooks for the lost-answer probe (./lost-answer.ts); the timed rounds use none. */
export interface PeerOptions {
  /** Asked before the library writes its answer to Redis: true makes that write fail, as a crash there would. */
  failAnswerWrite?: () => boolean;
  /** Contender id (defaults: `powertools`, `powertools-no-context`, `node-idempotency`). */
  id?: string;
}

/**
 * @param options.lambdaContext false: call the wrapped function without a Lambda context, as code
 *   outside Lambda would by default (the one-key race shows what that does).
 * @param options.remainingMs what the stand-in context's getRemainingTimeInMillis() answers (default:
 *   our lease, 30 s): how long Powertools treats an INPROGRESS record as live.
 */
export async function powertoolsContender(
  sql: postgres.Sql,
  redisUrl: string,
  options: PeerOptions & { lambdaContext?: boolean; remainingMs?: number } = {},
): Promise<Contender> {
  const withContext = options.lambdaContext ?? true;
  const id = options.id ?? (withContext ? 'powertools' : 'powertools-no-context');
  const connected = await createClient({ url: redisUrl }).connect();
  const fail = options.failAnswerWrite;
  // The client as Powertools sees it; with the probe's hook, its SET of a COMPLETED record can fail.
  const client: CacheClient = fail
    ? {
        get: (name) => connected.get(name),
        del: (keys) => connected.del(keys),
        set: (name, value, setOptions) => {
          if (String(value).includes('"COMPLETED"') && fail()) return Promise.reject(new InjectedAnswerWriteFailure());
          return connected.set(name as string, value as string, setOptions as never);
        },
      }
    : connected;
  const persistenceStore = new CachePersistenceLayer({ client });
  const remaining = options.remainingMs === undefined ? remainingMs : () => options.remainingMs!;
  const config = new IdempotencyConfig({
    eventKeyJmesPath: 'key',
    expiresAfterSeconds: DEFAULT_IDEMPOTENCY_OPTIONS.ttlMs / 1000,
  });
  const handler = makeIdempotent(
    async (event: PowertoolsEvent, context: StandInContext | { ran: boolean }): Promise<BusinessResult> => {
      context.ran = true;
      return businessTransaction(sql, id, event.input, event.worker);
    },
    { persistenceStore, config, keyPrefix: `payonce-bench.${id}` },
  );
  return {
    id,
    describe: withContext
      ? 'makeIdempotent(fn, { CachePersistenceLayer on @redis/client, eventKeyJmesPath: "key" }) called as a Lambda handler ' +
        'with a stand-in context (30 s remaining): SET NX of an INPROGRESS record, the business transaction, then SET of the answer'
      : 'the same, called without a Lambda context',
    async call({ key, worker, input }) {
      // A marker without getRemainingTimeInMillis is not taken for a Lambda context.
      const context = withContext ? standInContext(key, remaining) : { ran: false };
      const body = await handler({ key, worker, input }, context);
      return { outcome: context.ran ? 'ran' : 'replayed', body };
    },
    isInProgress: (error) => error instanceof IdempotencyAlreadyInProgressError,
    close: () => connected.close(),
  };
}

export async function nodeIdempotencyContender(sql: postgres.Sql, redisUrl: string, options: PeerOptions = {}): Promise<Contender> {
  const storage = new RedisStorageAdapter({ url: redisUrl });
  await storage.connect();
  const fail = options.failAnswerWrite;
  if (fail) {
    // onResponse's write of the COMPLETE record is the adapter's set(); setIfNotExists is the claim.
    const set = storage.set.bind(storage);
    storage.set = (key, value, setOptions) => (fail() ? Promise.reject(new InjectedAnswerWriteFailure()) : set(key, value, setOptions));
  }
  const idempotency = new Idempotency(storage, { cacheTTLMS: DEFAULT_IDEMPOTENCY_OPTIONS.ttlMs });
  const id = options.id ?? 'node-idempotency';
  return {
    id,
    describe:
      'new Idempotency(RedisStorageAdapter): onRequest (SET NX of an IN_PROGRESS record, else GET), the business ' +
      'transaction, then onResponse (SET of the answer)',
    async call({ key, worker, input }) {
      const request: IdempotencyParams = { method: 'POST', path: INPROC_PATH, headers: { 'idempotency-key': key }, body: { ...input } };
      const stored = await idempotency.onRequest(request);
      if (stored) {
        if (stored.error !== undefined) throw new Error(`node-idempotency replayed a stored error: ${JSON.stringify(stored.error)}`);
        return { outcome: 'replayed', body: stored.body as BusinessResult };
      }
      let body: BusinessResult;
      try {
        body = await businessTransaction(sql, id, input, worker);
      } catch (error) {
        // The README's way: the error is stored as the key's response.
        await idempotency.onResponse(request, { error: String(error), additional: { status: 500 } });
        throw error;
      }
      await idempotency.onResponse(request, { body, additional: { status: 201 } });
      return { outcome: 'ran', body };
    },
    isInProgress: (error) => error instanceof IdempotencyError && error.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS,
    close: () => storage.disconnect(),
  };
}
