/**
 * 对账 as a pure function: a statement against our books, each kind of mismatch classed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { matchStatement, type BookEntry, type StatementLine } from '@/server/reconciliation/match';

const payment = (n: number, amountMinor = 6800): BookEntry => ({
  kind: 'payment',
  orderId: `order-${n}`,
  outTradeNo: `PO${n}`,
  gatewayTradeNo: `T${n}`,
  amountMinor,
  currency: 'CNY',
});
const refund = (n: number, amountMinor = 1000): BookEntry => ({
  kind: 'refund',
  orderId: `order-${n}`,
  outTradeNo: `PO${n}`,
  gatewayTradeNo: `T${n}`,
  refundId: `R${n}`,
  gatewayRefundId: `GR${n}`,
  amountMinor,
  currency: 'CNY',
});
const line = (entry: BookEntry, changes: Partial<StatementLine> = {}): StatementLine => {
  const { orderId: _orderId, ...rest } = entry;
  return { ...rest, feeMinor: Math.round(entry.amountMinor * 0.006), ...changes };
};

describe('matchStatement', () => {
  it('a clean day: every line matched both ways, fees summed', () => {
    const books = [payment(1), payment(2), refund(1)];
    const result = matchStatement(
      'alipay',
      books.map((b) => line(b)),
      books,
    );
    assert.deepEqual({ ...result, mismatches: result.mismatches.length }, { lines: 3, matched: 3, feesMinor: 41 + 41 + 6, mismatches: 0 });
  });

  it('classes each mismatch: money we do not know of, a payment missing, an amount that differs, a refund missing or unknown', () => {
    const books = [payment(1), payment(2), payment(3), refund(1)];
    const statement = [line(payment(1)), line(payment(3), { amountMinor: 6801 }), line(payment(9)), line(refund(7))];
    const result = matchStatement('wechatpay', statement, books);
    assert.equal(result.matched, 1);
    assert.deepEqual(
      result.mismatches.map((m) => [m.kind, m.reference, m.orderId]).sort(),
      [
        ['amount_differs', 'T3', 'order-3'],
        ['missing_payment', 'T2', 'order-2'],
        ['missing_refund', 'R1', 'order-1'],
        ['unknown_payment', 'T9', null],
        ['unknown_refund', 'R7', null],
      ].sort(),
    );
  });

  it('a refund line without our refund id is matched by the gateway’s', () => {
    const books = [refund(4)];
    const result = matchStatement('stripe', [line(refund(4), { refundId: undefined })], books);
    assert.equal(result.matched, 1);
    assert.deepEqual(result.mismatches, []);
  });

  it('another currency for the same amount differs', () => {
    const result = matchStatement('2c2p', [line(payment(5), { currency: 'THB' })], [payment(5)]);
    assert.deepEqual(
      result.mismatches.map((m) => m.kind),
      ['amount_differs'],
    );
  });
});
