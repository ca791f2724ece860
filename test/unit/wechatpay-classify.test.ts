/**
 * What the WeChat Pay adapter makes of each answer (server/payments/wechatpay/classify.ts and the
 * readers in wire.ts), from answers recorded off the PSP sandbox exactly as it sends them over the
 * wire (API v3: 下单, 查询订单, 关闭订单, 申请退款, 查询单笔退款, and decrypted notification
 * resources), plus the odd ones a real gateway or a proxy may send: missing fields, unknown codes,
 * another order's answer, another amount. No database, no sandbox, no network.
 *
 *   node --import tsx --test test/unit/wechatpay-classify.test.ts
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  classifyAfterRefusedClose,
  classifyBeforeClose,
  classifyClose,
  classifyCreate,
  classifyLookup,
  classifyNotification,
  classifyPolled,
  classifyRefund,
  classifyRefundQuery,
  classifyUsedOutTradeNo,
  paidOutcome,
  queryOutcome,
  readEnvelope,
  refundStatus,
  tradeStatus,
  type Lookup,
} from '@/server/payments/wechatpay/classify';
import { parseJson, readRefund, readTransaction, type Json, type Transaction, type WechatRefund } from '@/server/payments/wechatpay/wire';

// ---------------------------------------------------------------------------------------------
// Recorded answers: the bodies as the sandbox sent them (test/payments/wechatpay-*.test.ts runs).

const MCHID = '1925352975';

/** 查询订单 of an order the ok test buyer paid. */
const QUERY_SUCCESS = `{"appid":"wx6728a2027d1f8d91","mchid":"1925352975","out_trade_no":"PO6893077876880DE45E","transaction_id":"4200127740202612055589664912","trade_type":"NATIVE","trade_state":"SUCCESS","trade_state_desc":"支付成功","bank_type":"OTHERS","attach":"sandbox_buyer=ok","success_time":"2026-12-05T23:54:39+08:00","payer":{"openid":"oSandbox_TestBuyer_Ok_000001"},"amount":{"total":1999,"payer_total":1999,"currency":"CNY","payer_currency":"CNY"}}`;
/** 查询订单 after the insufficient_funds test buyer failed to pay: no transaction_id. */
const QUERY_PAYERROR = `{"appid":"wx6728a2027d1f8d91","mchid":"1925352975","out_trade_no":"PO2144B52F47784AF51E","trade_type":"NATIVE","trade_state":"PAYERROR","trade_state_desc":"支付失败，用户余额不足","attach":"sandbox_buyer=insufficient_funds","payer":{"openid":"oSandbox_TestBuyer_Poor_0002"},"amount":{"total":1230,"currency":"CNY","payer_currency":"CNY"}}`;
const QUERY_NOTPAY = `{"appid":"wx6728a2027d1f8d91","mchid":"1925352975","out_trade_no":"PO58B0B971508648A33C","trade_type":"NATIVE","trade_state":"NOTPAY","trade_state_desc":"订单未支付","amount":{"total":1230,"currency":"CNY","payer_currency":"CNY"}}`;
const QUERY_USERPAYING = `{"appid":"wx6728a2027d1f8d91","mchid":"1925352975","out_trade_no":"PO948D8B0CF2A95FF753","trade_type":"NATIVE","trade_state":"USERPAYING","trade_state_desc":"用户支付中","amount":{"total":1230,"currency":"CNY","payer_currency":"CNY"}}`;
const QUERY_CLOSED = `{"appid":"wx6728a2027d1f8d91","mchid":"1925352975","out_trade_no":"POBE0CF27F82B1174D76","trade_type":"NATIVE","trade_state":"CLOSED","trade_state_desc":"订单已关闭","attach":"sandbox_buyer=account_restricted","payer":{"openid":"oSandbox_TestBuyer_Restr_003"},"amount":{"total":1230,"currency":"CNY","payer_currency":"CNY"}}`;
const QUERY_NOT_EXIST = `{"code":"ORDER_NOT_EXIST","message":"订单不存在"}`;

const CREATED = `{"code_url":"weixin://wxpay/bizpayurl?pr=q7eEMV4"}`;
const OUT_TRADE_NO_USED = `{"code":"OUT_TRADE_NO_USED","message":"商户订单号重复：该订单已支付"}`;
const ORDER_CLOSED = `{"code":"ORDER_CLOSED","message":"当前订单已关闭，请重新下单"}`;
const PARAM_ERROR = `{"code":"PARAM_ERROR","message":"参数错误: /out_trade_no 要求6-32个字符内，只能是数字、大小写字母_-|*","detail":{"location":"body","field":"/out_trade_no","issue":"要求6-32个字符内，只能是数字、大小写字母_-|*"}}`;
const APPID_MCHID_NOT_MATCH = `{"code":"APPID_MCHID_NOT_MATCH","message":"AppID和mch_id不匹配"}`;
const ORDERPAID = `{"code":"ORDERPAID","message":"订单已支付，不能发起关单，请当作已支付的正常交易"}`;

/** 申请退款 answered at once (PROCESSING), and read back by 查询单笔退款 once final (SUCCESS). */
const REFUND_PROCESSING = `{"refund_id":"50273178082026120563333760588","out_refund_no":"RFDFAD1E538144B5FE089AF5B5","transaction_id":"4200582642202612052996853324","out_trade_no":"POE58D65F19DD34BDDBD","channel":"ORIGINAL","user_received_account":"支付用户零钱","create_time":"2026-12-05T23:55:05+08:00","status":"PROCESSING","funds_account":"AVAILABLE","amount":{"total":2100,"refund":2100,"from":[],"payer_total":2100,"payer_refund":2100,"settlement_refund":2100,"settlement_total":2100,"discount_refund":0,"currency":"CNY","refund_fee":0},"promotion_detail":[]}`;
const REFUND_SUCCESS = `{"refund_id":"50640621482026120508859446592","out_refund_no":"RF98950C09207E29982E8785F2","transaction_id":"4200286189202612058900580389","out_trade_no":"PO8E521010536A07DAE9","channel":"ORIGINAL","user_received_account":"支付用户零钱","success_time":"2026-12-05T23:55:14+08:00","create_time":"2026-12-05T23:55:14+08:00","status":"SUCCESS","funds_account":"AVAILABLE","amount":{"total":1230,"refund":1230,"from":[],"payer_total":1230,"payer_refund":1230,"settlement_refund":1230,"settlement_total":1230,"discount_refund":0,"currency":"CNY","refund_fee":0},"promotion_detail":[]}`;
const REFUND_TOO_MUCH = `{"code":"INVALID_REQUEST","message":"申请退款金额超过订单可退金额"}`;
const REFUND_ORDER_UNKNOWN = `{"code":"RESOURCE_NOT_EXISTS","message":"订单不存在：请检查订单号是否正确且是否已支付，未支付的订单不能发起退款"}`;
const REFUND_NOT_EXIST = `{"code":"RESOURCE_NOT_EXISTS","message":"退款单不存在"}`;

/** A TRANSACTION.SUCCESS notification body (its signature checked elsewhere) and its decrypted resource. */
const TRANSACTION_ENVELOPE = `{"id":"6ef11e11-154a-4a78-acd8-1dd90cbdcc79","create_time":"2026-12-05T23:55:44+08:00","resource_type":"encrypt-resource","event_type":"TRANSACTION.SUCCESS","summary":"支付成功","resource":{"original_type":"transaction","algorithm":"AEAD_AES_256_GCM","ciphertext":"BYKgS0/Lk3HeIFqap4rT9q89R/GrmIqc4NNcds+P4R46g8c2b42ZmlMU6DGFWpMjObuItRZWVvu4MSOIKTfaGdTnWGAdMufN1NyeFyzXGJi26OmcXLVsuyhkMzwKeAOvG7iOoxNF/OtDpLubWjF8GJIHsowWKp3tSnLtj+klWpbERLTJZP/hNHR36ImjyXd4t1bIszBi3KWqIDnPRydRcIzsShO/7ooZcWfLgWeKAMw4EP2alEHQuyP10UJAQN3j+JIvUiYkuMZ4ko/50lBhGaoRVsSWVyPCdqz+uUb/f2c9n8UqTxhpvKh044gP9zlHtHEE73b/lHbWrjSBtVdzhWhJwkqOfjfykAa29/eZRl+3RDI/HrR4oNQskUVa0eRx/jSeyS2E/VMge+2qH9KuRzFtbAwxdRDP2zylYjbgf0DPImb+vwe7YDbLlsWIDhRtYDCd9DJeTjapygKnf34Sh/XHbD06Sgj+j5oiXUNej0j0Jb8RiFP59KZE4JOZHJhle4xkNSgiUMaXiD+8XUTSqBC26u8b9+y+47aQcH4j8ud9ZapSyZekHEeNKGxqf/2hTd/IRXGOzK5sv37u4mlegNPCSWrv67qtzOQ=","associated_data":"transaction","nonce":"saQoXVhEUj4a"}}`;
const TRANSACTION_RESOURCE = `{"appid":"wx6728a2027d1f8d91","mchid":"1925352975","out_trade_no":"PO00000001A246EB20BE","transaction_id":"4200243484202612051334161812","trade_type":"NATIVE","trade_state":"SUCCESS","trade_state_desc":"支付成功","bank_type":"OTHERS","attach":"sandbox_buyer=ok","success_time":"2026-12-05T23:55:44+08:00","payer":{"openid":"oSandbox_TestBuyer_Ok_000001"},"amount":{"total":1230,"payer_total":1230,"currency":"CNY","payer_currency":"CNY"}}`;
/** A REFUND.SUCCESS notification body and its decrypted resource (which carries no currency). */
const REFUND_ENVELOPE = `{"id":"52951389-c01b-42b5-b5cd-0f0018d885df","create_time":"2026-12-05T23:55:44+08:00","resource_type":"encrypt-resource","event_type":"REFUND.SUCCESS","summary":"退款成功","resource":{"original_type":"refund","algorithm":"AEAD_AES_256_GCM","ciphertext":"Svkb22jS/to+zG0MU6t3bttuZiRK7YEjcobx9wO4vLM4D9TjIOYsRXRn3aZWThfHvyTCUW6KbNID0ZfnpatIw6Uzj/1TpdkX+3fOzKqhQ60q0PFle3eOWx7INYiwODVDGjYwb1kMdijZTsWHnY4Z97F4xjLeyN07727iYCcr6sCR/enf4uWSsxfvrhvBW2QF19lq2Ip9eWpqbad4785F80nao7X1qTAblwJPQkJwHoLMpOcZ0mufq6BnEtjHGE0n8pyGiSXQQycsMjV9VdcNaVZe4uP2VVV0e1vN33Xll1IkWoMOWYxE94h9FUmWNzK+VNot9TO23vVdE/JAoY+NUHIOEoKfvdoVPzO1Q/2tLsBB29+e0TuyBCA2G+oTd1sIm/8OFnvNwvjqjfw+aZ+FyErv/inYZ9WFoOp9doJLrzZsxay4xeBGpZBfvj9TCukbPC0bQf3Do5N0fm2iN+O+C0z2UztOdpX2IXdm/hx30W4OMiJoQ7Or7lG4IShRJHEVG0rvErtBDDvDi8LYfmcIOYZO","associated_data":"refund","nonce":"oJzfuEX6YT8C"}}`;
const REFUND_RESOURCE = `{"mchid":"1925352975","out_trade_no":"PO00000001A246EB20BE","transaction_id":"4200243484202612051334161812","out_refund_no":"RF0123456789ABCDEF012345","refund_id":"50057516662026120572174799302","refund_status":"SUCCESS","success_time":"2026-12-05T23:55:44+08:00","user_received_account":"支付用户零钱","amount":{"total":1230,"refund":1230,"payer_total":1230,"payer_refund":1230}}`;

// ---------------------------------------------------------------------------------------------
// Helpers

/** A recorded body as the adapter parses it. */
function wire(text: string): Json | null {
  const parsed = parseJson(text);
  assert.notEqual(parsed, undefined, 'a recorded answer is a JSON object');
  return parsed ?? null;
}

/** A recorded body with some fields changed (a field set to undefined is left out). */
function altered(text: string, changes: Json): Json {
  const body = { ...wire(text) };
  for (const [key, value] of Object.entries(changes)) {
    if (value === undefined) delete body[key];
    else body[key] = value;
  }
  return body;
}

/** The order a recorded query answer is about, as the adapter asked for it. */
function askedFor(text: string): { outTradeNo: string; mchid: string } {
  return { outTradeNo: String(wire(text)?.out_trade_no), mchid: MCHID };
}

function transaction(text: string, changes: Json = {}): Transaction {
  const read = readTransaction(altered(text, changes));
  if (typeof read === 'string') assert.fail(read);
  return read;
}

function found(text: string, changes: Json = {}): Lookup {
  return { kind: 'found', transaction: transaction(text, changes) };
}

function refundOf(text: string, changes: Json = {}): WechatRefund {
  const read = readRefund(altered(text, changes), 'status');
  if (typeof read === 'string') assert.fail(read);
  return read;
}

/** The refund a recorded refund answer is about, as the adapter asked for it. */
function askedRefund(text: string): { outTradeNo: string; gatewayTradeNo: string; refundId: string; amountMinor: number } {
  const body = wire(text) as { out_trade_no: string; transaction_id: string; out_refund_no: string; amount: { refund: number } };
  return {
    outTradeNo: body.out_trade_no,
    gatewayTradeNo: body.transaction_id,
    refundId: body.out_refund_no,
    amountMinor: body.amount.refund,
  };
}

const unavailable: Lookup = { kind: 'unavailable', code: 'TIMEOUT', message: 'The operation was aborted due to timeout' };
const notFound: Lookup = { kind: 'not_found' };

// ---------------------------------------------------------------------------------------------
// The transaction

describe('parseJson', () => {
  it('reads an object, an empty body as null, and anything else as undefined', () => {
    assert.deepEqual(parseJson(CREATED), { code_url: 'weixin://wxpay/bizpayurl?pr=q7eEMV4' });
    assert.equal(parseJson(''), null);
    assert.equal(parseJson('<html>Bad Gateway</html>'), undefined);
    assert.equal(parseJson('[1,2]'), undefined);
    assert.equal(parseJson('null'), undefined);
    assert.equal(parseJson('"text"'), undefined);
  });
});

describe('readTransaction', () => {
  it('reads a paid order with its transaction id, amount and currency', () => {
    assert.deepEqual(readTransaction(wire(QUERY_SUCCESS)), {
      mchid: MCHID,
      outTradeNo: 'PO6893077876880DE45E',
      state: 'SUCCESS',
      stateDesc: '支付成功',
      transactionId: '4200127740202612055589664912',
      total: 1999,
      currency: 'CNY',
    });
  });

  it('reads an unpaid order without a transaction id', () => {
    const read = readTransaction(wire(QUERY_PAYERROR));
    assert.ok(typeof read !== 'string');
    assert.equal(read.state, 'PAYERROR');
    assert.equal(read.stateDesc, '支付失败，用户余额不足');
    assert.equal(read.transactionId, undefined);
  });

  it('names the state when trade_state_desc is missing', () => {
    assert.equal(transaction(QUERY_NOTPAY, { trade_state_desc: undefined }).stateDesc, 'NOTPAY');
  });

  it('refuses an unknown or missing trade_state', () => {
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { trade_state: 'PAID' })), 'unknown trade_state PAID');
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { trade_state: undefined })), 'unknown trade_state (none)');
    assert.equal(readTransaction(null), 'unknown trade_state (none)');
  });

  it('refuses a missing amount', () => {
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { amount: undefined })), 'missing amount');
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { amount: null })), 'missing amount');
  });

  it('refuses an amount.total that is not a whole non-negative number of fen', () => {
    for (const total of ['1999', 19.99, -1, undefined]) {
      const read = readTransaction(altered(QUERY_SUCCESS, { amount: { total, currency: 'CNY' } }));
      assert.equal(read, `invalid amount.total ${String(total)}`);
    }
  });

  it('refuses a missing amount.currency', () => {
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { amount: { total: 1999 } })), 'missing amount.currency');
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { amount: { total: 1999, currency: '' } })), 'missing amount.currency');
  });

  it('refuses a missing mchid or out_trade_no', () => {
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { mchid: undefined })), 'missing mchid');
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { out_trade_no: '' })), 'missing out_trade_no');
  });

  it('refuses SUCCESS or REFUND without a transaction_id: money moved, and there is no proof to keep', () => {
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { transaction_id: undefined })), 'SUCCESS without transaction_id');
    assert.equal(readTransaction(altered(QUERY_SUCCESS, { trade_state: 'REFUND', transaction_id: '' })), 'REFUND without transaction_id');
  });
});

describe('classifyLookup (查询订单)', () => {
  it('finds the order asked about', () => {
    assert.deepEqual(classifyLookup(200, wire(QUERY_SUCCESS), askedFor(QUERY_SUCCESS)), found(QUERY_SUCCESS));
  });

  it('is not_found on 404 ORDER_NOT_EXIST', () => {
    assert.deepEqual(classifyLookup(404, wire(QUERY_NOT_EXIST), askedFor(QUERY_SUCCESS)), { kind: 'not_found' });
  });

  it('is unavailable on any other status, with WeChat’s code or the status', () => {
    assert.deepEqual(classifyLookup(400, wire(PARAM_ERROR), askedFor(QUERY_SUCCESS)), {
      kind: 'unavailable',
      code: 'PARAM_ERROR',
      message: wire(PARAM_ERROR)?.message,
    });
    assert.deepEqual(classifyLookup(404, null, askedFor(QUERY_SUCCESS)), { kind: 'unavailable', code: 'HTTP_404', message: 'HTTP 404' });
    assert.deepEqual(classifyLookup(202, wire(QUERY_SUCCESS), askedFor(QUERY_SUCCESS)), {
      kind: 'unavailable',
      code: 'HTTP_202',
      message: 'HTTP 202',
    });
  });

  it('is unavailable for a 200 it cannot read', () => {
    assert.deepEqual(classifyLookup(200, altered(QUERY_SUCCESS, { trade_state: 'PAID' }), askedFor(QUERY_SUCCESS)), {
      kind: 'unavailable',
      code: 'MALFORMED_RESPONSE',
      message: 'unknown trade_state PAID',
    });
  });

  it('is unavailable for an answer about another order or another merchant', () => {
    const other = { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'query answered for another order' };
    assert.deepEqual(classifyLookup(200, wire(QUERY_SUCCESS), askedFor(QUERY_NOTPAY)), other);
    assert.deepEqual(classifyLookup(200, wire(QUERY_SUCCESS), { ...askedFor(QUERY_SUCCESS), mchid: '1900000000' }), other);
  });
});

describe('tradeStatus and queryOutcome', () => {
  it('is pending while the order can still be paid (NOTPAY, USERPAYING, PAYERROR)', () => {
    for (const text of [QUERY_NOTPAY, QUERY_USERPAYING, QUERY_PAYERROR])
      assert.deepEqual(tradeStatus(transaction(text)), { kind: 'pending' });
  });

  it('is succeeded for SUCCESS and for REFUND, which was paid first', () => {
    const paid = { kind: 'succeeded', gatewayTradeNo: '4200127740202612055589664912', amountMinor: 1999, currency: 'CNY' };
    assert.deepEqual(tradeStatus(transaction(QUERY_SUCCESS)), paid);
    assert.deepEqual(tradeStatus(transaction(QUERY_SUCCESS, { trade_state: 'REFUND', trade_state_desc: '转入退款' })), paid);
  });

  it('is closed for CLOSED and REVOKED', () => {
    assert.deepEqual(tradeStatus(transaction(QUERY_CLOSED)), { kind: 'closed' });
    assert.deepEqual(tradeStatus(transaction(QUERY_CLOSED, { trade_state: 'REVOKED' })), { kind: 'closed' });
  });

  it('answers what the lookup found, or is unavailable', () => {
    assert.deepEqual(queryOutcome(unavailable), unavailable);
    assert.deepEqual(queryOutcome(notFound), { kind: 'answered', trade: { kind: 'not_found' } });
    assert.deepEqual(queryOutcome(found(QUERY_CLOSED)), { kind: 'answered', trade: { kind: 'closed' } });
  });
});

// ---------------------------------------------------------------------------------------------
// Charge

describe('classifyCreate (Native下单)', () => {
  it('is created with the code_url', () => {
    assert.deepEqual(classifyCreate(200, wire(CREATED)), { kind: 'created', codeUrl: 'weixin://wxpay/bizpayurl?pr=q7eEMV4' });
  });

  it('is indeterminate for a 200 without a code_url', () => {
    assert.deepEqual(classifyCreate(200, {}), {
      kind: 'indeterminate',
      code: 'MALFORMED_RESPONSE',
      message: 'create answered 200 without code_url',
    });
    assert.equal(classifyCreate(200, null).kind, 'indeterminate');
  });

  it('declines what cannot succeed by sending it again, ORDER_CLOSED included', () => {
    assert.deepEqual(classifyCreate(400, wire(ORDER_CLOSED)), {
      kind: 'declined',
      code: 'ORDER_CLOSED',
      message: '当前订单已关闭，请重新下单',
    });
    assert.deepEqual(classifyCreate(400, wire(PARAM_ERROR)), {
      kind: 'declined',
      code: 'PARAM_ERROR',
      message: wire(PARAM_ERROR)?.message,
    });
    for (const code of ['INVALID_REQUEST', 'RULE_LIMIT', 'TRADE_ERROR', 'NOT_ENOUGH', 'ACCOUNT_ERROR']) {
      assert.deepEqual(classifyCreate(403, { code, message: 'm' }), { kind: 'declined', code, message: 'm' }, code);
    }
  });

  it('is retryable when our configuration is refused (nothing was processed)', () => {
    assert.deepEqual(classifyCreate(400, wire(APPID_MCHID_NOT_MATCH)), {
      kind: 'retryable',
      code: 'APPID_MCHID_NOT_MATCH',
      message: 'AppID和mch_id不匹配',
    });
    for (const code of ['MCH_NOT_EXISTS', 'NO_AUTH']) {
      assert.deepEqual(classifyCreate(403, { code, message: 'm' }), { kind: 'retryable', code, message: 'm' }, code);
    }
  });

  it('hands 403 OUT_TRADE_NO_USED on to a query', () => {
    assert.deepEqual(classifyCreate(403, wire(OUT_TRADE_NO_USED)), { kind: 'out_trade_no_used', message: '商户订单号重复：该订单已支付' });
  });

  it('is indeterminate for an error code WeChat does not document', () => {
    assert.deepEqual(classifyCreate(403, { code: 'SOMETHING_NEW', message: '?' }), {
      kind: 'indeterminate',
      code: 'SOMETHING_NEW',
      message: '?',
    });
    // Not a table's inherited property either.
    assert.deepEqual(classifyCreate(400, { code: 'toString' }), { kind: 'indeterminate', code: 'toString', message: 'HTTP 400' });
  });

  it('is indeterminate for a documented code under a status that is not 4xx, or a 4xx without a code', () => {
    assert.deepEqual(classifyCreate(302, wire(PARAM_ERROR)), {
      kind: 'indeterminate',
      code: 'PARAM_ERROR',
      message: wire(PARAM_ERROR)?.message,
    });
    assert.deepEqual(classifyCreate(404, null), { kind: 'indeterminate', code: 'HTTP_404', message: 'HTTP 404' });
  });
});

describe('paidOutcome', () => {
  it('is succeeded for exactly the amount and currency asked', () => {
    assert.deepEqual(paidOutcome(transaction(QUERY_SUCCESS), { amountMinor: 1999, currency: 'CNY' }), {
      kind: 'succeeded',
      gatewayTradeNo: '4200127740202612055589664912',
      amountMinor: 1999,
      currency: 'CNY',
    });
  });

  it('is indeterminate (AMOUNT_MISMATCH) for another amount', () => {
    assert.deepEqual(paidOutcome(transaction(QUERY_SUCCESS), { amountMinor: 2000, currency: 'CNY' }), {
      kind: 'indeterminate',
      code: 'AMOUNT_MISMATCH',
      message: 'order paid 1999 CNY, asked 2000 CNY',
    });
  });

  it('is indeterminate (AMOUNT_MISMATCH) for another currency', () => {
    const outcome = paidOutcome(transaction(QUERY_SUCCESS), { amountMinor: 1999, currency: 'USD' });
    assert.ok(outcome.kind === 'indeterminate' && outcome.code === 'AMOUNT_MISMATCH', JSON.stringify(outcome));
  });
});

describe('classifyPolled (the order a test buyer pays, queried)', () => {
  const asked = { amountMinor: 1999, currency: 'CNY' };

  it('is succeeded once paid, for the amount asked', () => {
    assert.equal(classifyPolled(found(QUERY_SUCCESS), asked).kind, 'succeeded');
    assert.equal(classifyPolled(found(QUERY_SUCCESS, { trade_state: 'REFUND' }), asked).kind, 'succeeded');
  });

  it('is indeterminate when paid for another amount', () => {
    const outcome = classifyPolled(found(QUERY_SUCCESS), { ...asked, amountMinor: 1 });
    assert.ok(outcome.kind === 'indeterminate' && outcome.code === 'AMOUNT_MISMATCH');
  });

  it('declines PAYERROR with WeChat’s reason', () => {
    assert.deepEqual(classifyPolled(found(QUERY_PAYERROR), asked), {
      kind: 'declined',
      code: 'PAYERROR',
      message: '支付失败，用户余额不足',
    });
  });

  it('declines a CLOSED or REVOKED order', () => {
    assert.deepEqual(classifyPolled(found(QUERY_CLOSED), asked), { kind: 'declined', code: 'CLOSED', message: '订单已关闭' });
    assert.deepEqual(classifyPolled(found(QUERY_CLOSED, { trade_state: 'REVOKED', trade_state_desc: '已撤销' }), asked), {
      kind: 'declined',
      code: 'REVOKED',
      message: '已撤销',
    });
  });

  it('keeps waiting while NOTPAY or USERPAYING', () => {
    assert.deepEqual(classifyPolled(found(QUERY_NOTPAY), asked), { kind: 'waiting', code: 'NOTPAY', message: '订单未支付' });
    assert.deepEqual(classifyPolled(found(QUERY_USERPAYING), asked), { kind: 'waiting', code: 'USERPAYING', message: '用户支付中' });
  });

  it('keeps waiting when the order just created is not found, or the query fails', () => {
    assert.deepEqual(classifyPolled(notFound, asked), {
      kind: 'waiting',
      code: 'ORDER_NOT_EXIST',
      message: 'created order not found by query',
    });
    assert.deepEqual(classifyPolled(unavailable, asked), { kind: 'waiting', code: 'TIMEOUT', message: unavailable.message });
  });
});

describe('classifyUsedOutTradeNo (403 OUT_TRADE_NO_USED, then a query)', () => {
  const asked = { amountMinor: 1999, currency: 'CNY' };
  const used = '商户订单号重复：该订单已支付';

  it('is succeeded when the order is paid for the amount asked (a retry whose answer was lost)', () => {
    assert.equal(classifyUsedOutTradeNo(found(QUERY_SUCCESS), asked, used).kind, 'succeeded');
    assert.equal(classifyUsedOutTradeNo(found(QUERY_SUCCESS, { trade_state: 'REFUND' }), asked, used).kind, 'succeeded');
  });

  it('is indeterminate when the order is paid for another amount', () => {
    const outcome = classifyUsedOutTradeNo(found(QUERY_SUCCESS), { ...asked, amountMinor: 1231 }, used);
    assert.ok(outcome.kind === 'indeterminate' && outcome.code === 'AMOUNT_MISMATCH', JSON.stringify(outcome));
  });

  it('is indeterminate while someone pays the order (USERPAYING)', () => {
    assert.deepEqual(classifyUsedOutTradeNo(found(QUERY_USERPAYING), asked, used), {
      kind: 'indeterminate',
      code: 'OUT_TRADE_NO_USED',
      message: `${used}; order is USERPAYING`,
    });
  });

  it('declines changed parameters on an unpaid or closed order', () => {
    for (const text of [QUERY_NOTPAY, QUERY_PAYERROR, QUERY_CLOSED]) {
      const state = String(wire(text)?.trade_state);
      assert.deepEqual(classifyUsedOutTradeNo(found(text), asked, used), {
        kind: 'declined',
        code: 'OUT_TRADE_NO_USED',
        message: `${used} (order is ${state})`,
      });
    }
    assert.equal(classifyUsedOutTradeNo(found(QUERY_CLOSED, { trade_state: 'REVOKED' }), asked, used).kind, 'declined');
  });

  it('is indeterminate when the query fails or finds no order', () => {
    assert.deepEqual(classifyUsedOutTradeNo(unavailable, asked, used), {
      kind: 'indeterminate',
      code: 'OUT_TRADE_NO_USED',
      message: `${used}; query failed: ${unavailable.message}`,
    });
    assert.deepEqual(classifyUsedOutTradeNo(notFound, asked, used), {
      kind: 'indeterminate',
      code: 'OUT_TRADE_NO_USED',
      message: `${used}; query found no order`,
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Close

describe('classifyBeforeClose (the query before a close)', () => {
  it('closes only an order nobody is paying: NOTPAY, PAYERROR', () => {
    assert.deepEqual(classifyBeforeClose(found(QUERY_NOTPAY)), { kind: 'open' });
    assert.deepEqual(classifyBeforeClose(found(QUERY_PAYERROR)), { kind: 'open' });
  });

  it('is already_paid with the charge for SUCCESS and REFUND', () => {
    const paid = {
      kind: 'already_paid',
      charges: [{ gatewayTradeNo: '4200127740202612055589664912', amountMinor: 1999, currency: 'CNY' }],
    };
    assert.deepEqual(classifyBeforeClose(found(QUERY_SUCCESS)), paid);
    assert.deepEqual(classifyBeforeClose(found(QUERY_SUCCESS, { trade_state: 'REFUND' })), paid);
  });

  it('is indeterminate while the buyer is paying (USERPAYING): no close is sent under them', () => {
    assert.deepEqual(classifyBeforeClose(found(QUERY_USERPAYING)), {
      kind: 'indeterminate',
      code: 'USERPAYING',
      message: '用户支付中: the buyer is paying now',
    });
  });

  it('is closed for a CLOSED or REVOKED order, and for one WeChat never saw', () => {
    assert.deepEqual(classifyBeforeClose(found(QUERY_CLOSED)), { kind: 'closed' });
    assert.deepEqual(classifyBeforeClose(found(QUERY_CLOSED, { trade_state: 'REVOKED' })), { kind: 'closed' });
    assert.deepEqual(classifyBeforeClose(notFound), { kind: 'closed' });
  });

  it('is indeterminate when the query fails', () => {
    assert.deepEqual(classifyBeforeClose(unavailable), {
      kind: 'indeterminate',
      code: 'TIMEOUT',
      message: `query before close failed: ${unavailable.message}`,
    });
  });
});

describe('classifyClose (关闭订单)', () => {
  it('is closed on 204', () => {
    assert.deepEqual(classifyClose(204, null), { kind: 'closed' });
  });

  it('is closed when WeChat says nothing can be paid under the out_trade_no', () => {
    assert.deepEqual(classifyClose(400, wire(ORDER_CLOSED)), { kind: 'closed' });
    assert.deepEqual(classifyClose(404, wire(QUERY_NOT_EXIST)), { kind: 'closed' });
    assert.deepEqual(classifyClose(400, { code: 'ORDERCLOSED', message: '订单已关闭' }), { kind: 'closed' });
  });

  it('hands a refusal as paid (ORDERPAID, ORDER_PAID, TRADE_ERROR) on to a query', () => {
    assert.deepEqual(classifyClose(400, wire(ORDERPAID)), {
      kind: 'refused',
      code: 'ORDERPAID',
      message: '订单已支付，不能发起关单，请当作已支付的正常交易',
    });
    for (const code of ['ORDER_PAID', 'TRADE_ERROR']) {
      assert.deepEqual(classifyClose(400, { code, message: 'm' }), { kind: 'refused', code, message: 'm' }, code);
    }
  });

  it('is indeterminate for an undocumented code, a documented one under a status that is not 4xx, or no code', () => {
    assert.deepEqual(classifyClose(400, wire(PARAM_ERROR)), {
      kind: 'indeterminate',
      code: 'PARAM_ERROR',
      message: wire(PARAM_ERROR)?.message,
    });
    assert.deepEqual(classifyClose(200, wire(ORDER_CLOSED)), {
      kind: 'indeterminate',
      code: 'ORDER_CLOSED',
      message: '当前订单已关闭，请重新下单',
    });
    assert.deepEqual(classifyClose(200, null), { kind: 'indeterminate', code: 'HTTP_200', message: 'HTTP 200' });
    assert.deepEqual(classifyClose(400, { code: 'constructor' }), { kind: 'indeterminate', code: 'constructor', message: 'HTTP 400' });
  });
});

describe('classifyAfterRefusedClose (the query after a refused close)', () => {
  it('is already_paid when the buyer paid between the query and the close', () => {
    assert.deepEqual(classifyAfterRefusedClose(found(QUERY_SUCCESS), 'ORDERPAID', 'm'), {
      kind: 'already_paid',
      charges: [{ gatewayTradeNo: '4200127740202612055589664912', amountMinor: 1999, currency: 'CNY' }],
    });
    assert.equal(classifyAfterRefusedClose(found(QUERY_SUCCESS, { trade_state: 'REFUND' }), 'ORDERPAID', 'm').kind, 'already_paid');
  });

  it('is closed when the order turns out closed', () => {
    assert.deepEqual(classifyAfterRefusedClose(found(QUERY_CLOSED), 'TRADE_ERROR', 'm'), { kind: 'closed' });
    assert.deepEqual(classifyAfterRefusedClose(found(QUERY_CLOSED, { trade_state: 'REVOKED' }), 'TRADE_ERROR', 'm'), { kind: 'closed' });
  });

  it('is indeterminate when the order is still payable', () => {
    for (const text of [QUERY_NOTPAY, QUERY_PAYERROR, QUERY_USERPAYING]) {
      const state = String(wire(text)?.trade_state);
      assert.deepEqual(classifyAfterRefusedClose(found(text), 'ORDERPAID', 'm'), {
        kind: 'indeterminate',
        code: 'ORDERPAID',
        message: `m (order is ${state})`,
      });
    }
  });

  it('is indeterminate when the query fails or finds nothing', () => {
    assert.deepEqual(classifyAfterRefusedClose(unavailable, 'ORDERPAID', 'm'), {
      kind: 'indeterminate',
      code: 'ORDERPAID',
      message: 'm; query after close: unavailable',
    });
    assert.deepEqual(classifyAfterRefusedClose(notFound, 'ORDERPAID', 'm'), {
      kind: 'indeterminate',
      code: 'ORDERPAID',
      message: 'm; query after close: not_found',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Refunds

describe('readRefund', () => {
  it('reads a refund answer (status) and a refund resource (refund_status)', () => {
    assert.deepEqual(readRefund(wire(REFUND_PROCESSING), 'status'), {
      refundId: '50273178082026120563333760588',
      outRefundNo: 'RFDFAD1E538144B5FE089AF5B5',
      outTradeNo: 'POE58D65F19DD34BDDBD',
      transactionId: '4200582642202612052996853324',
      status: 'PROCESSING',
      refund: 2100,
      total: 2100,
    });
    const resource = readRefund(wire(REFUND_RESOURCE), 'refund_status');
    assert.ok(typeof resource !== 'string' && resource.status === 'SUCCESS');
  });

  it('refuses an unknown or missing status', () => {
    assert.equal(readRefund(altered(REFUND_SUCCESS, { status: 'DONE' }), 'status'), 'unknown status DONE');
    assert.equal(readRefund(wire(REFUND_SUCCESS), 'refund_status'), 'unknown refund_status (none)');
  });

  it('refuses a missing refund_id, out_refund_no, out_trade_no or transaction_id', () => {
    for (const field of ['refund_id', 'out_refund_no', 'out_trade_no', 'transaction_id']) {
      assert.equal(readRefund(altered(REFUND_SUCCESS, { [field]: undefined }), 'status'), `missing ${field}`);
    }
  });

  it('refuses a missing amount, or an amount.refund or amount.total that is not a whole number of fen', () => {
    assert.equal(readRefund(altered(REFUND_SUCCESS, { amount: undefined }), 'status'), 'missing amount');
    for (const amount of [
      { refund: 1230 },
      { total: 1230 },
      { refund: '1230', total: 1230 },
      { refund: 12.3, total: 1230 },
      { refund: -1, total: 1230 },
    ]) {
      assert.equal(
        readRefund(altered(REFUND_SUCCESS, { amount }), 'status'),
        'invalid amount.refund or amount.total',
        JSON.stringify(amount),
      );
    }
  });
});

describe('refundStatus', () => {
  it('is succeeded with WeChat’s refund id and the amount for SUCCESS', () => {
    assert.deepEqual(refundStatus(refundOf(REFUND_SUCCESS)), {
      kind: 'succeeded',
      gatewayRefundId: '50640621482026120508859446592',
      amountMinor: 1230,
    });
  });

  it('is pending for PROCESSING', () => {
    assert.deepEqual(refundStatus(refundOf(REFUND_PROCESSING)), { kind: 'pending' });
  });

  it('is failed for CLOSED and ABNORMAL: a person must act', () => {
    assert.deepEqual(refundStatus(refundOf(REFUND_SUCCESS, { status: 'CLOSED' })), {
      kind: 'failed',
      code: 'REFUND_CLOSED',
      message: 'WeChat Pay refund 50640621482026120508859446592 is CLOSED',
    });
    assert.equal(refundStatus(refundOf(REFUND_SUCCESS, { status: 'ABNORMAL' })).kind, 'failed');
  });
});

describe('classifyRefund (申请退款)', () => {
  it('is pending with WeChat’s refund id while PROCESSING', () => {
    assert.deepEqual(classifyRefund(200, wire(REFUND_PROCESSING), askedRefund(REFUND_PROCESSING)), {
      kind: 'pending',
      gatewayRefundId: '50273178082026120563333760588',
    });
  });

  it('is succeeded for SUCCESS (the same out_refund_no again)', () => {
    assert.deepEqual(classifyRefund(200, wire(REFUND_SUCCESS), askedRefund(REFUND_SUCCESS)), {
      kind: 'succeeded',
      gatewayRefundId: '50640621482026120508859446592',
      amountMinor: 1230,
    });
  });

  it('is failed for CLOSED and ABNORMAL', () => {
    const outcome = classifyRefund(200, altered(REFUND_SUCCESS, { status: 'ABNORMAL' }), askedRefund(REFUND_SUCCESS));
    assert.deepEqual(outcome, {
      kind: 'failed',
      code: 'REFUND_ABNORMAL',
      message: 'WeChat Pay refund 50640621482026120508859446592 is ABNORMAL',
    });
    assert.equal(classifyRefund(200, altered(REFUND_SUCCESS, { status: 'CLOSED' }), askedRefund(REFUND_SUCCESS)).kind, 'failed');
  });

  it('is indeterminate for a 200 it cannot read', () => {
    assert.deepEqual(classifyRefund(200, altered(REFUND_SUCCESS, { refund_id: undefined }), askedRefund(REFUND_SUCCESS)), {
      kind: 'indeterminate',
      code: 'MALFORMED_RESPONSE',
      message: 'missing refund_id',
    });
  });

  it('is indeterminate for an answer about another refund, order, charge or amount', () => {
    const asked = askedRefund(REFUND_SUCCESS);
    const cases: [Partial<typeof asked>, string][] = [
      [{ refundId: 'RFOTHER' }, 'answered for refund RF98950C09207E29982E8785F2'],
      [{ outTradeNo: 'POOTHER' }, 'answered for order PO8E521010536A07DAE9'],
      [{ gatewayTradeNo: '4200000000000000000000000000' }, 'answered for transaction 4200286189202612058900580389'],
      [{ amountMinor: 1000 }, 'refund of 1230, asked 1000'],
    ];
    for (const [change, message] of cases) {
      assert.deepEqual(classifyRefund(200, wire(REFUND_SUCCESS), { ...asked, ...change }), {
        kind: 'indeterminate',
        code: 'MALFORMED_RESPONSE',
        message,
      });
    }
  });

  it('does not compare the charge when the refund was asked by out_trade_no', () => {
    assert.equal(classifyRefund(200, wire(REFUND_SUCCESS), { ...askedRefund(REFUND_SUCCESS), gatewayTradeNo: '' }).kind, 'succeeded');
  });

  it('is failed for the documented refusals (exceeds the charge, unknown or unpaid order, …)', () => {
    assert.deepEqual(classifyRefund(400, wire(REFUND_TOO_MUCH), askedRefund(REFUND_SUCCESS)), {
      kind: 'failed',
      code: 'INVALID_REQUEST',
      message: '申请退款金额超过订单可退金额',
    });
    assert.deepEqual(classifyRefund(404, wire(REFUND_ORDER_UNKNOWN), askedRefund(REFUND_SUCCESS)), {
      kind: 'failed',
      code: 'RESOURCE_NOT_EXISTS',
      message: wire(REFUND_ORDER_UNKNOWN)?.message,
    });
    for (const code of ['PARAM_ERROR', 'NOT_ENOUGH', 'USER_ACCOUNT_ABNORMAL', 'NO_AUTH', 'MCH_NOT_EXISTS']) {
      assert.deepEqual(
        classifyRefund(403, { code, message: 'm' }, askedRefund(REFUND_SUCCESS)),
        { kind: 'failed', code, message: 'm' },
        code,
      );
    }
  });

  it('is indeterminate for an undocumented code, or a documented one under a status that is not 4xx', () => {
    assert.deepEqual(classifyRefund(403, { code: 'SOMETHING_NEW', message: '?' }, askedRefund(REFUND_SUCCESS)), {
      kind: 'indeterminate',
      code: 'SOMETHING_NEW',
      message: '?',
    });
    assert.deepEqual(classifyRefund(202, wire(REFUND_TOO_MUCH), askedRefund(REFUND_SUCCESS)), {
      kind: 'indeterminate',
      code: 'INVALID_REQUEST',
      message: '申请退款金额超过订单可退金额',
    });
    assert.deepEqual(classifyRefund(400, null, askedRefund(REFUND_SUCCESS)), {
      kind: 'indeterminate',
      code: 'HTTP_400',
      message: 'HTTP 400',
    });
  });
});

describe('classifyRefundQuery (查询单笔退款)', () => {
  const asked = () => {
    const { amountMinor: _amount, ...query } = askedRefund(REFUND_SUCCESS);
    return query;
  };

  it('answers the refund’s status', () => {
    assert.deepEqual(classifyRefundQuery(200, wire(REFUND_SUCCESS), asked()), {
      kind: 'answered',
      refund: { kind: 'succeeded', gatewayRefundId: '50640621482026120508859446592', amountMinor: 1230 },
    });
    assert.deepEqual(classifyRefundQuery(200, altered(REFUND_SUCCESS, { status: 'PROCESSING' }), asked()), {
      kind: 'answered',
      refund: { kind: 'pending' },
    });
  });

  it('is not_found on 404 RESOURCE_NOT_EXISTS', () => {
    assert.deepEqual(classifyRefundQuery(404, wire(REFUND_NOT_EXIST), asked()), { kind: 'answered', refund: { kind: 'not_found' } });
  });

  it('is unavailable on any other status', () => {
    assert.deepEqual(classifyRefundQuery(400, wire(PARAM_ERROR), asked()), {
      kind: 'unavailable',
      code: 'PARAM_ERROR',
      message: wire(PARAM_ERROR)?.message,
    });
    assert.deepEqual(classifyRefundQuery(404, null, asked()), { kind: 'unavailable', code: 'HTTP_404', message: 'HTTP 404' });
  });

  it('is unavailable for a 200 it cannot read, or about another refund', () => {
    assert.deepEqual(classifyRefundQuery(200, altered(REFUND_SUCCESS, { status: undefined }), asked()), {
      kind: 'unavailable',
      code: 'MALFORMED_RESPONSE',
      message: 'unknown status (none)',
    });
    assert.deepEqual(classifyRefundQuery(200, wire(REFUND_SUCCESS), { ...asked(), outTradeNo: 'POOTHER' }), {
      kind: 'unavailable',
      code: 'MALFORMED_RESPONSE',
      message: 'answered for order PO8E521010536A07DAE9',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Notifications

describe('readEnvelope', () => {
  it('reads the envelope and its encrypted resource', () => {
    const read = readEnvelope(TRANSACTION_ENVELOPE);
    assert.ok(!('kind' in read));
    assert.equal(read.envelope.event_type, 'TRANSACTION.SUCCESS');
    const { ciphertext } = (wire(TRANSACTION_ENVELOPE) as { resource: { ciphertext: string } }).resource;
    assert.deepEqual(read.resource, { originalType: 'transaction', ciphertext, nonce: 'saQoXVhEUj4a', associatedData: 'transaction' });
    const refund = readEnvelope(REFUND_ENVELOPE);
    assert.ok(!('kind' in refund) && refund.resource.originalType === 'refund');
  });

  it('reads a ciphertext, nonce or associated_data that is not a string as empty (and so undecryptable)', () => {
    const body = JSON.parse(TRANSACTION_ENVELOPE) as { resource: Json };
    body.resource = { ...body.resource, ciphertext: 42, nonce: null, associated_data: undefined };
    const read = readEnvelope(JSON.stringify(body));
    assert.ok(!('kind' in read));
    assert.deepEqual(read.resource, { originalType: 'transaction', ciphertext: '', nonce: '', associatedData: '' });
  });

  it('rejects a body that is not a JSON object', () => {
    for (const rawBody of ['', '[]', 'success', '{"id":']) {
      assert.deepEqual(readEnvelope(rawBody), { kind: 'rejected', reason: 'body is not a JSON object' }, rawBody);
    }
  });

  it('rejects a missing resource', () => {
    const { resource: _resource, ...envelope } = JSON.parse(TRANSACTION_ENVELOPE) as Json;
    assert.deepEqual(readEnvelope(JSON.stringify(envelope)), { kind: 'rejected', reason: 'missing resource' });
    assert.deepEqual(readEnvelope(JSON.stringify({ ...envelope, resource: 'x' })), { kind: 'rejected', reason: 'missing resource' });
  });

  it('rejects another algorithm', () => {
    const rawBody = TRANSACTION_ENVELOPE.replace('"AEAD_AES_256_GCM"', '"AES_128"');
    assert.deepEqual(readEnvelope(rawBody), { kind: 'rejected', reason: 'unsupported algorithm AES_128' });
  });

  it('rejects a resource that is neither a transaction nor a refund', () => {
    const rawBody = TRANSACTION_ENVELOPE.replace('"original_type":"transaction"', '"original_type":"certificate"');
    assert.deepEqual(readEnvelope(rawBody), { kind: 'rejected', reason: 'unexpected original_type certificate' });
  });
});

describe('classifyNotification: a transaction', () => {
  const envelope = wire(TRANSACTION_ENVELOPE) as Json;
  const withEvent = (event_type: string) => ({ ...envelope, event_type });

  it('verifies TRANSACTION.SUCCESS of a SUCCESS transaction as succeeded, keyed by the transaction id', () => {
    assert.deepEqual(classifyNotification(envelope, 'transaction', TRANSACTION_RESOURCE), {
      kind: 'verified',
      notification: {
        gateway: 'wechatpay',
        eventId: '4200243484202612051334161812',
        merchantId: MCHID,
        outTradeNo: 'PO00000001A246EB20BE',
        status: 'succeeded',
        gatewayTradeNo: '4200243484202612051334161812',
        amountMinor: 1230,
        currency: 'CNY',
      },
    });
  });

  it('verifies as other what does not say "paid" both ways (another event, or a REFUND transaction)', () => {
    const closedEvent = classifyNotification(withEvent('TRANSACTION.CLOSED'), 'transaction', TRANSACTION_RESOURCE);
    assert.ok(closedEvent.kind === 'verified' && closedEvent.notification.status === 'other');
    const refunded = classifyNotification(
      envelope,
      'transaction',
      JSON.stringify(altered(TRANSACTION_RESOURCE, { trade_state: 'REFUND' })),
    );
    assert.ok(refunded.kind === 'verified' && refunded.notification.status === 'other');
  });

  it('keeps a validly signed amount as it is: the app compares it with the order', () => {
    const tampered = classifyNotification(
      envelope,
      'transaction',
      JSON.stringify(altered(TRANSACTION_RESOURCE, { amount: { total: 1, currency: 'CNY' } })),
    );
    assert.ok(tampered.kind === 'verified' && tampered.notification.amountMinor === 1);
  });

  it('rejects a resource it cannot read', () => {
    assert.deepEqual(classifyNotification(envelope, 'transaction', 'not json'), { kind: 'rejected', reason: 'unknown trade_state (none)' });
    assert.deepEqual(classifyNotification(envelope, 'transaction', JSON.stringify(altered(TRANSACTION_RESOURCE, { transaction_id: '' }))), {
      kind: 'rejected',
      reason: 'SUCCESS without transaction_id',
    });
  });

  it('rejects a transaction without a transaction_id even when unpaid: there is no event id', () => {
    const unpaid = JSON.stringify(altered(TRANSACTION_RESOURCE, { trade_state: 'NOTPAY', transaction_id: undefined }));
    assert.deepEqual(classifyNotification(envelope, 'transaction', unpaid), { kind: 'rejected', reason: 'missing transaction_id' });
  });
});

describe('classifyNotification: a refund', () => {
  const envelope = wire(REFUND_ENVELOPE) as Json;
  const resource = (changes: Json) => JSON.stringify(altered(REFUND_RESOURCE, changes));

  it('verifies REFUND.SUCCESS of a SUCCESS refund as succeeded, keyed by the notification id, in CNY', () => {
    assert.deepEqual(classifyNotification(envelope, 'refund', REFUND_RESOURCE), {
      kind: 'refund',
      notification: {
        gateway: 'wechatpay',
        eventId: '52951389-c01b-42b5-b5cd-0f0018d885df',
        merchantId: MCHID,
        outTradeNo: 'PO00000001A246EB20BE',
        refundId: 'RF0123456789ABCDEF012345',
        gatewayRefundId: '50057516662026120572174799302',
        status: 'succeeded',
        amountMinor: 1230,
        currency: 'CNY',
      },
    });
  });

  it('verifies REFUND.CLOSED / REFUND.ABNORMAL of a refund in that state as failed', () => {
    for (const status of ['CLOSED', 'ABNORMAL']) {
      const verdict = classifyNotification({ ...envelope, event_type: `REFUND.${status}` }, 'refund', resource({ refund_status: status }));
      assert.ok(verdict.kind === 'refund' && verdict.notification.status === 'failed', status);
    }
  });

  it('verifies as other when the event and the resource disagree', () => {
    const disagree = [
      ['REFUND.SUCCESS', 'CLOSED'],
      ['REFUND.CLOSED', 'SUCCESS'],
      ['REFUND.ABNORMAL', 'PROCESSING'],
      ['TRANSACTION.SUCCESS', 'SUCCESS'],
    ];
    for (const [event, status] of disagree) {
      const verdict = classifyNotification({ ...envelope, event_type: event }, 'refund', resource({ refund_status: status }));
      assert.ok(verdict.kind === 'refund' && verdict.notification.status === 'other', `${event} / ${status}`);
    }
  });

  it('takes the currency from the resource when it carries one', () => {
    const verdict = classifyNotification(envelope, 'refund', resource({ amount: { total: 1230, refund: 1230, currency: 'HKD' } }));
    assert.ok(verdict.kind === 'refund' && verdict.notification.currency === 'HKD');
  });

  it('rejects a notification without an id', () => {
    assert.deepEqual(classifyNotification({ ...envelope, id: '' }, 'refund', REFUND_RESOURCE), {
      kind: 'rejected',
      reason: 'missing notification id',
    });
  });

  it('rejects a refund resource it cannot read', () => {
    assert.deepEqual(classifyNotification(envelope, 'refund', resource({ refund_id: undefined })), {
      kind: 'rejected',
      reason: 'missing refund_id',
    });
    assert.deepEqual(classifyNotification(envelope, 'refund', '{}'), { kind: 'rejected', reason: 'unknown refund_status (none)' });
  });

  it('rejects a refund resource without a mchid', () => {
    assert.deepEqual(classifyNotification(envelope, 'refund', resource({ mchid: undefined })), {
      kind: 'rejected',
      reason: 'missing mchid',
    });
  });
});
