/**
 * What the page's status says when a payment call fails: a cart refused before any order existed is
 * "not ordered", never "payment failed"; an order whose hold was released is cancelled; anything else
 * that failed is a failed payment.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { failedStatus } from '@/client/checkout-status';
import type { CallFailure } from '@/client/retry';

function failed(reason: string, status: number) {
  const failure: CallFailure = { status, reason, message: reason, retryAfterMs: undefined, retryable: false, details: undefined };
  return failedStatus({ kind: 'failed', failure, message: reason });
}

describe('failedStatus', () => {
  it('calls a refused cart 未能下单 and says why, for every cart refusal', () => {
    for (const reason of ['SOLD_OUT', 'OUT_OF_STOCK', 'PRICE_CHANGED', 'TOO_MANY_OPEN_ORDERS', 'RATE_LIMITED']) {
      const status = failed(reason, 409);
      assert.equal(status.tone, 'bad');
      assert.equal(status.tone === 'bad' && status.title, 'status.notOrdered', reason);
    }
    const soldOut = failed('SOLD_OUT', 409);
    assert.deepEqual(soldOut.tone === 'bad' && soldOut.lines, [{ key: 'status.soldOut' }]);
  });

  it('calls an order closed by its released hold 已取消, not a failed payment, and says nothing was charged', () => {
    const failure: CallFailure = {
      status: 422,
      reason: 'IDEMPOTENCY_KEY_REUSED',
      message: '',
      retryAfterMs: undefined,
      retryable: false,
      details: undefined,
    };
    const closed = (closedAs: string) =>
      failedStatus({ kind: 'failed', failure, message: closedAs, orderState: 'closed', charged: false, closedAs });
    const voided = closed('voided');
    assert.equal(voided.tone === 'bad' && voided.title, 'status.voided');
    assert.deepEqual(voided.tone === 'bad' && voided.lines, [{ key: 'status.voidedDetail' }, { key: 'status.closedNotCharged' }]);
    const expired = closed('expired');
    assert.equal(expired.tone === 'bad' && expired.title, 'status.failed');
    assert.deepEqual(expired.tone === 'bad' && expired.lines, [{ key: 'status.orderClosed' }, { key: 'status.closedNotCharged' }]);
  });

  it('calls anything else a failed payment', () => {
    for (const [reason, code] of [
      ['INTERNAL_ERROR', 500],
      ['ORDER_NOT_PAYABLE', 409],
    ] as const) {
      const status = failed(reason, code);
      assert.equal(status.tone === 'bad' && status.title, 'status.failed', reason);
    }
  });
});
