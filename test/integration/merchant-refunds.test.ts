/**
 * Merchant refunds, on all four gateways through each one's own refund API in the sandbox: the sum
 * given back never exceeds what was charged, and each refund happens once, under a double click, two
 * operators at once, a lost answer and a crash between the gateway's refund and our commit. Judged by
 * the sandbox's ledger. Real PostgreSQL, the app's own handlers, the refund worker.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, it } from 'node:test';
import { processDueRefunds } from '@/server/jobs/refund-worker';
import { relayOutbox } from '@/server/jobs/outbox-relay';
import { GATEWAY_IDS } from '@/server/payments/gateway-ids';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

const TOKEN = 'merchant-token-for-the-refund-tests-0123456789abcdef';
let stack: TestStack;
before(async () => {
  stack = await startTestStack({ faults: true, merchantApiToken: TOKEN, idempotency: { leaseMs: 2000 } });
});
after(async () => {
  await stack?.close();
});
afterEach(() => {
  stack.faults?.clear();
});

function refund(input: { orderId: string; amountMinor: number; reason?: string }, key: string = randomUUID()) {
  return stack.customer().send('POST', 'merchant.refund', {
    input: { reason: 'customer returned it', ...input },
    key,
    headers: { authorization: `Bearer ${TOKEN}`, 'x-no-session': '1' },
  });
}

async function paidOrder(gateway: string) {
  const customer = stack.customer();
  const order = await customer.createOrder([{ sku: 'MUG-CELADON', quantity: 1 }]);
  const paid = await customer.pay(order.orderId, { gateway });
  assert.equal(paid.status, 201, paid.text);
  return order;
}

/** Runs the refund worker until every refund of the order is final (backoff 0: every run is due). */
function settleRefunds(orderId: string) {
  return eventually(
    async () => {
      await processDueRefunds(stack.services, { backoffMs: 0 });
      const rows = await stack.sql<{ status: string }[]>`select status from refunds where order_id = ${orderId}`;
      return rows.every((r) => r.status === 'succeeded' || r.status === 'failed') ? rows : undefined;
    },
    15_000,
    'the refunds to settle',
  );
}

/** At the gateway: what was charged and what was given back for the order. */
async function atGateway(outTradeNo: string) {
  const ledger = await stack.ledger(outTradeNo);
  const charged = ledger.charges.filter((c) => c.status === 'succeeded').reduce((s, c) => s + c.amountMinor, 0);
  const refunds = ledger.refunds.filter((r) => r.status === 'succeeded');
  return { charged, refunded: refunds.reduce((s, r) => s + r.amountMinor, 0), refunds: refunds.length };
}

for (const gateway of GATEWAY_IDS) {
  describe(`merchant refunds: ${gateway}`, () => {
    it('1. a double click refunds once; two operators at once never give back more than was charged', async () => {
      const order = await paidOrder(gateway);
      const key = randomUUID();
      const clicks = await Promise.all([
        refund({ orderId: order.orderId, amountMinor: 1000 }, key),
        refund({ orderId: order.orderId, amountMinor: 1000 }, key),
      ]);
      assert.deepEqual(
        clicks.map((c) => c.status),
        [202, 202],
        clicks.map((c) => c.text).join('\n'),
      );
      const rest = order.amountMinor - 1000;
      const operators = await Promise.all([
        refund({ orderId: order.orderId, amountMinor: rest }),
        refund({ orderId: order.orderId, amountMinor: rest }),
      ]);
      assert.deepEqual(operators.map((o) => o.status).sort(), [202, 422], operators.map((o) => o.text).join('\n'));
      assert.equal(operators.find((o) => o.status === 422)!.json.error.data.reason, 'REFUND_EXCEEDS_CHARGE');

      await settleRefunds(order.orderId);
      assert.deepEqual(await atGateway(order.outTradeNo), { charged: order.amountMinor, refunded: order.amountMinor, refunds: 2 });
      const over = await refund({ orderId: order.orderId, amountMinor: 1 });
      assert.equal(over.status, 422, 'nothing is left to refund');
    });

    it('2. an answer lost after the commit: the retry gets the stored 202 and nothing more is refunded', async () => {
      const order = await paidOrder(gateway);
      stack.faults!.arm({ point: 'after_commit', action: { kind: 'throw' }, procedure: 'merchant.refund' });
      const key = randomUUID();
      const lost = await refund({ orderId: order.orderId, amountMinor: 2000 }, key);
      assert.equal(lost.status, 503, lost.text);
      const retried = await refund({ orderId: order.orderId, amountMinor: 2000 }, key);
      assert.equal(retried.status, 202);
      assert.equal(retried.headers.get('idempotency-replayed'), 'true');
      await settleRefunds(order.orderId);
      assert.deepEqual(await atGateway(order.outTradeNo), { charged: order.amountMinor, refunded: 2000, refunds: 1 });
    });

    it('3. a crash between the gateway’s refund and our commit: the next run finds it done, refunded once; the buyer is told once', async () => {
      const order = await paidOrder(gateway);
      assert.equal((await refund({ orderId: order.orderId, amountMinor: 3000 })).status, 202);
      stack.faults!.arm({ point: 'after_refund_call', action: { kind: 'throw' }, procedure: 'refunds.process', gateway });
      await assert.rejects(processDueRefunds(stack.services, { backoffMs: 0 }));
      await stack.sql`update refunds set lease_until = null where order_id = ${order.orderId}`;
      await settleRefunds(order.orderId);
      assert.deepEqual(await atGateway(order.outTradeNo), { charged: order.amountMinor, refunded: 3000, refunds: 1 });
      await relayOutbox(stack.db);
      const [emails] = await stack.sql<{ n: number }[]>`
        select count(*)::int as n from outbox where topic = 'email.refund' and payload->>'orderId' = ${order.orderId}`;
      assert.equal(emails!.n, 1);
    });
  });
}

describe('merchant refunds: refusals change nothing', () => {
  it('an order not paid, an amount of nothing, a stranger', async () => {
    const unpaid = await stack.customer().createOrder();
    const early = await refund({ orderId: unpaid.orderId, amountMinor: 100 });
    assert.equal(early.status, 409);
    assert.equal(early.json.error.data.reason, 'ORDER_NOT_REFUNDABLE');
    assert.equal((await refund({ orderId: unpaid.orderId, amountMinor: 0 })).status, 400);
    const stranger = await stack.customer().send('POST', 'merchant.refund', {
      input: { orderId: unpaid.orderId, amountMinor: 100, reason: 'x' },
      key: randomUUID(),
    });
    assert.equal(stranger.status, 401);
    const [{ n } = { n: -1 }] = await stack.sql<{ n: number }[]>`select count(*)::int as n from refunds where order_id = ${unpaid.orderId}`;
    assert.equal(n, 0);
  });
});
