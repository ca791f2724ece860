/**
 * The in-process benchmark's harness (bench/in-process/), without Redis: the unguarded, ours and seed
 * contenders each write exactly the business rows the benchmark counts, a completed key replays
 * without writing, the load loop awaits every call, and the one-key race counts what really ran.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import { runMigrations } from '@/db/migrate';
import { ACCOUNTS, AMOUNT_MINOR, ensureInProcessTables, INPROC_SCOPE, rowsByTag } from '@/bench/in-process/business';
import { oursContender, seedContender, unguardedContender, type Contender } from '@/bench/in-process/contenders';
import { runLoop } from '@/bench/in-process/load';
import { oneKeyRace } from '@/bench/in-process/one-key';

let sql: postgres.Sql;
/** Every tag this file writes starts with it, so its rows are its own. */
const PREFIX = `test-inproc-${randomUUID()}/`;

before(async () => {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is not set: run the tests with `npm test`, which provides a fresh database.');
  // The key table comes from the app's migrations; run alone, this file applies them itself.
  await runMigrations(url);
  sql = postgres(url, { max: 10, onnotice: () => {} });
  await ensureInProcessTables(sql);
});

after(async () => {
  if (!sql) return;
  await sql`delete from bench_writes where starts_with(tag, ${PREFIX})`;
  await sql.end({ timeout: 5 });
});

async function rowsTagged(tag: string): Promise<number> {
  return (await rowsByTag(sql, tag)).get(tag) ?? 0;
}

async function balance(account: number): Promise<bigint> {
  const [row] = await sql<{ balance: string }[]>`select balance_minor::text as balance from bench_inproc_accounts where id = ${account}`;
  return BigInt(row!.balance);
}

/** Five fresh keys, then the first key again: five rows, five account updates, and what the repeat got. */
async function fiveThenRepeat(contender: Contender) {
  const tag = `${PREFIX}${contender.id}`;
  const input = { tag, amountMinor: AMOUNT_MINOR };
  const worker = 3;
  const before = await balance(worker);
  const keys = Array.from({ length: 5 }, () => randomUUID());
  const results = [];
  for (const key of keys) results.push(await contender.call({ key, worker, input }));
  assert.deepEqual(
    results.map((r) => r.outcome),
    ['ran', 'ran', 'ran', 'ran', 'ran'],
  );
  assert.equal(await rowsTagged(tag), 5);
  assert.equal(await balance(worker), before + 5n * BigInt(AMOUNT_MINOR));
  const repeat = await contender.call({ key: keys[0]!, worker, input });
  return { tag, first: results[0]!, repeat, keys, before };
}

describe('bench in-process harness (no Redis)', () => {
  it('has an account row for every worker of the largest concurrency', async () => {
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from bench_inproc_accounts`;
    assert.ok(row!.n >= ACCOUNTS && ACCOUNTS >= 128);
  });

  it('unguarded: each call runs the business transaction (INSERT + UPDATE), a repeated key too', async () => {
    const { tag, repeat, before } = await fiveThenRepeat(unguardedContender(sql));
    assert.equal(repeat.outcome, 'ran');
    assert.equal(await rowsTagged(tag), 6);
    assert.equal(await balance(3), before + 6n * BigInt(AMOUNT_MINOR));
  });

  it('ours: a fresh key runs once and completes in the business transaction; the same key replays without writing', async () => {
    const { tag, first, repeat, keys, before } = await fiveThenRepeat(oursContender(sql));
    assert.equal(repeat.outcome, 'replayed');
    assert.deepEqual(repeat.body, first.body);
    assert.equal(await rowsTagged(tag), 5);
    assert.equal(await balance(3), before + 5n * BigInt(AMOUNT_MINOR));
    const [stored] = await sql<{ status: number; completed: boolean }[]>`
      select response_status as status, completed_at is not null as completed
        from idempotency_keys where scope = ${INPROC_SCOPE} and key = ${keys[0]!}`;
    assert.deepEqual({ ...stored }, { status: 201, completed: true });
  });

  it("seed: the seed's sequence writes once, stores the answer after the commit, and replays it", async () => {
    const { tag, first, repeat, keys } = await fiveThenRepeat(seedContender(sql));
    assert.equal(repeat.outcome, 'replayed');
    assert.deepEqual(repeat.body, first.body);
    assert.equal(await rowsTagged(tag), 5);
    const [stored] = await sql<{ status: number; body: unknown; completed: boolean }[]>`
      select response_status as status, response_body as body, completed_at is not null as completed
        from bench_naive_keys where key = ${keys[0]!}`;
    assert.deepEqual({ ...stored }, { status: 201, body: first.body, completed: true });
  });

  it('the load loop awaits every call and keeps every latency', async () => {
    const contender = unguardedContender(sql);
    const tag = `${PREFIX}loop`;
    const result = await runLoop({
      concurrency: 4,
      calls: 20,
      call: (worker) => contender.call({ key: randomUUID(), worker, input: { tag, amountMinor: AMOUNT_MINOR } }),
    });
    assert.equal(result.ok, 20);
    assert.equal(result.errors, 0);
    assert.equal(result.latenciesMs.length, 20);
    assert.ok(result.latenciesMs.every((ms) => ms > 0));
    assert.equal(await rowsTagged(tag), 20);
  });

  it('one key, ten concurrent callers: ours and the seed run the work exactly once, unguarded ten times', async () => {
    for (const [contender, guarded] of [
      [oursContender(sql), true],
      [seedContender(sql), true],
      [unguardedContender(sql), false],
    ] as const) {
      const result = await oneKeyRace(sql, contender, { callers: 10, tag: `${PREFIX}race-${contender.id}`, key: randomUUID(), guarded });
      assert.equal(result.success + result.replay + result.inProgress + result.otherError, 10);
      if (guarded) {
        assert.equal(result.businessRuns, 1, `${contender.id}: ${JSON.stringify(result)}`);
        assert.equal(result.success, 1);
        assert.equal(result.otherError, 0);
        assert.equal(result.pass, true);
      } else {
        assert.equal(result.businessRuns, 10);
        assert.equal(result.pass, null);
      }
    }
  });
});
