/**
 * What the Alipay adapter reads into each answer (server/payments/alipay/classify.ts), from answers
 * as the gateway sends them: no database, no sandbox, no keys.
 *
 * RECORDED: captured from the PSP sandbox while test/payments/alipay-*.test.ts ran (the SDK's parsed
 * `<method>_response` object; a notification's raw form body). DOCUMENTED: the same envelope with a
 * code or sub_code the sandbox never produces, written from Alipay's per-interface error tables
 * ({code, msg, sub_code, sub_msg}, as sandbox/alipay.ts builds its own), or a recorded answer with
 * one field changed or removed to make an odd case.
 *
 *   node --import tsx --test test/unit/alipay-classify.test.ts
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  classifyClose,
  classifyNotification,
  classifyPay,
  classifyPrecreate,
  classifyRefund,
  classifyRefundQuery,
  classifyTradeQuery,
  gatewayRefundIdOf,
  readNotificationForm,
  type Fields,
} from '@/server/payments/alipay/classify';

/** A recorded answer with fields replaced, or removed (undefined). */
function edit(answer: Fields, changes: Record<string, unknown>): Fields {
  const edited: Fields = { ...answer, ...changes };
  for (const [key, value] of Object.entries(changes)) if (value === undefined) delete edited[key];
  return edited;
}

/** A documented business failure (40004) with Alipay's envelope. */
function businessFailure(subCode: string, subMsg: string): Fields {
  return { code: '40004', msg: 'Business Failed', sub_code: subCode, sub_msg: subMsg };
}

// RECORDED: Alipay's own failure shape under the sandbox's fail_before_charge (trade.close, trade.refund).
const UNAVAILABLE_20000 = { code: '20000', msg: 'Service Currently Unavailable', sub_code: 'isp.unknow-error', sub_msg: '服务暂不可用' };
// RECORDED: signed with the wrong private key.
const INVALID_SIGNATURE_40002 = {
  code: '40002',
  msg: 'Invalid Arguments',
  sub_code: 'isv.invalid-signature',
  sub_msg: '验签出错，建议检查签名字符串或签名私钥与应用公钥是否匹配',
};
// DOCUMENTED: the gateway's own failure inside a business answer.
const SYSTEM_ERROR = businessFailure('ACQ.SYSTEM_ERROR', '系统错误');

// ---------------------------------------------------------------------------------------------
// alipay.trade.pay

// RECORDED: the ok buyer, 19.99.
const PAY_SUCCESS = {
  code: '10000',
  msg: 'Success',
  trade_no: '2026120522096199437743255138',
  out_trade_no: 'Amxalayuud729b4464ff9',
  buyer_logon_id: 'ok***@sandbox.example',
  buyer_user_id: '2088102000000001',
  total_amount: '19.99',
  receipt_amount: '19.99',
  buyer_pay_amount: '19.99',
  invoice_amount: '19.99',
  point_amount: '0.00',
  gmt_payment: '2026-12-05 23:51:12',
  fund_bill_list: [{ fund_channel: 'ALIPAYACCOUNT', amount: '19.99' }],
};
// RECORDED: 10003, the buyer confirms in the app; no sub_code, as Alipay's sample shows.
const PAY_USERPAYING = {
  code: '10003',
  msg: 'order success pay inprocess',
  out_trade_no: 'Smxalb3px145f6f05c7df',
  buyer_pay_amount: '0.00',
  invoice_amount: '0.00',
  point_amount: '0.00',
  receipt_amount: '0.00',
  trade_no: '2026120522402340893824533306',
  total_amount: '24.80',
};
// RECORDED: a second charge of a paid order.
const PAY_HAS_SUCCESS = {
  code: '40004',
  msg: 'Business Failed',
  sub_code: 'ACQ.TRADE_HAS_SUCCESS',
  sub_msg: '交易已被支付',
  out_trade_no: 'Amxalayy19cba883d6c26',
};
// RECORDED: the insufficient_funds buyer.
const PAY_BALANCE_NOT_ENOUGH = {
  code: '40004',
  msg: 'Business Failed',
  sub_code: 'ACQ.BUYER_BALANCE_NOT_ENOUGH',
  sub_msg: '买家余额不足',
  out_trade_no: 'Amxalaywffb747713142c',
  buyer_pay_amount: '0.00',
  invoice_amount: '0.00',
  point_amount: '0.00',
  receipt_amount: '0.00',
};

describe('classifyPay (alipay.trade.pay)', () => {
  it('10000 for the amount asked: paid, with its trade_no', () => {
    assert.deepEqual(classifyPay(PAY_SUCCESS, 1999), { kind: 'paid', tradeNo: '2026120522096199437743255138', amountMinor: 1999 });
  });

  it('10000 for another amount than asked: in doubt AMOUNT_MISMATCH, never paid', () => {
    assert.deepEqual(classifyPay(PAY_SUCCESS, 1998), { kind: 'in_doubt', code: 'AMOUNT_MISMATCH', message: 'paid 19.99, asked 1998 fen' });
  });

  it('10000 with an amount that is not a CNY amount: in doubt AMOUNT_MISMATCH', () => {
    assert.deepEqual(classifyPay(edit(PAY_SUCCESS, { total_amount: '19.999' }), 1999), {
      kind: 'in_doubt',
      code: 'AMOUNT_MISMATCH',
      message: 'paid 19.999, asked 1999 fen',
    });
  });

  it('10000 without trade_no or total_amount: in doubt MALFORMED_RESPONSE', () => {
    const expected = { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: 'success without trade_no' };
    assert.deepEqual(classifyPay(edit(PAY_SUCCESS, { trade_no: undefined }), 1999), expected);
    assert.deepEqual(classifyPay(edit(PAY_SUCCESS, { total_amount: undefined }), 1999), expected);
    assert.deepEqual(classifyPay(edit(PAY_SUCCESS, { trade_no: '' }), 1999), expected);
  });

  it('10003: in doubt ACQ.USERPAYING (the buyer is confirming)', () => {
    assert.deepEqual(classifyPay(PAY_USERPAYING, 2480), {
      kind: 'in_doubt',
      code: 'ACQ.USERPAYING',
      message: 'order success pay inprocess',
    });
  });

  it('20000: in doubt under its sub_code, or 20000 without one', () => {
    assert.deepEqual(classifyPay(UNAVAILABLE_20000, 1230), { kind: 'in_doubt', code: 'isp.unknow-error', message: '服务暂不可用' });
    assert.deepEqual(classifyPay({ code: '20000', msg: 'Service Currently Unavailable' }, 1230), {
      kind: 'in_doubt',
      code: '20000',
      message: 'Service Currently Unavailable',
    });
  });

  it('40001/40002/40006: refused by the public checks (nothing processed)', () => {
    assert.deepEqual(classifyPay(INVALID_SIGNATURE_40002, 1230), {
      kind: 'refused',
      code: 'isv.invalid-signature',
      message: INVALID_SIGNATURE_40002.sub_msg,
    });
    // RECORDED: another app id.
    assert.deepEqual(
      classifyPay(
        { code: '40002', msg: 'Invalid Arguments', sub_code: 'isv.invalid-app-id', sub_msg: '无效的AppID参数: 2021000000000000' },
        1230,
      ),
      { kind: 'refused', code: 'isv.invalid-app-id', message: '无效的AppID参数: 2021000000000000' },
    );
    // DOCUMENTED: without a sub_code the code names it; without sub_msg, msg is the message.
    assert.deepEqual(classifyPay({ code: '40001', msg: 'Missing Required Arguments' }, 1230), {
      kind: 'refused',
      code: '40001',
      message: 'Missing Required Arguments',
    });
    assert.deepEqual(classifyPay({ code: '40006', msg: 'Insufficient Permissions', sub_code: 'isv.insufficient-isv-permissions' }, 1230), {
      kind: 'refused',
      code: 'isv.insufficient-isv-permissions',
      message: 'Insufficient Permissions',
    });
  });

  it('40004 ACQ.TRADE_HAS_SUCCESS: already paid (to be confirmed by a query)', () => {
    assert.deepEqual(classifyPay(PAY_HAS_SUCCESS, 1230), { kind: 'already_paid' });
  });

  it('40004 with a decline sub_code: declined, with Alipay’s sub_msg', () => {
    assert.deepEqual(classifyPay(PAY_BALANCE_NOT_ENOUGH, 1230), {
      kind: 'declined',
      subCode: 'ACQ.BUYER_BALANCE_NOT_ENOUGH',
      message: '买家余额不足',
    });
    const recorded: [string, string][] = [
      ['ACQ.BUYER_ENABLE_STATUS_FORBID', '买家状态非法，无法继续交易'],
      ['ACQ.CONTEXT_INCONSISTENT', '交易信息被篡改'],
      ['ACQ.TRADE_HAS_CLOSE', '交易已经关闭'],
      ['ACQ.INVALID_PARAMETER', '参数无效: out_trade_no 只能包含字母、数字、下划线，且不超过 64 位'],
      // From the sandbox's buyer tool and Alipay's table: an unknown payment code, another buyer's trade.
      ['ACQ.PAYMENT_AUTH_CODE_INVALID', '支付失败，获取顾客账户信息失败，请顾客刷新付款码后重新收款'],
      ['ACQ.TRADE_BUYER_NOT_MATCH', '交易买家不匹配'],
    ];
    for (const [subCode, subMsg] of recorded) {
      assert.deepEqual(classifyPay(businessFailure(subCode, subMsg), 1230), { kind: 'declined', subCode, message: subMsg }, subCode);
    }
  });

  it('40004 ACQ.SYSTEM_ERROR, an unknown sub_code, or none: in doubt (not proof that nothing was charged)', () => {
    assert.deepEqual(classifyPay(SYSTEM_ERROR, 1230), { kind: 'in_doubt', code: 'ACQ.SYSTEM_ERROR', message: '系统错误' });
    assert.deepEqual(classifyPay(businessFailure('ACQ.SOMETHING_NEW', '新错误'), 1230), {
      kind: 'in_doubt',
      code: 'ACQ.SOMETHING_NEW',
      message: '新错误',
    });
    assert.deepEqual(classifyPay({ code: '40004', msg: 'Business Failed' }, 1230), {
      kind: 'in_doubt',
      code: '40004',
      message: 'Business Failed',
    });
  });

  it('an unknown code, or no code at all: in doubt', () => {
    assert.deepEqual(classifyPay({ code: '50000', msg: 'Whatever' }, 1230), { kind: 'in_doubt', code: '50000', message: 'Whatever' });
    assert.deepEqual(classifyPay({}, 1230), { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: '' });
    assert.deepEqual(classifyPay({ code: 10000, trade_no: 'T', total_amount: '12.30' }, 1230), {
      kind: 'in_doubt',
      code: 'MALFORMED_RESPONSE',
      message: '',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// alipay.trade.precreate

// RECORDED
const PRECREATE_SUCCESS = {
  code: '10000',
  msg: 'Success',
  out_trade_no: 'Smxalb3201c61068b0a49',
  qr_code: 'http://127.0.0.1:40781/sandbox/alipay/qr/b92db92806c9e5b7ffe35a0309334bd2',
};
// RECORDED
const PRECREATE_HAS_SUCCESS = {
  code: '40004',
  msg: 'Business Failed',
  sub_code: 'ACQ.TRADE_HAS_SUCCESS',
  sub_msg: '交易已被支付',
  out_trade_no: 'Smxalb3201c61068b0a49',
};
// RECORDED
const PRECREATE_HAS_CLOSE = {
  code: '40004',
  msg: 'Business Failed',
  sub_code: 'ACQ.TRADE_HAS_CLOSE',
  sub_msg: '交易已经关闭',
  out_trade_no: 'Smxalb3ci4423e262c439',
};

describe('classifyPrecreate (alipay.trade.precreate)', () => {
  it('10000: the qr_code', () => {
    assert.deepEqual(classifyPrecreate(PRECREATE_SUCCESS), { kind: 'qr_code', qrCode: PRECREATE_SUCCESS.qr_code });
  });

  it('10000 without qr_code: no code (MALFORMED_RESPONSE)', () => {
    assert.deepEqual(classifyPrecreate(edit(PRECREATE_SUCCESS, { qr_code: undefined })), {
      kind: 'no_code',
      code: 'MALFORMED_RESPONSE',
      message: 'precreate success without qr_code',
    });
  });

  it('40004 ACQ.TRADE_HAS_SUCCESS: already paid (to be confirmed by a query)', () => {
    assert.deepEqual(classifyPrecreate(PRECREATE_HAS_SUCCESS), { kind: 'already_paid' });
  });

  it('40004 closed, changed, another buyer’s or invalid: declined', () => {
    assert.deepEqual(classifyPrecreate(PRECREATE_HAS_CLOSE), { kind: 'declined', subCode: 'ACQ.TRADE_HAS_CLOSE', message: '交易已经关闭' });
    for (const subCode of ['ACQ.CONTEXT_INCONSISTENT', 'ACQ.TRADE_BUYER_NOT_MATCH', 'ACQ.INVALID_PARAMETER']) {
      assert.deepEqual(classifyPrecreate(businessFailure(subCode, 'x')), { kind: 'declined', subCode, message: 'x' }, subCode);
    }
  });

  it('a buyer’s decline sub_code is not a precreate refusal: no code', () => {
    assert.deepEqual(classifyPrecreate(PAY_BALANCE_NOT_ENOUGH), {
      kind: 'no_code',
      code: 'ACQ.BUYER_BALANCE_NOT_ENOUGH',
      message: '买家余额不足',
    });
  });

  it('20000, public checks, ACQ.SYSTEM_ERROR, no code: no code handed out', () => {
    assert.deepEqual(classifyPrecreate(UNAVAILABLE_20000), { kind: 'no_code', code: 'isp.unknow-error', message: '服务暂不可用' });
    assert.deepEqual(classifyPrecreate(INVALID_SIGNATURE_40002), {
      kind: 'no_code',
      code: 'isv.invalid-signature',
      message: INVALID_SIGNATURE_40002.sub_msg,
    });
    assert.deepEqual(classifyPrecreate(SYSTEM_ERROR), { kind: 'no_code', code: 'ACQ.SYSTEM_ERROR', message: '系统错误' });
    assert.deepEqual(classifyPrecreate({ code: '20000', msg: 'Service Currently Unavailable' }), {
      kind: 'no_code',
      code: '20000',
      message: 'Service Currently Unavailable',
    });
    assert.deepEqual(classifyPrecreate({}), { kind: 'no_code', code: 'MALFORMED_RESPONSE', message: '' });
  });
});

// ---------------------------------------------------------------------------------------------
// alipay.trade.close / alipay.trade.cancel

// RECORDED
const CLOSE_SUCCESS = { code: '10000', msg: 'Success', trade_no: '2026120522606025262742140030', out_trade_no: 'Amxalb16cde702ec3b35c' };
// RECORDED: trade.close of a trade that is paid, or that another close just closed.
const CLOSE_STATUS_ERROR = { code: '40004', msg: 'Business Failed', sub_code: 'ACQ.TRADE_STATUS_ERROR', sub_msg: '交易状态不合法' };
// RECORDED: trade.cancel of an out_trade_no with no trade yet.
const CANCEL_CLOSE = { code: '10000', msg: 'Success', out_trade_no: 'Amxalb17d5d718523ae0c', retry_flag: 'N', action: 'close' };
// RECORDED: trade.cancel of a trade the buyer paid just before it.
const CANCEL_REFUND = {
  code: '10000',
  msg: 'Success',
  trade_no: '2026120522677491864391033112',
  out_trade_no: 'Smxalb3o4564f81954d3b',
  retry_flag: 'N',
  action: 'refund',
  gmt_refund_pay: '2026-12-05 23:51:18',
};

describe('classifyClose (alipay.trade.close, alipay.trade.cancel)', () => {
  it('trade.close 10000: closed', () => {
    assert.deepEqual(classifyClose(CLOSE_SUCCESS, 'alipay.trade.close'), { kind: 'closed' });
  });

  it('trade.cancel 10000 action close: closed', () => {
    assert.deepEqual(classifyClose(CANCEL_CLOSE, 'alipay.trade.cancel'), { kind: 'closed' });
  });

  it('trade.cancel 10000 action refund: the buyer’s payment was refunded, never closed', () => {
    assert.deepEqual(classifyClose(CANCEL_REFUND, 'alipay.trade.cancel'), {
      kind: 'refunded_by_cancel',
      message: 'trade.cancel found the trade paid and refunded it in full (action refund)',
    });
  });

  it('trade.cancel 10000 without action, or another one: in doubt UNKNOWN_CANCEL_ACTION', () => {
    assert.deepEqual(classifyClose(edit(CANCEL_CLOSE, { action: undefined }), 'alipay.trade.cancel'), {
      kind: 'in_doubt',
      code: 'UNKNOWN_CANCEL_ACTION',
      message: 'trade.cancel action (none)',
    });
    assert.deepEqual(classifyClose(edit(CANCEL_CLOSE, { action: 'freeze' }), 'alipay.trade.cancel'), {
      kind: 'in_doubt',
      code: 'UNKNOWN_CANCEL_ACTION',
      message: 'trade.cancel action freeze',
    });
  });

  it('40004 status error, paid, finished or no trade: the state changed (settle with a query)', () => {
    assert.deepEqual(classifyClose(CLOSE_STATUS_ERROR, 'alipay.trade.close'), {
      kind: 'state_changed',
      code: 'ACQ.TRADE_STATUS_ERROR',
      message: '交易状态不合法',
    });
    for (const subCode of ['ACQ.TRADE_HAS_SUCCESS', 'ACQ.TRADE_HAS_FINISHED', 'ACQ.TRADE_NOT_EXIST']) {
      for (const method of ['alipay.trade.close', 'alipay.trade.cancel'] as const) {
        assert.deepEqual(
          classifyClose(businessFailure(subCode, 'x'), method),
          { kind: 'state_changed', code: subCode, message: 'x' },
          subCode,
        );
      }
    }
  });

  it('40004 ACQ.SYSTEM_ERROR (a cancel with retry_flag Y), an unknown sub_code or none: in doubt', () => {
    assert.deepEqual(classifyClose({ ...SYSTEM_ERROR, retry_flag: 'Y' }, 'alipay.trade.cancel'), {
      kind: 'in_doubt',
      code: 'ACQ.SYSTEM_ERROR',
      message: '系统错误',
    });
    assert.deepEqual(classifyClose({ code: '40004', msg: 'Business Failed' }, 'alipay.trade.close'), {
      kind: 'in_doubt',
      code: '40004',
      message: 'Business Failed',
    });
  });

  it('20000, public checks, unknown codes, no code: in doubt (the trade may still take money)', () => {
    assert.deepEqual(classifyClose(UNAVAILABLE_20000, 'alipay.trade.close'), {
      kind: 'in_doubt',
      code: 'isp.unknow-error',
      message: '服务暂不可用',
    });
    assert.deepEqual(classifyClose(INVALID_SIGNATURE_40002, 'alipay.trade.cancel'), {
      kind: 'in_doubt',
      code: 'isv.invalid-signature',
      message: INVALID_SIGNATURE_40002.sub_msg,
    });
    assert.deepEqual(classifyClose({ code: '10003', msg: 'x' }, 'alipay.trade.close'), { kind: 'in_doubt', code: '10003', message: 'x' });
    assert.deepEqual(classifyClose({}, 'alipay.trade.close'), { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: '' });
  });
});

// ---------------------------------------------------------------------------------------------
// alipay.trade.refund

// RECORDED: the first refund of a refundId.
const REFUND_MOVED = {
  code: '10000',
  msg: 'Success',
  trade_no: '2026120522263442518057553988',
  out_trade_no: 'Amxalb1rybd2841a9097f',
  buyer_logon_id: 'ok***@sandbox.example',
  buyer_user_id: '2088102000000001',
  fund_change: 'Y',
  refund_fee: '12.30',
  gmt_refund_pay: '2026-12-05 23:51:16',
};
// RECORDED: the same refundId again.
const REFUND_REPEATED = { ...REFUND_MOVED, fund_change: 'N' };
// RECORDED: more than the charge.
const REFUND_FEE_ERR = {
  code: '40004',
  msg: 'Business Failed',
  sub_code: 'ACQ.REASON_TRADE_REFUND_FEE_ERR',
  sub_msg: '退款金额无效',
  out_trade_no: 'Amxalb1tbf59e06bc1ea2',
  refund_fee: '0.00',
};

describe('classifyRefund (alipay.trade.refund)', () => {
  it('10000 fund_change Y: refunded by this call, with its trade_no', () => {
    assert.deepEqual(classifyRefund(REFUND_MOVED), { kind: 'refunded', tradeNo: '2026120522263442518057553988' });
    assert.deepEqual(classifyRefund(edit(REFUND_MOVED, { trade_no: undefined })), { kind: 'refunded', tradeNo: undefined });
  });

  it('10000 fund_change N, or without fund_change: confirm by the refund query', () => {
    assert.deepEqual(classifyRefund(REFUND_REPEATED), { kind: 'confirm_by_query' });
    assert.deepEqual(classifyRefund(edit(REFUND_MOVED, { fund_change: undefined })), { kind: 'confirm_by_query' });
  });

  it('40004 with a refusal sub_code: refused for good', () => {
    assert.deepEqual(classifyRefund(REFUND_FEE_ERR), {
      kind: 'refused',
      subCode: 'ACQ.REASON_TRADE_REFUND_FEE_ERR',
      message: '退款金额无效',
    });
    const refusals = [
      'ACQ.TRADE_NOT_EXIST', // RECORDED
      'ACQ.TRADE_STATUS_ERROR', // RECORDED
      'ACQ.DISCORDANT_REPEAT_REQUEST', // RECORDED
      'ACQ.TRADE_HAS_FINISHED',
      'ACQ.TRADE_NOT_ALLOW_REFUND',
      'ACQ.REFUND_AMT_NOT_EQUAL_TOTAL',
      'ACQ.REFUND_FEE_ERROR',
      'ACQ.SELLER_BALANCE_NOT_ENOUGH',
      'ACQ.REASON_TRADE_BEEN_FREEZEN',
      'ACQ.INVALID_PARAMETER',
    ];
    for (const subCode of refusals) {
      assert.deepEqual(
        classifyRefund({ ...businessFailure(subCode, 'x'), refund_fee: '0.00' }),
        { kind: 'refused', subCode, message: 'x' },
        subCode,
      );
    }
  });

  it('40004 ACQ.SYSTEM_ERROR, an unknown sub_code or none: in doubt (not proof that nothing was refunded)', () => {
    assert.deepEqual(classifyRefund(SYSTEM_ERROR), { kind: 'in_doubt', code: 'ACQ.SYSTEM_ERROR', message: '系统错误' });
    assert.deepEqual(classifyRefund(businessFailure('ACQ.SOMETHING_NEW', 'y')), {
      kind: 'in_doubt',
      code: 'ACQ.SOMETHING_NEW',
      message: 'y',
    });
    assert.deepEqual(classifyRefund({ code: '40004', msg: 'Business Failed' }), {
      kind: 'in_doubt',
      code: '40004',
      message: 'Business Failed',
    });
  });

  it('40001/40002/40006: not processed', () => {
    assert.deepEqual(classifyRefund(INVALID_SIGNATURE_40002), {
      kind: 'not_processed',
      code: 'isv.invalid-signature',
      message: INVALID_SIGNATURE_40002.sub_msg,
    });
    assert.deepEqual(classifyRefund({ code: '40001', msg: 'Missing Required Arguments' }), {
      kind: 'not_processed',
      code: '40001',
      message: 'Missing Required Arguments',
    });
  });

  it('20000, unknown codes, no code: in doubt', () => {
    assert.deepEqual(classifyRefund(UNAVAILABLE_20000), { kind: 'in_doubt', code: 'isp.unknow-error', message: '服务暂不可用' });
    assert.deepEqual(classifyRefund({ code: '10003', msg: 'x' }), { kind: 'in_doubt', code: '10003', message: 'x' });
    assert.deepEqual(classifyRefund({}), { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: '' });
  });
});

// ---------------------------------------------------------------------------------------------
// alipay.trade.query

// RECORDED
const QUERY_NOT_EXIST = { code: '40004', msg: 'Business Failed', sub_code: 'ACQ.TRADE_NOT_EXIST', sub_msg: '交易不存在' };
// RECORDED
const QUERY_WAITING = {
  code: '10000',
  msg: 'Success',
  trade_no: '2026120522844497412155268978',
  out_trade_no: 'Amxalaywffb747713142c',
  trade_status: 'WAIT_BUYER_PAY',
  total_amount: '12.30',
  receipt_amount: '0.00',
  buyer_pay_amount: '0.00',
  point_amount: '0.00',
  invoice_amount: '0.00',
};
// RECORDED
const QUERY_PAID = {
  code: '10000',
  msg: 'Success',
  trade_no: '2026120522512301803107046606',
  out_trade_no: 'Amxalayy19cba883d6c26',
  trade_status: 'TRADE_SUCCESS',
  total_amount: '12.30',
  receipt_amount: '12.30',
  buyer_pay_amount: '12.30',
  point_amount: '0.00',
  invoice_amount: '12.30',
  buyer_user_id: '2088102000000001',
  buyer_logon_id: 'ok***@sandbox.example',
  send_pay_date: '2026-12-05 23:51:12',
};
// RECORDED
const QUERY_CLOSED = {
  code: '10000',
  msg: 'Success',
  trade_no: '2026120522238356579764447259',
  out_trade_no: 'Amxalb07j2b12a1de9f81',
  trade_status: 'TRADE_CLOSED',
  total_amount: '12.30',
  receipt_amount: '0.00',
  buyer_pay_amount: '0.00',
  point_amount: '0.00',
  invoice_amount: '0.00',
};

describe('classifyTradeQuery (alipay.trade.query)', () => {
  const paid = {
    kind: 'answered',
    trade: { kind: 'succeeded', gatewayTradeNo: '2026120522512301803107046606', amountMinor: 1230, currency: 'CNY' },
  };

  it('40004 ACQ.TRADE_NOT_EXIST: not found', () => {
    assert.deepEqual(classifyTradeQuery(QUERY_NOT_EXIST), { kind: 'answered', trade: { kind: 'not_found' } });
  });

  it('WAIT_BUYER_PAY: pending', () => {
    assert.deepEqual(classifyTradeQuery(QUERY_WAITING), { kind: 'answered', trade: { kind: 'pending' } });
  });

  it('TRADE_CLOSED: closed', () => {
    assert.deepEqual(classifyTradeQuery(QUERY_CLOSED), { kind: 'answered', trade: { kind: 'closed' } });
  });

  it('TRADE_SUCCESS and TRADE_FINISHED: succeeded, for the whole total_amount', () => {
    assert.deepEqual(classifyTradeQuery(QUERY_PAID), paid);
    assert.deepEqual(classifyTradeQuery(edit(QUERY_PAID, { trade_status: 'TRADE_FINISHED' })), paid);
  });

  it('a paid trade without trade_no or a readable total_amount: unavailable MALFORMED_RESPONSE', () => {
    const malformed = { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'paid trade without trade_no or amount' };
    assert.deepEqual(classifyTradeQuery(edit(QUERY_PAID, { trade_no: undefined })), malformed);
    assert.deepEqual(classifyTradeQuery(edit(QUERY_PAID, { total_amount: undefined })), malformed);
    assert.deepEqual(classifyTradeQuery(edit(QUERY_PAID, { total_amount: '12.305' })), malformed);
  });

  it('an unknown trade_status, or none: unavailable UNKNOWN_TRADE_STATUS', () => {
    assert.deepEqual(classifyTradeQuery(edit(QUERY_WAITING, { trade_status: 'TRADE_PENDING' })), {
      kind: 'unavailable',
      code: 'UNKNOWN_TRADE_STATUS',
      message: 'trade_status TRADE_PENDING',
    });
    assert.deepEqual(classifyTradeQuery(edit(QUERY_WAITING, { trade_status: undefined })), {
      kind: 'unavailable',
      code: 'UNKNOWN_TRADE_STATUS',
      message: 'trade_status (none)',
    });
  });

  it('any other answer: unavailable, under its sub_code, code, or MALFORMED_RESPONSE', () => {
    assert.deepEqual(classifyTradeQuery(UNAVAILABLE_20000), { kind: 'unavailable', code: 'isp.unknow-error', message: '服务暂不可用' });
    assert.deepEqual(classifyTradeQuery(SYSTEM_ERROR), { kind: 'unavailable', code: 'ACQ.SYSTEM_ERROR', message: '系统错误' });
    assert.deepEqual(classifyTradeQuery({ code: '20000', msg: 'Service Currently Unavailable' }), {
      kind: 'unavailable',
      code: '20000',
      message: 'Service Currently Unavailable',
    });
    assert.deepEqual(classifyTradeQuery({}), { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'trade.query failed' });
  });
});

// ---------------------------------------------------------------------------------------------
// alipay.trade.fastpay.refund.query

// RECORDED
const REFUND_FOUND = {
  code: '10000',
  msg: 'Success',
  trade_no: '2026120522263442518057553988',
  out_trade_no: 'Amxalb1rybd2841a9097f',
  out_request_no: 'Ra7fa45921fbd7aaa',
  total_amount: '12.30',
  refund_amount: '12.30',
  refund_status: 'REFUND_SUCCESS',
};
// RECORDED: an out_request_no Alipay never saw.
const REFUND_UNSEEN = { code: '10000', msg: 'Success' };

describe('classifyRefundQuery (alipay.trade.fastpay.refund.query)', () => {
  const asked = { gatewayTradeNo: '2026120522263442518057553988', refundId: 'Ra7fa45921fbd7aaa' };
  const succeeded = {
    kind: 'answered',
    refund: { kind: 'succeeded', gatewayRefundId: '2026120522263442518057553988:Ra7fa45921fbd7aaa', amountMinor: 1230 },
  };

  it('the refund’s data with REFUND_SUCCESS: succeeded, named trade_no:out_request_no', () => {
    assert.deepEqual(classifyRefundQuery(REFUND_FOUND, asked), succeeded);
  });

  it('the refund’s data without refund_status: succeeded (a refund made with trade.refund)', () => {
    assert.deepEqual(classifyRefundQuery(edit(REFUND_FOUND, { refund_status: undefined }), asked), succeeded);
  });

  it('the refund’s data without trade_no: named by the trade asked about', () => {
    assert.deepEqual(classifyRefundQuery(edit(REFUND_FOUND, { trade_no: undefined }), asked), succeeded);
  });

  it('another refund_status: pending', () => {
    assert.deepEqual(classifyRefundQuery(edit(REFUND_FOUND, { refund_status: 'REFUND_PROCESSING' }), asked), {
      kind: 'answered',
      refund: { kind: 'pending' },
    });
  });

  it('a refund_amount that is not a CNY amount: unavailable MALFORMED_RESPONSE', () => {
    assert.deepEqual(classifyRefundQuery(edit(REFUND_FOUND, { refund_amount: '-12.30' }), asked), {
      kind: 'unavailable',
      code: 'MALFORMED_RESPONSE',
      message: 'refund_amount -12.30',
    });
  });

  it('10000 without the refund’s data, or no such trade: not found', () => {
    assert.deepEqual(classifyRefundQuery(REFUND_UNSEEN, asked), { kind: 'answered', refund: { kind: 'not_found' } });
    assert.deepEqual(classifyRefundQuery(QUERY_NOT_EXIST, asked), { kind: 'answered', refund: { kind: 'not_found' } });
  });

  it('any other answer: unavailable', () => {
    assert.deepEqual(classifyRefundQuery(UNAVAILABLE_20000, asked), {
      kind: 'unavailable',
      code: 'isp.unknow-error',
      message: '服务暂不可用',
    });
    assert.deepEqual(classifyRefundQuery({}, asked), { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'refund query failed' });
  });
});

describe('gatewayRefundIdOf', () => {
  it('names a refund by its trade and out_request_no', () => {
    assert.equal(gatewayRefundIdOf('2026120522263442518057553988', 'R1'), '2026120522263442518057553988:R1');
  });
});

// ---------------------------------------------------------------------------------------------
// Notifications

// RECORDED: a payment's trade_status_sync, 50.00.
const PAID_NOTIFICATION =
  'app_id=2021397902984880&charset=utf-8&subject=PayOnce+%E8%AE%A2%E5%8D%95+%E6%B5%8B%E8%AF%95&version=1.0&buyer_id=2088102000000001&trade_no=2026120522621567868255171510&notify_id=2808e4a19563954d1bcb13efcb1939d4&seller_id=2088778367805360&gmt_create=2026-12-05+23%3A51%3A14&auth_app_id=2021397902984880&gmt_payment=2026-12-05+23%3A51%3A14&notify_type=trade_status_sync&out_trade_no=Amxalb08qc202f640ff87&point_amount=0.00&total_amount=50.00&trade_status=TRADE_SUCCESS&fund_bill_list=%5B%7B%22amount%22%3A%2250.00%22%2C%22fundChannel%22%3A%22ALIPAYACCOUNT%22%7D%5D&invoice_amount=50.00&receipt_amount=50.00&buyer_pay_amount=50.00&notify_time=2026-12-05+23%3A51%3A14&sign_type=RSA2&sign=YIIgo9ED4U8BRCKX4MFVx9uSIJ%2BQiVnIrqTUvo0dFR%2FD9ZUozBm%2Fia3rKILmTC7Dmjulq%2FDfQZNVhGqmoo0ekMscTuPHXUoEQTb%2FLEWWgwJp%2B8A9iUoX3e4Ymr56tiZ3WqaZ2a1V9ZvSXs%2Fi85eJQBtzhB11C6%2B4vA18CHNS2n1GOcYdu10YkI4gcGEBcHnJ68U7sqfF3id%2BZ1D%2FjjD7LulIbOx4zSXtXUW7mf7fvbn8FohIJXfQnJmXci4YSqzl5mzQiR%2BckmNyCnLpg8j3emCkHqcaAagdeTxhWdxIIqjyYduU8WwN%2BdyVQ5Z6jdD8Uc1dXcbJxAsKebo0V2AZlg%3D%3D';
// RECORDED: the TRADE_CLOSED of a precreated trade that close() closed.
const CLOSED_NOTIFICATION =
  'app_id=2021397902984880&charset=utf-8&subject=PayOnce+%E8%AE%A2%E5%8D%95+%E6%B5%8B%E8%AF%95&version=1.0&trade_no=2026120522849424072358683873&gmt_close=2026-12-05+23%3A51%3A18&notify_id=473ac16aa6a0567e708c1663c684d34b&seller_id=2088778367805360&gmt_create=2026-12-05+23%3A51%3A18&auth_app_id=2021397902984880&notify_type=trade_status_sync&out_trade_no=Smxalb3ci4423e262c439&total_amount=24.80&trade_status=TRADE_CLOSED&notify_time=2026-12-05+23%3A51%3A18&sign_type=RSA2&sign=kOpookImEJEPCujFxAHbC%2BZYyngQsXDI9Ulog0X80IDgiTTdF9KS6EpIwWi0f60785IQtzqhG2EGeWjFMSdZx%2ByFKVon70tl8xREwcA%2F%2FZ%2FMQYQo6dHCHIAYQUeg9qmvEw9KgTJR%2F9ZE4WDWvR0c9GidN5F6RqcPiudvDUIYN0iSScoC6K3JCr4yiyf5kOqNEGrjrFMCYgCln4mPES9rYZQptzxDlJ2s%2B1q5VC7rLLNvkxLsMNppfXE%2B%2Fh9P4aRFJ%2Buce%2BIagWvWFsCnaFoRJBusNOzH1XGHnIlc77jTtfaqxUWpVq4dsnqciT8cKmxP%2FA%2B0eM9ARiQroVwjDAqbNg%3D%3D';
// RECORDED: a partial refund (10.00 of 30.00): trade_status stays TRADE_SUCCESS.
const PARTIAL_REFUND_NOTIFICATION =
  'app_id=2021397902984880&charset=utf-8&subject=PayOnce+%E8%AE%A2%E5%8D%95+%E6%B5%8B%E8%AF%95&version=1.0&buyer_id=2088102000000001&trade_no=2026120522233040497939055121&notify_id=fc69a27c84b2fea9cd06fac62195d807&seller_id=2088778367805360&gmt_create=2026-12-05+23%3A51%3A16&gmt_refund=2026-12-05+23%3A51%3A16.769&out_biz_no=R615a44b96f59bae1&refund_fee=10.00&auth_app_id=2021397902984880&gmt_payment=2026-12-05+23%3A51%3A16&notify_type=trade_status_sync&out_trade_no=Amxalb1zp1b237a6ba8ee&point_amount=0.00&total_amount=30.00&trade_status=TRADE_SUCCESS&fund_bill_list=%5B%7B%22amount%22%3A%2230.00%22%2C%22fundChannel%22%3A%22ALIPAYACCOUNT%22%7D%5D&invoice_amount=30.00&receipt_amount=30.00&buyer_pay_amount=30.00&notify_time=2026-12-05+23%3A51%3A16&sign_type=RSA2&sign=JGftcATPeAt1TqPPlMo9pe%2BO2CS%2Bx%2FWXci%2FMLDK%2BCHlBK2WebY4LvpawzreQ%2Fo%2F%2BrJjtgmsg0txnTgMbUbK%2BX2yt0A9lHLtvLvPxQGaqWf9MM9y1wYQ7nf53PgiaXMl65uJ70Hpi7IuILyWGyJ8W06xWyrWlcGVA2zH%2BIRNelYz1o2NQhk2PT7SqthCxs7JyhMu%2BagZ2fKTEQZwnbALIv3A8KNL1mRd9SBsWILASPj5S%2FBbPDAk%2B%2BdTg2%2BbS33Q91QicK%2BxwFuwI%2BjENQCDfLlwgSISGG%2BaXrAv1iiJeub6uzKzH1YrAJAQX62btJHtJV43vXfiSKpih6xUGI6IRSw%3D%3D';
// RECORDED: the last refund of the same trade (20.00 more): TRADE_CLOSED, refund_fee the running total.
const FINAL_REFUND_NOTIFICATION =
  'app_id=2021397902984880&charset=utf-8&subject=PayOnce+%E8%AE%A2%E5%8D%95+%E6%B5%8B%E8%AF%95&version=1.0&buyer_id=2088102000000001&trade_no=2026120522233040497939055121&gmt_close=2026-12-05+23%3A51%3A16&notify_id=531eaf207f05c3a57d46d5daf464cacd&seller_id=2088778367805360&gmt_create=2026-12-05+23%3A51%3A16&gmt_refund=2026-12-05+23%3A51%3A16.805&out_biz_no=R6b1177706aa6d1f0&refund_fee=30.00&auth_app_id=2021397902984880&gmt_payment=2026-12-05+23%3A51%3A16&notify_type=trade_status_sync&out_trade_no=Amxalb1zp1b237a6ba8ee&point_amount=0.00&total_amount=30.00&trade_status=TRADE_CLOSED&fund_bill_list=%5B%7B%22amount%22%3A%2230.00%22%2C%22fundChannel%22%3A%22ALIPAYACCOUNT%22%7D%5D&invoice_amount=30.00&receipt_amount=30.00&buyer_pay_amount=30.00&notify_time=2026-12-05+23%3A51%3A16&sign_type=RSA2&sign=Y3pUHDpMthzqxCoQ74BkKAiXgAYVT%2F4%2BaZ1EsTdwXlrgdwnyZN34o0yYBdEvvfos5GKE1rR%2FPm2eoSVNnXAu0AjrS6ifjgfUzUmiqxtlnqGLY6waaWsB2T9R1nxBEqS2ds01dwxceNiAUDokBYf9vVJDml%2FGc7nWfEjJZ2ormmFHJ7kwDg0sCNARNSprBivLEwi%2BgrLc2wTyAparTtXlkSz2YbJ8rfzasMBGGH%2FIFxkhYd%2BmuKkIVm7czC44k8otSYdpvuBb2fybn3J8j7s1W%2BoYZE1W5wPp4J7iJ82x9TEBbGBdK1DFA6flhNqJhsMdToYla3wmj9ra3xO3mk2hzA%3D%3D';

/** A recorded notification's fields, as readNotificationForm hands them on. */
function formOf(rawBody: string): Record<string, string> {
  const form = readNotificationForm(rawBody);
  assert.ok(form.kind === 'form', JSON.stringify(form));
  return form.fields;
}

/** A recorded body with fields replaced ('' keeps an empty value) or removed (undefined), as the sandbox's tool sends it. */
function editBody(rawBody: string, changes: Record<string, string | undefined>): string {
  const params = new URLSearchParams(rawBody);
  for (const [key, value] of Object.entries(changes)) {
    if (value === undefined) params.delete(key);
    else params.set(key, value);
  }
  return params.toString();
}

describe('readNotificationForm (before the signature)', () => {
  it('a notification as Alipay posts it: its fields, decoded, each once', () => {
    const fields = formOf(PAID_NOTIFICATION);
    assert.equal(fields.subject, 'PayOnce 订单 测试');
    assert.equal(fields.gmt_payment, '2026-12-05 23:51:14');
    assert.equal(fields.sign_type, 'RSA2');
    assert.equal(Object.keys(fields).length, 23);
  });

  it('a field twice: rejected, whichever value would be signed', () => {
    assert.deepEqual(readNotificationForm(`${PAID_NOTIFICATION}&total_amount=0.01`), {
      kind: 'rejected',
      reason: 'duplicate field total_amount',
    });
  });

  it('no sign, or an empty one: rejected', () => {
    assert.deepEqual(readNotificationForm(editBody(PAID_NOTIFICATION, { sign: undefined })), { kind: 'rejected', reason: 'missing sign' });
    assert.deepEqual(readNotificationForm(editBody(PAID_NOTIFICATION, { sign: '' })), { kind: 'rejected', reason: 'missing sign' });
  });

  it('sign_type RSA (SHA-1): rejected as a downgrade; no sign_type at all: read', () => {
    assert.deepEqual(readNotificationForm(editBody(PAID_NOTIFICATION, { sign_type: 'RSA' })), {
      kind: 'rejected',
      reason: 'unsupported sign_type RSA',
    });
    assert.equal(formOf(editBody(PAID_NOTIFICATION, { sign_type: undefined })).sign_type, undefined);
  });
});

describe('classifyNotification (after the signature)', () => {
  const paid = {
    kind: 'verified',
    notification: {
      gateway: 'alipay',
      eventId: 'Amxalb08qc202f640ff87',
      merchantId: '2021397902984880',
      outTradeNo: 'Amxalb08qc202f640ff87',
      status: 'succeeded',
      gatewayTradeNo: '2026120522621567868255171510',
      amountMinor: 5000,
      currency: 'CNY',
    },
  };

  it('TRADE_SUCCESS and TRADE_FINISHED: a succeeded payment, named by out_trade_no', () => {
    assert.deepEqual(classifyNotification(formOf(PAID_NOTIFICATION)), paid);
    assert.deepEqual(classifyNotification(formOf(editBody(PAID_NOTIFICATION, { trade_status: 'TRADE_FINISHED' }))), paid);
  });

  it('TRADE_CLOSED or WAIT_BUYER_PAY: status other', () => {
    const closed = classifyNotification(formOf(CLOSED_NOTIFICATION));
    assert.ok(closed.kind === 'verified', JSON.stringify(closed));
    assert.equal(closed.notification.status, 'other');
    assert.equal(closed.notification.amountMinor, 2480);
    const waiting = classifyNotification(formOf(editBody(PAID_NOTIFICATION, { trade_status: 'WAIT_BUYER_PAY' })));
    assert.ok(waiting.kind === 'verified' && waiting.notification.status === 'other', JSON.stringify(waiting));
  });

  it('a signed amount other than the order’s is read as signed (the checkout compares it with the order)', () => {
    const tampered = classifyNotification(formOf(editBody(PAID_NOTIFICATION, { total_amount: '0.01' })));
    assert.ok(tampered.kind === 'verified', JSON.stringify(tampered));
    assert.equal(tampered.notification.amountMinor, 1);
  });

  it('a required field missing or empty: rejected', () => {
    for (const field of ['app_id', 'out_trade_no', 'trade_no', 'trade_status', 'total_amount']) {
      assert.deepEqual(classifyNotification(formOf(editBody(PAID_NOTIFICATION, { [field]: undefined }))), {
        kind: 'rejected',
        reason: `missing ${field}`,
      });
      assert.deepEqual(classifyNotification(formOf(editBody(PAID_NOTIFICATION, { [field]: '' }))), {
        kind: 'rejected',
        reason: `missing ${field}`,
      });
    }
  });

  it('a total_amount that is not a CNY amount: rejected', () => {
    assert.deepEqual(classifyNotification(formOf(editBody(PAID_NOTIFICATION, { total_amount: '1.001' }))), {
      kind: 'rejected',
      reason: 'invalid total_amount 1.001',
    });
  });

  it('a partial refund’s (still TRADE_SUCCESS): a refund, never a second payment', () => {
    assert.deepEqual(classifyNotification(formOf(PARTIAL_REFUND_NOTIFICATION)), {
      kind: 'refund',
      notification: {
        gateway: 'alipay',
        eventId: 'Amxalb1zp1b237a6ba8ee:refund:R615a44b96f59bae1',
        merchantId: '2021397902984880',
        outTradeNo: 'Amxalb1zp1b237a6ba8ee',
        refundId: 'R615a44b96f59bae1',
        gatewayRefundId: '2026120522233040497939055121:R615a44b96f59bae1',
        status: 'succeeded',
        amountMinor: 1000,
        currency: 'CNY',
      },
    });
  });

  it('the last refund’s (TRADE_CLOSED): a refund, for refund_fee, the total refunded so far', () => {
    const verdict = classifyNotification(formOf(FINAL_REFUND_NOTIFICATION));
    assert.ok(verdict.kind === 'refund', JSON.stringify(verdict));
    assert.equal(verdict.notification.refundId, 'R6b1177706aa6d1f0');
    assert.equal(verdict.notification.amountMinor, 3000);
  });

  it('any one of refund_fee, out_biz_no, gmt_refund makes it a refund’s: without out_biz_no, rejected', () => {
    for (const only of ['refund_fee', 'gmt_refund']) {
      const others = {
        refund_fee: undefined,
        out_biz_no: undefined,
        gmt_refund: undefined,
        [only]: only === 'refund_fee' ? '10.00' : '2026-12-05 23:51:16.769',
      };
      assert.deepEqual(
        classifyNotification(formOf(editBody(PARTIAL_REFUND_NOTIFICATION, others))),
        { kind: 'rejected', reason: 'missing out_biz_no' },
        only,
      );
    }
    const outBizNoOnly = editBody(PARTIAL_REFUND_NOTIFICATION, { refund_fee: undefined, gmt_refund: undefined });
    assert.deepEqual(classifyNotification(formOf(outBizNoOnly)), { kind: 'rejected', reason: 'invalid refund_fee undefined' });
  });

  it('a refund_fee that is not a CNY amount: rejected', () => {
    assert.deepEqual(classifyNotification(formOf(editBody(PARTIAL_REFUND_NOTIFICATION, { refund_fee: '10.001' }))), {
      kind: 'rejected',
      reason: 'invalid refund_fee 10.001',
    });
  });
});
