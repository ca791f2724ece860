/**
 * Every decline code an adapter can answer has shopper text of its own in both languages, and the
 * Chinese text carries no English, status code or gateway jargon.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { declineReasonOf, declineText, KNOWN_DECLINE_CODES } from '@/client/decline-reasons';

describe('decline reasons', () => {
  it('1. maps each known code to a reason of its own (never the fallback), except PAYERROR without its text', () => {
    for (const { gateway, code } of KNOWN_DECLINE_CODES) {
      if (gateway === 'wechatpay' && code === 'PAYERROR') continue;
      assert.notEqual(declineReasonOf(gateway, code), 'unknown', `${gateway} ${code}`);
    }
  });

  it('2. says it in Chinese without Latin letters or digits, and in English', () => {
    for (const { gateway, code } of KNOWN_DECLINE_CODES) {
      assert.doesNotMatch(declineText('zh', gateway, code), /[A-Za-z]|\d{3}/, `${gateway} ${code}`);
      assert.match(declineText('en', gateway, code), /^[\x20-\x7e’]+$/, `${gateway} ${code}`);
    }
  });

  it('3. reads WeChat Pay PAYERROR from its trade_state_desc, as the sandbox and WeChat send it', () => {
    assert.equal(declineReasonOf('wechatpay', 'PAYERROR', '支付失败，用户余额不足'), 'insufficient_funds');
    assert.equal(declineReasonOf('wechatpay', 'PAYERROR', '支付失败，用户账户异常，已被限制支付'), 'account_restricted');
    assert.equal(declineReasonOf('wechatpay', 'PAYERROR', '支付失败'), 'unknown');
  });

  it('4. falls back to 支付被拒绝 for a code nobody listed, and treats any 2C2P 4xxx as a card decline', () => {
    assert.equal(declineText('zh', 'stripe', 'something_new'), '支付被拒绝，请更换支付方式。');
    assert.equal(declineText('zh', 'alipay', undefined), '支付被拒绝，请更换支付方式。');
    assert.equal(declineReasonOf('2c2p', '4999'), 'card_declined');
    assert.equal(declineText('zh', 'stripe', 'insufficient_funds'), declineText('zh', '2c2p', '4051'));
  });
});
