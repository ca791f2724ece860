/**
 * The app's database layer through PgBouncer in transaction-pooling mode (docs/scaling.md): a
 * PgBouncer of the test's own (scripts/pgbouncer.ts) in front of DATABASE_URL, with a pool of three
 * server connections so that consecutive transactions of one client land on different backends.
 *
 * Skipped, saying so, when pgbouncer is not installed (`apt-get install pgbouncer`); CI installs it.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { sql as drizzleSql } from 'drizzle-orm';
import { setTimeout as sleep } from 'node:timers/promises';
import PgBoss from 'pg-boss';
import { openQueueDatabase } from '@/server/jobs/queue-database';
import postgres from 'postgres';
import { configureConnections, openDatabase, type DatabaseHandle, type Transaction } from '@/db/client';
import { runMigrations } from '@/db/migrate';
import { createCheckoutIdempotencyStore } from '@/server/checkout/services';
import {
  decide,
  executeIdempotent,
  LeaseLostError,
  RequestInProgressError,
  respond,
  type IdempotencyOptions,
  type IdempotencyStore,
} from '@payonce/idempotency';
import { startBeforeCommit } from '@payonce/idempotency/postgres';
import { findPgBouncer, startPgBouncer, type PgBouncer } from '@/scripts/pgbouncer';
import { requireDatabaseUrl } from '@/test/support/stack';

const installed = findPgBouncer() !== undefined;
const skip = installed ? false : 'pgbouncer is not installed (apt-get install pgbouncer): nothing to test through';

/** Named statements this process's app pool sent (Parse with a non-empty name), and wire round trips. */
const wire = { namedParses: 0, roundTrips: 0 };
function watchingSocket(options: { host: string[]; port: number[] }): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(options.port[0]!, options.host[0]!);
    socket.once('error', reject);
    socket.once('connect', () => {
      const write = socket.write.bind(socket) as (chunk: unknown, ...rest: unknown[]) => boolean;
      socket.write = ((chunk: unknown, ...rest: unknown[]) => {
        if (Buffer.isBuffer(chunk)) {
          let last: number | undefined;
          for (let i = 0; i + 5 <= chunk.length; i += 1 + chunk.readInt32BE(i + 1)) {
            if (chunk[i] === 0x50 /* Parse */ && chunk[i + 5] !== 0) wire.namedParses++;
            last = chunk[i];
          }
          if (last === 0x53 || last === 0x48 || last === 0x51) wire.roundTrips++;
        }
        return write(chunk, ...rest);
      }) as typeof socket.write;
      resolve(socket);
    });
  });
}

const options: IdempotencyOptions = { leaseMs: 30_000, ttlMs: 24 * 3600_000 };
let bouncer: PgBouncer;
let app: DatabaseHandle;
let store: IdempotencyStore<Transaction>;
let direct: postgres.Sql;

const effects = async (tag: string) =>
  (await direct<{ n: number }[]>`select count(*)::int as n from pgbouncer_test_effects where tag = ${tag}`)[0]!.n;

describe('through PgBouncer in transaction-pooling mode', { skip }, () => {
  before(async () => {
    const url = requireDatabaseUrl();
    direct = postgres(url, { max: 2, onnotice: () => {} });
    bouncer = await startPgBouncer({ upstreamUrl: url, poolSize: 3, reservePoolSize: 0 });
    configureConnections({ socket: watchingSocket });
    app = openDatabase(bouncer.url, { max: 10, pooling: 'transaction' });
    store = createCheckoutIdempotencyStore(app.sql);
    await direct`create table if not exists pgbouncer_test_effects (id serial primary key, tag text not null)`;
  });
  after(async () => {
    await app?.sql.end({ timeout: 5 });
    await bouncer?.stop();
    await direct?.end({ timeout: 5 });
  });

  it('migrates with several starters at once and leaves no advisory lock behind', async () => {
    // A session-level pg_advisory_lock here would be taken on one backend and "released" on another.
    await Promise.all(Array.from({ length: 3 }, () => runMigrations(bouncer.url)));
    const locks = await direct`select 1 from pg_locks where locktype = 'advisory' and database = (
      select oid from pg_database where datname = current_database())`;
    assert.equal(locks.length, 0);
  });

  it('claims, completes and replays 40 keys at once: one effect each, and no named statement on the wire', async () => {
    const scope = `customer:${randomUUID()}`;
    const tag = randomUUID();
    const run = (key: string) =>
      executeIdempotent(
        store,
        { scope, key, path: 'pgbouncer.test', input: { key } },
        async (owned) =>
          (
            await owned.atomicPhase(async (tx) => {
              await tx.execute(drizzleSql`insert into pgbouncer_test_effects (tag) values (${tag})`);
              return respond(201, { key });
            })
          ).response,
        options,
      );
    const keys = Array.from({ length: 40 }, (_, i) => `k${i}`);
    const firsts = await Promise.all(keys.map(run));
    const replays = await Promise.all(keys.map(run));
    for (const [i, key] of keys.entries()) {
      assert.deepEqual(firsts[i], { status: 201, body: { key }, replayed: false });
      assert.deepEqual(replays[i], { status: 201, body: { key }, replayed: true });
    }
    assert.equal(await effects(tag), 40);
    assert.equal(wire.namedParses, 0, 'DATABASE_POOLING=transaction sends no named prepared statement');
  });

  it('runs the handler once for 20 concurrent calls with one key', async () => {
    const scope = `customer:${randomUUID()}`;
    const tag = randomUUID();
    let runs = 0;
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, () =>
        executeIdempotent(
          store,
          { scope, key: 'same', path: 'pgbouncer.test', input: {} },
          async (owned) => {
            runs++;
            await new Promise((resolve) => setTimeout(resolve, 50));
            return (
              await owned.atomicPhase(async (tx) => {
                await tx.execute(drizzleSql`insert into pgbouncer_test_effects (tag) values (${tag})`);
                return respond(201, { ok: true });
              })
            ).response;
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

  it('runs one-phase requests through it: one effect per key, duplicates replay, lock_timeout stays local', async () => {
    const scope = `customer:${randomUUID()}`;
    const tag = randomUUID();
    let runs = 0;
    const phased = (key: string, pauseMs: number) =>
      executeIdempotent(
        store,
        { scope, key, path: 'pgbouncer.test', input: { key } },
        {
          onePhase: async (tx) => {
            runs++;
            await tx.execute(drizzleSql`insert into pgbouncer_test_effects (tag) values (${tag})`);
            if (pauseMs) await new Promise((resolve) => setTimeout(resolve, pauseMs));
            return respond(201, { key });
          },
        },
        { ...options, claimWaitMs: 3000 },
      );
    const namedBefore = wire.namedParses;
    // Ten keys, each sent three times at once: duplicates may run the work, but only one commits per
    // key; the others roll their work back and replay its answer.
    const keys = Array.from({ length: 10 }, (_, i) => `phased-${i}`);
    const results = await Promise.all(keys.flatMap((key) => [phased(key, 100), phased(key, 0), phased(key, 0)]));
    assert.ok(runs >= keys.length);
    assert.equal(await effects(tag), keys.length, 'one committed effect per key');
    for (const [i, result] of results.entries()) {
      assert.equal(result.status, 201);
      assert.deepEqual(result.body, { key: keys[Math.floor(i / 3)] });
    }
    assert.equal(results.filter((result) => !result.replayed).length, keys.length, 'the others replayed the answer');
    assert.equal(wire.namedParses, namedBefore, 'no named statement on the wire');
    // The claim's lock_timeout was set for its own transaction only: no pooled server connection keeps it.
    const timeouts = await Promise.all(
      Array.from({ length: 6 }, () => app.sql.begin(async (tx) => (await tx`select current_setting('lock_timeout') as t`)[0]!.t as string)),
    );
    assert.deepEqual([...new Set(timeouts)], ['0']);
  });

  it('rolls a phase back when its lease was taken over: the fence fails, the COMMIT is a rollback', async () => {
    const scope = `customer:${randomUUID()}`;
    const tag = randomUUID();
    const request = (leaseToken: string) => ({
      scope,
      key: 'taken-over',
      path: 'pgbouncer.test',
      fingerprint: 'f',
      leaseMs: 200,
      ttlMs: 3600_000,
      leaseToken,
      waitMs: 1000,
    });
    const firstToken = randomUUID();
    const first = await store.claim(request(firstToken));
    assert.equal(first.kind, 'inserted');
    const firstRef = { scope, key: 'taken-over', leaseToken: firstToken };

    // The first owner's phase writes, then stalls past its lease while a retry takes the key over.
    let takenOver!: () => void;
    const takeover = new Promise<void>((resolve) => (takenOver = resolve));
    const zombie = store.atomicPhase(
      firstRef,
      async (tx) => {
        await tx.execute(drizzleSql`insert into pgbouncer_test_effects (tag) values (${`${tag}:zombie`})`);
        await takeover;
        return 'zombie';
      },
      () => ({ recoveryPoint: 'zombie_done' }),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    const secondToken = randomUUID();
    const seen = await store.claim(request(secondToken));
    assert.equal(seen.kind, 'exists');
    const decision = decide(seen.kind === 'exists' ? seen.read.record : undefined, request(secondToken), 0);
    assert.deepEqual(decision, { kind: 'take_over', from: 'stale_lease', observedToken: firstToken });
    assert.ok(await store.takeOver(request(secondToken), firstToken), 'the stale lease is taken over');
    takenOver();
    await assert.rejects(zombie, LeaseLostError);
    assert.equal(await effects(`${tag}:zombie`), 0, "the zombie's write rolled back with its phase");

    // The new owner completes; its answer is what a retry gets.
    await store.atomicPhase(
      { scope, key: 'taken-over', leaseToken: secondToken },
      async (tx) => {
        await tx.execute(drizzleSql`insert into pgbouncer_test_effects (tag) values (${tag})`);
      },
      () => ({ response: { status: 201, body: { owner: 'second' } } }),
    );
    const replay = await store.read({ scope, key: 'taken-over' });
    assert.deepEqual(replay.record?.response, { status: 201, body: { owner: 'second' } });
    assert.equal(await effects(tag), 1);
  });

  it("keeps the fence's order through it: in the transaction, before the COMMIT, failing it rolls back", async () => {
    const tag = randomUUID();
    let insideXact = '';
    let closing!: Promise<postgres.RowList<postgres.Row[]>>;
    await app.sql.begin(async (tx) => {
      await tx`insert into pgbouncer_test_effects (tag) values (${tag})`;
      insideXact = (await tx`select pg_current_xact_id()::text as xact`)[0]!.xact;
      closing = startBeforeCommit(tx, 'select pg_current_xact_id()::text as xact, $1::int as n', [1]);
      closing.catch(() => {});
    });
    assert.equal((await closing)[0]!.xact, insideXact, 'the closing statement ran inside the transaction');

    // The fence raises: the statement's promise rejects with its SQLSTATE, and nothing is committed.
    const failing = randomUUID();
    let fence!: Promise<unknown>;
    await app.sql.begin(async (tx) => {
      await tx`insert into pgbouncer_test_effects (tag) values (${failing})`;
      fence = startBeforeCommit(tx, 'select idempotency_assert_owned($1::bigint)', [0]);
      fence.catch(() => {});
    });
    await assert.rejects(fence, (error: { code?: string }) => error.code === 'IK001');
    assert.equal(await effects(failing), 0);

    // What transaction pooling costs here: with no named statement, the parameterised fence is
    // described before it runs, so it no longer shares one round trip with the COMMIT.
    const before = wire.roundTrips;
    await app.sql.begin(async (tx) => {
      startBeforeCommit(tx, 'select $1::int as n', [1]).catch(() => {});
    });
    // BEGIN; the fence's Parse/Describe/Flush; its Bind/Execute/Sync; then the COMMIT.
    assert.equal(wire.roundTrips - before, 4);
  });

  it('answers every query when the pool is exhausted: no query queued behind another on one connection', async () => {
    // More queries at once than the pool has connections: postgres.js would queue the next query on a
    // busy connection and send it before the first one's answer (pipelining). Behind a transaction
    // pooler the first one's ReadyForQuery hands the server connection back, and a description asked
    // for by the next is answered to nobody ("got packet from server when not linked"): that query
    // never completes. DATABASE_POOLING=transaction turns pipelining off (db/client.ts).
    const small = openDatabase(bouncer.url, { max: 2, pooling: 'transaction' });
    try {
      const asked = Array.from({ length: 300 }, (_, i) => i);
      const answers = Promise.all(
        asked.map(async (i) => {
          // A statement without parameters (sent whole, and followed at once by the next query on its
          // connection), then one with a parameter (described first: Parse, Describe, Flush).
          if (i % 2 === 0) await small.sql`select pg_sleep(0.001)`;
          const [row] = await small.sql<{ n: number }[]>`select ${i}::int as n`;
          return row!.n;
        }),
      );
      const got = await Promise.race([answers, sleep(30_000).then(() => assert.fail('queries were left unanswered after 30 s'))]);
      assert.deepEqual(got, asked);
    } finally {
      await small.sql.end({ timeout: 1 });
    }
  });

  it("runs pg-boss (no LISTEN/NOTIFY, transaction-scoped locks only) through it, on the app's queue connection", async () => {
    // As server/jobs/queue.ts opens it with DATABASE_POOLING=transaction: each statement with
    // parameters in a transaction of its own, or its description could be answered to nobody.
    const database = openQueueDatabase(bouncer.url, { max: 3, pooling: 'transaction' });
    const boss = new PgBoss({ db: database.db, schema: 'pgboss_pgbouncer_test' });
    boss.on('error', () => {});
    await boss.start();
    try {
      const queue = 'pgbouncer.test';
      await boss.createQueue(queue);
      const seen: unknown[] = [];
      const done = new Promise<void>((resolve) => {
        void boss.work(queue, { pollingIntervalSeconds: 0.5, batchSize: 5 }, async (jobs) => {
          for (const job of jobs) seen.push(job.data);
          if (seen.length === 20) resolve();
        });
      });
      for (let i = 0; i < 20; i++) await boss.send(queue, { hello: 'pgbouncer', i });
      await Promise.race([done, sleep(20_000).then(() => assert.fail(`only ${seen.length} of 20 jobs were worked within 20 s`))]);
      assert.deepEqual(new Set(seen.map((d) => (d as { i: number }).i)).size, 20);
    } finally {
      await boss.stop({ graceful: false, wait: true });
      await database.close();
      await direct`drop schema if exists pgboss_pgbouncer_test cascade`;
    }
  });
});
