/**
 * The node-postgres example against real PostgreSQL (DATABASE_URL), called as a framework calls a
 * fetch handler. Run: `node --import tsx --test examples/node-postgres/node-postgres.test.ts`.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { exampleDatabase, migrate } from './db';
import { POST } from './transfers';

const request = (key: string, body: unknown, customer: string) =>
  new Request('http://localhost/transfers', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-customer-id': customer, 'idempotency-key': key },
    body: JSON.stringify(body),
  });

const transfers = async (customer: string) =>
  (await exampleDatabase().pool.query<{ n: number }>('select count(*)::int as n from example_transfers where customer = $1', [customer]))
    .rows[0]!.n;

before(async () => {
  await migrate(exampleDatabase().pool);
  await migrate(exampleDatabase().pool); // a migration that runs twice changes nothing
});
after(async () => {
  await exampleDatabase().pool.end();
});

describe('node-postgres example: POST /transfers', () => {
  it('1. transfers once and replays the stored 201 to a retry with the same key', async () => {
    const customer = `c-${randomUUID()}`;
    const key = randomUUID();
    const first = await POST(request(key, { amountMinor: 700 }, customer));
    assert.equal(first.status, 201);
    const retry = await POST(request(key, { amountMinor: 700 }, customer));
    assert.equal(retry.headers.get('idempotency-replayed'), 'true');
    assert.deepEqual(await retry.json(), await first.json());
    assert.equal(await transfers(customer), 1);
  });

  it('2. twenty concurrent requests with one key make one transfer', async () => {
    const customer = `c-${randomUUID()}`;
    const key = randomUUID();
    const answers = await Promise.all(Array.from({ length: 20 }, () => POST(request(key, { amountMinor: 300 }, customer))));
    assert.ok(answers.some((answer) => answer.status === 201));
    assert.ok(answers.every((answer) => answer.status === 201 || answer.status === 409));
    assert.equal(await transfers(customer), 1);
  });

  it('3. the same key with another amount is a 422 and transfers nothing more', async () => {
    const customer = `c-${randomUUID()}`;
    const key = randomUUID();
    assert.equal((await POST(request(key, { amountMinor: 100 }, customer))).status, 201);
    const reused = await POST(request(key, { amountMinor: 999 }, customer));
    assert.equal(reused.status, 422);
    assert.equal(await transfers(customer), 1);
  });
});
