/**
 * Request floods and stock hoarding (issue 11, item 6): rate limits on the mutations per session and
 * per client address, counted in PostgreSQL and so shared by app instances, and caps on what one
 * customer may hold in unpaid orders. Every refusal is checked to have changed nothing: no order, no
 * stored key, no payment, no charge, the same stock.
 */
import assert from 'node:assert/strict';
import { randomInt, randomUUID } from 'node:crypto';
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { DEFAULT_ORDER_CAPS } from '@/server/checkout/orders';
import { clientAddress, DEFAULT_RATE_LIMIT_POLICY, deleteEndedRateLimitWindows, rateLimitPolicyFromEnv } from '@/server/http/rate-limit';
import { PEER_ADDRESS_HEADER } from '@/server/http/peer-address';
import { ApiCustomer, startTestStack, type ApiResponse, type TestStack } from '@/test/support/stack';

// The production defaults (30 a minute per session, 300 per address), behind one trusted proxy so
// that the tests can say which address a request comes from.
const POLICY = { ...DEFAULT_RATE_LIMIT_POLICY, trustProxy: 1 };
const SKU = 'MUG-CELADON';

let first: TestStack;
let second: TestStack;
let capped: TestStack;
let byAddress: TestStack;

before(async () => {
  // Two app instances on one database, as behind a load balancer; one with the customer's order caps
  // on (every test here connects from 127.0.0.1, so its address caps are off); and one as a server
  // with no proxy in front is configured by default: every cap and limit on, the socket's address.
  first = await startTestStack({ rateLimits: POLICY });
  second = await startTestStack({ rateLimits: POLICY });
  capped = await startTestStack({ orderCaps: { ...DEFAULT_ORDER_CAPS, openOrdersPerAddress: 0, heldUnitsPerSkuPerAddress: 0 } });
  byAddress = await startTestStack({ orderCaps: DEFAULT_ORDER_CAPS, rateLimits: DEFAULT_RATE_LIMIT_POLICY });
});
after(async () => {
  await Promise.all([first?.close(), second?.close(), capped?.close(), byAddress?.close()]);
});

function customerIdOf(customer: ApiCustomer): string {
  return decodeURIComponent(customer.cookie!.split('=')[1]!).split('.')[0]!;
}

/** A mutation as sent through our proxy, which appended the address it received from. */
function mutateFrom(customer: ApiCustomer, forwardedFor: string, procedure: string, input: unknown, key: string | null = randomUUID()) {
  return customer.send('POST', procedure, { input, key, headers: { 'x-forwarded-for': forwardedFor } });
}

const createOrderFrom = (customer: ApiCustomer, forwardedFor: string, key?: string) =>
  mutateFrom(customer, forwardedFor, 'checkout.createOrder', { items: [{ sku: SKU, quantity: 1 }] }, key);

/**
 * The limits count in fixed one-minute windows of the database's clock (this host's): a test that
 * needs its requests inside one window starts early enough in one.
 */
async function roomInWindow(seconds: number): Promise<void> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < seconds * 1000) await sleep(left + 250);
}

async function stockOf(stack: TestStack, sku = SKU): Promise<number> {
  const [row] = await stack.sql<{ stock: number }[]>`select stock from products where sku = ${sku}`;
  return row!.stock;
}

/** What a customer has: orders (by status), stored keys, payments. */
async function footprint(stack: TestStack, customerId: string) {
  const [row] = await stack.sql<{ orders: number; open: number; keys: number; payments: number }[]>`
    select (select count(*)::int from orders where customer_id = ${customerId}) as orders,
           (select count(*)::int from orders where customer_id = ${customerId}
               and status in ('awaiting_payment', 'paying')) as open,
           (select count(*)::int from idempotency_keys where scope = ${`customer:${customerId}`}) as keys,
           (select count(*)::int from payments p join orders o on o.id = p.order_id
             where o.customer_id = ${customerId}) as payments`;
  return row!;
}

function assertRateLimited(response: ApiResponse<any>) {
  assert.equal(response.status, 429, response.text);
  assert.equal(response.json.error.data.reason, 'RATE_LIMITED');
  assert.equal(response.json.error.data.httpStatus, 429);
  const retryAfter = Number(response.headers.get('retry-after'));
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${response.headers.get('retry-after')}`);
  // Seconds until the window frees, by the same clock the windows are cut by.
  const untilNextMinute = Math.ceil((60_000 - (Date.now() % 60_000)) / 1000);
  assert.ok(Math.abs(retryAfter - untilNextMinute) <= 2, `Retry-After ${retryAfter}, next minute in ${untilNextMinute} s`);
}

describe('rate limits on the mutations', () => {
  it('refuses the 31st mutation of a session in a minute with 429 RATE_LIMITED and Retry-After, and runs nothing', async () => {
    await roomInWindow(20);
    const customer = first.customer();
    const address = '203.0.113.10';

    // 1. Thirty mutations: a script's pace, not a shopper's, and still all served.
    const orders: string[] = [];
    for (let i = 0; i < 30; i++) {
      const response = await createOrderFrom(customer, address);
      assert.equal(response.status, 201, `mutation ${i + 1}: ${response.text}`);
      orders.push(response.json.result.data.orderId);
    }
    const customerId = customerIdOf(customer);
    const before = await footprint(first, customerId);
    const stockBefore = await stockOf(first);
    assert.deepEqual(before, { orders: 30, open: 30, keys: 30, payments: 0 });

    // 2. The 31st — a new order, a payment, a replay of a completed key — is refused before the guard.
    const key = randomUUID();
    assertRateLimited(await createOrderFrom(customer, address, key));
    const [order] = await first.sql<{ out_trade_no: string }[]>`select out_trade_no from orders where id = ${orders[0]!}`;
    assertRateLimited(await mutateFrom(customer, address, 'checkout.pay', { orderId: orders[0], gateway: 'alipay', buyer: 'ok' }));
    const firstKey = await first.sql<{ key: string }[]>`
      select key from idempotency_keys where scope = ${`customer:${customerId}`} order by created_at limit 1`;
    const replay = await createOrderFrom(customer, address, firstKey[0]!.key);
    assertRateLimited(replay);
    assert.equal(replay.headers.get('idempotency-replayed'), null);

    // 3. Nothing ran: no order, no key stored, no payment, no charge, the same stock.
    assert.deepEqual(await footprint(first, customerId), before);
    assert.equal((await first.sql`select 1 from idempotency_keys where key = ${key}`).length, 0);
    assert.equal(await stockOf(first), stockBefore);
    assert.equal((await first.ledger(order!.out_trade_no)).charges.length, 0);

    // 4. Another session on another address is not affected.
    const other = first.customer();
    assert.equal((await createOrderFrom(other, '203.0.113.11')).status, 201);
  });

  it('limits an address across its sessions, by the hop our proxy appended, not the one the client sent', async () => {
    await roomInWindow(25);
    // 1. Ten sessions behind one address, 30 mutations each: 300, the address's limit, all served.
    //    Each claims a different origin in the part of X-Forwarded-For a client controls.
    const address = '203.0.113.20';
    const sessions = Array.from({ length: 10 }, () => first.customer());
    await Promise.all(
      sessions.map(async (customer, s) => {
        for (let i = 0; i < 30; i++) {
          // Without a key: the guard answers 400 and stores nothing, but the request was counted.
          const response = await mutateFrom(
            customer,
            `198.51.100.${s * 30 + i}, ${address}`,
            'checkout.createOrder',
            { items: [{ sku: SKU, quantity: 1 }] },
            null,
          );
          assert.equal(response.status, 400, response.text);
          assert.equal(response.json.error.data.reason, 'IDEMPOTENCY_KEY_MISSING');
        }
      }),
    );

    // 2. An eleventh session at that address, on its first mutation: refused, nothing created.
    const latecomer = first.customer();
    const stockBefore = await stockOf(first);
    assertRateLimited(await createOrderFrom(latecomer, `192.0.2.99, ${address}`));
    assert.deepEqual(await footprint(first, customerIdOf(latecomer)), { orders: 0, open: 0, keys: 0, payments: 0 });
    assert.equal(await stockOf(first), stockBefore);

    // 3. The same kind of session at another address is served.
    assert.equal((await createOrderFrom(first.customer(), `192.0.2.99, 203.0.113.21`)).status, 201);
  });

  it("counts in PostgreSQL: two app instances share one session's limit", async () => {
    await roomInWindow(20);
    const onFirst = first.customer();
    await onFirst.query('checkout.products');
    const onSecond = second.customer();
    onSecond.cookie = onFirst.cookie; // one shopper, load-balanced over both instances
    const address = '203.0.113.30';

    // 1. Fifteen mutations on each instance: thirty in all, each instance well under the limit alone.
    for (let i = 0; i < 15; i++) {
      assert.equal((await createOrderFrom(onFirst, address)).status, 201);
      assert.equal((await createOrderFrom(onSecond, address)).status, 201);
    }
    const customerId = customerIdOf(onFirst);
    const before = await footprint(first, customerId);
    assert.equal(before.orders, 30);

    // 2. The 31st is refused whichever instance it reaches.
    assertRateLimited(await createOrderFrom(onSecond, address));
    assertRateLimited(await createOrderFrom(onFirst, address));
    assert.deepEqual(await footprint(first, customerId), before);
  });

  it('takes the address from the socket, or only from a trusted proxy, and from the configured environment', () => {
    const forwarded = new Headers({ 'x-forwarded-for': '10.9.9.9, 203.0.113.40' });
    // No trusted proxy: `next start` keeps a client's own X-Forwarded-For, so only the socket counts.
    assert.equal(clientAddress(forwarded, 0), undefined);
    const fromSocket = new Headers({ 'x-forwarded-for': '10.9.9.9', [PEER_ADDRESS_HEADER]: '::ffff:192.0.2.7' });
    assert.equal(clientAddress(fromSocket, 0), '192.0.2.7');
    // Behind a proxy, a request that skipped it (no hop of the proxy's) counts by its socket.
    assert.equal(clientAddress(new Headers({ [PEER_ADDRESS_HEADER]: '192.0.2.8' }), 1), '192.0.2.8');
    assert.equal(clientAddress(forwarded, 1), '203.0.113.40');
    assert.equal(clientAddress(forwarded, 2), '10.9.9.9');
    assert.equal(clientAddress(new Headers({ 'x-forwarded-for': 'not-an-address' }), 1), undefined);
    // An IPv6 subscriber's /64 is one address.
    assert.equal(clientAddress(new Headers({ 'x-forwarded-for': '2001:db8:1:2::abcd' }), 1), '2001:db8:1:2::/64');
    assert.equal(clientAddress(new Headers({ 'x-forwarded-for': '2001:db8:1:2:ffff::1' }), 1), '2001:db8:1:2::/64');

    assert.deepEqual(rateLimitPolicyFromEnv({}), { sessionPerWindow: 30, addressPerWindow: 300, windowSeconds: 60, trustProxy: 0 });
    assert.deepEqual(
      rateLimitPolicyFromEnv({ RATE_LIMIT_SESSION_PER_MINUTE: '0', RATE_LIMIT_ADDRESS_PER_MINUTE: '1000', TRUST_PROXY: '1' }),
      { sessionPerWindow: 0, addressPerWindow: 1000, windowSeconds: 60, trustProxy: 1 },
    );
  });

  it('deletes counters whose window has ended, and only those', async () => {
    await first.sql`
      insert into rate_limits (bucket, window_start, window_ends_at, hits) values
        ('session:ended-test', now() - interval '2 minutes', now() - interval '1 minute', 31),
        ('session:live-test', now(), now() + interval '1 minute', 3)`;
    assert.ok((await deleteEndedRateLimitWindows(first.db, { batchSize: 1 })) >= 1);
    const left = await first.sql<{ bucket: string }[]>`
      select bucket from rate_limits where bucket in ('session:ended-test', 'session:live-test')`;
    assert.deepEqual(
      left.map((row) => row.bucket),
      ['session:live-test'],
    );
  });
});

describe('caps on what one customer holds in unpaid orders', () => {
  it('refuses a sixth unpaid order with 409 TOO_MANY_OPEN_ORDERS, taking no stock; paying one makes room', async () => {
    const customer = capped.customer();
    const orders: string[] = [];
    for (let i = 0; i < 5; i++) orders.push((await customer.createOrder()).orderId);
    const customerId = customerIdOf(customer);
    const before = await footprint(capped, customerId);
    const stockBefore = await stockOf(capped);

    // 1. The sixth: refused, nothing created, its key not stored.
    const key = randomUUID();
    const refused = await customer.mutate('checkout.createOrder', { items: [{ sku: SKU, quantity: 1 }] }, key);
    assert.equal(refused.status, 409, refused.text);
    assert.equal(refused.json.error.data.reason, 'TOO_MANY_OPEN_ORDERS');
    assert.deepEqual(await footprint(capped, customerId), before);
    assert.equal(await stockOf(capped), stockBefore);

    // 2. Paid, an order holds nothing any more: the same key now creates the sixth.
    assert.equal((await customer.pay(orders[0]!, { buyer: 'ok' })).status, 201);
    const retried = await customer.mutate('checkout.createOrder', { items: [{ sku: SKU, quantity: 1 }] }, key);
    assert.equal(retried.status, 201, retried.text);
  });

  it('refuses more than 20 units of one SKU across unpaid orders with 409 STOCK_HOLD_LIMIT, taking no stock', async () => {
    const customer = capped.customer();
    await customer.createOrder([{ sku: 'TEA-LONGJING', quantity: 15 }]);
    const customerId = customerIdOf(customer);
    const before = await footprint(capped, customerId);
    const teaBefore = await stockOf(capped, 'TEA-LONGJING');
    const mugBefore = await stockOf(capped, SKU);

    for (const items of [
      [
        { sku: SKU, quantity: 1 },
        { sku: 'TEA-LONGJING', quantity: 6 },
      ],
      [{ sku: SKU, quantity: 21 }],
    ]) {
      const refused = await customer.mutate('checkout.createOrder', { items });
      assert.equal(refused.status, 409, refused.text);
      assert.equal(refused.json.error.data.reason, 'STOCK_HOLD_LIMIT');
    }
    assert.deepEqual(await footprint(capped, customerId), before);
    assert.equal(await stockOf(capped, 'TEA-LONGJING'), teaBefore);
    assert.equal(await stockOf(capped, SKU), mugBefore);

    // Up to the cap exactly is fine.
    await customer.createOrder([
      { sku: 'TEA-LONGJING', quantity: 5 },
      { sku: SKU, quantity: 20 },
    ]);
  });

  it('holds under concurrency: ten parallel createOrders of one customer create exactly five', async () => {
    const customer = capped.customer();
    await customer.query('checkout.products');
    const stockBefore = await stockOf(capped);
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => customer.mutate('checkout.createOrder', { items: [{ sku: SKU, quantity: 2 }] })),
    );
    const statuses = answers.map((a) => a.status).sort();
    assert.deepEqual(statuses, [201, 201, 201, 201, 201, 409, 409, 409, 409, 409], answers.map((a) => a.text).join('\n'));
    for (const a of answers.filter((a) => a.status === 409)) assert.equal(a.json.error.data.reason, 'TOO_MANY_OPEN_ORDERS');
    const after = await footprint(capped, customerIdOf(customer));
    assert.deepEqual(after, { orders: 5, open: 5, keys: 5, payments: 0 });
    assert.equal(await stockOf(capped), stockBefore - 10);
  });
});

/**
 * One raw HTTP request from a chosen loopback address (all of 127.0.0.0/8 reaches this host), so that
 * the server sees a socket address no other test in this database has used.
 */
function requestFrom(
  localAddress: string,
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method: options.method ?? 'GET', headers: options.headers, localAddress }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, text }));
    });
    request.on('error', reject);
    request.end(options.body);
  });
}

describe('caps on what one address holds, whatever its sessions', () => {
  it('a script opening a new session per order from one machine gets 429s and holds at most the address cap', async () => {
    const address = `127.${randomInt(1, 255)}.${randomInt(0, 256)}.${randomInt(1, 255)}`;
    const cap = DEFAULT_ORDER_CAPS.heldUnitsPerSkuPerAddress;
    const statuses: number[] = [];
    const teaBefore = await stockOf(byAddress, 'TEA-LONGJING');

    // 1. Forty sessions, one order of 20 units each, each request claiming another address in every
    //    header a client controls: X-Forwarded-For (no proxy is trusted) and the stamp's own header.
    for (let session = 0; session < 40; session++) {
      const opened = await requestFrom(address, `${byAddress.appUrl}/api/trpc/checkout.products`);
      const cookie = String(opened.headers['set-cookie']).split(';')[0]!;
      const forged = `198.51.100.${session + 1}`;
      const created = await requestFrom(address, `${byAddress.appUrl}/api/trpc/checkout.createOrder`, {
        method: 'POST',
        headers: {
          cookie,
          'content-type': 'application/json',
          'idempotency-key': randomUUID(),
          'x-forwarded-for': forged,
          [PEER_ADDRESS_HEADER]: forged,
        },
        body: JSON.stringify({ items: [{ sku: 'TEA-LONGJING', quantity: 20 }] }),
      });
      statuses.push(created.status);
      if (created.status === 429) {
        const error = JSON.parse(created.text).error;
        assert.equal(error.data.reason, 'ADDRESS_HOLD_LIMIT', created.text);
        assert.ok(Number(created.headers['retry-after']) >= 1, `Retry-After ${created.headers['retry-after']}`);
      } else {
        assert.equal(created.status, 201, created.text);
      }
    }

    // 2. What the address holds: the cap, no more; every refusal took no stock.
    const allowed = cap / 20;
    assert.deepEqual(
      statuses,
      Array.from({ length: 40 }, (_, i) => (i < allowed ? 201 : 429)),
    );
    const [held] = await byAddress.sql<{ units: number; orders: number }[]>`
      select coalesce(sum(i.quantity), 0)::int as units, count(distinct o.id)::int as orders
        from orders o join order_items i on i.order_id = o.id
       where o.client_address = ${address} and o.status in ('awaiting_payment', 'paying')`;
    assert.deepEqual(held, { units: cap, orders: allowed });
    assert.equal(await stockOf(byAddress, 'TEA-LONGJING'), teaBefore - cap);

    // 3. Another machine is not held back by this one.
    const neighbour = address.replace(/\.\d+$/, (last) => `.${(Number(last.slice(1)) % 254) + 1}`);
    const opened = await requestFrom(neighbour, `${byAddress.appUrl}/api/trpc/checkout.products`);
    const other = await requestFrom(neighbour, `${byAddress.appUrl}/api/trpc/checkout.createOrder`, {
      method: 'POST',
      headers: {
        cookie: String(opened.headers['set-cookie']).split(';')[0]!,
        'content-type': 'application/json',
        'idempotency-key': randomUUID(),
      },
      body: JSON.stringify({ items: [{ sku: 'TEA-LONGJING', quantity: 20 }] }),
    });
    assert.equal(other.status, 201, other.text);
  });
});
