/**
 * Authorise, then capture (STRIPE_CAPTURE_METHOD=manual), judged by the sandbox's ledger: the buyer's
 * payment only holds the money; the merchant's capture takes it — all or part — exactly once, under
 * retries, lost answers, a crash between the capture and the commit, and two operators at once; a
 * release or a lapse voids the order and gives its stock back; a hold the order cannot keep is
 * released. Real PostgreSQL, the sandbox over HTTP, stripe-node, the app's own handlers.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, it } from 'node:test';
import { processDueAuthorizationActions } from '@/server/jobs/authorization-worker';
import { reconcilePayments } from '@/server/jobs/reconciler';
import { relayOutbox } from '@/server/jobs/outbox-relay';
import { reconcileDay } from '@/server/reconciliation/reconcile-day';
import { eventually, startTestStack, type ApiCustomer, type TestStack } from '@/test/support/stack';

const TOKEN = 'merchant-token-for-the-authorisation-tests-0123456789';
const SKU = 'MUG-CELADON';

let stack: TestStack;
before(async () => {
  stack = await startTestStack({ faults: true, stripeCaptureMethod: 'manual', merchantApiToken: TOKEN, idempotency: { leaseMs: 2000 } });
});
after(async () => {
  await stack?.close();
});
afterEach(async () => {
  stack.faults?.clear();
  await fetch(`${stack.sandboxUrl}/sandbox/faults`, { method: 'DELETE' });
});

/** The merchant's back office: a bearer token and its own keys. */
function merchant(procedure: 'merchant.capture' | 'merchant.release', input: unknown, key: string = randomUUID(), token = TOKEN) {
  return stack.customer().send('POST', procedure, { input, key, headers: { authorization: `Bearer ${token}`, 'x-no-session': '1' } });
}

async function authorizedOrder(customer: ApiCustomer = stack.customer()) {
  const order = await customer.createOrder([{ sku: SKU, quantity: 1 }]);
  const paid = await customer.pay(order.orderId, { gateway: 'stripe' });
  assert.equal(paid.status, 201, paid.text);
  assert.equal(paid.json.result.data.status, 'authorized');
  return { order, customer, gatewayTradeNo: paid.json.result.data.payment.gatewayTradeNo as string };
}

async function orderRow(orderId: string) {
  const [row] = await stack.sql<{ status: string; amount_minor: number }[]>`select status, amount_minor from orders where id = ${orderId}`;
  return row!;
}

async function stock(): Promise<number> {
  const [row] = await stack.sql<{ stock: number }[]>`select stock from products where sku = ${SKU}`;
  return row!.stock;
}

/** Money taken at Stripe for the order: the ledger's succeeded charges − succeeded refunds. */
async function kept(outTradeNo: string) {
  const ledger = await stack.ledger(outTradeNo);
  const charged = ledger.charges.filter((c) => c.status === 'succeeded');
  const refunded = ledger.refunds.filter((r) => r.status === 'succeeded');
  return {
    charges: charged.length,
    kept: charged.reduce((s, c) => s + c.amountMinor, 0) - refunded.reduce((s, r) => s + r.amountMinor, 0),
  };
}

/** Runs the authorization worker until the order leaves `authorized` (backoff 0: every run is due). */
function settleDecisions(orderId: string, until: (status: string) => boolean = (status) => status !== 'authorized') {
  return eventually(
    async () => {
      await processDueAuthorizationActions(stack.services, { backoffMs: 0 });
      const row = await orderRow(orderId);
      return until(row.status) ? row : undefined;
    },
    15_000,
    'the decision to be carried out',
  );
}

async function paidEmails(orderId: string): Promise<number> {
  await relayOutbox(stack.db);
  const [row] = await stack.sql<{ n: number }[]>`
    select count(*)::int as n from outbox where topic = 'email.order_paid' and payload->>'orderId' = ${orderId}`;
  return row!.n;
}

describe('authorise, then capture at Stripe', () => {
  it('1. the buyer’s payment holds the money: the order is authorised, keeps its stock, and nothing is taken', async () => {
    const before = await stock();
    const { order } = await authorizedOrder();
    assert.equal((await orderRow(order.orderId)).status, 'authorized');
    assert.equal(await stock(), before - 1, 'the stock stays with the authorised order');
    assert.deepEqual(await kept(order.outTradeNo), { charges: 0, kept: 0 });
    assert.equal(await paidEmails(order.orderId), 0, 'no 支付成功 email before the money is taken');
  });

  it('2. a capture takes it all, once: retried, replayed, asked again by a second operator', async () => {
    const { order } = await authorizedOrder();
    const key = randomUUID();
    const decided = await merchant('merchant.capture', { orderId: order.orderId }, key);
    assert.equal(decided.status, 202, decided.text);
    assert.equal(decided.json.result.data.amountMinor, order.amountMinor);
    const replay = await merchant('merchant.capture', { orderId: order.orderId }, key);
    assert.equal(replay.status, 202);
    assert.equal(replay.headers.get('idempotency-replayed'), 'true');
    const again = await merchant('merchant.capture', { orderId: order.orderId });
    assert.equal(again.status, 202, 'another operator asking the same capture gets the same decision');
    assert.equal(again.json.result.data.status, 'pending');

    assert.equal((await settleDecisions(order.orderId)).status, 'paid');
    assert.deepEqual(await kept(order.outTradeNo), { charges: 1, kept: order.amountMinor });
    assert.equal(await paidEmails(order.orderId), 1);
    const [{ n } = { n: -1 }] = await stack.sql<{ n: number }[]>`
      select count(*)::int as n from authorization_actions where order_id = ${order.orderId}`;
    assert.equal(n, 1, 'one decision however often it was asked');
  });

  it('3. a partial capture takes that much and releases the rest; the order is paid for what was taken', async () => {
    const { order } = await authorizedOrder();
    const part = order.amountMinor - 1000;
    const decided = await merchant('merchant.capture', { orderId: order.orderId, amountMinor: part });
    assert.equal(decided.status, 202, decided.text);
    const other = await merchant('merchant.capture', { orderId: order.orderId });
    assert.equal(other.status, 409, 'a different capture of a decided authorisation is refused');
    assert.equal(other.json.error.data.reason, 'AUTHORIZATION_ALREADY_DECIDED');
    assert.equal((await settleDecisions(order.orderId)).status, 'paid');
    assert.deepEqual(await kept(order.outTradeNo), { charges: 1, kept: part });
    const [payment] = await stack.sql<{ amount_minor: number; authorized_minor: number; status: string }[]>`
      select amount_minor, authorized_minor, status from payments where order_id = ${order.orderId} and role = 'payment'`;
    assert.deepEqual(payment, { amount_minor: part, authorized_minor: order.amountMinor, status: 'succeeded' });
  });

  it('4. two operators at once, two keys, two amounts: one decision, one capture', async () => {
    const { order } = await authorizedOrder();
    const answers = await Promise.all([
      merchant('merchant.capture', { orderId: order.orderId }),
      merchant('merchant.capture', { orderId: order.orderId, amountMinor: 500 }),
    ]);
    assert.deepEqual(answers.map((a) => a.status).sort(), [202, 409], answers.map((a) => a.text).join('\n'));
    await settleDecisions(order.orderId);
    const won = answers.find((a) => a.status === 202)!.json.result.data.amountMinor as number;
    assert.deepEqual(await kept(order.outTradeNo), { charges: 1, kept: won });
  });

  it('5. the capture’s answer lost, then the worker crashing before its commit: captured once', async () => {
    const { order } = await authorizedOrder();
    assert.equal((await merchant('merchant.capture', { orderId: order.orderId })).status, 202);
    // Stripe takes the money, the answer never arrives, nor does its notification (which would
    // settle it first); then a try whose commit never happens.
    await stack.sandboxFault({ gateway: 'stripe', action: 'lose_notifications', times: 20, outTradeNo: order.outTradeNo });
    await stack.sandboxFault({ gateway: 'stripe', operation: 'capture', action: 'drop_after_charge', times: 3 });
    const lost = await processDueAuthorizationActions(stack.services, { backoffMs: 0 });
    assert.equal(lost.retried, 1, JSON.stringify(lost));
    stack.faults!.arm({ point: 'after_capture_call', action: { kind: 'throw' }, procedure: 'authorizations.process' });
    await assert.rejects(processDueAuthorizationActions(stack.services, { backoffMs: 0 }));
    stack.faults!.clear();
    await stack.sql`update authorization_actions set lease_until = null where order_id = ${order.orderId}`;
    assert.equal((await settleDecisions(order.orderId)).status, 'paid');
    assert.deepEqual(await kept(order.outTradeNo), { charges: 1, kept: order.amountMinor });
  });

  it('6. a release voids the order, gives the stock back, takes nothing; a capture after it is refused', async () => {
    const before = await stock();
    const { order } = await authorizedOrder();
    const released = await merchant('merchant.release', { orderId: order.orderId });
    assert.equal(released.status, 202, released.text);
    assert.equal((await settleDecisions(order.orderId)).status, 'voided');
    assert.equal(await stock(), before, 'the stock is back');
    const late = await merchant('merchant.capture', { orderId: order.orderId });
    assert.equal(late.status, 409);
    assert.deepEqual(await kept(order.outTradeNo), { charges: 0, kept: 0 });
  });

  it('7. a lapse at the gateway voids the order through its notification; a capture decided too late takes nothing', async () => {
    const before = await stock();
    const { order, gatewayTradeNo } = await authorizedOrder();
    assert.equal((await merchant('merchant.capture', { orderId: order.orderId })).status, 202);
    const lapse = await fetch(`${stack.sandboxUrl}/sandbox/stripe/lapse-authorization`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ paymentIntent: gatewayTradeNo }),
    });
    assert.equal(lapse.status, 200, await lapse.text());
    await eventually(async () => ((await orderRow(order.orderId)).status === 'voided' ? true : undefined), 10_000, 'the order voided');
    assert.equal(await stock(), before);
    await processDueAuthorizationActions(stack.services, { backoffMs: 0 });
    const [action] = await stack.sql<{ status: string }[]>`select status from authorization_actions where order_id = ${order.orderId}`;
    assert.equal(action!.status, 'failed', 'the capture found nothing left to take');
    assert.deepEqual(await kept(order.outTradeNo), { charges: 0, kept: 0 });
  });

  it('8. a lapse whose notification never lands is found by the reconciler', async () => {
    const { order, gatewayTradeNo } = await authorizedOrder();
    // Every Stripe notification fails inside its transaction: Stripe is not acknowledged and the order stays.
    stack.faults!.arm({ point: 'after_claim', action: { kind: 'throw' }, procedure: 'webhook.stripe', times: 1000 });
    const lapse = await fetch(`${stack.sandboxUrl}/sandbox/stripe/lapse-authorization`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ paymentIntent: gatewayTradeNo }),
    });
    assert.equal(lapse.status, 200);
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal((await orderRow(order.orderId)).status, 'authorized');
    const pass = await reconcilePayments(stack.services, { minAgeMs: 0 });
    assert.equal((await orderRow(order.orderId)).status, 'voided', JSON.stringify(pass));
  });

  it('9. a second authorisation of an authorised order is released, never kept', async () => {
    const { order } = await authorizedOrder();
    // Another PaymentIntent for the same order, paid elsewhere (a second tab, a script): it only holds.
    const intent = await stack.stripe.client.paymentIntents.create({
      amount: order.amountMinor,
      currency: order.currency.toLowerCase(),
      capture_method: 'manual',
      confirm: true,
      payment_method: 'pm_card_visa',
      allowed_payment_method_types: ['card'],
      metadata: { out_trade_no: order.outTradeNo, attempt: '9' },
    } as never);
    assert.equal(intent.status, 'requires_capture');
    await eventually(
      async () => {
        await processDueAuthorizationActions(stack.services, { backoffMs: 0 });
        return (await stack.stripe.client.paymentIntents.retrieve(intent.id)).status === 'canceled' ? true : undefined;
      },
      15_000,
      'the excess authorisation released',
    );
    assert.equal((await orderRow(order.orderId)).status, 'authorized', 'the order keeps its own authorisation');
  });

  it('10. the merchant API: no token, a wrong one, an order not authorised, more than held — each refused, nothing decided', async () => {
    const { order } = await authorizedOrder();
    const stranger = await stack.customer().send('POST', 'merchant.capture', { input: { orderId: order.orderId }, key: randomUUID() });
    assert.equal(stranger.status, 401);
    assert.equal((await merchant('merchant.capture', { orderId: order.orderId }, randomUUID(), `${TOKEN}x`)).status, 401);
    const tooMuch = await merchant('merchant.capture', { orderId: order.orderId, amountMinor: order.amountMinor + 1 });
    assert.equal(tooMuch.status, 422, tooMuch.text);
    assert.equal(tooMuch.json.error.data.reason, 'CAPTURE_AMOUNT_INVALID');
    const unpaid = await stack.customer().createOrder();
    const early = await merchant('merchant.capture', { orderId: unpaid.orderId });
    assert.equal(early.status, 409);
    assert.equal(early.json.error.data.reason, 'ORDER_NOT_AUTHORIZED');
    const [{ n } = { n: -1 }] = await stack.sql<{ n: number }[]>`
      select count(*)::int as n from authorization_actions where order_id in (${order.orderId}, ${unpaid.orderId})`;
    assert.equal(n, 0);
  });
  it('11. a hold made one day and captured the next is booked on the capture’s day, as the statement books it (对账)', async () => {
    const { order } = await authorizedOrder();
    // The hold as if made yesterday: the money is taken today, and Stripe's balance shows it today.
    await stack.sql`update payments set created_at = created_at - interval '1 day' where order_id = ${order.orderId}`;
    assert.equal((await merchant('merchant.capture', { orderId: order.orderId })).status, 202);
    assert.equal((await settleDecisions(order.orderId)).status, 'paid');
    const today = new Date().toISOString().slice(0, 10); // Stripe's statement day is UTC's
    const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
    const held = await reconcileDay(stack.services, 'stripe', yesterday, 'test');
    assert.ok(!held.mismatches.some((m) => m.outTradeNo === order.outTradeNo), `the hold’s day: nothing taken (${JSON.stringify(held)})`);
    const taken = await reconcileDay(stack.services, 'stripe', today, 'test');
    assert.ok(!taken.mismatches.some((m) => m.outTradeNo === order.outTradeNo), JSON.stringify(taken.mismatches));
    assert.ok(taken.matched >= 1);
  });
});
