/**
 * The tRPC example over real HTTP with the real tRPC client, against real PostgreSQL (DATABASE_URL).
 * Run: `node --import tsx --test examples/trpc/trpc.test.ts`.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { TRPCClientError } from '@trpc/client';
import postgres from 'postgres';
import { applyIdempotencySchema } from '@payonce/idempotency/postgres';
import { serveFetch } from '../serve-fetch';
import { CHARGES_TABLE_SQL } from '../route-handler/db';
import { createExampleClient, withRetries } from './client';
import { createExampleApp, type ExampleRouter } from './server';

let sql: postgres.Sql;
let server: Awaited<ReturnType<typeof serveFetch>>;
let url: string;

const charges = async (customer: string) =>
  (await sql<{ n: number }[]>`select count(*)::int as n from example_charges where customer = ${customer}`)[0]!.n;

before(async () => {
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) throw new Error('DATABASE_URL is not set');
  sql = postgres(databaseUrl, { max: 5, onnotice: () => {} });
  await applyIdempotencySchema(sql);
  await sql.unsafe(CHARGES_TABLE_SQL);
  const { handler } = createExampleApp(sql);
  server = await serveFetch(handler);
  url = `${server.url}/api/trpc`;
});
after(async () => {
  await server?.close();
  await sql?.end({ timeout: 5 });
});

describe('tRPC example: charges.create', () => {
  it('1. charges once; the same key gets the same answer, over HTTP with 201 and Idempotency-Replayed', async () => {
    const customer = `c-${randomUUID()}`;
    const client = createExampleClient(url, customer);
    const key = randomUUID();
    const first = await client.charges.create.mutate({ amountMinor: 1200 }, { context: { idempotencyKey: key } });
    const again = await client.charges.create.mutate({ amountMinor: 1200 }, { context: { idempotencyKey: key } });
    assert.deepEqual(again, first);
    assert.equal(await charges(customer), 1);

    const raw = await fetch(`${url}/charges.create`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-customer-id': customer, 'idempotency-key': key },
      body: JSON.stringify({ amountMinor: 1200 }),
    });
    assert.equal(raw.status, 201);
    assert.equal(raw.headers.get('idempotency-replayed'), 'true');
    assert.deepEqual((await raw.json()).result.data, first);
  });

  it('2. concurrent retries of one intent (withRetries: 409 waits and retries) make one charge', async () => {
    const customer = `c-${randomUUID()}`;
    const client = createExampleClient(url, customer);
    const key = randomUUID();
    const results = await Promise.all(
      Array.from({ length: 20 }, () =>
        withRetries(() => client.charges.create.mutate({ amountMinor: 300 }, { context: { idempotencyKey: key } }), 8),
      ),
    );
    assert.ok(results.every((result) => result.chargeId === results[0]!.chargeId));
    assert.equal(await charges(customer), 1);
  });

  it('3. another input under the same key is a 422; no key is a 400; bad input a 400 that claims nothing', async () => {
    const customer = `c-${randomUUID()}`;
    const client = createExampleClient(url, customer);
    const key = randomUUID();
    await client.charges.create.mutate({ amountMinor: 100 }, { context: { idempotencyKey: key } });
    const status = (error: unknown) => (error as TRPCClientError<ExampleRouter>).data?.httpStatus;
    await assert.rejects(
      client.charges.create.mutate({ amountMinor: 101 }, { context: { idempotencyKey: key } }),
      (e) => status(e) === 422,
    );
    await assert.rejects(client.charges.create.mutate({ amountMinor: 100 }), (e) => status(e) === 400);
    const fresh = randomUUID();
    await assert.rejects(
      client.charges.create.mutate({ amountMinor: -1 }, { context: { idempotencyKey: fresh } }),
      (e) => status(e) === 400,
    );
    assert.equal(await charges(customer), 1);
    const [claimed] = await sql`select count(*)::int as n from idempotency_keys where key = ${fresh}`;
    assert.equal(claimed!.n, 0, 'invalid input is refused before the key is claimed');
  });
});
