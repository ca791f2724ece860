/**
 * The benchmark's procedures: absent from the app unless BENCH=1, and each scenario doing what the
 * benchmark's table says it does — the same business write, guarded or not, with the PostgreSQL
 * statements it costs counted by db/client.ts.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import postgres from 'postgres';
import { drizzle } from 'drizzle-orm/postgres-js';
import { benchRouter, ensureBenchTables } from '@/bench/router';
import { countingSocket, statementCount } from '@/bench/wire-count';
import { withPreparedStatements } from '@payonce/idempotency/drizzle';
import { createCheckoutIdempotencyStore, type CheckoutServices } from '@/server/checkout/services';
import { createTRPCContext, createTRPCRouter, type TRPCContext } from '@/server/trpc/init';
import { checkoutRouter } from '@/server/trpc/routers/checkout';
import { serveFetch, type FetchServer } from '@/test/support/serve-fetch';
import { ApiCustomer, requireDatabaseUrl, startTestStack, type TestStack } from '@/test/support/stack';

let stack: TestStack;
let benchApp: FetchServer;
let counted: postgres.Sql;

/** The app's tRPC handler as server/trpc/http.ts builds it, on the router bench/app-extension.ts serves. */
function benchHandler(services: CheckoutServices) {
  const router = createTRPCRouter({ bench: benchRouter, checkout: checkoutRouter });
  return (req: Request) =>
    fetchRequestHandler({
      endpoint: '/api/trpc',
      req,
      router,
      createContext: ({ req: request, resHeaders }) =>
        createTRPCContext({
          headers: request.headers,
          resHeaders,
          services,
          sessionSecret: 'test-session-secret',
          secureCookies: false,
        }),
      responseMeta({ ctx, errors }) {
        const holder = (ctx as TRPCContext | undefined)?.response;
        if (!holder) return {};
        return {
          ...(errors.length === 0 && holder.status ? { status: holder.status } : {}),
          headers: new Headers(holder.headers),
        };
      },
    });
}

before(async () => {
  stack = await startTestStack();
  // A pool on the benchmark's counting socket, as the app opens it under BENCH=1; one connection
  // keeps the count exact.
  counted = postgres(requireDatabaseUrl(), { max: 1, onnotice: () => {}, socket: countingSocket } as postgres.Options<
    Record<string, postgres.PostgresType>
  >);
  const db = drizzle(withPreparedStatements(counted), { casing: 'snake_case' });
  await ensureBenchTables(db);
  await counted`select 1`; // connect (and load types) before anything is counted
  const services: CheckoutServices = {
    ...stack.services,
    db,
    idempotencyStore: createCheckoutIdempotencyStore(counted),
  };
  const handler = benchHandler(services);
  benchApp = await serveFetch((pathname) => (pathname.startsWith('/api/trpc/') ? handler : undefined));
});

after(async () => {
  await benchApp?.close();
  await counted?.end({ timeout: 5 });
  await stack?.close();
});

/** Runs `fn` and returns how many statements (BEGIN/COMMITs among them) and wire round trips it cost the counted pool. */
async function statementsOf<T>(
  fn: () => Promise<T>,
): Promise<{ result: T; total: number; begin: number; commit: number; roundTrips: number }> {
  const before = { ...statementCount() };
  const result = await fn();
  const after = statementCount();
  return {
    result,
    total: after.total - before.total,
    begin: after.begin - before.begin,
    commit: after.commit - before.commit,
    roundTrips: after.roundTrips - before.roundTrips,
  };
}

/** A customer of the bench app whose session exists already, so that counting starts with its request. */
async function benchCustomer(): Promise<ApiCustomer> {
  const customer = new ApiCustomer(benchApp.url);
  await customer.query('checkout.products');
  return customer;
}

async function rowsTagged(tag: string): Promise<{ scenario: string }[]> {
  return [...(await stack.sql<{ scenario: string }[]>`select scenario from bench_writes where tag = ${tag}`)];
}

describe('bench router', () => {
  it('is absent without BENCH=1: the app answers 404 for bench.control and bench.roundTrips', async () => {
    assert.notEqual(process.env.BENCH, '1', 'precondition: the test process runs without BENCH=1');
    const customer = stack.customer();
    const control = await customer.mutate('bench.control', { tag: 'absent', amountMinor: 1 });
    assert.equal(control.status, 404, control.text);
    assert.equal(control.json.error.data.code, 'NOT_FOUND');
    const roundTrips = await customer.query('bench.roundTrips');
    assert.equal(roundTrips.status, 404, roundTrips.text);
    // The product's procedures are still there.
    assert.equal((await customer.query('checkout.products')).status, 200);
  });

  it('control: the business write alone, in its own transaction (BEGIN, INSERT, COMMIT)', async () => {
    const customer = await benchCustomer();
    await customer.mutate('bench.control', { tag: `warm-${randomUUID()}`, amountMinor: 1 }, null); // statements prepared
    const tag = `control-${randomUUID()}`;
    const { result, total, begin, commit, roundTrips } = await statementsOf(() =>
      customer.mutate('bench.control', { tag, amountMinor: 6800 }, null),
    );
    assert.equal(result.status, 201, result.text);
    assert.equal(result.json.result.data.tag, tag);
    assert.deepEqual(await rowsTagged(tag), [{ scenario: 'control' }]);
    assert.deepEqual({ total, begin, commit }, { total: 3, begin: 1, commit: 1 });
    // Once prepared (db/client.ts), every statement is one round trip.
    assert.equal(roundTrips, 3);
  });

  it('guarded: claims, writes and completes in the business transaction; the same key replays', async () => {
    const customer = await benchCustomer();
    await customer.mutate('bench.guarded', { tag: `warm-${randomUUID()}`, amountMinor: 1 }, randomUUID());
    const tag = `guarded-${randomUUID()}`;
    const key = randomUUID();
    // 1. First request: BEGIN with the claim, INSERT, the completion with the COMMIT — the round
    //    trips of the unguarded transaction, no more.
    const first = await statementsOf(() => customer.mutate('bench.guarded', { tag, amountMinor: 6800 }, key));
    assert.equal(first.result.status, 201, first.result.text);
    assert.equal(first.result.headers.get('idempotency-replayed'), null);
    assert.deepEqual({ total: first.total, begin: first.begin, commit: first.commit }, { total: 5, begin: 1, commit: 1 });
    assert.equal(first.roundTrips, 3);
    // 2. The same key and input: the stored answer, from this process's replay cache — no statement,
    //    no second write.
    const replay = await statementsOf(() => customer.mutate('bench.guarded', { amountMinor: 6800, tag }, key));
    assert.equal(replay.result.status, 201);
    assert.equal(replay.result.headers.get('idempotency-replayed'), 'true');
    assert.equal(replay.result.text, first.result.text);
    assert.equal(replay.total, 0);
    assert.equal(replay.roundTrips, 0);
    assert.deepEqual(await rowsTagged(tag), [{ scenario: 'guarded' }]);
    const [stored] = await stack.sql<{ completed: boolean; status: number }[]>`
      select completed_at is not null as completed, response_status as status from idempotency_keys
       where scope like 'customer:%' and key = ${key}`;
    assert.deepEqual({ ...stored }, { completed: true, status: 201 });
    // 3. The same key with another input: 422, nothing written.
    const reused = await customer.mutate('bench.guarded', { tag, amountMinor: 1 }, key);
    assert.equal(reused.status, 422);
    assert.equal((await rowsTagged(tag)).length, 1);
  });

  it("naive: the seed's SELECT, INSERT … ON CONFLICT, business transaction, then UPDATE; it completes and replays", async () => {
    const customer = await benchCustomer();
    const warm = randomUUID();
    await customer.mutate('bench.naive', { tag: `warm-${warm}`, amountMinor: 1 }, warm);
    await customer.mutate('bench.naive', { tag: `warm-${warm}`, amountMinor: 1 }, warm); // the replay's SELECT too
    const tag = `naive-${randomUUID()}`;
    const key = randomUUID();
    const first = await statementsOf(() => customer.mutate('bench.naive', { tag, amountMinor: 6800 }, key));
    assert.equal(first.result.status, 201, first.result.text);
    assert.deepEqual({ total: first.total, begin: first.begin, commit: first.commit }, { total: 6, begin: 1, commit: 1 });
    assert.equal(first.roundTrips, 6);
    const [record] = await stack.sql<{ status: number; body: unknown; locked: boolean; completed: boolean }[]>`
      select response_status as status, response_body as body, locked_at is not null as locked,
             completed_at is not null as completed
        from bench_naive_keys where key = ${key}`;
    assert.deepEqual({ ...record }, { status: 201, body: first.result.json.result.data, locked: true, completed: true });

    const replay = await statementsOf(() => customer.mutate('bench.naive', { tag, amountMinor: 6800 }, key));
    assert.equal(replay.result.status, 201);
    assert.equal(replay.result.headers.get('idempotency-replayed'), 'true');
    assert.deepEqual(replay.result.json.result.data, first.result.json.result.data);
    assert.equal(replay.total, 1);
    assert.equal(replay.roundTrips, 1);
    assert.deepEqual(await rowsTagged(tag), [{ scenario: 'naive' }]);

    assert.equal((await customer.mutate('bench.naive', { tag, amountMinor: 1 }, key)).status, 422);
    assert.equal((await customer.mutate('bench.naive', { tag, amountMinor: 1 }, null)).status, 400);
  });

  it('bench.roundTrips reports the process-wide statement count', async () => {
    const customer = await benchCustomer();
    const before = await customer.query('bench.roundTrips');
    assert.equal(before.status, 200, before.text);
    await customer.mutate('bench.control', { tag: `count-${randomUUID()}`, amountMinor: 1 }, null);
    const after = await customer.query('bench.roundTrips');
    const [b, a] = [before.json.result.data, after.json.result.data];
    assert.equal(a.total - b.total, 3);
    assert.equal(a.begin - b.begin, 1);
    assert.equal(a.commit - b.commit, 1);
    assert.equal(a.roundTrips - b.roundTrips, 3);
  });
});
