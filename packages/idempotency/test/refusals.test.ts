/**
 * Refusals: one type (`Refusal`, or any error with `httpStatus` and `reason`) that the fetch adapter
 * answers with its status, reason, message and Retry-After — the guard's own refusals and a handler's
 * alike — while anything else is a 500 that says nothing of what broke.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { withIdempotency } from '../src/fetch.js';
import {
  createMemoryIdempotencyStore,
  KeyReusedError,
  Refusal,
  refusalHeaders,
  refusalOf,
  RequestInProgressError,
  respond,
  type MemoryTransaction,
} from '../src/index.js';

describe('refusalOf', () => {
  it('takes a Refusal as it is, the guard’s errors included', () => {
    const refusal = new Refusal(503, 'GATEWAY_UNAVAILABLE', 'try again', 1);
    assert.equal(refusalOf(refusal), refusal);
    assert.deepEqual(
      [new KeyReusedError(), new RequestInProgressError(2)].map((error) => [refusalOf(error)?.httpStatus, refusalOf(error)?.reason]),
      [
        [422, 'KEY_REUSED_WITH_DIFFERENT_REQUEST'],
        [409, 'REQUEST_IN_PROGRESS'],
      ],
    );
  });

  it("reads an application's own error that carries httpStatus and reason", () => {
    class OutOfStock extends Error {
      httpStatus = 409;
      reason = 'OUT_OF_STOCK';
    }
    assert.deepEqual(refusalOf(new OutOfStock('gone')), { httpStatus: 409, reason: 'OUT_OF_STOCK', message: 'gone' });
    assert.deepEqual(refusalOf({ httpStatus: 429, reason: 'SLOW_DOWN', retryAfterSeconds: 3 }), {
      httpStatus: 429,
      reason: 'SLOW_DOWN',
      message: 'SLOW_DOWN',
      retryAfterSeconds: 3,
    });
  });

  it('is undefined for anything that is not a refusal', () => {
    for (const error of [
      new Error('boom'),
      null,
      undefined,
      'text',
      { httpStatus: 200, reason: 'OK' },
      { httpStatus: 409 },
      { reason: 'X' },
    ]) {
      assert.equal(refusalOf(error), undefined, JSON.stringify(error));
    }
  });

  it('gives Retry-After only when the refusal names one', () => {
    assert.deepEqual(refusalHeaders(new RequestInProgressError(2)), { 'Retry-After': '2' });
    assert.deepEqual(refusalHeaders(new KeyReusedError()), {});
  });
});

describe('the fetch adapter answers refusals', () => {
  const store = createMemoryIdempotencyStore();
  const post = (handler: () => Promise<never>) =>
    withIdempotency<MemoryTransaction>({ store, scope: () => 'user:1' }, async () => {
      await handler();
      return respond(201, {}).response;
    })(
      new Request('http://shop.test/charges', {
        method: 'POST',
        headers: { 'idempotency-key': crypto.randomUUID(), 'content-type': 'application/json' },
        body: '{}',
      }),
    );

  it("with a handler's Refusal: its status, reason, message and Retry-After", async () => {
    const response = await post(async () => {
      throw new Refusal(503, 'GATEWAY_UNAVAILABLE', 'The gateway is unavailable; retry.', 1);
    });
    assert.equal(response.status, 503);
    assert.equal(response.headers.get('retry-after'), '1');
    assert.deepEqual(await response.json(), { reason: 'GATEWAY_UNAVAILABLE', message: 'The gateway is unavailable; retry.' });
  });

  it("with a handler's own error class carrying httpStatus and reason", async () => {
    const response = await post(async () => {
      throw Object.assign(new Error('No stock left.'), { httpStatus: 409, reason: 'OUT_OF_STOCK' });
    });
    assert.equal(response.status, 409);
    assert.equal(response.headers.get('retry-after'), null);
    assert.deepEqual(await response.json(), { reason: 'OUT_OF_STOCK', message: 'No stock left.' });
  });

  it('with a 500 that names nothing for anything else', async () => {
    const logged = console.error;
    console.error = () => {};
    try {
      const response = await post(async () => {
        throw new Error('connection to db-7.internal refused');
      });
      assert.equal(response.status, 500);
      const body = (await response.json()) as { reason: string; message: string };
      assert.equal(body.reason, 'INTERNAL_ERROR');
      assert.doesNotMatch(body.message, /db-7/);
    } finally {
      console.error = logged;
    }
  });
});
