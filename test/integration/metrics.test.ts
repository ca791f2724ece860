/**
 * The Prometheus metrics count what really happened: each guard outcome, gateway calls and
 * notification duplicates, and the guard's claim latency lands in its histogram.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

let stack: TestStack;
before(async () => {
  stack = await startTestStack({ metrics: true, faults: true });
});
after(async () => {
  await stack?.close();
});

async function value(name: string, labels: Record<string, string>): Promise<number> {
  const metric = await stack.services.metrics!.registry.getSingleMetric(name)!.get();
  const sample = metric.values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l));
  return sample?.value ?? 0;
}

describe('metrics', () => {
  it('counts each guard outcome, gateway call and duplicate notification', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const before = {
      claimed: await value('payonce_idempotency_guard_total', { outcome: 'claimed' }),
      replayed: await value('payonce_idempotency_guard_total', { outcome: 'replayed' }),
      mismatch: await value('payonce_idempotency_guard_total', { outcome: 'mismatch' }),
      released: await value('payonce_idempotency_guard_total', { outcome: 'released' }),
      charges: await value('payonce_gateway_calls_total', { gateway: 'alipay', operation: 'charge', outcome: 'succeeded' }),
    };
    const key = randomUUID();
    stack.faults!.arm({ point: 'after_claim', action: { kind: 'throw' } });
    assert.equal((await customer.pay(order.orderId, { key })).status, 503); // claimed, then released
    assert.equal((await customer.pay(order.orderId, { key })).status, 201); // claimed again, completed
    assert.equal((await customer.pay(order.orderId, { key })).status, 201); // replayed
    assert.equal((await customer.pay(order.orderId, { key, buyer: 'insufficient_funds' })).status, 422); // mismatch

    // Two claims by checkout.pay, plus the gateway's own notification, which may have arrived already.
    const claimed = await value('payonce_idempotency_guard_total', { outcome: 'claimed' });
    assert.ok(claimed === before.claimed + 2 || claimed === before.claimed + 3, `claimed ${claimed - before.claimed}`);
    assert.equal(await value('payonce_idempotency_guard_total', { outcome: 'released' }), before.released + 1);
    assert.equal(await value('payonce_idempotency_guard_total', { outcome: 'replayed' }), before.replayed + 1);
    assert.equal(await value('payonce_idempotency_guard_total', { outcome: 'mismatch' }), before.mismatch + 1);
    assert.equal(
      await value('payonce_gateway_calls_total', { gateway: 'alipay', operation: 'charge', outcome: 'succeeded' }),
      before.charges + 1,
    );

    // The gateway's own notification is processed first, so that every copy below is a replay (a
    // copy racing the first one would be answered in_flight instead).
    await eventually(
      async () => ((await stack.ledger(order.outTradeNo)).notifications.some((n) => n.acknowledged) ? true : undefined),
      10_000,
      'the first notification to be acknowledged',
    );
    const duplicatesBefore = await value('payonce_notifications_total', { gateway: 'alipay', result: 'duplicate' });
    const storm = await fetch(`${stack.sandboxUrl}/sandbox/alipay/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo: order.outTradeNo, copies: 3 }),
    });
    assert.equal(storm.status, 200);
    assert.ok((await value('payonce_notifications_total', { gateway: 'alipay', result: 'duplicate' })) >= duplicatesBefore + 2);

    const text = await stack.services.metrics!.registry.metrics();
    assert.match(text, /payonce_idempotency_claim_seconds_bucket\{le="0.001",outcome="claimed"\} \d+/);
  });
});
