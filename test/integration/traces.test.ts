/**
 * One payment's trace: with tracing on (here an in-memory exporter, in production OTLP), the pay
 * request and the guard's verdict, the gateway's charge, the notification that settles it, a
 * merchant's refund and the refund worker's call all land in the order's one trace, named by
 * out_trade_no and idempotency key — and no span carries a secret or card data.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace';
import { processDueRefunds } from '@/server/jobs/refund-worker';
import { registerTracing, type Tracing } from '@/server/tracing/setup';
import { orderTraceId } from '@/server/tracing/traces';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

const TOKEN = 'merchant-token-for-the-trace-tests-0123456789abcdef';
const exporter = new InMemorySpanExporter();
let tracing: Tracing;
let stack: TestStack;

before(async () => {
  tracing = registerTracing([new SimpleSpanProcessor({ exporter })], 'payonce-test');
  stack = await startTestStack({ merchantApiToken: TOKEN });
});
after(async () => {
  await stack?.close();
  await tracing?.shutdown();
});

describe('traces', () => {
  it('follows one payment across the request, the gateway, the notification and the refund worker', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder([{ sku: 'MUG-CELADON', quantity: 1 }]);
    const key = randomUUID();
    // 1. The buyer's own step (a QR code), paid at the sandbox: the notification settles the order.
    const opened = await customer.pay(order.orderId, { gateway: 'wechatpay', buyer: null, key });
    assert.equal(opened.status, 202, opened.text);
    const scanned = await fetch(`${stack.sandboxUrl}/sandbox/wechatpay/buyer-pays`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo: order.outTradeNo, buyer: 'ok' }),
    });
    assert.equal(scanned.status, 200, await scanned.text());
    await eventually(async () => {
      const [row] = await stack.sql<{ status: string }[]>`select status from orders where id = ${order.orderId}`;
      return row?.status === 'paid' ? true : undefined;
    });
    // 2. A merchant's refund, sent by the refund worker.
    const refunded = await customer.send('POST', 'merchant.refund', {
      input: { orderId: order.orderId, amountMinor: 800, reason: 'a cracked handle' },
      key: randomUUID(),
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(refunded.status, 202, refunded.text);
    await processDueRefunds(stack.services, { backoffMs: 0 });

    const traceId = orderTraceId(order.orderId);
    const spans = exporter.getFinishedSpans().filter((span) => span.spanContext().traceId === traceId);
    const names = new Set(spans.map((span) => span.name));
    for (const hop of ['checkout.pay', 'gateway.charge', 'webhook.wechatpay', 'merchant.refund', 'refunds.process', 'gateway.refund']) {
      assert.ok(names.has(hop), `the trace has ${hop}; it has ${[...names].join(', ')}`);
    }
    const pay = spans.find((span) => span.name === 'checkout.pay')!;
    assert.equal(pay.attributes['payonce.idempotency_key'], key);
    assert.equal(pay.attributes['payonce.out_trade_no'], order.outTradeNo);
    assert.equal(pay.attributes['payonce.guard.outcome'], 'claimed', 'the guard’s verdict: this request owned the key');
    const charge = spans.find((span) => span.name === 'gateway.charge')!;
    assert.equal(charge.parentSpanContext?.spanId, pay.spanContext().spanId, 'the charge is the pay request’s child');
    assert.equal(spans.find((span) => span.name === 'webhook.wechatpay')!.attributes['payonce.out_trade_no'], order.outTradeNo);

    // Nothing secret rides along: no gateway key, no session secret, no card number.
    const secrets = Object.entries(process.env)
      .filter(([name, value]) => /SECRET|PRIVATE_KEY|API_V3_KEY|TOKEN/.test(name) && value && value.length >= 8)
      .map(([, value]) => value!);
    const carried = JSON.stringify(spans.map((span) => span.attributes));
    for (const secret of [...secrets, TOKEN, 'test-session-secret']) assert.ok(!carried.includes(secret), 'no secret in any span');
    assert.doesNotMatch(carried, /\b\d{13,19}\b/, 'no card number');
  });
});
