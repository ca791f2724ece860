import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { NEW_OUT_TRADE_NO_PATTERN, OUT_TRADE_NO_PATTERN, outTradeNoFor } from '@/server/checkout/out-trade-no';

describe('out_trade_no', () => {
  it('passes every gateway rule at once: Alipay, WeChat Pay and 2C2P QR', () => {
    for (let i = 0; i < 1000; i++) {
      const value = outTradeNoFor(randomUUID());
      assert.match(value, OUT_TRADE_NO_PATTERN);
      assert.match(value, /^[A-Za-z0-9_]{1,64}$/, 'Alipay');
      assert.ok(value.length >= 6 && value.length <= 32, 'WeChat Pay');
      assert.match(value, /^[A-Za-z0-9]{1,20}$/, '2C2P');
    }
  });

  it('is derived from the order id: stable for one id, different across ids', () => {
    const id = randomUUID();
    assert.equal(outTradeNoFor(id), outTradeNoFor(id));
    const seen = new Set(Array.from({ length: 10_000 }, () => outTradeNoFor(randomUUID())));
    assert.equal(seen.size, 10_000);
  });

  it('never spells a word: no vowel (nor Y) anywhere after the prefix, and a digit right after it', () => {
    for (let i = 0; i < 10_000; i++) {
      const value = outTradeNoFor(randomUUID());
      assert.match(value, NEW_OUT_TRADE_NO_PATTERN);
      assert.doesNotMatch(value.slice(2), /[AEIOUY]/, value);
    }
    // The order a shopper once read as a word on screen now starts PO + a digit.
    assert.doesNotMatch(outTradeNoFor('ffffffff-ffff-4fff-bfff-ffffffffffff'), /^PO[A-Z]/);
  });

  it('refuses what is not a UUID', () => {
    assert.throws(() => outTradeNoFor('ORDER-1'));
  });
});
