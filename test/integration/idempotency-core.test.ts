/**
 * The guard's state machine (design.md §3) against real PostgreSQL, with a toy business table so
 * that "completion commits with the effects" can be seen in rows.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import { sql } from 'drizzle-orm';
import postgres from 'postgres';
import { openDatabase, type Database, type Transaction } from '@/db/client';
import { runMigrations } from '@/db/migrate';
import {
  deleteExpiredKeys,
  executeIdempotent,
  InvalidKeyError,
  KeyReusedError,
  MissingKeyError,
  recoveryPoint,
  RequestInProgressError,
  respond,
  type GuardEvent,
  type IdempotencyOptions,
  type IdempotencyStore,
  type OwnedKey,
} from '@payonce/idempotency';
import { createPostgresIdempotencyStore } from '@payonce/idempotency/postgres';
import { requireDatabaseUrl } from '@/test/support/stack';
import { createCheckoutIdempotencyStore } from '@/server/checkout/services';

const url = requireDatabaseUrl();
let handle: ReturnType<typeof openDatabase>;
let db: Database;
let store: IdempotencyStore<Transaction>;
const options: IdempotencyOptions = { leaseMs: 30_000, ttlMs: 24 * 3600_000 };
const shortLease: IdempotencyOptions = { leaseMs: 300, ttlMs: 24 * 3600_000 };

const scope = () => `customer:${randomUUID()}`;
const effects = async (tag: string) =>
  Number((await db.execute<{ n: number }>(sql`select count(*)::int as n from core_test_effects where tag = ${tag}`))[0]!.n);
const keyRow = async (s: string, key: string) =>
  (await db.execute<Record<string, any>>(sql`select * from idempotency_keys where scope = ${s} and key = ${key}`))[0];

/** A handler that writes one effect row and completes in the same transaction. */
const writeEffectAndComplete =
  (tag: string, status = 201, body: unknown = { ok: true, tag }) =>
  async (key: OwnedKey<Transaction>) =>
    (
      await key.atomicPhase(async (tx) => {
        await tx.execute(sql`insert into core_test_effects (tag) values (${tag})`);
        return respond(status, body);
      })
    ).response;

before(async () => {
  await runMigrations(url);
  handle = openDatabase(url, { max: 30 });
  db = handle.db;
  store = createCheckoutIdempotencyStore(handle.sql);
  await db.execute(sql`create table if not exists core_test_effects (id serial primary key, tag text not null)`);
});
after(async () => {
  await handle.sql.end({ timeout: 5 });
});

describe('idempotency core', () => {
  let s: string;
  beforeEach(() => {
    s = scope();
  });

  it('1. runs the handler once and replays its stored status and body to a retry', async () => {
    const tag = randomUUID();
    const first = await executeIdempotent(store, { scope: s, key: 'k1', path: 'p', input: { a: 1 } }, writeEffectAndComplete(tag), options);
    assert.deepEqual(first, { status: 201, body: { ok: true, tag }, replayed: false });
    let ran = false;
    const second = await executeIdempotent(
      store,
      { scope: s, key: 'k1', path: 'p', input: { a: 1 } },
      async () => {
        ran = true;
      },
      options,
    );
    assert.equal(ran, false);
    assert.deepEqual(second, { status: 201, body: { ok: true, tag }, replayed: true });
    assert.equal(JSON.stringify(second.body), JSON.stringify(first.body), 'byte-identical body');
    assert.equal(await effects(tag), 1);
  });

  it('2. refuses a missing or malformed key with 400 before writing anything', async () => {
    const handler = async () => assert.fail('handler must not run');
    await assert.rejects(executeIdempotent(store, { scope: s, key: undefined, path: 'p', input: {} }, handler, options), MissingKeyError);
    for (const key of ['', 'x'.repeat(256), 'ключ']) {
      await assert.rejects(executeIdempotent(store, { scope: s, key, path: 'p', input: {} }, handler, options), InvalidKeyError);
    }
    const rows = await db.execute(sql`select 1 from idempotency_keys where scope = ${s}`);
    assert.equal(rows.length, 0);
  });

  it('3. treats key order and whitespace as the same request, another input or path as 422', async () => {
    const tag = randomUUID();
    await executeIdempotent(
      store,
      { scope: s, key: 'k', path: 'p', input: JSON.parse('{"a":1,"b":[1,2]}') },
      writeEffectAndComplete(tag),
      options,
    );
    const replay = await executeIdempotent(
      store,
      { scope: s, key: 'k', path: 'p', input: JSON.parse('{ "b": [1, 2], "a": 1 }') },
      writeEffectAndComplete(tag),
      options,
    );
    assert.equal(replay.replayed, true);
    await assert.rejects(
      executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { a: 2, b: [1, 2] } }, writeEffectAndComplete(tag), options),
      (e: KeyReusedError) => e instanceof KeyReusedError && e.httpStatus === 422 && e.reason === 'KEY_REUSED_WITH_DIFFERENT_REQUEST',
    );
    await assert.rejects(
      executeIdempotent(store, { scope: s, key: 'k', path: 'other', input: { a: 1, b: [1, 2] } }, writeEffectAndComplete(tag), options),
      KeyReusedError,
    );
    assert.equal(await effects(tag), 1);
  });

  it('4. answers 409 with a Retry-After while the first request is in flight', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const tag = randomUUID();
    const first = executeIdempotent(
      store,
      { scope: s, key: 'k', path: 'p', input: {} },
      async (key) => {
        await gate;
        return writeEffectAndComplete(tag)(key);
      },
      options,
    );
    await new Promise((r) => setTimeout(r, 100));
    await assert.rejects(
      executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, writeEffectAndComplete(tag), options),
      (e: RequestInProgressError) =>
        e instanceof RequestInProgressError && e.httpStatus === 409 && e.retryAfterSeconds >= 1 && e.retryAfterSeconds <= 30,
    );
    release();
    assert.equal((await first).status, 201);
    assert.equal(await effects(tag), 1);
  });

  it('5. runs the handler exactly once for 50 concurrent calls with one key', async () => {
    const tag = randomUUID();
    let runs = 0;
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, () =>
        executeIdempotent(
          store,
          { scope: s, key: 'same', path: 'p', input: { n: 1 } },
          async (key) => {
            runs++;
            await new Promise((r) => setTimeout(r, 50));
            return writeEffectAndComplete(tag)(key);
          },
          options,
        ),
      ),
    );
    assert.equal(runs, 1);
    assert.equal(await effects(tag), 1);
    for (const result of results) {
      if (result.status === 'rejected') assert.ok(result.reason instanceof RequestInProgressError, String(result.reason));
      else assert.equal(result.value.status, 201);
    }
  });

  it('6. lets exactly one retry take over a stale lease, resuming at the recovery point', async () => {
    const tag = randomUUID();
    // The first owner reaches a recovery point, then "dies": its promise never settles.
    let reachedPoint!: () => void;
    const atPoint = new Promise<void>((resolve) => (reachedPoint = resolve));
    let resumeDead!: () => void;
    const deadOwner = executeIdempotent(
      store,
      { scope: s, key: 'k', path: 'p', input: {} },
      async (key) => {
        await key.atomicPhase(async (tx) => {
          await tx.execute(sql`insert into core_test_effects (tag) values (${`${tag}:phase1`})`);
          return recoveryPoint('phase1_done');
        });
        reachedPoint();
        await new Promise<void>((resolve) => (resumeDead = resolve));
        return writeEffectAndComplete(`${tag}:zombie`)(key);
      },
      shortLease,
    );
    await atPoint;
    await assert.rejects(
      executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, writeEffectAndComplete(tag), shortLease),
      RequestInProgressError,
      'the lease is still fresh',
    );
    await new Promise((r) => setTimeout(r, 400));

    const events: GuardEvent[] = [];
    const seenPoints: string[] = [];
    let takerMayFinish!: () => void;
    const takerGate = new Promise<void>((resolve) => (takerMayFinish = resolve));
    let takerStarted!: () => void;
    const takerRunning = new Promise<void>((resolve) => (takerStarted = resolve));
    const contenders = Promise.allSettled(
      Array.from({ length: 20 }, () =>
        executeIdempotent(
          store,
          { scope: s, key: 'k', path: 'p', input: {} },
          async (key) => {
            seenPoints.push(key.recoveryPoint);
            takerStarted();
            await takerGate;
            return writeEffectAndComplete(tag)(key);
          },
          { ...shortLease, leaseMs: 30_000, observe: (e) => events.push(e) },
        ),
      ),
    );
    await takerRunning;

    // The zombie wakes up while the new owner is still working and tries to complete: fenced out by
    // the lease token, its transaction rolls back.
    resumeDead();
    await assert.rejects(deadOwner, RequestInProgressError);
    assert.equal(await effects(`${tag}:zombie`), 0);

    takerMayFinish();
    const settled = await contenders;
    assert.deepEqual(seenPoints, ['phase1_done'], 'exactly one takeover, resumed where the dead owner stopped');
    assert.equal(events.filter((e) => e.outcome === 'lease_taken_over').length, 1);
    assert.ok(settled.some((c) => c.status === 'fulfilled' && c.value.status === 201));
    assert.equal(await effects(`${tag}:phase1`), 1, 'phase 1 effects were not repeated');
    assert.equal(await effects(tag), 1);
  });

  it('7. treats an expired record as absent and takes it over', async () => {
    const tag = randomUUID();
    // The record is expired behind the process's back, so this process must not remember the answer.
    const options: IdempotencyOptions = { leaseMs: 30_000, ttlMs: 24 * 3600_000, replayCacheSize: 0 };
    await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: { v: 1 } }, writeEffectAndComplete(tag), options);
    await db.execute(sql`update idempotency_keys set expires_at = now() - interval '1 second' where scope = ${s}`);
    // Even a different request may use the key once its record has expired.
    const again = await executeIdempotent(
      store,
      { scope: s, key: 'k', path: 'p', input: { v: 2 } },
      writeEffectAndComplete(tag, 201, { second: true }),
      options,
    );
    assert.deepEqual(again, { status: 201, body: { second: true }, replayed: false });
    assert.equal(await effects(tag), 2);
    const row = await keyRow(s, 'k');
    assert.ok(new Date(row!.expires_at).getTime() > Date.now() + 23 * 3600_000);
  });

  it('8. releases the key on a transient failure: forgotten before any effect, kept at its recovery point after', async () => {
    const tag = randomUUID();
    await assert.rejects(
      executeIdempotent(
        store,
        { scope: s, key: 'early', path: 'p', input: {} },
        async () => {
          throw new Error('PSP 503');
        },
        options,
      ),
      /PSP 503/,
    );
    assert.equal(await keyRow(s, 'early'), undefined, 'nothing durable happened: the key is forgotten');

    await assert.rejects(
      executeIdempotent(
        store,
        { scope: s, key: 'late', path: 'p', input: {} },
        async (key) => {
          await key.atomicPhase(async (tx) => {
            await tx.execute(sql`insert into core_test_effects (tag) values (${`${tag}:started`})`);
            return recoveryPoint('charge_started');
          });
          throw new Error('gateway timeout');
        },
        options,
      ),
      /gateway timeout/,
    );
    const row = await keyRow(s, 'late');
    assert.equal(row!.recovery_point, 'charge_started');
    assert.equal(row!.lease_token, null);
    assert.equal(row!.completed_at, null);

    // The retry runs at once (no lease to wait out) and resumes at the recovery point.
    const seen: string[] = [];
    const retry = await executeIdempotent(
      store,
      { scope: s, key: 'late', path: 'p', input: {} },
      async (key) => {
        seen.push(key.recoveryPoint);
        return writeEffectAndComplete(tag)(key);
      },
      options,
    );
    assert.deepEqual(seen, ['charge_started']);
    assert.equal(retry.status, 201);
    assert.equal(await effects(`${tag}:started`), 1);
  });

  it('9. stores a terminal failure (402) and replays it without running again', async () => {
    const tag = randomUUID();
    const declined = { reason: 'PAYMENT_DECLINED', declineCode: 'ACQ.BUYER_BALANCE_NOT_ENOUGH' };
    const first = await executeIdempotent(
      store,
      { scope: s, key: 'k', path: 'p', input: {} },
      writeEffectAndComplete(tag, 402, declined),
      options,
    );
    const second = await executeIdempotent(store, { scope: s, key: 'k', path: 'p', input: {} }, writeEffectAndComplete(tag, 201), options);
    assert.deepEqual(first, { status: 402, body: declined, replayed: false });
    assert.deepEqual(second, { status: 402, body: declined, replayed: true });
    assert.equal(await effects(tag), 1);
  });

  it('10. commits completion with the business effects or not at all', async () => {
    const tag = randomUUID();
    await assert.rejects(
      executeIdempotent(
        store,
        { scope: s, key: 'k', path: 'p', input: {} },
        async (key) => {
          await key.atomicPhase(async (tx) => {
            await tx.execute(sql`insert into core_test_effects (tag) values (${tag})`);
            if (tag) throw new Error('serialization failure');
            return respond(201, {});
          });
        },
        options,
      ),
      /serialization failure/,
    );
    assert.equal(await effects(tag), 0);
    assert.equal(await keyRow(s, 'k'), undefined);
  });

  it("11. scopes keys: two customers using the same key never see each other's answer", async () => {
    const other = scope();
    const a = await executeIdempotent(
      store,
      { scope: s, key: 'shared', path: 'p', input: {} },
      writeEffectAndComplete('a', 201, { who: 'a' }),
      options,
    );
    const b = await executeIdempotent(
      store,
      { scope: other, key: 'shared', path: 'p', input: { different: true } },
      writeEffectAndComplete('b', 201, { who: 'b' }),
      options,
    );
    assert.deepEqual(a.body, { who: 'a' });
    assert.deepEqual(b, { status: 201, body: { who: 'b' }, replayed: false });
  });

  it('12. costs two statements on the happy path beyond the business work (claim; completion in its transaction)', async () => {
    const statements: string[] = [];
    const counting = postgres(url, { max: 1, onnotice: () => {}, debug: (_c, query) => statements.push(query) });
    try {
      const countingStore = createPostgresIdempotencyStore(counting);
      // A new connection first reads the server's array types once; that is not per request.
      await counting`select 1`;
      statements.length = 0;
      await executeIdempotent(
        countingStore,
        { scope: s, key: 'rt', path: 'p', input: {} },
        async (key) => (await key.atomicPhase(async () => respond(201, { ok: 1 }))).response,
        options,
      );
      const work = statements.filter((q) => !/^\s*(begin|commit)\s*$/i.test(q));
      assert.equal(work.length, 2, work.join('\n---\n'));
      assert.match(work[0]!, /insert into idempotency_keys/);
      assert.match(work[1]!, /update idempotency_keys/);

      statements.length = 0;
      await executeIdempotent(countingStore, { scope: s, key: 'rt', path: 'p', input: {} }, async () => assert.fail(), {
        ...options,
        replayCacheSize: 0,
      });
      assert.equal(statements.length, 1, 'a replay the process does not remember is one round trip');

      statements.length = 0;
      const warm = await executeIdempotent(
        countingStore,
        { scope: s, key: 'rt', path: 'p', input: {} },
        async () => assert.fail(),
        options,
      );
      assert.deepEqual(warm, { status: 201, body: { ok: 1 }, replayed: true });
      assert.equal(statements.length, 0, 'a replay of an answer this process committed costs no statement');
    } finally {
      await counting.end({ timeout: 5 });
    }
  });

  it('12b. commits the claim without a WAL flush for that statement only: the completion after it stays synchronous', async () => {
    // One connection, so the claim and everything after it share a session: a session-wide
    // synchronous_commit=off would make completions and business commits lose their durability.
    const single = openDatabase(url, { max: 1 });
    try {
      const singleStore = createCheckoutIdempotencyStore(single.sql);
      let insidePhase = '';
      await executeIdempotent(
        singleStore,
        { scope: s, key: 'sync', path: 'p', input: {} },
        async (key) =>
          (
            await key.atomicPhase(async (tx) => {
              const [row] = await tx.execute<{ setting: string }>(sql`select current_setting('synchronous_commit') as setting`);
              insidePhase = row!.setting;
              return respond(201, { ok: 1 });
            })
          ).response,
        options,
      );
      const [after] = await single.sql<{ setting: string }[]>`select current_setting('synchronous_commit') as setting`;
      assert.equal(insidePhase, 'on', 'the atomic phase after the claim commits synchronously');
      assert.equal(after!.setting, 'on', 'the connection keeps its setting');
    } finally {
      await single.sql.end({ timeout: 5 });
    }
  });

  it('13. deletes expired keys in bounded batches and leaves live ones', async () => {
    await db.execute(sql`
      insert into idempotency_keys (scope, key, request_path, request_hash, completed_at, response_status, expires_at)
      select ${s}, 'old-' || g, 'p', 'h', now(), 200, now() - interval '1 minute' from generate_series(1, 2500) g`);
    await db.execute(sql`
      insert into idempotency_keys (scope, key, request_path, request_hash, completed_at, response_status)
      select ${s}, 'live-' || g, 'p', 'h', now(), 200 from generate_series(1, 10) g`);
    // Expired but its owner is still inside its lease: left for a later pass.
    await db.execute(sql`
      insert into idempotency_keys (scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token, expires_at)
      values (${s}, 'busy', 'p', 'h', now(), now() + interval '1 minute', gen_random_uuid(), now() - interval '1 second')`);
    const batches: number[] = [];
    const counted: IdempotencyStore<Transaction> = {
      ...store,
      deleteExpired: async (n) => {
        const deleted = await store.deleteExpired(n);
        batches.push(deleted);
        return deleted;
      },
    };
    // Other tests' expired keys in this database may be swept too; count only ours.
    await deleteExpiredKeys(counted, { batchSize: 1000 });
    assert.ok(batches.length >= 3 && batches.every((n) => n <= 1000), `batches ${batches}`);
    const left = await db.execute<{ key: string }>(sql`select key from idempotency_keys where scope = ${s} order by key`);
    assert.equal(left.length, 11);
    assert.ok(left.some((r) => r.key === 'busy'));
  });
});
