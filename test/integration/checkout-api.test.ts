/**
 * The public contract (design.md §5) over real HTTP, with the promises of §1 checked against the
 * database and the sandbox's ledger, the ground truth of what was charged.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { requestFingerprint } from '@payonce/idempotency';
import type { ChargeRequest, PaymentGateway } from '@/server/payments/gateway';
import { serveFetch } from '@/test/support/serve-fetch';
import { eventually, startTestStack, type ApiCustomer, type TestStack } from '@/test/support/stack';

let stack: TestStack;

before(async () => {
  stack = await startTestStack({ idempotency: { leaseMs: 1500 } });
});
after(async () => {
  await stack?.close();
});

async function stockOf(sku: string): Promise<number> {
  const [row] = await stack.sql<{ stock: number }[]>`select stock from products where sku = ${sku}`;
  return row!.stock;
}
async function orderRow(orderId: string) {
  const [row] = await stack.sql<{ status: string; payment_attempt: number; attempt_key_id: string | null }[]>`
    select status, payment_attempt, attempt_key_id from orders where id = ${orderId}`;
  return row!;
}
async function emailsFor(orderId: string): Promise<number> {
  const [row] = await stack.sql<{ n: number }[]>`
    select count(*)::int as n from outbox where topic = 'email.order_paid' and payload->>'orderId' = ${orderId}`;
  return row!.n;
}
async function paymentsFor(orderId: string, status = 'succeeded'): Promise<number> {
  const [row] = await stack.sql<{ n: number }[]>`
    select count(*)::int as n from payments where order_id = ${orderId} and status = ${status}`;
  return row!.n;
}
function customerIdOf(customer: ApiCustomer): string {
  return decodeURIComponent(customer.cookie!.split('=')[1]!).split('.')[0]!;
}

describe('checkout.products and checkout.createOrder', () => {
  it('lists the catalogue with integer minor-unit prices and stock', async () => {
    const response = await stack.customer().query('checkout.products');
    assert.equal(response.status, 200);
    const products = response.json.result.data as {
      sku: string;
      nameEn: string | null;
      priceMinor: number;
      currency: string;
      stock: number;
    }[];
    assert.ok(products.length >= 3);
    for (const p of products) {
      assert.ok(Number.isInteger(p.priceMinor) && p.priceMinor > 0);
      assert.equal(p.currency, 'CNY');
      // An English name for the page's English mode: no Chinese in it.
      assert.match(p.nameEn ?? '', /^[A-Za-z][^\u4e00-\u9fff]*$/, p.sku);
    }
  });

  it('tells a shopper 已售罄 (SOLD_OUT) when none is left, OUT_OF_STOCK when fewer than asked, and takes nothing', async () => {
    await stack.sql`
      insert into products (sku, name, name_en, price_minor, currency, stock)
      values ('TEST-LAST-TWO', '最后两件', 'The last two', 1000, 'CNY', 2)
      on conflict (sku) do update set stock = 2`;
    const customer = stack.customer();
    const tooMany = await customer.mutate('checkout.createOrder', { items: [{ sku: 'TEST-LAST-TWO', quantity: 3 }] });
    assert.equal(tooMany.status, 409, tooMany.text);
    assert.equal(tooMany.json.error.data.reason, 'OUT_OF_STOCK');
    assert.equal(await stockOf('TEST-LAST-TWO'), 2);
    await customer.createOrder([{ sku: 'TEST-LAST-TWO', quantity: 2 }]);
    const late = await customer.mutate('checkout.createOrder', { items: [{ sku: 'TEST-LAST-TWO', quantity: 1 }] });
    assert.equal(late.status, 409, late.text);
    assert.equal(late.json.error.data.reason, 'SOLD_OUT');
    // Two at once for the last unit: one order, one 已售罄, whichever waited on the row's lock.
    await stack.sql`update products set stock = 1 where sku = 'TEST-LAST-TWO'`;
    const racing = await Promise.all(
      [stack.customer(), stack.customer()].map((c) => c.mutate('checkout.createOrder', { items: [{ sku: 'TEST-LAST-TWO', quantity: 1 }] })),
    );
    assert.deepEqual(racing.map((r) => r.status).sort(), [201, 409]);
    assert.equal(racing.find((r) => r.status === 409)!.json.error.data.reason, 'SOLD_OUT');
    assert.equal(await stockOf('TEST-LAST-TWO'), 0);
    await stack.sql`delete from products where sku = 'TEST-LAST-TWO' and not exists (select 1 from order_items where sku = 'TEST-LAST-TWO')`;
  });

  it('1. refuses a request without a key with 400 IDEMPOTENCY_KEY_MISSING and creates nothing', async () => {
    const customer = stack.customer();
    const before = await stockOf('TEA-LONGJING');
    const response = await customer.mutate('checkout.createOrder', { items: [{ sku: 'TEA-LONGJING', quantity: 1 }] }, null);
    assert.equal(response.status, 400);
    assert.equal(response.json.error.data.reason, 'IDEMPOTENCY_KEY_MISSING');
    const tooLong = await customer.mutate('checkout.createOrder', { items: [{ sku: 'TEA-LONGJING', quantity: 1 }] }, 'k'.repeat(256));
    assert.equal(tooLong.status, 400);
    assert.equal(tooLong.json.error.data.reason, 'IDEMPOTENCY_KEY_INVALID');
    assert.equal(await stockOf('TEA-LONGJING'), before);
  });

  it('1a. rollout mode (missingKey run_unguarded): a keyless mutation runs unguarded and is told of; a keyless double pay still charges once', async () => {
    const options = stack.services.idempotencyOptions;
    const events: { outcome: string; path: string }[] = [];
    stack.services.idempotencyOptions = { ...options, missingKey: 'run_unguarded', observe: (event) => void events.push(event) };
    try {
      const customer = stack.customer();
      const input = { items: [{ sku: 'TEA-LONGJING', quantity: 1 }] };
      // 1. Without a key each call is a new order: nothing is stored, nothing replayed.
      const first = await customer.mutate('checkout.createOrder', input, null);
      const second = await customer.mutate('checkout.createOrder', input, null);
      assert.deepEqual([first.status, second.status], [201, 201]);
      assert.notEqual(first.json.result.data.orderId, second.json.result.data.orderId);
      assert.equal(first.headers.get('idempotency-replayed'), null);
      const [keys] = await stack.sql<{ n: number }[]>`
        select count(*)::int as n from idempotency_keys where scope = ${`customer:${customerIdOf(customer)}`}`;
      assert.equal(keys!.n, 0);
      // 2. A malformed key is still refused.
      const malformed = await customer.mutate('checkout.createOrder', input, 'k'.repeat(256));
      assert.equal(malformed.status, 400);
      // 3. Two keyless pays of one order: the order-level guard still lets the gateway charge once.
      const order = first.json.result.data as { orderId: string; outTradeNo: string };
      const payInput = { orderId: order.orderId, gateway: 'alipay', buyer: 'ok' };
      const pays = [await customer.mutate('checkout.pay', payInput, null), await customer.mutate('checkout.pay', payInput, null)];
      assert.deepEqual(
        pays.map((pay) => pay.status),
        [201, 201],
      );
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
      // 4. Each one told, with its procedure, for the log line and the counter.
      assert.deepEqual(
        events.filter((event) => event.outcome === 'unguarded').map((event) => event.path),
        ['checkout.createOrder', 'checkout.createOrder', 'checkout.pay', 'checkout.pay'],
      );
    } finally {
      stack.services.idempotencyOptions = options;
    }
  });

  it('1b. refuses a mutation from a request without a session (401 SESSION_REQUIRED), so a lost first answer cannot create a second order', async () => {
    const customer = stack.customer();
    const key = randomUUID();
    const input = { items: [{ sku: 'TEA-LONGJING', quantity: 1 }] };
    const first = await customer.send('POST', 'checkout.createOrder', { input, key, headers: { 'x-no-session': '1' } });
    assert.equal(first.status, 401);
    assert.equal(first.json.error.data.reason, 'SESSION_REQUIRED');
    assert.ok(customer.cookie, 'the answer established the session');
    const [none] = await stack.sql<{ n: number }[]>`select count(*)::int as n from orders where customer_id = ${customerIdOf(customer)}`;
    assert.equal(none!.n, 0);
    // Its answer lost or not, the retry carries the session and the same key: one order.
    const retry = await customer.mutate('checkout.createOrder', input, key);
    assert.equal(retry.status, 201);
    const again = await customer.mutate('checkout.createOrder', input, key);
    assert.equal(again.headers.get('idempotency-replayed'), 'true');
    const [one] = await stack.sql<{ n: number }[]>`select count(*)::int as n from orders where customer_id = ${customerIdOf(customer)}`;
    assert.equal(one!.n, 1);
  });

  it('2. creates one order per key: the retry is replayed with Idempotency-Replayed and stock is taken once', async () => {
    const customer = stack.customer();
    const before = await stockOf('TEA-LONGJING');
    const key = randomUUID();
    const input = { items: [{ sku: 'TEA-LONGJING', quantity: 2 }] };
    const first = await customer.mutate('checkout.createOrder', input, key);
    assert.equal(first.status, 201, first.text);
    assert.equal(first.headers.get('idempotency-replayed'), null);
    const order = first.json.result.data;
    assert.match(order.outTradeNo, /^PO[0-9A-Z]{18}$/);
    assert.equal(order.amountMinor, 2 * 16800);
    assert.equal(order.status, 'awaiting_payment');

    // The same request with its keys reordered and re-spaced is still the same request.
    const replay = await customer.send('POST', 'checkout.createOrder', {
      key,
      rawBody: '{ "items" : [ { "quantity": 2, "sku": "TEA-LONGJING" } ] }',
    });
    assert.equal(replay.status, 201);
    assert.equal(replay.headers.get('idempotency-replayed'), 'true');
    assert.equal(replay.text, first.text, 'the very same body');
    assert.equal(await stockOf('TEA-LONGJING'), before - 2);
    const [count] = await stack.sql<{ n: number }[]>`select count(*)::int as n from orders where customer_id = ${customerIdOf(customer)}`;
    assert.equal(count!.n, 1);
  });

  it('3. answers 422 KEY_REUSED_WITH_DIFFERENT_REQUEST for the same key with another body, changing nothing', async () => {
    const customer = stack.customer();
    const key = randomUUID();
    await customer.mutate('checkout.createOrder', { items: [{ sku: 'MUG-CELADON', quantity: 1 }] }, key);
    const before = await stockOf('MUG-CELADON');
    const response = await customer.mutate('checkout.createOrder', { items: [{ sku: 'MUG-CELADON', quantity: 3 }] }, key);
    assert.equal(response.status, 422);
    assert.equal(response.json.error.data.reason, 'KEY_REUSED_WITH_DIFFERENT_REQUEST');
    assert.equal(await stockOf('MUG-CELADON'), before);
  });

  it('4. refuses bad input with a clear 4xx, stores nothing, and lets the key be used for a good request', async () => {
    const customer = stack.customer();
    const key = randomUUID();
    const invalid = await customer.mutate('checkout.createOrder', { items: [{ sku: 'MUG-CELADON', quantity: 0 }] }, key);
    assert.equal(invalid.status, 400);
    assert.equal(invalid.json.error.data.reason, 'INVALID_INPUT');
    const unknown = await customer.mutate('checkout.createOrder', { items: [{ sku: 'NO-SUCH-SKU', quantity: 1 }] }, key);
    assert.equal(unknown.status, 400);
    assert.equal(unknown.json.error.data.reason, 'UNKNOWN_SKU');
    const tooMany = await customer.mutate(
      'checkout.createOrder',
      {
        items: [
          { sku: 'MUG-CELADON', quantity: 1 },
          { sku: 'MUG-CELADON', quantity: 1 },
        ],
      },
      key,
    );
    assert.equal(tooMany.json.error.data.reason, 'DUPLICATE_SKU');
    const [keys] = await stack.sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where key = ${key}`;
    assert.equal(keys!.n, 0, 'a refused request leaves no key behind');
    const good = await customer.mutate('checkout.createOrder', { items: [{ sku: 'MUG-CELADON', quantity: 1 }] }, key);
    assert.equal(good.status, 201);
  });

  it('5. scopes keys to the customer: the same key from another customer is a new request, and orders stay private', async () => {
    const alice = stack.customer();
    const bob = stack.customer();
    const key = randomUUID();
    const a = await alice.mutate('checkout.createOrder', { items: [{ sku: 'MUG-CELADON', quantity: 1 }] }, key);
    const b = await bob.mutate('checkout.createOrder', { items: [{ sku: 'MUG-CELADON', quantity: 1 }] }, key);
    assert.equal(b.status, 201);
    assert.equal(b.headers.get('idempotency-replayed'), null, "not Alice's stored answer");
    assert.notEqual(b.json.result.data.orderId, a.json.result.data.orderId);

    const peek = await bob.query('checkout.order', { orderId: a.json.result.data.orderId });
    assert.equal(peek.status, 404);
    assert.equal(peek.json.error.data.reason, 'ORDER_NOT_FOUND');
    const pay = await bob.pay(a.json.result.data.orderId);
    assert.equal(pay.status, 404);
    assert.equal((await stack.ledger(a.json.result.data.outTradeNo)).charges.length, 0);

    // A forged session cookie is not Alice: it gets a fresh identity.
    const mallory = stack.customer();
    mallory.cookie = `payonce_session=${customerIdOf(alice)}.forged`;
    const forged = await mallory.query('checkout.order', { orderId: a.json.result.data.orderId });
    assert.equal(forged.status, 404);
  });
});

describe('checkout.pay with Alipay through the sandbox', () => {
  it('1. charges once, answers 201, and replays the same body to a retry', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    const first = await customer.pay(order.orderId, { key });
    assert.equal(first.status, 201, first.text);
    const paid = first.json.result.data;
    assert.equal(paid.status, 'paid');
    assert.equal(paid.payment.gateway, 'alipay');
    assert.equal(paid.payment.outTradeNo, order.outTradeNo);
    assert.equal(paid.payment.amountMinor, order.amountMinor);
    assert.ok(paid.payment.gatewayTradeNo);

    const replay = await customer.pay(order.orderId, { key });
    assert.equal(replay.status, 201);
    assert.equal(replay.headers.get('idempotency-replayed'), 'true');
    assert.equal(replay.text, first.text);

    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 1, 'the replay never reached the gateway');
    assert.equal((await orderRow(order.orderId)).status, 'paid');
    assert.equal(await emailsFor(order.orderId), 1);

    // The gateway's own notification arrives too, and is acknowledged without a second effect.
    await eventually(
      async () => {
        const ledger = await stack.ledger(order.outTradeNo);
        return ledger.notifications.some((n) => n.acknowledged) ? true : undefined;
      },
      10_000,
      'the notification to be acknowledged',
    );
    assert.equal(await paymentsFor(order.orderId), 1);
    assert.equal(await emailsFor(order.orderId), 1);

    const view = await customer.query('checkout.order', { orderId: order.orderId });
    assert.equal(view.json.result.data.status, 'paid');
    assert.equal(view.json.result.data.payments.length, 1);
  });

  it('2. stores a terminal decline as 402 and replays it; another buyer is a new attempt that can succeed', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    const declined = await customer.pay(order.orderId, { key, buyer: 'insufficient_funds' });
    assert.equal(declined.status, 402, declined.text);
    assert.equal(declined.json.error.data.reason, 'PAYMENT_DECLINED');
    assert.equal(declined.json.error.data.details.declineCode, 'ACQ.BUYER_BALANCE_NOT_ENOUGH');

    const replay = await customer.pay(order.orderId, { key, buyer: 'insufficient_funds' });
    assert.equal(replay.status, 402);
    assert.equal(replay.headers.get('idempotency-replayed'), 'true');
    assert.equal(replay.text, declined.text);
    assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 1, 'no second call to the gateway');
    assert.equal((await orderRow(order.orderId)).status, 'awaiting_payment');

    const restricted = await customer.pay(order.orderId, { buyer: 'account_restricted' });
    assert.equal(restricted.status, 402);
    assert.equal(restricted.json.error.data.details.declineCode, 'ACQ.BUYER_ENABLE_STATUS_FORBID');

    const ok = await customer.pay(order.orderId, { buyer: 'ok' });
    assert.equal(ok.status, 201, ok.text);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    assert.equal(await paymentsFor(order.orderId, 'declined'), 2);
    assert.equal((await orderRow(order.orderId)).payment_attempt, 3);
  });

  it('3. answers an attempt on a paid order with the paid result and calls no gateway', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const first = await customer.pay(order.orderId);
    const callsBefore = (await stack.ledger(order.outTradeNo)).charges.length;
    const again = await customer.pay(order.orderId); // a new key: a second tab, say
    assert.equal(again.status, 201);
    assert.deepEqual(again.json.result.data, first.json.result.data);
    assert.equal((await stack.ledger(order.outTradeNo)).charges.length, callsBefore);
  });

  it('4. runs one execution and one charge for 50 concurrent calls with one key', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products'); // take the session cookie before the burst
    const order = await customer.createOrder();
    const key = randomUUID();
    const responses = await Promise.all(Array.from({ length: 50 }, () => customer.pay(order.orderId, { key })));
    const statuses = responses.map((r) => r.status);
    assert.ok(
      statuses.every((s) => s === 201 || s === 409),
      statuses.join(','),
    );
    for (const conflict of responses.filter((r) => r.status === 409)) {
      assert.equal(conflict.json.error.data.reason, 'REQUEST_IN_PROGRESS');
      assert.ok(Number(conflict.headers.get('retry-after')) >= 1);
    }
    const bodies = new Set(responses.filter((r) => r.status === 201).map((r) => JSON.stringify(r.json.result.data)));
    assert.equal(bodies.size, 1);
    const ledger = await stack.ledger(order.outTradeNo);
    assert.equal(ledger.charges.length, 1, 'one call reached the gateway');
    assert.equal(ledger.charges[0]!.status, 'succeeded');
    assert.equal(await paymentsFor(order.orderId), 1);
  });

  it('5. lets only one of two tabs (two keys, two requests at once) pay; the other gets 409 or the paid result', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const responses = await Promise.all(Array.from({ length: 10 }, () => customer.pay(order.orderId)));
    for (const r of responses) {
      if (r.status === 409) assert.equal(r.json.error.data.reason, 'ORDER_PAYMENT_IN_PROGRESS');
      else assert.equal(r.status, 201, r.text);
    }
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 1);
  });

  it("6. answers 409 REQUEST_IN_PROGRESS with Retry-After while the key's lease is held", async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    const input = { orderId: order.orderId, gateway: 'alipay' };
    await stack.sql`
      insert into idempotency_keys (scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token)
      values (${`customer:${customerIdOf(customer)}`}, ${key}, 'checkout.pay', ${requestFingerprint('checkout.pay', input)},
              now(), now() + interval '20 seconds', gen_random_uuid())`;
    const response = await customer.mutate('checkout.pay', input, key);
    assert.equal(response.status, 409);
    assert.equal(response.json.error.data.reason, 'REQUEST_IN_PROGRESS');
    const retryAfter = Number(response.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 20, `Retry-After ${retryAfter}`);
    assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 0);
  });

  it('7. recovers a request that died between the charge and the commit: the retry takes the stale lease over, one charge', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    const real = stack.services.gateways.alipay!;
    // The process "dies" right after the gateway charged: the call never returns, nothing commits.
    // (Its notification goes nowhere, so that the retry, not the webhook, is what settles the order.)
    const dying: PaymentGateway = {
      ...real,
      charge: async (request: ChargeRequest) => {
        await real.charge({ ...request, notifyUrl: 'http://127.0.0.1:9/unreachable' });
        return new Promise(() => {});
      },
    };
    stack.services.gateways.alipay = dying;
    void customer
      .send('POST', 'checkout.pay', {
        input: { orderId: order.orderId, gateway: 'alipay', buyer: 'ok' },
        key,
        signal: AbortSignal.timeout(1000), // the customer's connection is lost too
      })
      .catch(() => undefined);
    await eventually(async () => ((await stack.succeededCharges(order.outTradeNo)).length === 1 ? true : undefined), 5000, 'the charge');
    stack.services.gateways.alipay = real;
    assert.equal((await orderRow(order.orderId)).status, 'paying');

    const during = await customer.pay(order.orderId, { key });
    assert.equal(during.status, 409, 'the lease is still fresh');
    await new Promise((r) => setTimeout(r, 1600));
    const retry = await customer.pay(order.orderId, { key });
    assert.equal(retry.status, 201, retry.text);
    assert.equal(retry.json.result.data.payment.outTradeNo, order.outTradeNo);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'one charge in the ledger');
    assert.equal(await paymentsFor(order.orderId), 1);
    assert.equal(await emailsFor(order.orderId), 1);
    const [row] = await stack.sql<{ completed_at: Date | null; response_status: number }[]>`
      select completed_at, response_status from idempotency_keys where key = ${key}`;
    assert.ok(row!.completed_at);
    assert.equal(row!.response_status, 201);
  });
});

describe('Alipay notifications at /api/webhooks/alipay', () => {
  async function paidTrade() {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const response = await customer.pay(order.orderId);
    assert.equal(response.status, 201);
    return { customer, order };
  }

  it('1. settles an order from 25 concurrent duplicate notifications once: one payment, one email', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    // Charge at the gateway directly, as if the pay response had been lost: only notifications settle it.
    await stack.sql`update orders set status = 'paying', payment_attempt = 1 where id = ${order.orderId}`;
    const outcome = await stack.services.gateways.alipay!.charge({
      outTradeNo: order.outTradeNo,
      amountMinor: order.amountMinor,
      currency: 'CNY',
      subject: 'storm',
      attempt: 1,
      buyer: 'ok',
      notifyUrl: `${stack.appUrl}/api/webhooks/alipay`,
    });
    assert.equal(outcome.kind, 'succeeded');
    const storm = await fetch(`${stack.sandboxUrl}/sandbox/alipay/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo: order.outTradeNo, copies: 25 }),
    });
    const { deliveries } = (await storm.json()) as { deliveries: { status: number; body: string }[] };
    assert.equal(deliveries.length, 25);
    for (const d of deliveries) {
      // Acknowledged, or told to come back because the first copy was still in flight.
      assert.ok((d.status === 200 && d.body === 'success') || d.status === 503, `${d.status} ${d.body}`);
    }
    await eventually(async () => ((await orderRow(order.orderId)).status === 'paid' ? true : undefined), 10_000, 'paid');
    assert.equal(await paymentsFor(order.orderId), 1);
    assert.equal(await emailsFor(order.orderId), 1);
    const [key] = await stack.sql<{ n: number }[]>`
      select count(*)::int as n from idempotency_keys where scope = 'webhook:alipay' and key = ${order.outTradeNo} and completed_at is not null`;
    assert.equal(key!.n, 1);
  });

  it('4. does not acknowledge a duplicate that arrives while the first copy is still being processed', async () => {
    // A relay in front of the app that stays shut until the first copy is "in flight".
    let open = false;
    const relay = await serveFetch(() => async (request) => {
      if (!open) return new Response('relay closed', { status: 502 });
      return fetch(`${stack.appUrl}/api/webhooks/alipay`, {
        method: 'POST',
        headers: { 'content-type': request.headers.get('content-type') ?? '' },
        body: await request.text(),
      });
    });
    after(() => relay.close());
    const customer = stack.customer();
    const order = await customer.createOrder();
    await stack.sql`update orders set status = 'paying', payment_attempt = 1 where id = ${order.orderId}`;
    const outcome = await stack.services.gateways.alipay!.charge({
      outTradeNo: order.outTradeNo,
      amountMinor: order.amountMinor,
      currency: 'CNY',
      subject: 'in flight',
      attempt: 1,
      buyer: 'ok',
      notifyUrl: `${relay.url}/api/webhooks/alipay`,
    });
    assert.equal(outcome.kind, 'succeeded');
    if (outcome.kind !== 'succeeded') return;
    // The first copy holds the key's lease (it is "still processing").
    await stack.sql`
      insert into idempotency_keys (scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token)
      values ('webhook:alipay', ${order.outTradeNo}, 'webhook.alipay',
              ${requestFingerprint('webhook.alipay', { outTradeNo: order.outTradeNo, gatewayTradeNo: outcome.gatewayTradeNo, amountMinor: order.amountMinor, currency: 'CNY' })},
              now(), now() + interval '30 seconds', gen_random_uuid())`;
    open = true;
    const response = await fetch(`${stack.sandboxUrl}/sandbox/alipay/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo: order.outTradeNo, overrides: {} }),
    });
    const { deliveries } = (await response.json()) as { deliveries: { status: number; body: string }[] };
    assert.notEqual(deliveries[0]!.body, 'success', 'Alipay must come back later');
    assert.equal(deliveries[0]!.status, 503);
    assert.equal((await orderRow(order.orderId)).status, 'paying');
    assert.equal(await paymentsFor(order.orderId), 0);
  });

  it('2. rejects a forged notification with 400 and records nothing', async () => {
    const { generateKeyPairSync, createSign } = await import('node:crypto');
    const customer = stack.customer();
    const order = await customer.createOrder();
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const credentials = (await (await fetch(`${stack.sandboxUrl}/sandbox/credentials`)).json()) as { alipay: { appId: string } };
    const params: Record<string, string> = {
      app_id: credentials.alipay.appId,
      charset: 'utf-8',
      notify_id: randomUUID(),
      notify_time: '2026-12-02 12:00:00',
      notify_type: 'trade_status_sync',
      out_trade_no: order.outTradeNo,
      total_amount: (order.amountMinor / 100).toFixed(2),
      trade_no: '2026120222001400000000000001',
      trade_status: 'TRADE_SUCCESS',
      version: '1.0',
    };
    const content = Object.keys(params)
      .sort()
      .map((k) => `${k}=${params[k]}`)
      .join('&');
    const sign = createSign('RSA-SHA256').update(content).sign(privateKey, 'base64');
    const response = await fetch(`${stack.appUrl}/api/webhooks/alipay`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ ...params, sign, sign_type: 'RSA2' }).toString(),
    });
    assert.equal(response.status, 400);
    assert.notEqual(await response.text(), 'success');
    assert.equal((await orderRow(order.orderId)).status, 'awaiting_payment');
    const [keys] = await stack.sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where key = ${order.outTradeNo}`;
    assert.equal(keys!.n, 0);
  });

  it('3. rejects a validly signed notification whose amount does not match the order, recording nothing', async () => {
    const { order: paidOrder } = await paidTrade();
    const victim = await stack.customer().createOrder();
    // A genuine signature over a lie: the sandbox's tool re-signs the notification after overrides.
    const response = await fetch(`${stack.sandboxUrl}/sandbox/alipay/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo: paidOrder.outTradeNo, overrides: { out_trade_no: victim.outTradeNo, total_amount: '0.01' } }),
    });
    const { deliveries } = (await response.json()) as { deliveries: { status: number; body: string }[] };
    assert.equal(deliveries[0]!.status, 400);
    assert.match(deliveries[0]!.body, /AMOUNT_MISMATCH/);
    assert.equal((await orderRow(victim.orderId)).status, 'awaiting_payment');
    assert.equal(await paymentsFor(victim.orderId), 0);
    const [keys] = await stack.sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where key = ${victim.outTradeNo}`;
    assert.equal(keys!.n, 0);
  });
});
