/**
 * The emails a shopper gets, end to end on real PostgreSQL: the time in each email is the time the
 * database recorded (the order's paid_at, the refund's settled_at), told in Beijing time, and the
 * gateway and amount read as the shopper saw them at checkout.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { formatBeijingLong } from '@/server/jobs/beijing-time';
import { markRefundSucceeded } from '@/server/checkout/refunds';
import { settleSucceededCharge } from '@/server/checkout/settle';
import { relayOutbox } from '@/server/jobs/outbox-relay';
import { startTestStack, type TestStack } from '@/test/support/stack';

let stack: TestStack;
before(async () => {
  stack = await startTestStack();
});
after(async () => {
  await stack?.close();
});

async function mailFor(orderId: string, topic: string) {
  await relayOutbox(stack.db);
  return stack.sql<{ subject: string; body: string }[]>`
    select m.subject, m.body from mail_sink m join outbox o on o.id = m.outbox_id
     where o.payload->>'orderId' = ${orderId} and o.topic = ${topic}`;
}

// postgres.js hands timestamps to Drizzle as text, so the raw queries below read them as epoch ms.
describe('emails to the shopper', () => {
  it('1. the confirmation names the gateway, the price and the Beijing time the order was paid', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder([{ sku: 'MUG-CELADON', quantity: 2 }]);
    assert.equal((await customer.pay(order.orderId, { gateway: 'wechatpay', buyer: 'ok' })).status, 201);
    const [row] = await stack.sql<{ ms: number }[]>`
      select extract(epoch from paid_at)::float8 * 1000 as ms from orders where id = ${order.orderId}`;

    const mails = await mailFor(order.orderId, 'email.order_paid');
    assert.equal(mails.length, 1);
    const yuan = (order.amountMinor / 100).toFixed(2);
    assert.equal(
      mails[0]!.body.split('\n\n')[0],
      [
        `您的订单 ${order.outTradeNo} 已支付成功，感谢惠顾！`,
        `支付金额：¥${yuan}`,
        '支付方式：微信支付',
        `支付时间：${formatBeijingLong(new Date(row!.ms))}`,
      ].join('\n'),
    );
  });

  it('2. a refund email tells when the refund settled, and a row queued without a time still renders', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    assert.equal((await customer.pay(order.orderId, { gateway: 'alipay', buyer: 'ok' })).status, 201);
    // A second charge on the paid order (a stale tab paid with a card): money that must go back.
    const outcome = await stack.db.transaction((tx) =>
      settleSucceededCharge(tx, {
        gateway: 'stripe',
        outTradeNo: order.outTradeNo,
        gatewayTradeNo: `pi_email_test_${order.orderId.slice(0, 8)}`,
        amountMinor: order.amountMinor,
        currency: order.currency,
        source: 'notification',
      }),
    );
    assert.equal(outcome.kind, 'refunding');
    const refundId = outcome.kind === 'refunding' ? outcome.refundId : '';
    assert.equal(await stack.db.transaction((tx) => markRefundSucceeded(tx, refundId, 're_email_test')), true);
    const [refund] = await stack.sql<{ ms: number }[]>`
      select extract(epoch from settled_at)::float8 * 1000 as ms from refunds where refund_id = ${refundId}`;

    const mails = await mailFor(order.orderId, 'email.refund');
    assert.equal(mails.length, 1);
    assert.equal(
      mails[0]!.body.split('\n\n')[0],
      [
        '该订单已支付，这笔重复付款已原路退回。',
        `退款金额：¥${(order.amountMinor / 100).toFixed(2)}`,
        '退回至：银行卡 (Stripe)',
        `退款时间：${formatBeijingLong(new Date(refund!.ms))}`,
        `退款单号：${refundId}`,
      ].join('\n'),
    );

    // An email queued by an older version, whose payload has no time: delivered all the same.
    await stack.sql`
      insert into outbox (topic, dedupe_key, payload)
      values ('email.order_paid', ${`order-paid-email:legacy:${order.orderId}`},
              ${JSON.stringify({ orderId: order.orderId, customerId: null, outTradeNo: order.outTradeNo, amountMinor: 16800, currency: 'CNY', gateway: '2c2p' })}::jsonb)`;
    const confirmations = await mailFor(order.orderId, 'email.order_paid');
    assert.ok(
      confirmations.some(
        (m) => m.body.split('\n\n')[0] === `您的订单 ${order.outTradeNo} 已支付成功，感谢惠顾！\n支付金额：¥168.00\n支付方式：2C2P`,
      ),
    );
  });
});
