/**
 * The lost-answer probe: what a guard does when its process dies between the business COMMIT and the
 * write of the answer — the window every guard has that stores its answer after the business
 * transaction (the seed, Powertools, node-idempotency). The write of the answer is made to fail once
 * (as the death would leave it: work committed, answer never stored); then the same key is retried at
 * once and, for Powertools, again after its in-progress window. Business rows say how many times the
 * work really ran; the key's record in Redis (or bench_naive_keys) says how long it stays that way.
 *
 * Our guard has no such window: its answer is written in the business transaction and commits with
 * it (or neither does), so there is nothing to inject — the probe lists it with that reason.
 */
import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from '@redis/client';
import type postgres from 'postgres';
import { AMOUNT_MINOR, INPROC_PATH, rowsByTag } from './business';
import { InjectedAnswerWriteFailure, seedContender, type Contender } from './contenders';
import { nodeIdempotencyContender, powertoolsContender } from './peers';

export interface LostAnswerResult {
  contender: string;
  /** What the first caller got: its work committed, its answer was not stored. */
  firstCall: string;
  immediateRetry: string;
  /** Powertools: a retry once the in-progress window (the Lambda's remaining time) has passed. */
  laterRetry?: string;
  /** How many times the business work ran over all the calls. */
  businessRuns: number;
  /** The key's record afterwards and how long it lives. */
  keyState: string;
}

/** How long the stand-in Lambda context says the invocation has left, in the Powertools probe. */
const POWERTOOLS_WINDOW_MS = 1000;

function describe(contender: Contender, settled: PromiseSettledResult<{ outcome: string }>): string {
  if (settled.status === 'fulfilled') return settled.value.outcome === 'ran' ? 'ran the work again' : 'the stored answer (replay)';
  const error = settled.reason as Error & { code?: unknown };
  const name = typeof error.code === 'string' ? `${error.name} ${error.code}` : error.name;
  if (contender.isInProgress(error)) return `refused: in progress (${name})`;
  if (error instanceof InjectedAnswerWriteFailure) return 'error: the injected failure';
  const cause = (error as { cause?: unknown }).cause;
  return `error: ${name}${cause instanceof InjectedAnswerWriteFailure ? ' (caused by the injected failure)' : ''}`;
}

const hours = (ms: number) => `${(ms / 3_600_000).toFixed(1)} h`;

async function probe(
  sql: postgres.Sql,
  contender: Contender,
  arm: () => void,
  keyState: (key: string) => Promise<string>,
  laterAfterMs?: number,
): Promise<LostAnswerResult> {
  const key = randomUUID();
  const tag = `inproc/lost-answer/${contender.id}`;
  const call = () => contender.call({ key, worker: 0, input: { tag, amountMinor: AMOUNT_MINOR } });
  arm();
  const [first] = await Promise.allSettled([call()]);
  const [retry] = await Promise.allSettled([call()]);
  let later: PromiseSettledResult<{ outcome: string }> | undefined;
  if (laterAfterMs !== undefined) {
    await sleep(laterAfterMs);
    [later] = await Promise.allSettled([call()]);
  }
  return {
    contender: contender.id,
    firstCall: describe(contender, first!),
    immediateRetry: describe(contender, retry!),
    ...(later ? { laterRetry: `after ${laterAfterMs} ms: ${describe(contender, later)}` } : {}),
    businessRuns: (await rowsByTag(sql, tag)).get(tag) ?? 0,
    keyState: await keyState(key),
  };
}

export async function lostAnswerProbe(sql: postgres.Sql, redisUrl: string | null): Promise<LostAnswerResult[]> {
  const results: LostAnswerResult[] = [];
  let armed = false;
  const failOnce = () => {
    const fail = armed;
    armed = false;
    return fail;
  };
  const arm = () => {
    armed = true;
  };

  const seed = seedContender(sql, { failAnswerWrite: failOnce, id: 'seed' });
  results.push(
    await probe(sql, seed, arm, async (key) => {
      const [row] = await sql<{ completed: boolean; expires_ms: number }[]>`
        select completed_at is not null as completed, (extract(epoch from (expires_at - now())) * 1000)::float8 as expires_ms
          from bench_naive_keys where key = ${key}`;
      return row
        ? `bench_naive_keys: ${row.completed ? 'completed' : 'locked, never completed'}; expires in ${hours(row.expires_ms)}`
        : 'no record';
    }),
  );
  if (!redisUrl) return results;

  const redis = await createClient({ url: redisUrl }).connect();
  try {
    const redisState = async (name: string) => {
      const value = await redis.get(name);
      if (value === null) return 'no record';
      const status = /"status":"([A-Z_]+)"/.exec(value)?.[1] ?? '?';
      return `Redis: ${status}; expires in ${hours(await redis.pTTL(name))}`;
    };

    const prefix = 'payonce-bench.powertools-lost-answer';
    const powertools = await powertoolsContender(sql, redisUrl, {
      id: 'powertools-lost-answer',
      failAnswerWrite: failOnce,
      remainingMs: POWERTOOLS_WINDOW_MS,
    });
    try {
      const result = await probe(
        sql,
        powertools,
        arm,
        // Powertools' record key: prefix#base64(md5(JSON of the selected key)).
        (key) => redisState(`${prefix}#${createHash('md5').update(JSON.stringify(key)).digest('base64')}`),
        POWERTOOLS_WINDOW_MS + 200,
      );
      results.push({ ...result, contender: `powertools (in-progress window ${POWERTOOLS_WINDOW_MS} ms)` });
    } finally {
      await powertools.close();
    }

    const nodeIdempotency = await nodeIdempotencyContender(sql, redisUrl, {
      id: 'node-idempotency-lost-answer',
      failAnswerWrite: failOnce,
    });
    try {
      const result = await probe(sql, nodeIdempotency, arm, (key) => redisState(`node-idempotency:POST:${INPROC_PATH}:${key}`));
      results.push({ ...result, contender: 'node-idempotency' });
    } finally {
      await nodeIdempotency.close();
    }
  } finally {
    await redis.close();
  }
  return results;
}
