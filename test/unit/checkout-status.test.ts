/**
 * What the page's status says when a payment call fails: a cart refused before any order existed is
 * "not ordered", never "payment failed"; anything else that failed is a failed payment.
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
