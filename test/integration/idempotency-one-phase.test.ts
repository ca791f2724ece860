/**
 * One-phase requests against real PostgreSQL: no claim row, lease or fence — the key is read with the
 * BEGIN and inserted with its answer before the COMMIT, so the guard costs no round trip beyond the
 * business transaction; a duplicate that commits second rolls its work back and replays. On the
 * store's plain postgres.js handle.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import postgres from 'postgres';
import { runMigrations } from '@/db/migrate';
import {
  executeIdempotent,
  KeyReusedError,
  recoveryPoint,
  RequestInProgressError,
  respond,
  type IdempotencyOptions,
  type IdempotencyStore,
  type OnePhaseHandler,
} from '@payonce/idempotency';
import { createPostgresIdempotencyStore } from '@payonce/idempotency/postgres';
import { countingSocket, statementCount } from '@/bench/wire-count';
import { requireDatabaseUrl } from '@/test/support/stack';

type Tx = postgres.TransactionSql;
const url = requireDatabaseUrl();
let sql: postgres.Sql;
let store: IdempotencyStore<Tx>;
const options: IdempotencyOptions = { leaseMs: 30_000, ttlMs: 24 * 3600_000, claimWaitMs: 2000, replayCacheSize: 0 };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const effects = async (tag: string) =>
  (await sql<{ n: number }[]>`select count(*)::int as n from one_phase_effects where tag = ${tag}`)[0]!.n;
const keyRow = async (s: string, key: string) => (await sql`select * from idempotency_keys where scope = ${s} and key = ${key}`)[0];

/** An effect row and the answer, after an optional pause inside the transaction. */
function onePhase(tag: string, counter: { runs: number }, pauseMs = 0, body: unknown = { tag }): OnePhaseHandler<Tx> {
  return {
    onePhase: async (tx) => {
      counter.runs++;
      await tx`insert into one_phase_effects (tag) values (${tag})`;
      if (pauseMs) await sleep(pauseMs);
      return respond(201, body);
    },
  };
}

before(async () => {
  await runMigrations(url);
  sql = postgres(url, { max: 20, onnotice: () => {} });
  store = createPostgresIdempotencyStore(sql);
  await sql`create table if not exists one_phase_effects (id serial primary key, tag text not null)`;
  await sql`create table if not exists one_phase_stock (tag text primary key, units int not null)`;
});
after(async () => {
  await sql?.end({ timeout: 5 });
});

describe('one-phase requests', () => {
  let s: string;
  beforeEach(() => {
    s = `customer:${randomUUID()}`;
  });

  it('1. cost the round trips of the business transaction alone, and one write: the completed key', async () => {
    const counted = postgres(url, { max: 1, onnotice: () => {}, socket: countingSocket } as postgres.Options<
      Record<string, postgres.PostgresType>
    >);
    try {
      const countedStore = createPostgresIdempotencyStore(counted);
      const business = (tx: Tx, tag: string) => tx.unsafe('insert into one_phase_effects (tag) values ($1)', [tag], { prepare: true });
      const guarded = (key: string, tag: string) =>
        executeIdempotent(
          countedStore,
          { scope: s, key, path: 'p', input: { tag } },
          { onePhase: async (tx) => (await business(tx, tag), respond(201, { tag })) },
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
      assert.equal(withGuard, unguarded, "the key's read, BEGIN with the INSERT, the key's insert with the COMMIT");
      const row = await keyRow(s, 'one');
      assert.equal(row?.response_status, 201);
      assert.equal(row?.lease_token, null, 'no lease');
      assert.equal(row?.locked_at, null, 'never locked');
      assert.equal(await effects(tag), 1);
      // A replay: the read alone, no transaction.
      assert.equal(await trips(() => guarded('one', tag)), 1);
    } finally {
      await counted.end({ timeout: 5 });
    }
  });

  it('2. 50 concurrent calls with one key commit one effect; every other call replays its answer', async () => {
    const tag = randomUUID();
    const counter = { runs: 0 };
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, () =>
        executeIdempotent(store, { scope: s, key: 'same', path: 'p', input: { n: 1 } }, onePhase(tag, counter, 20), options),
      ),
    );
    assert.equal(await effects(tag), 1, 'one committed effect');
    const fulfilled = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    for (const r of results) if (r.status === 'rejected') assert.ok(r.reason instanceof RequestInProgressError, String(r.reason));
    assert.equal(fulfilled.filter((r) => !r.replayed).length, 1, 'one answer was run');
    assert.ok(fulfilled.filter((r) => r.replayed).length >= 1, 'the duplicates replayed it');
  });

  it('3. a duplicate whose work fails because the first took the last unit replays the first answer', async () => {
    const tag = randomUUID();
    await sql`insert into one_phase_stock (tag, units) values (${tag}, 1)`;
    const buy: OnePhaseHandler<Tx> = {
      onePhase: async (tx) => {
        const taken = await tx`update one_phase_stock set units = units - 1 where tag = ${tag} and units > 0 returning units`;
        if (taken.length === 0) throw new Error('out of stock');
        await tx`insert into one_phase_effects (tag) values (${tag})`;
        await sleep(150); // holds the stock row: the duplicate waits on it, then finds none left
        return respond(201, { bought: tag });
      },
    };
    const [first, second] = await Promise.all([
      executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, buy, options),
      sleep(40).then(() => executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, buy, options)),
    ]);
    // The 40 ms head start usually decides which runs; on a busy machine the second may reach the
    // stock row first. Either way one runs and the other, finding no stock, replays its answer.
    assert.deepEqual(
      [first, second].map((answer) => answer.replayed).sort(),
      [false, true],
      `one ran, one replayed: ${JSON.stringify([first, second])}`,
    );
    for (const answer of [first, second])
      assert.deepEqual(answer, { status: 201, body: { bought: tag }, replayed: answer.replayed }, 'not "out of stock"');
    assert.equal(await effects(tag), 1);
  });

  it('4. another request under the key that commits first makes the slower one a 422', async () => {
    const tag = randomUUID();
    const counter = { runs: 0 };
    const slow = executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { a: 1 } }, onePhase(tag, counter, 300), options);
    await sleep(60);
    const fast = await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { a: 2 } }, onePhase(tag, counter), options);
    assert.equal(fast.replayed, false);
    await assert.rejects(slow, KeyReusedError);
    assert.equal(await effects(tag), 1);
  });

  it('5. work that throws keeps nothing: no key, no effect, and the retry runs afresh', async () => {
    const tag = randomUUID();
    const failing: OnePhaseHandler<Tx> = {
      onePhase: async (tx) => {
        await tx`insert into one_phase_effects (tag) values (${tag})`;
        throw new Error('crashed mid-transaction');
      },
    };
    await assert.rejects(executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, failing, options), /crashed/);
    assert.equal(await keyRow(s, 'k'), undefined);
    assert.equal(await effects(tag), 0);
    const retry = await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, onePhase(tag, { runs: 0 }), options);
    assert.equal(retry.replayed, false);
    assert.equal(await effects(tag), 1);
  });

  it('6. a COMMIT whose acknowledgement is lost is resolved by looking: the request answers with what committed', async () => {
    const tag = randomUUID();
    const lossy: IdempotencyStore<Tx> = {
      ...store,
      onePhase: async (key, step) => {
        await store.onePhase(key, step);
        throw Object.assign(new Error('connection lost after COMMIT was sent'), { code: 'ECONNRESET' });
      },
    };
    const answer = await executeIdempotent(lossy, { scope: s, key: 'k', path: 'p', input: {} }, onePhase(tag, { runs: 0 }), options);
    assert.deepEqual(answer, { status: 201, body: { tag }, replayed: true });
    const retry = await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, onePhase(tag, { runs: 0 }), options);
    assert.equal(retry.replayed, true, 'the lost answer is replayed to the retry');
    assert.equal(await effects(tag), 1);
  });

  it('7. waits no longer than claimWaitMs on an uncommitted record: 409 + Retry-After, and its own work rolls back', async () => {
    const tag = randomUUID();
    let inserted!: () => void;
    const holding = new Promise<void>((resolve) => (inserted = resolve));
    const holder = sql.begin(async (tx) => {
      await tx`insert into idempotency_keys (scope, key, request_path, request_hash) values (${s}, 'k', 'p', 'x')`;
      inserted();
      await sleep(1500);
      await tx`select 1`;
      throw new Error('rolled back on purpose');
    });
    holder.catch(() => {});
    await holding;
    const started = performance.now();
    await assert.rejects(
      executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, onePhase(tag, { runs: 0 }), { ...options, claimWaitMs: 200 }),
      (e: unknown) => e instanceof RequestInProgressError && e.retryAfterSeconds >= 1,
    );
    assert.ok(performance.now() - started < 1200, 'refused after the wait, before the holder finished');
    assert.equal(await effects(tag), 0);
    await holder.catch(() => {});
  });

  it("8. the key's wait bound is the key's alone: the work's own statements keep the session's lock_timeout", async () => {
    let inside = '';
    await executeIdempotent(
      store,
      { scope: s, key: 'k', path: 'p', input: {} },
      {
        onePhase: async (tx) => {
          inside = (await tx<{ t: string }[]>`select current_setting('lock_timeout') as t`)[0]!.t;
          return respond(201, {});
        },
      },
      { ...options, claimWaitMs: 1234 },
    );
    const [outside] = await sql<{ t: string }[]>`select current_setting('lock_timeout') as t`;
    assert.equal(inside, outside!.t);
  });

  it('9. an expired record counts as absent: another request under the key runs and replaces it', async () => {
    const tag = randomUUID();
    await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { v: 1 } }, onePhase(tag, { runs: 0 }), options);
    await sql`update idempotency_keys set expires_at = now() - interval '1 second' where scope = ${s}`;
    const fresh = await executeIdempotent(
      store,
      { scope: s, key: 'k', path: 'p', input: { v: 2 } },
      onePhase(tag, { runs: 0 }, 0, { v: 2 }),
      options,
    );
    assert.deepEqual(fresh, { status: 201, body: { v: 2 }, replayed: false });
    const rows = await sql`select response_body from idempotency_keys where scope = ${s}`;
    assert.deepEqual(
      rows.map((row) => row.response_body),
      [{ v: 2 }],
    );
  });

  it("10. a phases request's duplicates get 409 while it works between its phases", async () => {
    const tag = randomUUID();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const handler = async (key: import('@payonce/idempotency').OwnedKey<Tx>) => {
      await key.atomicPhase(
        async (tx) => (await tx`insert into one_phase_effects (tag) values (${`${tag}:1`})`, recoveryPoint('phase1_done')),
      );
      await gate; // the gateway call
      return (await key.atomicPhase(async (tx) => (await tx`insert into one_phase_effects (tag) values (${tag})`, respond(201, { tag }))))
        .response;
    };
    const first = executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, handler, options);
    await sleep(150);
    await assert.rejects(executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, handler, options), RequestInProgressError);
    release();
    assert.equal((await first).status, 201);
    assert.equal(await effects(`${tag}:1`), 1);
    assert.equal(await effects(tag), 1);
  });

  it('11. a warm replay is answered from the process until a second before its record expires', async () => {
    const tag = randomUUID();
    const brief: IdempotencyOptions = { ...options, ttlMs: 1800, replayCacheSize: 100 };
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
