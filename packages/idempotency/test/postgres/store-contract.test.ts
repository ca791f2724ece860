/**
 * One contract, two PostgreSQL stores: the postgres.js store and the node-postgres one send the same
 * SQL (src/postgres-sql.ts), so they must behave the same through the engine. Every scenario runs on
 * both against real PostgreSQL (DATABASE_URL), with replayCacheSize 0 so every replay reads the
 * store, and asserts on rows: the business effects in a table of this test's own (contract_effects,
 * written with the phase's transaction handle) and the keys in idempotency_keys.
 *
 * Each store gets a schema of its own, dropped and made afresh, and its key table is made only by
 * what the package ships, one way for each: the node-postgres store's by running
 * migrations/*.sql as a DBA would, the postgres.js store's by applyIdempotencySchema(). So the
 * contract also proves that either way of making the table gives a store everything it needs.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import postgres from 'postgres';
import {
  deleteExpiredKeys,
  executeIdempotent,
  KeyReusedError,
  recoveryPoint,
  RequestInProgressError,
  respond,
  type IdempotencyOptions,
  type IdempotencyStore,
  type OnePhaseHandler,
  type OwnedKey,
} from '@payonce/idempotency';
import { createPgIdempotencyStore } from '@payonce/idempotency/pg';
import { applyIdempotencySchema, createPostgresIdempotencyStore } from '@payonce/idempotency/postgres';

function requireDatabaseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) {
    throw new Error(
      'DATABASE_URL is not set: this test needs a PostgreSQL database it may create schemas in, e.g.\n' +
        '  DATABASE_URL=postgres://postgres@127.0.0.1:5432/scratch npm run test:postgres -w @payonce/idempotency',
    );
  }
  return url;
}
const url = requireDatabaseUrl();
const options: IdempotencyOptions = { leaseMs: 30_000, ttlMs: 60_000, claimWaitMs: 1000, replayCacheSize: 0 };
const scope = `contract:${randomUUID()}`;

/** The package's migration files, in the order a migration tool would run them. */
const MIGRATIONS_DIR = path.join(import.meta.dirname, '../../migrations');
const migrationFiles = readdirSync(MIGRATIONS_DIR)
  .filter((name) => name.endsWith('.sql'))
  .sort()
  .map((name) => path.join(MIGRATIONS_DIR, name));

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** A promise the test opens when it chooses: where a handler waits, or signals it got somewhere. */
function gate() {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}
const request = (key: string, input: unknown = {}) => ({ scope, key, path: 'contract', input });

/** Both drivers' connections to one store's schema: its store uses one, the assertions use both. */
interface Connections {
  sql: postgres.Sql;
  pgPool: pg.Pool;
}

/** Connections whose search_path is `schema` alone, so nothing outside it (an app's own table) is seen. */
function connect(schema: string): Connections {
  return {
    sql: postgres(url, { max: 10, onnotice: () => {}, connection: { search_path: schema } }),
    pgPool: new pg.Pool({ connectionString: url, max: 10, options: `-c search_path=${schema}` }),
  };
}

/** A store under test, and how business code writes an effect with its transaction handle. */
interface Subject<Tx> {
  /** The schema the store's key table is made in, and how it is made there. */
  schema: string;
  makeKeyTable: (db: Connections) => Promise<void>;
  store: (db: Connections) => IdempotencyStore<Tx>;
  effect: (tx: Tx, id: string) => Promise<unknown>;
}

const stores: [string, () => void][] = [
  [
    'postgres.js store (table by applyIdempotencySchema)',
    contract<postgres.TransactionSql>({
      schema: 'idempotency_contract_postgres_js',
      makeKeyTable: ({ sql }) => applyIdempotencySchema(sql),
      store: ({ sql }) => createPostgresIdempotencyStore(sql, { transactionHandle: (tx) => tx }),
      effect: (tx, id) => tx`insert into contract_effects (id) values (${id})`,
    }),
  ],
  [
    'node-postgres store (table by migrations/*.sql)',
    contract<pg.PoolClient>({
      schema: 'idempotency_contract_node_postgres',
      makeKeyTable: async ({ pgPool }) => {
        // As psql -f would: each file's text as it ships, several statements to one simple query.
        for (const file of migrationFiles) await pgPool.query(readFileSync(file, 'utf8'));
      },
      store: ({ pgPool }) => createPgIdempotencyStore(pgPool),
      effect: (client, id) => client.query('insert into contract_effects (id) values ($1)', [id]),
    }),
  ],
];

for (const [name, suite] of stores) describe(name, suite);

function contract<Tx>(subject: Subject<Tx>) {
  return () => {
    let sql: postgres.Sql;
    let pgPool: pg.Pool;
    let store: IdempotencyStore<Tx>;
    before(async () => {
      ({ sql, pgPool } = connect(subject.schema));
      await sql.unsafe(`drop schema if exists "${subject.schema}" cascade`);
      await sql.unsafe(`create schema "${subject.schema}"`);
      await subject.makeKeyTable({ sql, pgPool });
      await sql`create table contract_effects (id text primary key)`;
      store = subject.store({ sql, pgPool });
      // Every connection opened before the scenarios: a race between duplicates (scenario 2) must not
      // be decided by how long a cold pool takes to connect its next socket.
      await Promise.all(Array.from({ length: 10 }, () => sql`select pg_sleep(0.02)`));
      const clients = await Promise.all(Array.from({ length: 10 }, () => pgPool.connect()));
      for (const client of clients) client.release();
    });
    after(async () => {
      await sql?.unsafe(`drop schema if exists "${subject.schema}" cascade`);
      await sql?.end({ timeout: 5 });
      await pgPool?.end();
    });

    const effectsOf = async (key: string) =>
      (await sql<{ id: string }[]>`select id from contract_effects where id like ${`${key}:%`} order by id`).map((row) => row.id);
    const keyRow = async (key: string) => (await sql`select * from idempotency_keys where scope = ${scope} and key = ${key}`)[0];

    /** One-phase work: an effect named after its run, then (after a pause in the transaction) an answer naming it. */
    const onePhase = (key: string, runs: string[], pauseMs = 0): OnePhaseHandler<Tx> => ({
      onePhase: async (tx) => {
        const run = randomUUID();
        runs.push(run);
        await subject.effect(tx, `${key}:${run}`);
        if (pauseMs) await sleep(pauseMs);
        return respond(201, { key, run });
      },
    });
    /** A phase that writes `effect` and commits the final answer with it. */
    const complete = async (owned: OwnedKey<Tx>, key: string, effect: string, body: unknown) =>
      (
        await owned.atomicPhase(async (tx) => {
          await subject.effect(tx, `${key}:${effect}`);
          return respond(201, body);
        })
      ).response;
    /** A phases request that holds the key until `finish` opens, then completes. */
    const heldOwner = (key: string) => {
      const working = gate();
      const finish = gate();
      const result = executeIdempotent(
        store,
        request(key),
        async (owned) => {
          working.open();
          await finish.promise;
          return complete(owned, key, 'owner', { by: 'owner' });
        },
        options,
      );
      return { working: working.promise, finish: finish.open, result };
    };

    it('1. one phase: the effect and the key commit together, and a retry replays without running', async () => {
      const key = randomUUID();
      const runs: string[] = [];
      const first = await executeIdempotent(store, request(key, { amount: 100 }), onePhase(key, runs), options);
      assert.deepEqual(first, { status: 201, body: { key, run: runs[0] }, replayed: false });
      assert.deepEqual(await effectsOf(key), [`${key}:${runs[0]}`]);
      const row = await keyRow(key);
      assert.equal(row?.response_status, 201);
      assert.deepEqual(row?.response_body, { key, run: runs[0] });
      assert.ok(row?.completed_at, 'answered');
      assert.equal(row?.recovery_point, 'started', 'a one-phase key has no phases to resume');
      assert.equal(row?.lease_token, null, 'born complete, with no lease');
      // Answered means holding the answer: the table refuses one without the other.
      await assert.rejects(
        sql`update idempotency_keys set response_status = null where scope = ${scope} and key = ${key}`,
        (error: { code?: string }) => error.code === '23514',
      );

      const retry = await executeIdempotent(store, request(key, { amount: 100 }), onePhase(key, runs), options);
      assert.deepEqual(retry, { ...first, replayed: true });
      assert.equal(runs.length, 1, 'the retry did not run the work');
      assert.equal((await effectsOf(key)).length, 1);
    });

    it('2. one phase: of 5 concurrent duplicates one effect commits, and all 5 answer with its body, 4 replayed', async () => {
      const key = randomUUID();
      const runs: string[] = [];
      // The pause keeps every duplicate's transaction open until all have read the key as free.
      const results = await Promise.all(
        Array.from({ length: 5 }, () => executeIdempotent(store, request(key), onePhase(key, runs, 100), options)),
      );
      const effects = await effectsOf(key);
      assert.equal(effects.length, 1, 'one committed effect');
      const committed = effects[0]!.slice(key.length + 1);
      for (const result of results) assert.deepEqual(result.body, { key, run: committed });
      assert.equal(results.filter((r) => r.replayed).length, 4);
      assert.ok(runs.length > 1, 'duplicates ran their work too, and it rolled back with their refused key');
    });

    it('3. one phase: work that throws leaves no key and no effect, and a retry runs afresh', async () => {
      const key = randomUUID();
      const declining: OnePhaseHandler<Tx> = {
        onePhase: async (tx) => {
          await subject.effect(tx, `${key}:declined`);
          throw new Error('declined by a business rule');
        },
      };
      await assert.rejects(executeIdempotent(store, request(key), declining, options), /declined by a business rule/);
      assert.deepEqual(await effectsOf(key), []);
      assert.equal(await keyRow(key), undefined);

      const runs: string[] = [];
      const retry = await executeIdempotent(store, request(key), onePhase(key, runs), options);
      assert.equal(retry.replayed, false);
      assert.deepEqual(await effectsOf(key), [`${key}:${runs[0]}`]);
    });

    it('4. a different input under a used key is refused with 422, in one phase and in phases', async () => {
      const key = randomUUID();
      const runs: string[] = [];
      await executeIdempotent(store, request(key, { amount: 100 }), onePhase(key, runs), options);
      const reused = (e: unknown) => e instanceof KeyReusedError && e.httpStatus === 422;
      await assert.rejects(executeIdempotent(store, request(key, { amount: 999 }), onePhase(key, runs), options), reused);
      await assert.rejects(
        executeIdempotent(store, request(key, { amount: 999 }), async () => assert.fail('must not run'), options),
        reused,
      );
      assert.equal(runs.length, 1);
      assert.equal((await effectsOf(key)).length, 1);
      assert.deepEqual((await keyRow(key))?.response_body, { key, run: runs[0] }, 'the first answer stays');
    });

    it('5. phases: a committed recovery point survives a throw, unleased, and a retry resumes at it', async () => {
      const key = randomUUID();
      const failing = async (owned: OwnedKey<Tx>) => {
        await owned.atomicPhase(async (tx) => {
          await subject.effect(tx, `${key}:charge`);
          return recoveryPoint('charge_started');
        });
        throw new Error('gateway timeout');
      };
      await assert.rejects(executeIdempotent(store, request(key), failing, options), /gateway timeout/);
      const released = await keyRow(key);
      assert.equal(released?.recovery_point, 'charge_started');
      assert.equal(released?.lease_token, null);
      assert.equal(released?.lease_expires_at, null);
      assert.equal(released?.completed_at, null);

      const seen: string[] = [];
      const retry = await executeIdempotent(
        store,
        request(key),
        async (owned) => {
          seen.push(`${owned.acquisition}@${owned.recoveryPoint}`);
          return complete(owned, key, 'finish', { charged: true });
        },
        options,
      );
      assert.deepEqual(seen, ['released@charge_started']);
      assert.deepEqual(retry, { status: 201, body: { charged: true }, replayed: false });
      assert.deepEqual(await effectsOf(key), [`${key}:charge`, `${key}:finish`], 'the first phase did not run again');
      const done = await keyRow(key);
      assert.ok(done?.completed_at, 'answered');
      assert.equal(done?.recovery_point, 'charge_started', 'the recovery point stays at its last phase');
      const replay = await executeIdempotent(store, request(key), async () => assert.fail('must not run'), options);
      assert.deepEqual(replay, { ...retry, replayed: true });
    });

    it("6. a stale lease is taken over by exactly one retry; the first owner's next phase rolls back with 409", async () => {
      const key = randomUUID();
      const atPoint = gate();
      const wake = gate();
      const firstOwner = executeIdempotent(
        store,
        request(key),
        async (owned) => {
          await owned.atomicPhase(async (tx) => {
            await subject.effect(tx, `${key}:charge`);
            return recoveryPoint('charge_started');
          });
          atPoint.open();
          await wake.promise;
          return complete(owned, key, 'first-owner', { by: 'first owner' });
        },
        { ...options, leaseMs: 50 },
      );
      await atPoint.promise;
      await sleep(150); // past the first owner's 50 ms lease

      const resumed: string[] = [];
      const retryRunning = gate();
      const retryMayFinish = gate();
      const taker = async (owned: OwnedKey<Tx>) => {
        resumed.push(`${owned.acquisition}@${owned.recoveryPoint}`);
        retryRunning.open();
        await retryMayFinish.promise;
        return complete(owned, key, 'retry', { by: 'retry' });
      };
      const retries = Promise.allSettled(Array.from({ length: 3 }, () => executeIdempotent(store, request(key), taker, options)));
      await retryRunning.promise;
      wake.open();
      await assert.rejects(firstOwner, RequestInProgressError);
      assert.deepEqual(await effectsOf(key), [`${key}:charge`], "the first owner's phase rolled back");

      retryMayFinish.open();
      const settled = await retries;
      assert.deepEqual(resumed, ['stale_lease@charge_started'], 'exactly one takeover, at the recovery point');
      assert.equal(settled.filter((s) => s.status === 'fulfilled' && !s.value.replayed).length, 1);
      for (const s of settled) if (s.status === 'rejected') assert.ok(s.reason instanceof RequestInProgressError, String(s.reason));
      assert.deepEqual(await effectsOf(key), [`${key}:charge`, `${key}:retry`]);
      assert.deepEqual((await keyRow(key))?.response_body, { by: 'retry' });
    });

    it('7. while an owner works under a live lease, a duplicate gets 409 with Retry-After of at least 1 s', async () => {
      const key = randomUUID();
      const owner = heldOwner(key);
      await owner.working;
      const inProgress = (e: unknown) =>
        e instanceof RequestInProgressError && e.httpStatus === 409 && e.retryAfterSeconds >= 1 && e.retryAfterSeconds <= 30;
      await assert.rejects(
        executeIdempotent(store, request(key), async () => assert.fail('must not run'), options),
        inProgress,
      );
      await assert.rejects(
        executeIdempotent(store, request(key), { onePhase: async () => assert.fail('must not run') }, options),
        inProgress,
      );
      owner.finish();
      assert.deepEqual(await owner.result, { status: 201, body: { by: 'owner' }, replayed: false });
      assert.deepEqual(await effectsOf(key), [`${key}:owner`]);
    });

    it('8. deleteExpiredKeys removes an expired idle key and keeps an expired one whose lease is live', async () => {
      const idle = randomUUID();
      const held = randomUUID();
      await executeIdempotent(store, request(idle), onePhase(idle, []), options);
      const owner = heldOwner(held);
      await owner.working;
      await sql`update idempotency_keys set expires_at = now() - interval '1 second' where scope = ${scope} and key in ${sql([idle, held])}`;
      const ids = { idle: (await keyRow(idle))!.id as string, held: (await keyRow(held))!.id as string };
      const leased = await store.leasesHeld([
        { scope, id: ids.idle },
        { scope, id: ids.held },
      ]);
      assert.deepEqual([...leased], [ids.held]);

      assert.ok((await deleteExpiredKeys(store)) >= 1);
      assert.equal(await keyRow(idle), undefined);
      assert.equal((await keyRow(held))?.id, ids.held, 'the live lease keeps its key');
      owner.finish();
      assert.equal((await owner.result).status, 201, "the owner's fenced completion still finds its key");
      assert.deepEqual(await effectsOf(held), [`${held}:owner`]);
    });

    it('9. reads records with the types the engine compares: times as numbers, the body parsed, tokens as text', async () => {
      const done = randomUUID();
      const runs: string[] = [];
      await executeIdempotent(store, request(done), onePhase(done, runs), options);
      const { now, record } = await store.read({ scope, key: done });
      assert.equal(now, 0);
      assert.equal(typeof record?.id, 'string');
      assert.deepEqual(record?.response, { status: 201, body: { key: done, run: runs[0] } });
      assert.equal(record?.recoveryPoint, 'started');
      assert.equal(record?.leaseToken, null);
      assert.equal(record?.leaseExpiresAt, null);
      assert.ok(
        typeof record?.expiresAt === 'number' && record.expiresAt > 50_000 && record.expiresAt <= 60_000,
        String(record?.expiresAt),
      );

      const key = randomUUID();
      const leaseToken = randomUUID();
      const claim = { scope, key, path: 'contract', fingerprint: 'f', ttlMs: 60_000, leaseToken, leaseMs: 30_000, waitMs: 1000 };
      const inserted = await store.claim(claim);
      assert.ok(inserted.kind === 'inserted' && typeof inserted.id === 'string');
      const again = await store.claim({ ...claim, leaseToken: randomUUID() });
      assert.ok(again.kind === 'exists', again.kind);
      const leased = again.read.record;
      assert.equal(leased?.leaseToken, leaseToken);
      assert.equal(leased?.response, null);
      assert.equal(leased?.recoveryPoint, 'started');
      assert.ok(typeof leased?.leaseExpiresAt === 'number' && leased.leaseExpiresAt > 25_000 && leased.leaseExpiresAt <= 30_000);
      await store.release({ scope, key, leaseToken }, { forget: true });
      assert.equal(await keyRow(key), undefined, 'nothing durable happened under it: forgotten');
    });

    it('10. a duplicate behind an uncommitted key waits claimWaitMs, then 409; its one-phase work rolls back', async () => {
      const key = randomUUID();
      const runs: string[] = [];
      const quick = { ...options, claimWaitMs: 200 };
      const busy = (e: unknown) => e instanceof RequestInProgressError && e.retryAfterSeconds === 1;
      const holder = await pgPool.connect();
      try {
        await holder.query('begin');
        const holding = "insert into idempotency_keys (scope, key, request_path, request_hash) values ($1, $2, 'contract', 'held')";
        await holder.query(holding, [scope, key]);
        const started = performance.now();
        await assert.rejects(
          executeIdempotent(store, request(key), async () => assert.fail('must not run'), quick),
          busy,
        );
        await assert.rejects(executeIdempotent(store, request(key), onePhase(key, runs), quick), busy);
        assert.ok(performance.now() - started >= 380, 'each waited its 200 ms');
      } finally {
        await holder.query('rollback');
        holder.release();
      }
      assert.equal(runs.length, 1, 'the one-phase work ran');
      assert.deepEqual(await effectsOf(key), [], 'and rolled back with its refused key');
      assert.equal(await keyRow(key), undefined);
    });
  };
}
