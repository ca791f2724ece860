/**
 * The engine's branches (docs/lifecycle.md) against the in-memory store, on a clock the test moves:
 * every branch in milliseconds. The PostgreSQL store runs the same lifecycle in
 * test/integration/idempotency-core.test.ts and idempotency-one-phase.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  createMemoryIdempotencyStore,
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
  type MemoryTransaction,
  type OwnedKey,
} from '../src/index.js';

const options: IdempotencyOptions = { leaseMs: 1_000, ttlMs: 60_000, replayCacheSize: 0 };

/** A store on a test clock, and a ledger of effects that commit with the key or not at all. */
function world() {
  const clock = { now: 0 };
  const store = createMemoryIdempotencyStore({ now: () => clock.now });
  const ledger: string[] = [];
  const effect = (tx: MemoryTransaction, what: string) => tx.onCommit(() => ledger.push(what));
  const request = (key: string | undefined, input: unknown = { a: 1 }, path = 'checkout.pay') => ({
    scope: 'customer:1',
    key,
    path,
    input,
  });
  return { clock, store, ledger, effect, request };
}

const never = () => new Promise<never>(() => {});

describe('the engine, phases', () => {
  it('1. runs the handler once and replays its stored status and body', async () => {
    const { store, ledger, effect, request } = world();
    let runs = 0;
    const handler = async (key: OwnedKey<MemoryTransaction>) => {
      runs++;
      return (await key.atomicPhase(async (tx) => (effect(tx, 'charged'), respond(201, { paid: true, at: new Date(0) })))).response;
    };
    const first = await executeIdempotent(store, request('k'), handler, options);
    const again = await executeIdempotent(store, request('k', { a: 1 }), handler, options);
    assert.deepEqual(first, { status: 201, body: { paid: true, at: '1970-01-01T00:00:00.000Z' }, replayed: false });
    assert.deepEqual(again, { ...first, replayed: true });
    assert.equal(runs, 1);
    assert.deepEqual(ledger, ['charged']);
  });

  it('2. refuses a missing or malformed key with 400 and writes nothing', async () => {
    const { store, request } = world();
    await assert.rejects(executeIdempotent(store, request(undefined), never, options), MissingKeyError);
    for (const key of ['', 'x'.repeat(256), 'ключ', 'a, b']) {
      await assert.rejects(executeIdempotent(store, request(key), never, options), InvalidKeyError);
    }
    assert.equal((await store.read({ scope: 'customer:1', key: '' })).record, undefined);
  });

  it('3. the same input in another key order replays; another input or path under the key is a 422', async () => {
    const { store, request } = world();
    const answer = async () => ({ status: 200, body: {} });
    await executeIdempotent(store, request('k', { a: 1, b: [1, 2] }), answer, options);
    assert.equal((await executeIdempotent(store, request('k', JSON.parse('{ "b": [1, 2], "a": 1 }')), answer, options)).replayed, true);
    await assert.rejects(executeIdempotent(store, request('k', { a: 2, b: [1, 2] }), answer, options), KeyReusedError);
    await assert.rejects(executeIdempotent(store, request('k', { a: 1, b: [1, 2] }, 'other'), answer, options), KeyReusedError);
  });

  it('4. a duplicate while the owner works gets 409 with Retry-After from the lease left', async () => {
    const { store, clock, request } = world();
    void executeIdempotent(store, request('k'), never, options);
    await new Promise((resolve) => setImmediate(resolve));
    clock.now = 400;
    await assert.rejects(
      executeIdempotent(store, request('k'), never, options),
      (e: unknown) => e instanceof RequestInProgressError && e.retryAfterSeconds === 1,
    );
  });

  it('5. a dead owner is taken over by exactly one retry, which resumes at its recovery point', async () => {
    const { store, clock, ledger, effect, request } = world();
    void executeIdempotent(
      store,
      request('k'),
      async (key) => {
        await key.atomicPhase(async (tx) => (effect(tx, 'attempt started'), recoveryPoint('attempt_started')));
        return never(); // crashed after phase 1
      },
      options,
    );
    await new Promise((resolve) => setImmediate(resolve));
    clock.now = 1_000; // the lease ran out
    const seen: string[] = [];
    const resume = async (key: OwnedKey<MemoryTransaction>) => {
      seen.push(`${key.acquisition}@${key.recoveryPoint}`);
      return (await key.atomicPhase(async (tx) => (effect(tx, 'settled'), respond(201, {})))).response;
    };
    const results = await Promise.allSettled([
      executeIdempotent(store, request('k'), resume, options),
      executeIdempotent(store, request('k'), resume, options),
    ]);
    assert.deepEqual(seen, ['stale_lease@attempt_started'], 'one takeover, from phase 1 on');
    assert.deepEqual(ledger, ['attempt started', 'settled']);
    assert.ok(results.some((r) => r.status === 'fulfilled' && !r.value.replayed));
  });

  it('6. an owner that lost its lease cannot write: its phase rolls back and it is told 409', async () => {
    const { store, clock, ledger, effect, request } = world();
    let wake!: () => void;
    const stalled = new Promise<void>((resolve) => (wake = resolve));
    const zombie = executeIdempotent(
      store,
      request('k'),
      async (key) => (await key.atomicPhase(async (tx) => (effect(tx, 'zombie'), await stalled, respond(201, { by: 'zombie' })))).response,
      options,
    );
    await new Promise((resolve) => setImmediate(resolve));
    clock.now = 1_000;
    const winner = await executeIdempotent(
      store,
      request('k'),
      async (key) => (await key.atomicPhase(async (tx) => (effect(tx, 'winner'), respond(201, { by: 'winner' })))).response,
      options,
    );
    wake();
    await assert.rejects(zombie, RequestInProgressError);
    assert.deepEqual(winner.body, { by: 'winner' });
    assert.deepEqual(ledger, ['winner']);
  });

  it('7. a failure before anything durable forgets the key; after a recovery point it keeps it, unleased', async () => {
    const { store, request } = world();
    await assert.rejects(
      executeIdempotent(store, request('early'), async () => Promise.reject(new Error('gateway down')), options),
      /down/,
    );
    assert.equal((await store.read({ scope: 'customer:1', key: 'early' })).record, undefined);

    const failAfterPhase = async (key: OwnedKey<MemoryTransaction>) => {
      await key.atomicPhase(async () => recoveryPoint('attempt_started'));
      throw new Error('timeout');
    };
    await assert.rejects(executeIdempotent(store, request('late'), failAfterPhase, options), /timeout/);
    const kept = (await store.read({ scope: 'customer:1', key: 'late' })).record;
    assert.equal(kept?.recoveryPoint, 'attempt_started');
    assert.equal(kept?.leaseToken, null);
    const resumed: string[] = [];
    await executeIdempotent(
      store,
      request('late'),
      async (key) => (resumed.push(`${key.acquisition}@${key.recoveryPoint}`), undefined),
      options,
    );
    assert.deepEqual(resumed, ['released@attempt_started'], 'the retry resumes at once, no lease to wait out');
  });

  it('8. a terminal decline is stored as 402 and replayed; the handler never runs again', async () => {
    const { store, request } = world();
    let runs = 0;
    const decline = async (key: OwnedKey<MemoryTransaction>) => {
      runs++;
      return (await key.atomicPhase(async () => respond(402, { reason: 'INSUFFICIENT_FUNDS' }))).response;
    };
    await executeIdempotent(store, request('k'), decline, options);
    const replay = await executeIdempotent(store, request('k'), decline, options);
    assert.deepEqual(replay, { status: 402, body: { reason: 'INSUFFICIENT_FUNDS' }, replayed: true });
    assert.equal(runs, 1);
  });

  it('9. an expired record counts as absent: the next request under the key runs afresh', async () => {
    const { store, clock, request } = world();
    await executeIdempotent(store, request('k', { v: 1 }), async () => ({ status: 201, body: { v: 1 } }), options);
    clock.now = 60_000;
    const fresh = await executeIdempotent(store, request('k', { v: 2 }), async () => ({ status: 201, body: { v: 2 } }), options);
    assert.deepEqual(fresh, { status: 201, body: { v: 2 }, replayed: false });
  });

  it('10. tells its observer each outcome, the claim with its time', async () => {
    const { store, request } = world();
    const events: GuardEvent[] = [];
    const observed = { ...options, observe: (event: GuardEvent) => events.push(event) };
    await executeIdempotent(store, request('k'), async () => ({ status: 200, body: {} }), observed);
    await executeIdempotent(store, request('k'), async () => ({ status: 200, body: {} }), observed);
    assert.deepEqual(
      events.map((e) => [e.outcome, typeof e.claimMs]),
      [
        ['claimed', 'number'],
        ['completed', 'undefined'],
        ['replayed', 'number'],
      ],
    );
  });
});

describe('the engine, one phase', () => {
  it('1. commits the effects with the key; a retry replays without running', async () => {
    const { store, ledger, effect, request } = world();
    let runs = 0;
    const order = { onePhase: async (tx: MemoryTransaction) => (runs++, effect(tx, 'order'), respond(201, { orderId: 'o1' })) };
    await executeIdempotent(store, request('k', {}, 'checkout.createOrder'), order, options);
    const replay = await executeIdempotent(store, request('k', {}, 'checkout.createOrder'), order, options);
    assert.deepEqual(replay, { status: 201, body: { orderId: 'o1' }, replayed: true });
    assert.equal(runs, 1);
    assert.deepEqual(ledger, ['order']);
    const record = (await store.read({ scope: 'customer:1', key: 'k' })).record;
    assert.equal(record?.leaseToken, null, 'no lease, no claim row: the key is born complete');
  });

  it('2. concurrent duplicates: the first to commit wins; the others roll back and replay it', async () => {
    const { store, ledger, effect, request } = world();
    const order = (id: string) => ({
      onePhase: async (tx: MemoryTransaction) => {
        effect(tx, id);
        await new Promise((resolve) => setTimeout(resolve, id === 'slow' ? 20 : 0));
        return respond(201, { orderId: id });
      },
    });
    const [slow, fast] = await Promise.all([
      executeIdempotent(store, request('k'), order('slow'), options),
      executeIdempotent(store, request('k'), order('fast'), options),
    ]);
    assert.deepEqual(fast, { status: 201, body: { orderId: 'fast' }, replayed: false });
    assert.deepEqual(slow, { status: 201, body: { orderId: 'fast' }, replayed: true });
    assert.deepEqual(ledger, ['fast']);
  });

  it('3. work that fails keeps nothing; unless a duplicate committed meanwhile, whose answer it gets', async () => {
    const { store, ledger, effect, request } = world();
    const failing = { onePhase: async (tx: MemoryTransaction) => (effect(tx, 'lost'), Promise.reject(new Error('out of stock'))) };
    await assert.rejects(executeIdempotent(store, request('k'), failing, options), /out of stock/);
    assert.deepEqual(ledger, []);
    assert.equal((await store.read({ scope: 'customer:1', key: 'k' })).record, undefined);

    const lateFailure = {
      onePhase: async () => {
        await executeIdempotent(store, request('k'), { onePhase: async (tx) => (effect(tx, 'first'), respond(201, { n: 1 })) }, options);
        throw new Error('out of stock'); // the first took the last unit
      },
    };
    assert.deepEqual(await executeIdempotent(store, request('k'), lateFailure, options), { status: 201, body: { n: 1 }, replayed: true });
  });

  it('4. a different request under the key is a 422, before or after its work', async () => {
    const { store, request } = world();
    await executeIdempotent(store, request('k', { v: 1 }), { onePhase: async () => respond(201, {}) }, options);
    await assert.rejects(
      executeIdempotent(store, request('k', { v: 2 }), { onePhase: async () => respond(201, {}) }, options),
      KeyReusedError,
    );
  });

  it('5. a key held by a phases request in flight is 409, never run', async () => {
    const { store, request } = world();
    void executeIdempotent(store, request('k'), never, options);
    await new Promise((resolve) => setImmediate(resolve));
    await assert.rejects(
      executeIdempotent(store, request('k'), { onePhase: async () => assert.fail('must not run') }, options),
      RequestInProgressError,
    );
  });

  it('6. an expired record counts as absent, unless its owner still works under it: then 409, never run', async () => {
    const { store, clock, ledger, effect, request } = world();
    const order = (v: number) => ({ onePhase: async (tx: MemoryTransaction) => (effect(tx, `v${v}`), respond(201, { v })) });
    await executeIdempotent(store, request('k', { v: 1 }), order(1), options);
    clock.now = 60_000;
    assert.deepEqual(await executeIdempotent(store, request('k', { v: 2 }), order(2), options), {
      status: 201,
      body: { v: 2 },
      replayed: false,
    });

    // A phases owner whose lease outlasts its record: the record expires at 120,000, the lease at 180,000.
    void executeIdempotent(store, request('held', { v: 3 }), never, { ...options, leaseMs: 120_000 });
    await new Promise((resolve) => setImmediate(resolve));
    clock.now = 150_000;
    await assert.rejects(
      executeIdempotent(store, request('held', { v: 3 }), { onePhase: async () => assert.fail('must not run') }, options),
      RequestInProgressError,
    );
    assert.deepEqual(ledger, ['v1', 'v2']);
  });
});

describe('rollout: missingKey run_unguarded', () => {
  it('runs a keyless request unguarded every time, tells the observer, and still refuses a malformed key', async () => {
    const { store, ledger, effect, request } = world();
    const events: GuardEvent[] = [];
    const rollout = { ...options, missingKey: 'run_unguarded' as const, observe: (event: GuardEvent) => void events.push(event) };
    const onePhase = { onePhase: async (tx: MemoryTransaction) => (effect(tx, 'order'), respond(201, { n: ledger.length })) };
    const phases = async (key: OwnedKey<MemoryTransaction>) => {
      await key.atomicPhase(async (tx) => (effect(tx, 'started'), recoveryPoint('charge_started')));
      return (await key.atomicPhase(async (tx) => (effect(tx, 'paid'), respond(201, { paid: true })))).response;
    };
    // 1. Each keyless call runs its work; nothing is recorded, nothing replayed.
    assert.deepEqual(await executeIdempotent(store, request(undefined), onePhase, rollout), {
      status: 201,
      body: { n: 0 },
      replayed: false,
    });
    assert.deepEqual(await executeIdempotent(store, request(undefined), onePhase, rollout), {
      status: 201,
      body: { n: 1 },
      replayed: false,
    });
    assert.deepEqual((await executeIdempotent(store, request(undefined), phases, rollout)).body, { paid: true });
    assert.deepEqual(ledger, ['order', 'order', 'started', 'paid']);
    // 2. Each one told, with its path.
    assert.deepEqual(
      events.map((event) => [event.outcome, event.path]),
      [
        ['unguarded', 'checkout.pay'],
        ['unguarded', 'checkout.pay'],
        ['unguarded', 'checkout.pay'],
      ],
    );
    // 3. A key that is there but malformed is refused; without the mode, a missing key too.
    await assert.rejects(executeIdempotent(store, request('a, b'), onePhase, rollout), InvalidKeyError);
    await assert.rejects(executeIdempotent(store, request(undefined), onePhase, options), MissingKeyError);
    assert.equal(ledger.length, 4);
  });
});

describe('housekeeping', () => {
  it('deletes expired records in batches, never one whose owner still holds its lease', async () => {
    const { store, clock, request } = world();
    for (const key of ['a', 'b', 'c']) await executeIdempotent(store, request(key), async () => ({ status: 200, body: {} }), options);
    void executeIdempotent(store, request('busy'), never, { ...options, leaseMs: 120_000 });
    await new Promise((resolve) => setImmediate(resolve));
    clock.now = 60_000;
    assert.equal(await deleteExpiredKeys(store, { batchSize: 2 }), 3);
    assert.ok((await store.read({ scope: 'customer:1', key: 'busy' })).record);
  });

  it('says which records a request holds right now', async () => {
    const { store, request } = world();
    let id = '';
    void executeIdempotent(store, request('k'), (key) => ((id = key.id), never()), options);
    await executeIdempotent(store, request('done'), async () => ({ status: 200, body: {} }), options);
    await new Promise((resolve) => setImmediate(resolve));
    const done = (await store.read({ scope: 'customer:1', key: 'done' })).record!.id;
    const held = await store.leasesHeld([
      { scope: 'customer:1', id },
      { scope: 'customer:1', id: done },
    ]);
    assert.deepEqual([...held], [id]);
  });

  it('answers a warm replay from the process without asking the store, for exactly the same request', async () => {
    const { store, request } = world();
    let reads = 0;
    const counting = { ...store, claim: (claim: Parameters<typeof store.claim>[0]) => (reads++, store.claim(claim)) };
    const cached = { ...options, replayCacheSize: 10 };
    const mustNotRun = async () => assert.fail('must not run');
    const first = await executeIdempotent(
      counting,
      request('k', { a: 1, b: [1] }),
      async () => ({ status: 200, body: { n: [1] } }),
      cached,
    );
    // 1. The same text, and the same input in another key order, replay from the cache.
    const replay = await executeIdempotent(counting, request('k', { a: 1, b: [1] }), mustNotRun, cached);
    const reordered = await executeIdempotent(counting, request('k', { b: [1], a: 1 }), mustNotRun, cached);
    assert.deepEqual(
      [replay, reordered],
      [
        { ...first, replayed: true },
        { ...first, replayed: true },
      ],
    );
    // 2. Another input or another path under the key is refused from the cache too.
    await assert.rejects(executeIdempotent(counting, request('k', { a: 1, b: [2] }), mustNotRun, cached), KeyReusedError);
    await assert.rejects(executeIdempotent(counting, request('k', { a: 1, b: [1] }, 'other'), mustNotRun, cached), KeyReusedError);
    assert.equal(reads, 1);
    // 3. Every caller shares the cached answer, so none can change it for the next.
    assert.throws(() => (replay.body as { n: number[] }).n.push(2), TypeError);
    assert.deepEqual((await executeIdempotent(counting, request('k', { a: 1, b: [1] }), mustNotRun, cached)).body, { n: [1] });
  });
});
