import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { canonicalCopy, canonicalJson, requestFingerprint } from '../src/fingerprint.js';

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

  it('orders integer-like keys as JavaScript keeps them, so the text and the stored copy agree', () => {
    assert.equal(canonicalJson({ b: 1, 10: 'x', 2: 'y' }), '{"2":"y","10":"x","b":1}');
    assert.equal(JSON.stringify(canonicalCopy({ 10: 'x', 2: 'y' })), canonicalJson({ 2: 'y', 10: 'x' }));
  });

  it('drops undefined members like JSON does and is a SHA-256 hex digest', () => {
    assert.equal(canonicalJson({ a: 1, b: undefined }), '{"a":1}');
    assert.match(requestFingerprint('p', undefined), /^[0-9a-f]{64}$/);
  });

  it('stays what it was: keys stored by an earlier version still match their requests', () => {
    assert.equal(
      requestFingerprint('checkout.pay', { orderId: 'x', gateway: 'alipay', buyer: 'ok' }),
      '16e31b2304fd8827a944e2cd645cbd4f5ebf303b812ab0f6182b588812ba9fc2',
    );
  });
});

describe('the canonical copy of an answer', () => {
  it('is what a JSON round trip of the canonical text gives, for every kind of value', () => {
    const values: unknown[] = [
      null,
      undefined,
      0,
      -0,
      1.5e300,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      'text',
      true,
      [1, undefined, () => 1, { b: 2, a: 1 }],
      { z: 1, a: { d: [2, { f: 1, e: 0 }], c: null }, u: undefined, f: () => 1, s: Symbol('s') },
      { at: new Date(0), boxed: Object('s'), n: Object(2) },
      { toJSON: () => ({ y: 1, x: 2 }) },
    ];
    for (const value of values) {
      assert.deepEqual(canonicalCopy(value), JSON.parse(canonicalJson(value)));
      assert.equal(JSON.stringify(canonicalCopy(value)), canonicalJson(value));
    }
  });

  it('refuses a BigInt, as JSON does', () => {
    assert.throws(() => canonicalCopy({ amount: 1n }), TypeError);
  });
});
