import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TRPCClientError } from '@trpc/client';
import { backoffDelay, callWithRetry, DEFAULT_RETRY_POLICY, FinalFailureError, RetriesExhaustedError } from '@/client/retry';

function serverError(httpStatus: number, reason: string) {
  return new TRPCClientError('refused', {
    result: { error: { message: 'refused', code: -32000, data: { httpStatus, reason, code: 'X' } } } as never,
  });
}

describe('client retry policy', () => {
  it('retries network errors, 409 and 5xx, then succeeds, reporting each retry', async () => {
    const failures = [new TypeError('fetch failed'), serverError(409, 'REQUEST_IN_PROGRESS'), serverError(503, 'GATEWAY_UNAVAILABLE')];
    const seen: number[] = [];
    const result = await callWithRetry(
      async () => {
        const failure = failures.shift();
        if (failure) throw failure;
        return 'paid';
      },
      { sleep: async () => {}, onRetry: (n) => seen.push(n) },
    );
    assert.equal(result, 'paid');
    assert.deepEqual(seen, [1, 2, 3]);
  });

  it('stops at once on a 409 that will not pass by itself (out of stock, too many open orders), retries one in flight', async () => {
    for (const reason of ['OUT_OF_STOCK', 'SOLD_OUT', 'TOO_MANY_OPEN_ORDERS', 'STOCK_HOLD_LIMIT', 'ORDER_NOT_PAYABLE']) {
      let calls = 0;
      await assert.rejects(
        callWithRetry(
          async () => {
            calls++;
            throw serverError(409, reason);
          },
          { sleep: async () => {} },
        ),
        (error: FinalFailureError) => error instanceof FinalFailureError && error.failure.reason === reason,
      );
      assert.equal(calls, 1, reason);
    }
    let calls = 0;
    const result = await callWithRetry(
      async () => {
        if (++calls < 3) throw serverError(409, 'ORDER_PAYMENT_IN_PROGRESS');
        return 'paid';
      },
      { sleep: async () => {} },
    );
    assert.equal(result, 'paid');
  });

  it('stops at once on 402 and 422: the answer would never change', async () => {
    for (const status of [402, 422, 400, 404]) {
      let calls = 0;
      await assert.rejects(
        callWithRetry(
          async () => {
            calls++;
            throw serverError(status, 'X');
          },
          { sleep: async () => {} },
        ),
        (error: FinalFailureError) => error instanceof FinalFailureError && error.failure.status === status,
      );
      assert.equal(calls, 1, `status ${status}`);
    }
  });

  it('gives up after maxRetries with the last failure', async () => {
    let calls = 0;
    await assert.rejects(
      callWithRetry(
        async () => {
          calls++;
          throw new TypeError('fetch failed');
        },
        { sleep: async () => {}, policy: { ...DEFAULT_RETRY_POLICY, maxRetries: 3 } },
      ),
      RetriesExhaustedError,
    );
    assert.equal(calls, 4);
  });

  it('backs off exponentially with jitter, bounded by the cap', () => {
    const policy = { maxRetries: 10, baseDelayMs: 100, maxDelayMs: 1000 };
    assert.equal(
      backoffDelay(1, policy, () => 1),
      100,
    );
    assert.equal(
      backoffDelay(3, policy, () => 1),
      400,
    );
    assert.equal(
      backoffDelay(3, policy, () => 0),
      200,
    );
    assert.equal(
      backoffDelay(20, policy, () => 1),
      1000,
    );
  });
});
