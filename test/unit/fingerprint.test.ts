import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { canonicalJson, requestFingerprint } from '../../server/idempotency/fingerprint';

describe('request fingerprint', () => {
  it('sorts object keys at every depth, so key order never changes it', () => {
    assert.equal(canonicalJson({ b: 1, a: { d: [2, { f: 1, e: 0 }], c: null } }), '{"a":{"c":null,"d":[2,{"e":0,"f":1}]},"b":1}');
    assert.equal(
      requestFingerprint('checkout.pay', JSON.parse('{"orderId":"x","gateway":"alipay"}')),
      requestFingerprint('checkout.pay', JSON.parse('{ "gateway" : "alipay",\n "orderId":"x" }')),
    );
  });

  it('keeps array order, because order is meaning there', () => {
    assert.notEqual(requestFingerprint('p', { items: [1, 2] }), requestFingerprint('p', { items: [2, 1] }));
  });

  it('differs for another path or another value', () => {
    const base = requestFingerprint('checkout.pay', { orderId: 'x' });
    assert.notEqual(base, requestFingerprint('checkout.createOrder', { orderId: 'x' }));
    assert.notEqual(base, requestFingerprint('checkout.pay', { orderId: 'y' }));
    assert.notEqual(requestFingerprint('p', { a: 1 }), requestFingerprint('p', { a: '1' }));
  });

  it('drops undefined members like JSON does and is a SHA-256 hex digest', () => {
    assert.equal(canonicalJson({ a: 1, b: undefined }), '{"a":1}');
    assert.match(requestFingerprint('p', undefined), /^[0-9a-f]{64}$/);
  });
});
