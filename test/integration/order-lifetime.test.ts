/**
 * The customer's money across an order's whole life, judged by the sandbox's ledger: every trade an
 * order abandons is closed before it opens another or expires, and money that lands where it must not
 * stay goes back exactly once. Real PostgreSQL, the sandbox over HTTP, the app's own handlers.
 *
 * Per order, once settled: succeeded charges − succeeded refunds = the amount if paid, 0 otherwise.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, it } from 'node:test';
import { processDueRefunds } from '@/server/jobs/refund-worker';
import { relayOutbox } from '@/server/jobs/outbox-relay';
import { expireUnpaidOrders, reconcilePayments } from '@/server/jobs/reconciler';
import type { TestBuyer } from '@/server/payments/gateway';
import { GATEWAY_IDS, type GatewayId } from '@/server/payments/gateway-ids';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

const GATEWAYS: readonly GatewayId[] = GATEWAY_IDS;
const PAIRS = GATEWAYS.flatMap((a) => GATEWAYS.filter((b) => b !== a).map((b) => [a, b] as const));

interface LedgerRefund {
  gateway: string;
  outTradeNo: string;
  amountMinor: number;
  status: string;
  refundId: string;
  gatewayTradeNo: string;
}

let stack: TestStack;
before(async () => {
  stack = await startTestStack({ faults: true, idempotency: { leaseMs: 2000 } });
});
after(async () => {
  await stack?.close();
});
afterEach(async () => {
  await fetch(`${stack.sandboxUrl}/sandbox/faults`, { method: 'DELETE' });
  stack.faults?.clear();
});

/** Money kept at the gateways for one order: succeeded charges − succeeded refunds (the ledger). */
async function moneyKept(outTradeNo: string): Promise<{ kept: number; charges: number; refunds: LedgerRefund[] }> {
  const ledger = (await stack.ledger(outTradeNo)) as Awaited<ReturnType<TestStack['ledger']>> & { refunds: LedgerRefund[] };
  const charged = ledger.charges.filter((c) => c.status === 'succeeded');
  const refunded = ledger.refunds.filter((r) => r.status === 'succeeded');
  return {
    kept: charged.reduce((sum, c) => sum + c.amountMinor, 0) - refunded.reduce((sum, r) => sum + r.amountMinor, 0),
    charges: charged.length,
    refunds: ledger.refunds,
  };
}

async function orderRow(orderId: string) {
  const [row] = await stack.sql<{ status: string; amount_minor: number }[]>`select status, amount_minor from orders where id = ${orderId}`;
  return row!;
}

async function trades(orderId: string): Promise<Record<string, string>> {
  const rows = await stack.sql<{ gateway: string; status: string }[]>`select gateway, status from order_trades where order_id = ${orderId}`;
  return Object.fromEntries(rows.map((r) => [r.gateway, r.status]));
}

/** The buyer completes that gateway's open trade now (QR scanned, card confirmed, page submitted). */
async function buyerPays(gateway: GatewayId, outTradeNo: string, buyer: TestBuyer = 'ok') {
  const response = await fetch(`${stack.sandboxUrl}/sandbox/${gateway}/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ outTradeNo, buyer }),
  });
  return { status: response.status, body: (await response.json()) as { code?: string; status?: string } };
}

async function sandboxFault(spec: Record<string, unknown>) {
  const response = await fetch(`${stack.sandboxUrl}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(spec),
  });
  assert.equal(response.status, 201, await response.text());
}

/**
 * How many tries one fault must spoil to fail one call: stripe-node retries a 5xx, a timeout or a
 * dropped connection itself (maxNetworkRetries 2, same key); alipay-sdk's HTTP client re-sends a
 * POST once after a dropped connection; the other adapters do not retry.
 */
function triesPerCall(gateway: GatewayId, action: string): number {
  if (gateway === 'stripe') return 3;
  if (gateway === 'alipay' && action !== 'fail_before_charge') return 2;
  return 1;
}

/** Runs the refund worker until the order's refunds are final (backoff 0: every run is due). */
async function settleRefunds(orderId: string) {
  return eventually(
    async () => {
      await processDueRefunds(stack.services, { backoffMs: 0 });
      const rows = await stack.sql<{ status: string }[]>`select status from refunds where order_id = ${orderId}`;
      return rows.length > 0 && rows.every((r) => r.status === 'succeeded' || r.status === 'failed') ? rows : undefined;
    },
    15_000,
    'the refunds to settle',
  );
}

/** An order with one declined attempt on `gateway`: its trade stays payable at the gateway. */
async function declinedOn(gateway: GatewayId) {
  const customer = stack.customer();
  const order = await customer.createOrder();
  const declined = await customer.pay(order.orderId, { gateway, buyer: 'insufficient_funds' });
  assert.equal(declined.status, 402, declined.text);
  assert.equal((await trades(order.orderId))[gateway], 'open');
  return { customer, order };
}

describe('one open trade per order: a decline, a switch of gateway, then the buyer completes the first trade late', () => {
  for (const [first, second] of PAIRS) {
    it(`${first} declined → ${second} paid → the ${first} trade can no longer be paid`, async () => {
      const { customer, order } = await declinedOn(first);
      const paid = await customer.pay(order.orderId, { gateway: second, buyer: 'ok' });
      assert.equal(paid.status, 201, paid.text);
      assert.equal(paid.json.result.data.payment.gateway, second);

      const late = await buyerPays(first, order.outTradeNo);
      const money = await moneyKept(order.outTradeNo);
      assert.equal(money.charges, 1, `succeeded charges at the gateways (the late ${first} payment answered ${late.status})`);
      assert.equal(money.kept, order.amountMinor);
      assert.equal(late.status, 409, JSON.stringify(late.body));
      assert.equal(late.body.code, 'TRADE_NOT_PAYABLE');
      assert.deepEqual(await trades(order.orderId), { [first]: 'closed', [second]: 'paid' });
    });
  }
});

describe('the same gateway again, a close in doubt, a trade found paid when closing', () => {
  for (const gateway of GATEWAYS) {
    const other = GATEWAYS[(GATEWAYS.indexOf(gateway) + 1) % GATEWAYS.length]!;

    it(`${gateway}: declined, then paid on ${gateway} again — one charge`, async () => {
      const { customer, order } = await declinedOn(gateway);
      const paid = await customer.pay(order.orderId, { gateway, buyer: 'ok' });
      assert.equal(paid.status, 201, paid.text);
      const money = await moneyKept(order.outTradeNo);
      assert.deepEqual([money.charges, money.kept], [1, order.amountMinor]);
    });

    it(`${gateway}: its close fails → ${other} is not charged (409 ORDER_PAYMENT_IN_PROGRESS); the retry closes and pays`, async () => {
      const { customer, order } = await declinedOn(gateway);
      await sandboxFault({ gateway, operation: 'close', action: 'fail_before_charge', times: triesPerCall(gateway, 'fail_before_charge') });
      const key = randomUUID();
      const blocked = await customer.pay(order.orderId, { gateway: other, buyer: 'ok', key });
      assert.equal(blocked.status, 409, blocked.text);
      assert.equal(blocked.json.error.data.reason, 'ORDER_PAYMENT_IN_PROGRESS');
      assert.equal((await moneyKept(order.outTradeNo)).charges, 0);
      assert.equal((await trades(order.orderId))[gateway], 'open');

      const retried = await customer.pay(order.orderId, { gateway: other, buyer: 'ok', key });
      assert.equal(retried.status, 201, retried.text);
      assert.equal((await buyerPays(gateway, order.outTradeNo)).status, 409);
      const money = await moneyKept(order.outTradeNo);
      assert.deepEqual([money.charges, money.kept], [1, order.amountMinor]);
    });

    it(`${gateway}: the buyer paid the abandoned trade (notification lost) → paying with ${other} settles that payment and charges nothing`, async () => {
      const { customer, order } = await declinedOn(gateway);
      await sandboxFault({ gateway, action: 'lose_notifications', times: 50 });
      const late = await buyerPays(gateway, order.outTradeNo);
      assert.equal(late.status, 200, JSON.stringify(late.body));
      assert.equal((await orderRow(order.orderId)).status, 'awaiting_payment');

      const answer = await customer.pay(order.orderId, { gateway: other, buyer: 'ok' });
      assert.equal(answer.status, 201, answer.text);
      assert.equal(answer.json.result.data.payment.gateway, gateway, 'the order is paid by the trade the buyer completed');
      const [payment] = await stack.sql<{ source: string }[]>`
        select source from payments where order_id = ${order.orderId} and status = 'succeeded'`;
      assert.equal(payment!.source, 'close');
      const money = await moneyKept(order.outTradeNo);
      assert.deepEqual([money.charges, money.kept], [1, order.amountMinor]);
    });
  }
});

describe('expiry: the trade is closed before the stock goes back; a payment that lands anyway is refunded once', () => {
  for (const gateway of GATEWAYS) {
    it(`${gateway}: declined, expired → the trade is closed, the late buyer is refused, stock back once`, async () => {
      const { order } = await declinedOn(gateway);
      const [before] = await stack.sql<{ stock: number }[]>`select stock from products where sku = 'MUG-CELADON'`;
      await stack.sql`update orders set expires_at = now() - interval '1 second' where id = ${order.orderId}`;
      await Promise.all([expireUnpaidOrders(stack.services), expireUnpaidOrders(stack.services)]);
      assert.equal((await orderRow(order.orderId)).status, 'expired');
      assert.equal((await trades(order.orderId))[gateway], 'closed');
      const [afterExpiry] = await stack.sql<{ stock: number }[]>`select stock from products where sku = 'MUG-CELADON'`;
      assert.equal(afterExpiry!.stock, before!.stock + 1);
      assert.equal((await buyerPays(gateway, order.outTradeNo)).status, 409);
      assert.equal((await moneyKept(order.outTradeNo)).kept, 0);
    });

    it(`${gateway}: its close fails past the grace → expired anyway; the late payment is refunded exactly once, with a 退款通知`, async () => {
      const { order } = await declinedOn(gateway);
      await stack.sql`update orders set expires_at = now() - interval '1 second' where id = ${order.orderId}`;
      await sandboxFault({ gateway, operation: 'close', action: 'fail_before_charge', times: triesPerCall(gateway, 'fail_before_charge') });
      assert.equal(await expireUnpaidOrders(stack.services, 100, 60_000), 0, 'within the grace the order waits');
      await sandboxFault({ gateway, operation: 'close', action: 'fail_before_charge', times: triesPerCall(gateway, 'fail_before_charge') });
      await expireUnpaidOrders(stack.services, 100, 0);
      assert.equal((await orderRow(order.orderId)).status, 'expired');

      const late = await buyerPays(gateway, order.outTradeNo);
      assert.equal(late.status, 200, JSON.stringify(late.body));
      await eventually(
        async () => {
          const rows = await stack.sql`select 1 from refunds where order_id = ${order.orderId}`;
          return rows.length === 1 ? true : undefined;
        },
        10_000,
        'the late payment to be recorded for a refund',
      );
      assert.equal((await orderRow(order.orderId)).status, 'expired', 'a late payment never revives an expired order');
      await settleRefunds(order.orderId);
      await processDueRefunds(stack.services, { backoffMs: 0 }); // once more: nothing changes
      const money = await moneyKept(order.outTradeNo);
      assert.equal(money.kept, 0);
      assert.equal(money.refunds.filter((r) => r.status === 'succeeded').length, 1);
      await relayOutbox(stack.db);
      const mails = await stack.sql<{ subject: string }[]>`
        select m.subject from mail_sink m join outbox o on o.id = m.outbox_id
         where o.topic = 'email.refund' and o.payload->>'orderId' = ${order.orderId}`;
      assert.deepEqual(
        mails.map((m) => m.subject),
        [`退款通知：订单 ${order.outTradeNo} / Refund: order ${order.outTradeNo}`],
      );
    });
  }
});

describe('refunds exactly once, whatever fails', () => {
  /** A paid order that then receives a second success through `second`, outside the checkout. */
  async function paidTwice(first: GatewayId, second: GatewayId) {
    const customer = stack.customer();
    const order = await customer.createOrder();
    assert.equal((await customer.pay(order.orderId, { gateway: first, buyer: 'ok' })).status, 201);
    // A stale client or a mistaken retry charges the order again elsewhere: the app must give it back.
    const outcome = await stack.services.gateways[second]!.charge({
      outTradeNo: order.outTradeNo,
      amountMinor: order.amountMinor,
      currency: order.currency,
      subject: 'second charge',
      attempt: 9,
      buyer: 'ok',
      notifyUrl: new URL(`/api/webhooks/${second}`, stack.appUrl).toString(),
    });
    assert.equal(outcome.kind, 'succeeded');
    await eventually(
      async () => ((await stack.sql`select 1 from refunds where order_id = ${order.orderId}`).length === 1 ? true : undefined),
      10_000,
      'the second charge to be recorded for a refund',
    );
    return order;
  }

  for (const [first, second] of PAIRS.filter(([a]) => a === 'alipay' || a === 'stripe')) {
    it(`paid by ${first}, charged again by ${second} → the second charge is refunded once; the order stays paid`, async () => {
      const order = await paidTwice(first, second);
      await settleRefunds(order.orderId);
      const money = await moneyKept(order.outTradeNo);
      assert.equal(money.kept, order.amountMinor);
      assert.equal(money.refunds.length, 1);
      assert.equal(money.refunds[0]!.gateway, second);
      assert.equal((await orderRow(order.orderId)).status, 'paid');
      const view = await stack.sql<
        { role: string }[]
      >`select role from payments where order_id = ${order.orderId} and status = 'succeeded' order by created_at`;
      assert.deepEqual(
        view.map((p) => p.role),
        ['payment', 'excess'],
      );
    });
  }

  for (const gateway of GATEWAYS) {
    const first = gateway === 'alipay' ? 'wechatpay' : 'alipay';
    it(`${gateway}: the refund's answer is lost → the next run asks by refund id → one refund`, async () => {
      await sandboxFault({ gateway, operation: 'refund', action: 'drop_after_charge', times: triesPerCall(gateway, 'drop_after_charge') });
      const order = await paidTwice(first, gateway);
      // Refund notifications (WeChat Pay, Stripe) would settle it too; lost, only the query can.
      await sandboxFault({ gateway, action: 'lose_notifications', times: 50 });
      const firstRun = await processDueRefunds(stack.services, { backoffMs: 0 });
      assert.ok(firstRun.retried >= 1, JSON.stringify(firstRun));
      const [row] = await stack.sql<{ status: string }[]>`select status from refunds where order_id = ${order.orderId}`;
      assert.equal(row!.status, 'sent');
      const settled = await settleRefunds(order.orderId);
      assert.deepEqual(
        settled.map((r) => r.status),
        ['succeeded'],
        'our books: the refund succeeded (not refused as exceeding)',
      );
      const money = await moneyKept(order.outTradeNo);
      assert.equal(money.refunds.length, 1, JSON.stringify(money.refunds));
      assert.equal(money.kept, order.amountMinor);
    });

    it(`${gateway}: the worker dies between the refund call and its commit → recovered by query, one refund`, async () => {
      const order = await paidTwice(first, gateway);
      await sandboxFault({ gateway, action: 'lose_notifications', times: 50 });
      stack.faults!.arm({ point: 'after_refund_call', action: { kind: 'throw' }, procedure: 'refunds.process', gateway });
      await assert.rejects(processDueRefunds(stack.services, { backoffMs: 0 }));
      assert.equal((await moneyKept(order.outTradeNo)).refunds.length, 1, 'the gateway refunded before the crash');
      // The dead worker's lease runs out; the next run finds the refund `sent` and asks first.
      await stack.sql`update refunds set lease_until = now() where order_id = ${order.orderId}`;
      const settled = await settleRefunds(order.orderId);
      assert.deepEqual(
        settled.map((r) => r.status),
        ['succeeded'],
      );
      const money = await moneyKept(order.outTradeNo);
      assert.equal(money.refunds.length, 1);
      assert.equal(money.kept, order.amountMinor);
      const [refund] = await stack.sql<{ attempts: number }[]>`select attempts from refunds where order_id = ${order.orderId}`;
      assert.ok(refund!.attempts >= 2);
    });
  }
});

describe('back to a gateway whose trade was closed', () => {
  for (const [first, second] of PAIRS.filter(([a]) => a !== 'stripe')) {
    it(`${first} declined → ${second} declined → back to ${first}: 402 TRADE_CLOSED, no call, stored; ${second} still pays`, async () => {
      const { customer, order } = await declinedOn(first);
      assert.equal((await customer.pay(order.orderId, { gateway: second, buyer: 'insufficient_funds' })).status, 402);
      const charges = async () => (await stack.ledger(order.outTradeNo)).charges.filter((c) => c.gateway === first).length;
      const before = await charges();
      const key = randomUUID();
      const back = await customer.pay(order.orderId, { gateway: first, buyer: 'ok', key });
      assert.equal(back.status, 402, back.text);
      assert.equal(back.json.error.data.reason, 'PAYMENT_DECLINED');
      assert.match(back.text, /TRADE_CLOSED/);
      assert.equal(await charges(), before, `no call reached ${first}`);
      const replay = await customer.pay(order.orderId, { gateway: first, buyer: 'ok', key });
      assert.equal(replay.headers.get('idempotency-replayed'), 'true');
      const last = await customer.pay(order.orderId, { gateway: second, buyer: 'ok' });
      assert.equal(last.status, 201, last.text);
      const money = await moneyKept(order.outTradeNo);
      assert.deepEqual([money.charges, money.kept], [1, order.amountMinor]);
    });
  }
});

describe('the reconciler', () => {
  it('closes a trade left open on an order that is over', async () => {
    const { customer, order } = await declinedOn('wechatpay');
    assert.equal((await customer.pay(order.orderId, { gateway: 'alipay', buyer: 'ok' })).status, 201);
    // An order recorded before trades were tracked, or any path that left one open.
    await stack.sql`update order_trades set status = 'open' where order_id = ${order.orderId} and gateway = 'wechatpay'`;
    const summary = await reconcilePayments(stack.services, { minAgeMs: 0 });
    assert.ok(summary.swept >= 1);
    assert.equal((await trades(order.orderId)).wechatpay, 'closed');
    assert.equal((await buyerPays('wechatpay', order.outTradeNo)).status, 409);
  });
});
