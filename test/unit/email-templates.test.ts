import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { REFUND_EMAIL_TOPIC } from '@/server/checkout/refunds';
import { ORDER_PAID_EMAIL_TOPIC } from '@/server/checkout/settle';
import { formatBeijingLong, formatBeijingTimestamp } from '@/server/jobs/beijing-time';
import { formatAmount, gatewayName, renderEmail, type EmailPayload } from '@/server/jobs/email-templates';

const order: EmailPayload = {
  orderId: '0b7c2d1e-0000-4000-8000-000000000001',
  customerId: 'c0ffee00-0000-4000-8000-000000000002',
  outTradeNo: 'PO0B7C2D1E0000400080',
  amountMinor: 16800,
  currency: 'CNY',
  gateway: 'alipay',
};

describe('email templates', () => {
  it('names each gateway as the buyer chose it', () => {
    assert.equal(gatewayName('alipay'), '支付宝');
    assert.equal(gatewayName('wechatpay'), '微信支付');
    assert.equal(gatewayName('stripe'), '银行卡 (Stripe)');
    assert.equal(gatewayName('2c2p'), '2C2P');
    assert.equal(gatewayName('toString'), 'toString', 'an unknown id is shown as it is, never an inherited property');
  });

  it('writes amounts as prices, in integer arithmetic', () => {
    assert.equal(formatAmount(16800, 'CNY'), '¥168.00');
    assert.equal(formatAmount(6805, 'CNY'), '¥68.05');
    assert.equal(formatAmount(1, 'CNY'), '¥0.01');
    assert.equal(formatAmount(1_280_000, 'CNY'), '¥12,800.00');
    assert.equal(formatAmount(16800, 'USD'), 'USD 168.00');
  });

  it('tells the time in Beijing time, whatever the server runs in', () => {
    // 12:15:04 UTC is 20:15:04 in Beijing; 16:05 UTC on 31 December is already the next year there.
    assert.equal(formatBeijingLong(new Date('2026-12-03T12:15:04Z')), '2026年12月3日 20:15 (北京时间)');
    assert.equal(formatBeijingLong(new Date('2026-12-31T16:05:00Z')), '2027年1月1日 00:05 (北京时间)');
    assert.equal(formatBeijingTimestamp(new Date('2026-12-03T12:15:04Z')), '2026-12-03 20:15:04 北京时间');
    assert.equal(formatBeijingTimestamp(new Date('2026-02-28T16:00:00Z')), '2026-03-01 00:00:00 北京时间');
  });

  it('confirms a payment with the price, the gateway and the Beijing time it was paid', () => {
    for (const [gateway, name] of [
      ['alipay', '支付宝'],
      ['wechatpay', '微信支付'],
      ['stripe', '银行卡 (Stripe)'],
      ['2c2p', '2C2P'],
    ] as const) {
      const email = renderEmail(ORDER_PAID_EMAIL_TOPIC, { ...order, gateway, paidAt: '2026-12-03T12:15:04.123Z' });
      assert.equal(email.subject, '支付成功：订单 PO0B7C2D1E0000400080 / Payment received: order PO0B7C2D1E0000400080');
      const [zh, en] = email.body.split('\n\n');
      assert.equal(
        en,
        [
          'Your order PO0B7C2D1E0000400080 is paid. Thank you!',
          'Amount: ¥168.00',
          `Paid with: ${gatewayName(gateway, 'en')}`,
          'Paid at: 3 Dec 2026, 20:15 (Beijing time)',
        ].join('\n'),
      );
      assert.equal(
        zh,
        [
          '您的订单 PO0B7C2D1E0000400080 已支付成功，感谢惠顾！',
          '支付金额：¥168.00',
          `支付方式：${name}`,
          '支付时间：2026年12月3日 20:15 (北京时间)',
        ].join('\n'),
      );
    }
  });

  it('still renders a confirmation queued before payloads carried the time, without a time line', () => {
    const email = renderEmail(ORDER_PAID_EMAIL_TOPIC, order);
    assert.equal(email.body.split('\n\n')[0], '您的订单 PO0B7C2D1E0000400080 已支付成功，感谢惠顾！\n支付金额：¥168.00\n支付方式：支付宝');
    assert.equal(email.body.split('\n\n')[1], 'Your order PO0B7C2D1E0000400080 is paid. Thank you!\nAmount: ¥168.00\nPaid with: Alipay');
  });

  it('explains a refund: why, how much, to which gateway, when, and the refund number', () => {
    const duplicate = renderEmail(REFUND_EMAIL_TOPIC, {
      ...order,
      gateway: 'wechatpay',
      refundId: 'RF0B7C2D1E00004000801',
      reason: 'duplicate_charge',
      refundedAt: '2026-12-03T12:20:00Z',
    });
    assert.equal(duplicate.subject, '退款通知：订单 PO0B7C2D1E0000400080 / Refund: order PO0B7C2D1E0000400080');
    assert.match(
      duplicate.body.split('\n\n')[1]!,
      /^This order was already paid: .*\nAmount refunded: ¥168\.00\nRefunded to: WeChat Pay\nRefunded at: 3 Dec 2026, 20:20 \(Beijing time\)\nRefund number: RF0B7C2D1E00004000801$/,
    );
    assert.equal(
      duplicate.body.split('\n\n')[0],
      [
        '该订单已支付，这笔重复付款已原路退回。',
        '退款金额：¥168.00',
        '退回至：微信支付',
        '退款时间：2026年12月3日 20:20 (北京时间)',
        '退款单号：RF0B7C2D1E00004000801',
      ].join('\n'),
    );
    const closed = renderEmail(REFUND_EMAIL_TOPIC, { ...order, gateway: 'stripe', refundId: 'RF1', reason: 'order_not_payable' });
    assert.equal(
      closed.body.split('\n\n')[0],
      '该订单已关闭，这笔付款已原路退回。\n退款金额：¥168.00\n退回至：银行卡 (Stripe)\n退款单号：RF1',
    );
  });

  it('refuses a topic it has no template for', () => {
    assert.throws(() => renderEmail('email.newsletter', order), /no email template for outbox topic "email.newsletter"/);
  });
});
