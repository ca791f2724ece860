/**
 * A phased handler's claim rides in its first atomic phase's transaction (sent with the BEGIN), so a
 * one-phase request costs no round trip beyond its business transaction, and a duplicate that
 * arrives while the first is still in that transaction waits on its row and replays the answer.
 * Against real PostgreSQL, on the store's plain postgres.js handle.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import postgres from 'postgres';
import { runMigrations } from '../../db/migrate';
import {
  createPostgresIdempotencyStore,
  executeIdempotent,
  KeyReusedError,
  recoveryPoint,
  RequestInProgressError,
  respond,
  type IdempotencyOptions,
  type IdempotencyStore,
  type PhasedHandler,
} from '../../server/idempotency';
import { countingSocket, statementCount } from '../../bench/wire-count';
import { requireDatabaseUrl } from '../support/stack';

const url = requireDatabaseUrl();
let sql: postgres.Sql;
let store: IdempotencyStore<postgres.TransactionSql>;
const options: IdempotencyOptions = { leaseMs: 30_000, ttlMs: 24 * 3600_000, claimWaitMs: 2000 };

const scope = () => `customer:${randomUUID()}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const effects = async (tag: string) =>
  (await sql<{ n: number }[]>`select count(*)::int as n from claim_phase_effects where tag = ${tag}`)[0]!.n;
const keyRow = async (s: string, key: string) => (await sql`select * from idempotency_keys where scope = ${s} and key = ${key}`)[0];

/** One phase: an effect row and the answer, after an optional pause inside the transaction. */
function onePhase(tag: string, counter: { runs: number }, pauseMs = 0, body: unknown = { tag }): PhasedHandler<postgres.TransactionSql> {
  return {
    firstPhase: async (tx) => {
      counter.runs++;
      await tx`insert into claim_phase_effects (tag) values (${tag})`;
      if (pauseMs) await sleep(pauseMs);
      return respond(201, body);
    },
  };
}

before(async () => {
  await runMigrations(url);
  sql = postgres(url, { max: 20, onnotice: () => {} });
  store = createPostgresIdempotencyStore(sql);
  await sql`create table if not exists claim_phase_effects (id serial primary key, tag text not null)`;
});
after(async () => {
  await sql?.end({ timeout: 5 });
});

describe('the claim in the first phase', () => {
  let s: string;
  beforeEach(() => {
    s = scope();
  });

  it('1. costs a one-phase request the round trips of its business transaction alone', async () => {
    const counted = postgres(url, { max: 1, onnotice: () => {}, socket: countingSocket } as postgres.Options<
      Record<string, postgres.PostgresType>
    >);
    try {
      const countedStore = createPostgresIdempotencyStore(counted);
      const business = (tx: postgres.TransactionSql, tag: string) =>
        tx.unsafe('insert into claim_phase_effects (tag) values ($1)', [tag], { prepare: true });
      const guarded = (key: string, tag: string) =>
        executeIdempotent(
          countedStore,
          { scope: s, key, path: 'p', input: { tag } },
          {
            firstPhase: async (tx) => {
              await business(tx, tag);
              return respond(201, { tag });
            },
          },
          options,
        );
      // Every statement prepared on the connection first: a first use costs a describe.
      await counted.begin((tx) => business(tx, 'warm'));
      await guarded('warm', 'warm');

      const trips = async (run: () => Promise<unknown>) => {
        const before = statementCount().roundTrips;
        await run();
        await sleep(20); // an unawaited ROLLBACK would be counted too
        return statementCount().roundTrips - before;
      };
      const unguarded = await trips(() => counted.begin((tx) => business(tx, 'control')));
      const tag = randomUUID();
      const withGuard = await trips(() => guarded('one', tag));
      assert.equal(unguarded, 3, 'BEGIN, INSERT, COMMIT');
      assert.equal(withGuard, unguarded, 'BEGIN with the claim, the INSERT, the completion with the COMMIT');
      assert.equal(await effects(tag), 1);
      assert.equal((await keyRow(s, 'one'))?.response_status, 201);
    } finally {
      await counted.end({ timeout: 5 });
    }
  });

  it('2. a duplicate arriving during the first transaction waits on its row and replays the answer, not a 409', async () => {
    const tag = randomUUID();
    const counter = { runs: 0 };
    const first = executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { a: 1 } }, onePhase(tag, counter, 300), options);
    await sleep(80);
    const started = performance.now();
    const duplicate = await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { a: 1 } }, onePhase(tag, counter), options);
    const waitedMs = performance.now() - started;
    const original = await first;
    assert.equal(original.replayed, false);
    assert.deepEqual(duplicate, { status: 201, body: { tag }, replayed: true });
    assert.ok(waitedMs >= 100, `the duplicate waited for the first to commit (${waitedMs.toFixed(0)} ms)`);
    assert.equal(counter.runs, 1, 'the first phase ran once');
    assert.equal(await effects(tag), 1);
  });

  it('3. waits no longer than claimWaitMs: a slow first request turns its duplicate away with 409 + Retry-After', async () => {
    const tag = randomUUID();
    const counter = { runs: 0 };
    const first = executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, onePhase(tag, counter, 1500), options);
    await sleep(80);
    const started = performance.now();
    await assert.rejects(
      executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, onePhase(tag, counter), { ...options, claimWaitMs: 200 }),
      (e: unknown) => e instanceof RequestInProgressError && e.retryAfterSeconds >= 1,
    );
    assert.ok(performance.now() - started < 1200, 'refused after the wait, before the first finished');
    assert.equal((await first).status, 201);
    assert.equal(counter.runs, 1);
    assert.equal(await effects(tag), 1);
  });

  it('4. a different request under the key, arriving during the first transaction, gets 422 once it commits', async () => {
    const tag = randomUUID();
    const counter = { runs: 0 };
    const first = executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { a: 1 } }, onePhase(tag, counter, 200), options);
    await sleep(60);
    await assert.rejects(
      executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { a: 2 } }, onePhase(tag, counter), options),
      KeyReusedError,
    );
    await first;
    assert.equal(counter.runs, 1);
  });

  it('5. a multi-phase request keeps 409 for its duplicates once its first phase has committed', async () => {
    const tag = randomUUID();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let thenRuns = 0;
    const handler: PhasedHandler<postgres.TransactionSql> = {
      firstPhase: async (tx) => {
        await tx`insert into claim_phase_effects (tag) values (${`${tag}:1`})`;
        return recoveryPoint('phase1_done');
      },
      then: async (key, first) => {
        thenRuns++;
        assert.deepEqual(first, recoveryPoint('phase1_done'));
        await gate; // the gateway call
        return (
          await key.atomicPhase(async (tx) => {
            await tx`insert into claim_phase_effects (tag) values (${tag})`;
            return respond(201, { tag });
          })
        ).response;
      },
    };
    const first = executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, handler, options);
    await sleep(150);
    await assert.rejects(executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, handler, options), RequestInProgressError);
    release();
    assert.equal((await first).status, 201);
    assert.equal(thenRuns, 1);
    assert.equal(await effects(`${tag}:1`), 1);
    assert.equal(await effects(tag), 1);
  });

  it('6. runs the first phase once for 50 concurrent calls with one key; the others replay or get 409', async () => {
    const tag = randomUUID();
    const counter = { runs: 0 };
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, () =>
        executeIdempotent(store, { scope: s, key: 'same', path: 'p', input: { n: 1 } }, onePhase(tag, counter, 50), options),
      ),
    );
    assert.equal(counter.runs, 1);
    assert.equal(await effects(tag), 1);
    let replayed = 0;
    for (const result of results) {
      if (result.status === 'rejected') assert.ok(result.reason instanceof RequestInProgressError, String(result.reason));
      else if (result.value.replayed) replayed++;
    }
    assert.equal(results.filter((r) => r.status === 'fulfilled' && !r.value.replayed).length, 1);
    assert.ok(replayed >= 1, 'duplicates waited and replayed');
  });

  it('7. a first phase that throws keeps nothing, the claim included: the retry runs afresh', async () => {
    const tag = randomUUID();
    await assert.rejects(
      executeIdempotent(
        store,
        { scope: s, key: 'k', path: 'p', input: {} },
        {
          firstPhase: async (tx) => {
            await tx`insert into claim_phase_effects (tag) values (${tag})`;
            throw new Error('out of stock');
          },
        },
        options,
      ),
      /out of stock/,
    );
    assert.equal(await keyRow(s, 'k'), undefined);
    assert.equal(await effects(tag), 0);
    const counter = { runs: 0 };
    const retry = await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, onePhase(tag, counter), options);
    assert.equal(retry.replayed, false);
    assert.equal(await effects(tag), 1);
  });

  it("8. the claim's wait bound ends with the claim: the phase's own statements keep the session's lock_timeout", async () => {
    let inside = '';
    await executeIdempotent(
      store,
      { scope: s, key: 'k', path: 'p', input: {} },
      {
        firstPhase: async (tx) => {
          inside = (await tx<{ t: string }[]>`select current_setting('lock_timeout') as t`)[0]!.t;
          return respond(201, {});
        },
      },
      { ...options, claimWaitMs: 1234 },
    );
    const [outside] = await sql<{ t: string }[]>`select current_setting('lock_timeout') as t`;
    assert.equal(inside, outside!.t);
  });

  it('9. a key taken over from a dead owner past its first phase resumes in `then` without the first phase', async () => {
    const tag = randomUUID();
    const short: IdempotencyOptions = { ...options, leaseMs: 300 };
    let firstRuns = 0;
    const seen: { point: string; first: unknown }[] = [];
    const handler = (dies: boolean): PhasedHandler<postgres.TransactionSql> => ({
      firstPhase: async (tx) => {
        firstRuns++;
        await tx`insert into claim_phase_effects (tag) values (${`${tag}:1`})`;
        return recoveryPoint('phase1_done');
      },
      then: async (key, first) => {
        seen.push({ point: key.recoveryPoint, first });
        if (dies) await new Promise(() => {}); // crashed: never settles
        return (await key.atomicPhase(async () => respond(201, { resumed: true }))).response;
      },
    });
    void executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, handler(true), short);
    await sleep(450);
    const resumed = await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, handler(false), short);
    assert.deepEqual(resumed, { status: 201, body: { resumed: true }, replayed: false });
    assert.equal(firstRuns, 1, 'phase 1 was not repeated');
    assert.equal(await effects(`${tag}:1`), 1);
    assert.deepEqual(seen[1], { point: 'phase1_done', first: undefined });
  });

  it('10. a warm replay is answered from the process until a second before its record expires', async () => {
    const tag = randomUUID();
    const brief: IdempotencyOptions = { ...options, ttlMs: 1800 };
    const counter = { runs: 0 };
    await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { v: 1 } }, onePhase(tag, counter), brief);
    // Deleted behind the process's back, the record is still answered: the cache, not a statement.
    await sql`delete from idempotency_keys where scope = ${s}`;
    const warm = await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { v: 1 } }, onePhase(tag, counter), brief);
    assert.equal(warm.replayed, true);
    await assert.rejects(
      executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { v: 2 } }, onePhase(tag, counter), brief),
      KeyReusedError,
      'another request under a cached key is refused without a statement too',
    );
    assert.equal(counter.runs, 1);
    await sleep(900); // past ttl − 1 s: the entry is gone, and the process asks the store again
    const after = await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { v: 2 } }, onePhase(tag, counter), brief);
    assert.equal(after.replayed, false);
    assert.equal(counter.runs, 2);
  });
});
