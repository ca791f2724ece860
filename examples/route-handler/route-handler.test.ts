/**
 * The Route Handler example, called the way Next calls it: `POST(request)` with a web Request, against
 * real PostgreSQL (DATABASE_URL). Run: `node --import tsx --test examples/route-handler/route-handler.test.ts`.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { applyIdempotencySchema } from '@payonce/idempotency/postgres';
import { POST } from './app/api/charges/route';
import { CHARGES_TABLE_SQL, exampleDatabase } from './db';

const request = (key: string | null, body: unknown, customer = 'alice') =>
  new Request('http://localhost/api/charges', {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-customer-id': customer,
      ...(key ? { 'idempotency-key': key } : {}),
    },
    body: JSON.stringify(body),
  });

const charges = async (customer: string) =>
  (await exampleDatabase().sql<{ n: number }[]>`select count(*)::int as n from example_charges where customer = ${customer}`)[0]!.n;

before(async () => {
  const { sql } = exampleDatabase();
  await applyIdempotencySchema(sql);
  await sql.unsafe(CHARGES_TABLE_SQL);
});
after(async () => {
  await exampleDatabase().sql.end({ timeout: 5 });
});

describe('Route Handler example: POST /api/charges', () => {
  it('1. charges once and replays the stored 201 to a retry with the same key', async () => {
    const customer = `c-${randomUUID()}`;
    const key = randomUUID();
    const first = await POST(request(key, { amountMinor: 1200 }, customer));
    assert.equal(first.status, 201);
    const body = await first.json();
    assert.equal(body.amountMinor, 1200);
    const retry = await POST(request(key, { amountMinor: 1200 }, customer));
    assert.equal(retry.status, 201);
    assert.equal(retry.headers.get('idempotency-replayed'), 'true');
    assert.deepEqual(await retry.json(), body);
    assert.equal(await charges(customer), 1);
  });

  it('2. fifty concurrent requests with one key make one charge', async () => {
    const customer = `c-${randomUUID()}`;
    const key = randomUUID();
    const answers = await Promise.all(Array.from({ length: 50 }, () => POST(request(key, { amountMinor: 500 }, customer))));
    const statuses = answers.map((answer) => answer.status);
    assert.ok(
      statuses.every((status) => status === 201 || status === 409),
      statuses.join(','),
    );
    assert.ok(statuses.includes(201));
    assert.equal(await charges(customer), 1);
  });

  it('3. refuses, and charges nothing for: another body under the same key (422), no key (400), bad input (400, nothing claimed), no caller (401), a body over 64 KiB (413)', async () => {
    const customer = `c-${randomUUID()}`;
    const key = randomUUID();
    assert.equal((await POST(request(key, { amountMinor: 100 }, customer))).status, 201);
    const reused = await POST(request(key, { amountMinor: 999 }, customer));
    assert.equal(reused.status, 422);
    assert.equal((await reused.json()).reason, 'KEY_REUSED_WITH_DIFFERENT_REQUEST');
    assert.equal((await POST(request(null, { amountMinor: 100 }, customer))).status, 400);
    const invalidKey = randomUUID();
    const invalid = await POST(request(invalidKey, { amountMinor: -5 }, customer));
    assert.equal(invalid.status, 400);
    assert.equal((await invalid.json()).reason, 'INVALID_INPUT');
    const [claimed] = await exampleDatabase().sql`select count(*)::int as n from idempotency_keys where key = ${invalidKey}`;
    assert.equal(claimed!.n, 0, 'invalid input is refused before the key is claimed');
    const anonymous = new Request('http://localhost/api/charges', {
      method: 'POST',
      body: '{}',
      headers: { 'idempotency-key': randomUUID() },
    });
    assert.equal((await POST(anonymous)).status, 401);
    // Streamed without a Content-Length: read only as far as the limit.
    const huge = new ReadableStream<Uint8Array>({
      pull(controller) {
        controller.enqueue(new TextEncoder().encode(' '.repeat(16 * 1024)));
      },
    });
    const tooLarge = await POST(
      new Request('http://localhost/api/charges', {
        method: 'POST',
        headers: { 'x-customer-id': customer, 'idempotency-key': randomUUID() },
        body: huge,
        duplex: 'half',
      } as RequestInit),
    );
    assert.equal(tooLarge.status, 413);
    assert.equal(await charges(customer), 1);
  });

  it("4. one customer's key never answers another's request", async () => {
    const key = randomUUID();
    const [a, b] = [`c-${randomUUID()}`, `c-${randomUUID()}`];
    const first = await (await POST(request(key, { amountMinor: 100 }, a))).json();
    const second = await POST(request(key, { amountMinor: 100 }, b));
    assert.equal(second.status, 201);
    assert.equal(second.headers.get('idempotency-replayed'), null);
    assert.notEqual((await second.json()).chargeId, first.chargeId);
  });
});
