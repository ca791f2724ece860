/**
 * The fault points of the pay flow, fired in-process: what each failure leaves behind and how the
 * retry with the same key recovers — one charge in the ledger every time.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { faultsEnabled } from '@/server/demo/faults';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

let stack: TestStack;
before(async () => {
  // A short gateway timeout, so that a gateway that hangs after charging is seen to time out quickly.
  stack = await startTestStack({ faults: true, gatewayTimeoutMs: 1500 });
});
after(async () => {
  await stack?.close();
});

async function keyRow(key: string) {
  const [row] = await stack.sql<{ recovery_point: string; completed_at: Date | null; lease_token: string | null }[]>`
    select recovery_point, completed_at, lease_token from idempotency_keys where key = ${key}`;
  return row;
}

describe('fault points of checkout.pay', () => {
  it('is off unless CHECKOUT_FAULTS=1', () => {
    assert.equal(faultsEnabled({}), false);
    assert.equal(faultsEnabled({ CHECKOUT_FAULTS: '0' }), false);
    assert.equal(faultsEnabled({ CHECKOUT_FAULTS: '1' }), true);
  });

  for (const point of ['before_claim', 'after_claim'] as const) {
    it(`${point}: a thrown error leaves nothing behind and the retry pays once`, async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      stack.faults!.arm({ point, action: { kind: 'throw' } });
      const failed = await customer.pay(order.orderId, { key });
      assert.equal(failed.status, 503);
      assert.equal(failed.json.error.data.reason, 'INJECTED_FAULT');
      assert.equal(await keyRow(key), undefined, 'no key is left behind');
      assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 0);
      const retry = await customer.pay(order.orderId, { key });
      assert.equal(retry.status, 201, retry.text);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });
  }

  it('after_gateway_call: charged but not committed; the key keeps its recovery point and the retry settles the same charge', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    stack.faults!.arm({ point: 'after_gateway_call', action: { kind: 'throw' } });
    const failed = await customer.pay(order.orderId, { key });
    assert.equal(failed.status, 503);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'the money moved');
    const row = await keyRow(key);
    assert.equal(row?.recovery_point, 'attempt_started');
    assert.equal(row?.lease_token, null, 'released at once, no lease to wait out');
    const retry = await customer.pay(order.orderId, { key });
    assert.equal(retry.status, 201, retry.text);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'still one charge');
  });

  it('after_commit: the answer is lost after the commit; the retry gets it replayed', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    stack.faults!.arm({ point: 'after_commit', action: { kind: 'throw' } });
    const lost = await customer.pay(order.orderId, { key });
    assert.equal(lost.status, 503);
    assert.ok((await keyRow(key))?.completed_at);
    const retry = await customer.pay(order.orderId, { key });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers.get('idempotency-replayed'), 'true');
    assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 1);
  });

  it('delay after the claim: a retry meets the live lease, gets 409, one charge', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    stack.faults!.arm({ point: 'after_claim', action: { kind: 'delay', ms: 4000 } });
    const slow = customer.pay(order.orderId, { key });
    // Until the fault has fired: the slow request holds the key and is paused.
    await eventually(async () => (stack.faults!.list().length === 0 ? true : undefined), 5000, 'the slow request to claim its key');
    const concurrent = await customer.pay(order.orderId, { key });
    assert.equal(concurrent.status, 409, concurrent.text);
    assert.equal((await slow).status, 201);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });

  it('delay before the gateway call: a slow request holds its committed lease, a retry gets 409, one charge', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    stack.faults!.arm({ point: 'before_gateway_call', action: { kind: 'delay', ms: 3000 } });
    const slow = customer.pay(order.orderId, { key });
    await eventually(async () => (stack.faults!.list().length === 0 ? true : undefined), 5000, 'the slow request to start its attempt');
    const row = await keyRow(key);
    assert.equal(row?.recovery_point, 'attempt_started', 'the first phase has committed');
    assert.ok(row?.lease_token, 'and the slow request holds the lease');
    const concurrent = await customer.pay(order.orderId, { key });
    assert.equal(concurrent.status, 409, concurrent.text);
    assert.equal((await slow).status, 201);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });

  it('fires only where it is aimed: another procedure or gateway is untouched', async () => {
    const customer = stack.customer();
    stack.faults!.arm({ point: 'after_claim', action: { kind: 'throw' }, gateway: 'wechatpay' });
    const order = await customer.createOrder();
    assert.equal((await customer.pay(order.orderId)).status, 201);
    assert.equal(stack.faults!.list().length, 1, 'still armed, never fired');
    stack.faults!.clear();
  });
});

describe('sandbox faults: a flaky gateway', () => {
  it('a system error before charging (Alipay 20000): 503 PAYMENT_OUTCOME_UNKNOWN, nothing charged, the retry pays once', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    await stack.sandboxFault({ gateway: 'alipay', action: 'fail_before_charge' });
    const failed = await customer.pay(order.orderId, { key });
    assert.equal(failed.status, 503, failed.text);
    // 20000 cannot say whether trade.pay ran: the retry asks again with the same out_trade_no.
    assert.equal(failed.json.error.data.reason, 'PAYMENT_OUTCOME_UNKNOWN');
    assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 0);
    const retry = await customer.pay(order.orderId, { key });
    assert.equal(retry.status, 201, retry.text);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });

  it('timeout after charging: the outcome is unknown, the retry asks the gateway again, one charge', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    await stack.sandboxFault({ gateway: 'alipay', action: 'timeout_after_charge', delayMs: 3000 });
    const failed = await customer.pay(order.orderId, { key });
    assert.equal(failed.status, 503, failed.text);
    assert.equal(failed.json.error.data.reason, 'PAYMENT_OUTCOME_UNKNOWN');
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'the money moved');
    const retry = await customer.pay(order.orderId, { key });
    assert.equal(retry.status, 201, retry.text);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });

  it('Stripe rate-limited for a moment: the adapter backs off and the shopper is charged once', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    // The order's look-up and the create's first try are refused; the create's next try gets through.
    await stack.sandboxFault({ gateway: 'stripe', action: 'rate_limit', times: 2 });
    const paid = await customer.pay(order.orderId, { gateway: 'stripe' });
    assert.equal(paid.status, 201, paid.text);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });

  it('Stripe still rate-limited: the retryable 503 with Retry-After, nothing charged, the retry pays once', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    await stack.sandboxFault({ gateway: 'stripe', action: 'rate_limit', times: 50 });
    try {
      const limited = await customer.pay(order.orderId, { key, gateway: 'stripe' });
      // Never a decline (402) or a 500: the page retries this one by itself.
      assert.equal(limited.status, 503, limited.text);
      assert.equal(limited.json.error.data.reason, 'GATEWAY_UNAVAILABLE');
      assert.ok(Number(limited.headers.get('retry-after')) > 0, 'Retry-After');
      assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 0);
    } finally {
      await fetch(`${stack.sandboxUrl}/sandbox/faults`, { method: 'DELETE' });
    }
    const retry = await customer.pay(order.orderId, { key, gateway: 'stripe' });
    assert.equal(retry.status, 201, retry.text);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });

  it("connection dropped after charging: still one charge, settled by the gateway's own dedupe", async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    await stack.sandboxFault({ gateway: 'alipay', action: 'drop_after_charge' });
    const first = await customer.pay(order.orderId, { key });
    if (first.status !== 201) {
      assert.equal(first.status, 503, first.text);
      const retry = await customer.pay(order.orderId, { key });
      assert.equal(retry.status, 201, retry.text);
    }
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });
});
