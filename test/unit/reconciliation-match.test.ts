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
    assert.deepEqual(
      { ...result, mismatches: result.mismatches.length },
      { lines: 3, matched: 3, feesMinor: 41 + 41 + 6, feesChecked: false, mismatches: 0 },
    );
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

describe('matchStatement with a fee contract', () => {
  const alipay = { ratePpm: 6000, fixedMinor: 0, vatPpm: 0, whtPpm: 0, onRefund: 'pro_rata' as const };
  const books = [payment(1, 6800), { ...refund(1, 1000), chargeAmountMinor: 6800, refundedBeforeMinor: 0 }];

  it('a fee as contracted matches: 0.6 % of 68.00 is 0.41, a refund of 10.00 gives 0.06 back', () => {
    const statement = [line(books[0]!, { feeMinor: 41 }), line(books[1]!, { feeMinor: -6 })];
    const result = matchStatement('alipay', statement, books, alipay);
    assert.deepEqual([result.matched, result.mismatches, result.feesChecked, result.feesMinor], [2, [], true, 35]);
  });

  it('a fee one minor unit off is rounding; more is fee_differs, with the contract’s fee beside the statement’s', () => {
    const rounding = matchStatement('alipay', [line(books[0]!, { feeMinor: 42 }), line(books[1]!, { feeMinor: -5 })], books, alipay);
    assert.deepEqual(rounding.mismatches, []);
    const off = matchStatement('alipay', [line(books[0]!, { feeMinor: 141 }), line(books[1]!, { feeMinor: 0 })], books, alipay);
    assert.deepEqual(
      off.mismatches.map((m) => [m.kind, m.reference, m.ours?.feeMinor, m.theirs?.feeMinor]),
      [
        ['fee_differs', 'T1', 41, 141],
        ['fee_differs', 'R1', -6, 0],
      ],
    );
    assert.equal(off.matched, 0);
  });

  it('an amount that differs is amount_differs only, whatever its fee', () => {
    const result = matchStatement(
      'alipay',
      [line(books[0]!, { amountMinor: 6900, feeMinor: 999 }), line(books[1]!, { feeMinor: -6 })],
      books,
      alipay,
    );
    assert.deepEqual(
      result.mismatches.map((m) => m.kind),
      ['amount_differs'],
    );
  });

  it('without a contract fees are summed, not checked', () => {
    const result = matchStatement('alipay', [line(books[0]!, { feeMinor: 9999 }), line(books[1]!, { feeMinor: 0 })], books);
    assert.deepEqual([result.matched, result.feesChecked, result.feesMinor], [2, false, 9999]);
  });
});

describe('matchStatement, a trade listed twice', () => {
  it('matches one line to our entry and shows the second as money we have no record of', () => {
    const books = [payment(1)];
    const result = matchStatement('alipay', [line(payment(1)), line(payment(1))], books);
    assert.equal(result.matched, 1);
    assert.deepEqual(
      result.mismatches.map((m) => [m.kind, m.reference, m.orderId]),
      [['unknown_payment', 'T1', 'order-1']],
    );
  });
});
