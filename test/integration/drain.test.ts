/**
 * An instance leaving on SIGTERM (server/http/drain.ts), in process: while it drains, the health
 * check and every new API request or notification answer 503 + Retry-After and claim nothing; the
 * payment already in flight finishes and is charged once; the drain then reports every request done.
 * A request that outlasts the grace is reported cut off. Draining is for good in a process, so the
 * cases run in order. The browser drill (e2e/drills/infrastructure.spec.ts) sends a real SIGTERM.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/integration/drain.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { checkHealth } from '@/server/app/health';
import { webhookRoute } from '@/server/app/webhook-route';
import { countHttpResponses, drain, inFlight, requestsInFlight } from '@/server/http/drain';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

let stack: TestStack;
before(async () => {
  countHttpResponses(); // as instrumentation.ts does with SIGTERM handling: before any server answers
  stack = await startTestStack({ faults: true });
});
after(async () => {
  await stack?.close();
});

async function orderCount(): Promise<number> {
  const [row] = await stack.sql<{ n: number }[]>`select count(*)::int as n from orders`;
  return row!.n;
}

describe('draining on SIGTERM', { concurrency: false }, () => {
  it('finishes the payment in flight while new requests, notifications and the health check get 503 + Retry-After', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    // The payment is at the gateway (held there a moment) when the instance is told to leave.
    stack.faults!.arm({ point: 'after_gateway_call', action: { kind: 'delay', ms: 1500 }, gateway: 'alipay' });
    const paying = customer.pay(order.orderId, { gateway: 'alipay' });
    await eventually(async () => (requestsInFlight() > 0 ? true : undefined), 5000, 'the payment in flight');

    const drained = drain({ graceMs: 10_000, close: [], log: () => {} });

    const health = await checkHealth(() => stack.db);
    assert.equal(health.status, 503);
    assert.deepEqual(await health.json(), { status: 'draining' });

    const before = await orderCount();
    const refused = await stack
      .customer()
      .createOrder()
      .catch((error: Error) => error);
    assert.ok(refused instanceof Error, 'a new order is refused');
    const raw = await fetch(`${stack.appUrl}/api/trpc/checkout.products`);
    assert.equal(raw.status, 503);
    assert.equal(raw.headers.get('retry-after'), '1');
    assert.equal(((await raw.json()) as { error: { data: { reason: string } } }).error.data.reason, 'SHUTTING_DOWN');
    assert.equal(await orderCount(), before, 'nothing was created');

    const notification = await webhookRoute(
      'alipay',
      () => stack.services,
    )(new Request('http://app.test/api/webhooks/alipay', { method: 'POST', body: 'trade_status=TRADE_SUCCESS' }));
    assert.equal(notification.status, 503, 'the gateway delivers it again later');
    assert.equal(notification.headers.get('retry-after'), '1');

    const report = await drained;
    assert.deepEqual([report.requests, report.cutOff], ['drained', 0]);
    const [row] = await stack.sql<{ status: string }[]>`select status from orders where id = ${order.orderId}`;
    assert.equal(row?.status, 'paid', 'the drain waited for the payment in flight');
    const paid = await paying;
    assert.equal(paid.status, 201, paid.text);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });

  it('reports a request that outlasts the grace as cut off, and closes what it was given anyway', async () => {
    const closed: string[] = [];
    void inFlight(() => new Promise(() => {})); // a request that never finishes
    const report = await drain({
      graceMs: 200,
      close: [{ name: 'jobs', run: async () => closed.push('jobs') }],
      log: () => {},
    });
    assert.equal(report.requests, 'grace_elapsed');
    assert.equal(report.cutOff, 1);
    assert.ok(report.ms >= 200 && report.ms < 5000, `${report.ms} ms`);
    assert.deepEqual(closed, ['jobs']);
  });
});
