import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InvalidKeyError, MissingKeyError, parseIdempotencyKey } from '../src/index.js';

describe('Idempotency-Key validation', () => {
  it('rejects a missing key with IDEMPOTENCY_KEY_MISSING', () => {
    assert.throws(() => parseIdempotencyKey(undefined), MissingKeyError);
    assert.throws(
      () => parseIdempotencyKey(null),
      (e: MissingKeyError) => e.httpStatus === 400 && e.reason === 'IDEMPOTENCY_KEY_MISSING',
    );
  });

  it('rejects empty, over-long and non-printable-ASCII keys with IDEMPOTENCY_KEY_INVALID', () => {
    for (const bad of ['', '   ', 'x'.repeat(256), '支付', 'a\tb', 'a\u0000b']) {
      assert.throws(() => parseIdempotencyKey(bad), InvalidKeyError, JSON.stringify(bad));
    }
  });

  it('rejects a key with a comma: two Idempotency-Key headers arrive joined as "k1, k2"', () => {
    for (const bad of ['k1, k2', 'k1,k2', 'a,']) {
      assert.throws(
        () => parseIdempotencyKey(bad),
        (e: InvalidKeyError) => e instanceof InvalidKeyError && e.reason === 'IDEMPOTENCY_KEY_INVALID' && /comma/.test(e.message),
        JSON.stringify(bad),
      );
    }
  });

  it('rejects control characters that HTTP lets through in a header value (a tab) and those it does not', () => {
    for (const bad of ['a\tb', 'a\x01b', 'a\x7Fb', 'a\r\nb']) {
      assert.throws(() => parseIdempotencyKey(bad), InvalidKeyError, JSON.stringify(bad));
    }
  });

  it('accepts a UUID and any printable ASCII up to 255 characters', () => {
    assert.equal(parseIdempotencyKey('8c5c2d4e-1f0a-4d1b-9b61-3f1f6e3b9a10'), '8c5c2d4e-1f0a-4d1b-9b61-3f1f6e3b9a10');
    assert.equal(parseIdempotencyKey('x'.repeat(255)).length, 255);
    assert.equal(parseIdempotencyKey('order 42/attempt#1'), 'order 42/attempt#1');
  });
});
