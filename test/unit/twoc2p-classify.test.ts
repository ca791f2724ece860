/**
 * What the 2C2P adapter makes of each answer, decided without a gateway: the pure functions of
 * server/payments/twoc2p (classify, classify-refund, codes, the envelope and amounts) fed RECORDED wire
 * answers — the claims and bodies the PSP sandbox sent to the adapter during
 * test/payments/twoc2p-*.test.ts, kept here verbatim — plus a few shapes only 2C2P's documentation
 * shows (marked "documented"), and the odd ones: fields missing, codes unknown, amounts that differ.
 *
 *   node --import tsx --test test/unit/twoc2p-classify.test.ts
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ChargeRequest, RefundRequest } from '@/server/payments/gateway';
import type { TransportFailure } from '@/server/payments/transport';
import { claimAmountToMinor } from '@/server/payments/twoc2p/amounts';
import {
  classifyCancelAnswer,
  classifyNotification,
  classifyPaymentAnswer,
  classifyTokenAnswer,
  closeAfterRefusal,
  closeVerdictOf,
  hostedPageOf,
  hostedPageOutcome,
  inquiryOf,
  notificationPayloadOf,
  settleCharge,
  tradeOf,
  type Inquiry,
  type SettleReason,
} from '@/server/payments/twoc2p/classify';
import { classifyRefundAnswer, classifyRefundStatus } from '@/server/payments/twoc2p/classify-refund';
import { readMaintenanceAnswer, type MaintenanceExchange } from '@/server/payments/twoc2p/maintenance';
import { parseXml, xmlDocument } from '@/server/payments/twoc2p/xml';
import { maintenanceClassOf, respClassOf, respDescOf } from '@/server/payments/twoc2p/codes';
import { readEnvelope, type Exchange } from '@/server/payments/twoc2p/exchange';

type Claims = Record<string, unknown>;

const MERCHANT = '764124423873606';

// ---------------------------------------------------------------------------------------------
// Recorded answers (PSP sandbox, 2C2P PGW v4.3 shapes)

/** paymentToken, signed 0000. */
const TOKEN_ISSUED = {
  webPaymentUrl:
    'http://127.0.0.1:43399/payment/4.3/hosted/kSAgNa7lFcwpQLsInuUE0YMhbvGNEEt7IMdOWz9eMWAc%2FpROOTTr4tOHrQMKLV3%2B%2B6TSj7iRHUUFtuXpfE3',
  paymentToken: 'kSAgNa7lFcwpQLsInuUE0YMhbvGNEEt7IMdOWz9eMWAc/pROOTTr4tOHrQMKLV3++6TSj7iRHUUFtuXpfE3',
  respCode: '0000',
  respDesc: 'Success',
};
/** paymentToken refusals, plain JSON in an HTTP 200. */
const TOKEN_9015_PAID = { respCode: '9015', respDesc: 'Existing invoice number: the invoice is already paid' };
const TOKEN_9015_CANCELLED = { respCode: '9015', respDesc: 'Existing invoice number: the invoice is cancelled' };
const TOKEN_9004 = { respCode: '9004', respDesc: 'The value is not valid: invoiceNo must be alphanumeric' };
const TOKEN_9042 = { respCode: '9042', respDesc: 'Hash value mismatch' };
const TOKEN_9007 = { respCode: '9007', respDesc: 'Invalid merchant' };
const SYSTEM_ERROR = { respCode: '0999', respDesc: 'System error' };
/** A proxy's forgery of a paymentToken success, plain: not 2C2P's. */
const TOKEN_PLAIN_SUCCESS = { webPaymentUrl: 'https://evil.example/pay', paymentToken: 'kSAx', respCode: '0000' };

/** Do Payment, plain JSON. */
const PAYMENT_COMPLETED = {
  channelCode: 'CC',
  invoiceNo: 'POMXALB2NV79A5A7F58B',
  respCode: '2000',
  respDesc: 'Transaction is completed, please do payment inquiry request for full payment information.',
};
const PAYMENT_4051 = { channelCode: 'CC', invoiceNo: 'POMXALB2UO7A1D9877E7', respCode: '4051', respDesc: 'Insufficient funds' };
const PAYMENT_9015 = { respCode: '9015', respDesc: 'Existing invoice number: the invoice is already paid' };

/** paymentInquiry, signed. */
const INQUIRY_PAID = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB2NV79A5A7F58B',
  amount: 19.99,
  currencyCode: 'CNY',
  transactionDateTime: '20261205235117',
  agentCode: 'SANDBOX',
  channelCode: 'CC',
  approvalCode: '973548',
  referenceNo: '849152622299',
  tranRef: '3000001',
  accountNo: '411111XXXXXX1111',
  eci: '07',
  respCode: '0000',
  respDesc: 'Success',
};
const INQUIRY_PAID_JPY = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB2RRF114056792',
  amount: 1500,
  currencyCode: 'JPY',
  transactionDateTime: '20261205235117',
  agentCode: 'SANDBOX',
  channelCode: 'CC',
  approvalCode: '783188',
  referenceNo: '887322389462',
  tranRef: '3000002',
  accountNo: '411111XXXXXX1111',
  eci: '07',
  respCode: '0000',
  respDesc: 'Success',
};
const INQUIRY_PAID_MAX = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB2TU4B600485CA',
  amount: 999999999999.99,
  currencyCode: 'CNY',
  transactionDateTime: '20261205235117',
  agentCode: 'SANDBOX',
  channelCode: 'CC',
  approvalCode: '989082',
  referenceNo: '293410470499',
  tranRef: '3000003',
  accountNo: '411111XXXXXX1111',
  eci: '07',
  respCode: '0000',
  respDesc: 'Success',
};
const INQUIRY_DECLINED = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB2UO7A1D9877E7',
  amount: 168,
  currencyCode: 'CNY',
  transactionDateTime: '20261205235117',
  agentCode: 'SANDBOX',
  channelCode: 'CC',
  referenceNo: '781391305890',
  tranRef: '3000004',
  accountNo: '400000XXXXXX4051',
  respCode: '4051',
  respDesc: 'Insufficient funds',
};
const INQUIRY_PENDING = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB44E39F483442D',
  amount: 168,
  currencyCode: 'CNY',
  respCode: '0001',
  respDesc: 'Transaction is pending',
};
const INQUIRY_NOT_FOUND = { merchantID: MERCHANT, invoiceNo: 'POMXALB45D3395F86FE1', respCode: '2002', respDesc: 'Transaction not found' };
const INQUIRY_CANCELLED = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB4MC620B0F1BC0',
  amount: 168,
  currencyCode: 'CNY',
  respCode: '0003',
  respDesc: 'Transaction is cancelled',
};
const INQUIRY_SYSTEM_ERROR = { invoiceNo: 'POMXALB5V8A0F64426AB', respCode: '0999', respDesc: 'System error' };

/** cancelTransaction (JWT form), signed. */
const CANCEL_DONE = { merchantID: MERCHANT, invoiceNo: 'POMXALB4MC620B0F1BC0', respCode: '0000', respDesc: 'Success' };
const CANCEL_PAID = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB4OX8AE2654128',
  respCode: '9015',
  respDesc: 'Existing invoice number: the invoice is already paid',
};
const CANCEL_SYSTEM_ERROR = { merchantID: MERCHANT, invoiceNo: 'POMXALB5VZ3F2973C26E', respCode: '0999', respDesc: 'System error' };

/** Payment Maintenance answers (refund R, refund status RS): the XML fields, as the sandbox seals them. */
const REFUND_DONE = {
  version: '3.8',
  timeStamp: '051226235120',
  merchantID: MERCHANT,
  processType: 'R',
  invoiceNo: 'POMXALB4Y7DA807DBFFF',
  idempotencyID: 'RF9F8E3720D6EF46A2CF74',
  respCode: '00',
  respDesc: 'Success',
  amount: '168.00',
  currencyCode: 'CNY',
  status: 'RF',
  referenceNo: '3000031',
  refundReferenceNo: '7000001',
  transactionDateTime: '20261205235120',
};
const REFUND_40 = {
  merchantID: MERCHANT,
  processType: 'R',
  invoiceNo: 'POMXALB4Z7EB81894CEA',
  idempotencyID: 'RFF35B2025183CE6359CDC',
  respCode: '40',
  respDesc: 'Refund amount is more than transaction amount.',
};
const REFUND_49 = {
  merchantID: MERCHANT,
  processType: 'R',
  invoiceNo: 'POMXALB4Z7EB81894CEA',
  idempotencyID: 'RF5CB2FAA82572D90F6A14',
  respCode: '49',
  respDesc: 'Transaction is already fully refunded.',
};
const REFUND_12 = {
  merchantID: MERCHANT,
  processType: 'R',
  invoiceNo: 'POMXALB50F51BEF43E53',
  idempotencyID: 'RF46E9791DD897C9600BBD',
  respCode: '12',
  respDesc: 'Transaction status is not valid to perform your action. The invoice is not paid.',
};
const REFUND_16 = {
  merchantID: MERCHANT,
  processType: 'R',
  invoiceNo: 'POMXALB50TA4FEFF33C6',
  idempotencyID: 'RF82137D2003257DBC1A3C',
  respCode: '16',
  respDesc: "Requested transaction doesn't exist.",
};
const REFUND_99 = {
  merchantID: MERCHANT,
  processType: 'R',
  invoiceNo: 'POMXALB5Y22556B684A2',
  respCode: '99',
  respDesc: 'Unable to complete the request.',
};
/** Refund status of an invoice with two refunds. */
const STATUS_FIELDS = {
  version: '3.8',
  merchantID: MERCHANT,
  processType: 'RS',
  invoiceNo: 'POMXALB4Y7DA807DBFFF',
  respCode: '00',
  respDesc: 'Success',
  amount: '200.00',
  currencyCode: 'CNY',
  status: 'S',
  referenceNo: '3000031',
};
const STATUS_ITEMS = [
  { idempotencyID: 'RFFIRST', refundReferenceNo: '7000000', amount: '32.00', status: 'RF', dateTime: '20261205235001' },
  { idempotencyID: 'RF9F8E3720D6EF46A2CF74', refundReferenceNo: '7000001', amount: '168.00', status: 'RF', dateTime: '20261205235120' },
];
const REFUND_STATUS_16 = { ...REFUND_16, processType: 'RS', idempotencyID: undefined };

/** Backend notifications: the verified claims. */
const NOTIFIED_PAID = {
  eci: '07',
  amount: 50,
  cardNo: '411111XXXXXX1111',
  tranRef: '3000020',
  respCode: '0000',
  respDesc: 'Success',
  agentCode: 'SANDBOX',
  invoiceNo: 'POMXALB46O5202CEBEE2',
  merchantID: MERCHANT,
  channelCode: 'CC',
  referenceNo: '235849181279',
  approvalCode: '173321',
  currencyCode: 'CNY',
  transactionDateTime: '20261205235119',
};
const NOTIFIED_DECLINED = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB4KC6D6F936B04',
  cardNo: '411111XXXXXX1111',
  amount: 168,
  currencyCode: 'CNY',
  tranRef: '3000021',
  referenceNo: '967497742395',
  approvalCode: '128282',
  eci: '07',
  transactionDateTime: '20261205235120',
  agentCode: 'SANDBOX',
  channelCode: 'CC',
  respCode: '4051',
  respDesc: 'Insufficient funds',
};
/** The test's own signed forgeries: a finer amount than CNY has, and no tranRef. */
const NOTIFIED_FINE_AMOUNT = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB4LI89C56232C7',
  amount: 1.001,
  currencyCode: 'CNY',
  tranRef: '1',
  respCode: '0000',
  respDesc: 'Success',
};
const NOTIFIED_NO_TRAN_REF = {
  merchantID: MERCHANT,
  invoiceNo: 'POMXALB4LI89C56232C7',
  amount: 168,
  currencyCode: 'CNY',
  respCode: '0000',
  respDesc: 'Success',
};

// ---------------------------------------------------------------------------------------------
// Helpers

const signed = (claims: Claims): Exchange => ({ kind: 'signed', claims });
type XmlFields = Readonly<Record<string, string | undefined>>;
const defined = (fields: XmlFields): Record<string, string> =>
  Object.fromEntries(Object.entries(fields).filter((entry): entry is [string, string] => entry[1] !== undefined));
/** A Payment Maintenance answer that verified and decrypted, with refund status's refundList if any. */
const sealed = (fields: XmlFields, refundList?: XmlFields[]): MaintenanceExchange => ({
  kind: 'sealed',
  answer: { name: 'PaymentProcessResponse', fields: defined(fields), lists: refundList ? { refundList: refundList.map(defined) } : {} },
});
/** An unsealed (plain XML) Payment Maintenance answer. */
const plainXml = (fields: XmlFields): MaintenanceExchange => ({
  kind: 'plain',
  answer: { name: 'PaymentProcessResponse', fields: defined(fields), lists: {} },
});
const plain = (body: Claims): Exchange => ({ kind: 'plain', body });
const answered = (claims: Claims): Inquiry => ({ kind: 'answered', claims });
const NOT_SENT: TransportFailure = { kind: 'not_sent', code: 'ECONNREFUSED', message: 'fetch failed: connect ECONNREFUSED' };
const TIMEOUT: TransportFailure = { kind: 'in_doubt', code: 'TIMEOUT', message: 'The operation was aborted due to timeout' };
const FORGED: TransportFailure = {
  kind: 'in_doubt',
  code: 'INVALID_RESPONSE_SIGNATURE',
  message: 'paymentInquiry answer did not verify with the merchant secret',
};

function chargeOf(invoiceNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo: invoiceNo,
    amountMinor: 16800,
    currency: 'CNY',
    subject: 'PayOnce 订单',
    attempt: 1,
    buyer: 'ok',
    notifyUrl: 'http://127.0.0.1:9/unused',
    ...overrides,
  };
}

function refundOf(answer: { invoiceNo: string; idempotencyID?: string }, overrides: Partial<RefundRequest> = {}): RefundRequest {
  return {
    outTradeNo: answer.invoiceNo,
    gatewayTradeNo: '3000031',
    refundId: answer.idempotencyID ?? 'RFNONE',
    amountMinor: 16800,
    chargeAmountMinor: 16800,
    currency: 'CNY',
    reason: 'PayOnce 重复支付退款',
    ...overrides,
  };
}

const PAYMENT: SettleReason = { step: 'payment', code: '2000', message: PAYMENT_COMPLETED.respDesc };
const PAYMENT_ERROR: SettleReason = { step: 'payment_error', code: '0999', message: 'System error' };
const EXISTING: SettleReason = { step: 'existing_invoice', code: '9015', message: TOKEN_9015_PAID.respDesc };

// ---------------------------------------------------------------------------------------------
// Codes

describe('respClassOf: what a PGW respCode means for money', () => {
  it('reads the codes 2C2P lists by their table', () => {
    const table = {
      '0000': 'success',
      '2000': 'completed',
      '0001': 'pending',
      '2001': 'pending',
      '2002': 'not_found',
      '0003': 'cancelled',
      '9015': 'existing_invoice',
      '9007': 'refused',
      '9040': 'refused',
      '9042': 'refused',
      '6103': 'refused',
      '9004': 'invalid',
      '9005': 'invalid',
      '9006': 'invalid',
      '9009': 'invalid',
      '9010': 'invalid',
    };
    for (const [code, respClass] of Object.entries(table)) assert.equal(respClassOf(code), respClass, code);
  });
  it('reads 1xxx as another page the buyer must visit (documented: 1001 3-D Secure)', () => {
    assert.equal(respClassOf('1001'), 'redirect');
  });
  it('reads 4xxx as the card host’s decline, recorded or not', () => {
    assert.deepEqual(['4051', '4062', '4999'].map(respClassOf), ['declined', 'declined', 'declined']);
  });
  it('reads 0999, an empty code, a two-digit code and an object key as unknown', () => {
    assert.deepEqual(['0999', '', '99', '__proto__', 'constructor'].map(respClassOf), [
      'unknown',
      'unknown',
      'unknown',
      'unknown',
      'unknown',
    ]);
  });
});

describe('maintenanceClassOf: what a Payment Maintenance result code means for a refund', () => {
  it('reads the codes 2C2P lists by their table', () => {
    const refused = ['02', '10', '11', '12', '17', '18', '30', '40', '41', '43', '44', '45', '46', '49', '50', '54', '97'];
    const table = {
      '00': 'success',
      '03': 'keys',
      '13': 'keys',
      '14': 'keys',
      '96': 'keys',
      '42': 'pending',
      '51': 'pending',
      '15': 'not_found',
      '16': 'not_found',
      ...Object.fromEntries(refused.map((c) => [c, 'refused'])),
    };
    for (const [code, maintenanceClass] of Object.entries(table)) assert.equal(maintenanceClassOf(code), maintenanceClass, code);
  });
  it('reads 99, 95, a PGW code and an object key as unknown', () => {
    assert.deepEqual(['99', '95', '0000', '__proto__'].map(maintenanceClassOf), ['unknown', 'unknown', 'unknown', 'unknown']);
  });
});

describe('respDescOf', () => {
  it('is the respDesc, else the respCode, else says there is none', () => {
    assert.equal(respDescOf(TOKEN_9042), 'Hash value mismatch');
    assert.equal(respDescOf({ respCode: '0999' }), '0999');
    assert.equal(respDescOf({}), 'no respCode');
  });
});

// ---------------------------------------------------------------------------------------------
// The envelope and amounts

describe('readEnvelope: one HTTP answer before its signature is checked', () => {
  it('is not sent for any status but 200 (a proxy, an overload: 2C2P answers everything it processed with 200)', () => {
    assert.deepEqual(readEnvelope('payment', 503, '<html>unavailable</html>'), {
      kind: 'not_sent',
      code: 'HTTP_503',
      message: 'HTTP 503 from payment',
    });
  });
  it('is in doubt for a 200 that is not JSON', () => {
    assert.deepEqual(readEnvelope('refund', 200, '<html>'), {
      kind: 'in_doubt',
      code: 'MALFORMED_RESPONSE',
      message: 'refund answered non-JSON',
    });
  });
  it('is in doubt for JSON that is not an object', () => {
    for (const text of ['null', '[]', '"0000"']) {
      assert.deepEqual(readEnvelope('refund', 200, text), {
        kind: 'in_doubt',
        code: 'MALFORMED_RESPONSE',
        message: 'refund answered a non-object',
      });
    }
  });
  it('is plain without a payload (2C2P’s refusals)', () => {
    assert.deepEqual(readEnvelope('paymentToken', 200, JSON.stringify(TOKEN_9042)), { kind: 'plain', body: TOKEN_9042 });
  });
  it('is a JWT to verify when the payload is a string', () => {
    assert.deepEqual(readEnvelope('paymentInquiry', 200, '{"payload":"eyJhbGciOiJIUzI1NiJ9.e30.x"}'), {
      kind: 'jwt',
      token: 'eyJhbGciOiJIUzI1NiJ9.e30.x',
    });
  });
  it('is an unverifiable answer when the payload is not a string', () => {
    assert.deepEqual(readEnvelope('paymentInquiry', 200, '{"payload":{"respCode":"0000"}}'), {
      kind: 'in_doubt',
      code: 'INVALID_RESPONSE_SIGNATURE',
      message: 'paymentInquiry answer did not verify with the merchant secret',
    });
  });
});

describe('claimAmountToMinor: an amount read back exactly', () => {
  it('reads JSON numbers in the currency’s exponent', () => {
    assert.deepEqual(
      [claimAmountToMinor(19.99, 'CNY'), claimAmountToMinor(1500, 'JPY'), claimAmountToMinor(999999999999.99, 'CNY')],
      [1999, 1500, 99_999_999_999_999],
    );
  });
  it('reads decimal strings, trailing zeros past the exponent dropped', () => {
    assert.deepEqual([claimAmountToMinor('168.00000', 'CNY'), claimAmountToMinor('0.01', 'CNY')], [16800, 1]);
  });
  it('refuses digits past the exponent, signs, exponent forms, other types', () => {
    for (const [value, currency] of [
      [1.001, 'CNY'],
      [0.5, 'JPY'],
      [-1, 'CNY'],
      [1e21, 'CNY'],
      ['1e3', 'CNY'],
      [Number.NaN, 'CNY'],
      [null, 'CNY'],
      [undefined, 'CNY'],
    ] as const) {
      assert.equal(claimAmountToMinor(value, currency), null, String(value));
    }
  });
});

// ---------------------------------------------------------------------------------------------
// paymentInquiry → TradeStatus

describe('inquiryOf', () => {
  it('is answered by a signed inquiry', () => {
    assert.deepEqual(inquiryOf(signed(INQUIRY_PENDING)), { kind: 'answered', claims: INQUIRY_PENDING });
  });
  it('is unavailable on a plain refusal (wrong secret)', () => {
    assert.deepEqual(inquiryOf(plain(TOKEN_9042)), { kind: 'unavailable', code: '9042', message: 'Hash value mismatch' });
  });
  it('is unavailable on a plain answer without a respCode, as malformed', () => {
    assert.deepEqual(inquiryOf(plain({})), { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'no respCode' });
  });
  it('is unavailable when not sent or in doubt', () => {
    assert.deepEqual(inquiryOf(NOT_SENT), { kind: 'unavailable', code: 'ECONNREFUSED', message: NOT_SENT.message });
    assert.deepEqual(inquiryOf(FORGED), { kind: 'unavailable', code: 'INVALID_RESPONSE_SIGNATURE', message: FORGED.message });
  });
});

describe('tradeOf: the signed inquiry as a TradeStatus', () => {
  it('passes an unavailable inquiry on', () => {
    const unavailable = { kind: 'unavailable', code: 'TIMEOUT', message: 'slow' } as const;
    assert.deepEqual(tradeOf(unavailable, 'X'), unavailable);
  });
  it('is succeeded for a paid invoice, in the currency’s own exponent', () => {
    assert.deepEqual(tradeOf(answered(INQUIRY_PAID), INQUIRY_PAID.invoiceNo), {
      kind: 'answered',
      trade: { kind: 'succeeded', gatewayTradeNo: '3000001', amountMinor: 1999, currency: 'CNY' },
    });
    assert.deepEqual(tradeOf(answered(INQUIRY_PAID_JPY), INQUIRY_PAID_JPY.invoiceNo), {
      kind: 'answered',
      trade: { kind: 'succeeded', gatewayTradeNo: '3000002', amountMinor: 1500, currency: 'JPY' },
    });
    const max = tradeOf(answered(INQUIRY_PAID_MAX), INQUIRY_PAID_MAX.invoiceNo);
    assert.ok(max.kind === 'answered' && max.trade.kind === 'succeeded' && max.trade.amountMinor === 99_999_999_999_999);
  });
  it('is unavailable for a paid answer without tranRef, with an unreadable amount, or about another invoice', () => {
    const malformed = { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'paid invoice without tranRef, amount or currency' };
    const { tranRef: _t, ...noTranRef } = INQUIRY_PAID;
    const { currencyCode: _c, ...noCurrency } = INQUIRY_PAID;
    assert.deepEqual(tradeOf(answered(noTranRef), INQUIRY_PAID.invoiceNo), malformed);
    assert.deepEqual(tradeOf(answered(noCurrency), INQUIRY_PAID.invoiceNo), malformed);
    assert.deepEqual(tradeOf(answered({ ...INQUIRY_PAID, amount: 19.999 }), INQUIRY_PAID.invoiceNo), malformed);
    assert.deepEqual(tradeOf(answered(INQUIRY_PAID), 'POOTHERINVOICE000000'), malformed);
  });
  it('is pending for a declined latest attempt, a token nobody paid, and a page the buyer is on', () => {
    for (const claims of [INQUIRY_DECLINED, INQUIRY_PENDING, { ...INQUIRY_PENDING, respCode: '1001', respDesc: 'Redirect to 3DS' }]) {
      assert.deepEqual(tradeOf(answered(claims), claims.invoiceNo), { kind: 'answered', trade: { kind: 'pending' } });
    }
  });
  it('is not_found for 2002', () => {
    assert.deepEqual(tradeOf(answered(INQUIRY_NOT_FOUND), INQUIRY_NOT_FOUND.invoiceNo), { kind: 'answered', trade: { kind: 'not_found' } });
  });
  it('is closed for 0003', () => {
    assert.deepEqual(tradeOf(answered(INQUIRY_CANCELLED), INQUIRY_CANCELLED.invoiceNo), { kind: 'answered', trade: { kind: 'closed' } });
  });
  it('is unavailable for a signed 0999, and for an answer without a respCode', () => {
    assert.deepEqual(tradeOf(answered(INQUIRY_SYSTEM_ERROR), INQUIRY_SYSTEM_ERROR.invoiceNo), {
      kind: 'unavailable',
      code: '0999',
      message: 'System error',
    });
    assert.deepEqual(tradeOf(answered({ invoiceNo: 'X' }), 'X'), {
      kind: 'unavailable',
      code: 'MALFORMED_RESPONSE',
      message: 'no respCode',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Charge

describe('classifyTokenAnswer: paymentToken', () => {
  it('is retryable when never sent', () => {
    assert.deepEqual(classifyTokenAnswer(NOT_SENT), { kind: 'outcome', outcome: { kind: 'retryable', ...pick(NOT_SENT) } });
  });
  it('is retryable after a timeout (a token moves no money)', () => {
    assert.deepEqual(classifyTokenAnswer(TIMEOUT), {
      kind: 'outcome',
      outcome: { kind: 'retryable', code: 'TIMEOUT', message: `paymentToken: ${TIMEOUT.message}` },
    });
  });
  it('is indeterminate for an answer it cannot authenticate or read', () => {
    const malformed: TransportFailure = { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: 'paymentToken answered non-JSON' };
    for (const failure of [FORGED, malformed]) {
      assert.deepEqual(classifyTokenAnswer(failure), { kind: 'outcome', outcome: { kind: 'indeterminate', ...pick(failure) } });
    }
  });
  it('is the token and its page for a signed 0000', () => {
    assert.deepEqual(classifyTokenAnswer(signed(TOKEN_ISSUED)), {
      kind: 'token',
      paymentToken: TOKEN_ISSUED.paymentToken,
      webPaymentUrl: TOKEN_ISSUED.webPaymentUrl,
    });
  });
  it('is indeterminate for a plain 0000, or a signed one without a token', () => {
    const noToken = {
      kind: 'outcome',
      outcome: { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'paymentToken success without a signed token' },
    };
    assert.deepEqual(classifyTokenAnswer(plain(TOKEN_PLAIN_SUCCESS)), noToken);
    assert.deepEqual(classifyTokenAnswer(signed({ respCode: '0000', respDesc: 'Success' })), noToken);
  });
  it('hands 9015 to the inquiry', () => {
    assert.deepEqual(classifyTokenAnswer(plain(TOKEN_9015_PAID)), {
      kind: 'existing_invoice',
      code: '9015',
      message: TOKEN_9015_PAID.respDesc,
    });
  });
  it('is retryable for a refusal of configuration (wrong secret, unknown merchant)', () => {
    assert.deepEqual(classifyTokenAnswer(plain(TOKEN_9042)), {
      kind: 'outcome',
      outcome: { kind: 'retryable', code: '9042', message: 'Hash value mismatch' },
    });
    assert.deepEqual(classifyTokenAnswer(plain(TOKEN_9007)), {
      kind: 'outcome',
      outcome: { kind: 'retryable', code: '9007', message: 'Invalid merchant' },
    });
  });
  it('is retryable for 0999 and for an answer without a respCode', () => {
    assert.deepEqual(classifyTokenAnswer(plain(SYSTEM_ERROR)), {
      kind: 'outcome',
      outcome: { kind: 'retryable', code: '0999', message: 'System error' },
    });
    assert.deepEqual(classifyTokenAnswer(plain({})), {
      kind: 'outcome',
      outcome: { kind: 'retryable', code: 'MALFORMED_RESPONSE', message: 'no respCode' },
    });
  });
  it('is declined for a refusal of its content (a hyphenated invoiceNo)', () => {
    assert.deepEqual(classifyTokenAnswer(plain(TOKEN_9004)), {
      kind: 'outcome',
      outcome: { kind: 'declined', code: '9004', message: TOKEN_9004.respDesc },
    });
  });
  it('is retryable for an answer paymentToken never gives (a decline, a pending)', () => {
    assert.deepEqual(classifyTokenAnswer(plain(PAYMENT_4051)), {
      kind: 'outcome',
      outcome: { kind: 'retryable', code: '4051', message: 'unexpected paymentToken answer: Insufficient funds' },
    });
  });
});

describe('classifyPaymentAnswer: Do Payment', () => {
  it('is retryable when never sent, indeterminate when in doubt', () => {
    assert.deepEqual(classifyPaymentAnswer(NOT_SENT), { kind: 'outcome', outcome: { kind: 'retryable', ...pick(NOT_SENT) } });
    assert.deepEqual(classifyPaymentAnswer(TIMEOUT), { kind: 'outcome', outcome: { kind: 'indeterminate', ...pick(TIMEOUT) } });
  });
  it('asks the inquiry after 2000, a decline, 9015 and a plain 0000 (never believed)', () => {
    for (const answer of [
      PAYMENT_COMPLETED,
      PAYMENT_4051,
      PAYMENT_9015,
      { respCode: '0000', respDesc: 'Success', tranRef: '1', amount: 168 },
    ]) {
      assert.deepEqual(classifyPaymentAnswer(plain(answer)), {
        kind: 'settle',
        why: { step: 'payment', code: answer.respCode, message: answer.respDesc },
      });
    }
  });
  it('asks the inquiry as after an error for 0999, plain or signed', () => {
    for (const exchange of [plain(SYSTEM_ERROR), signed(SYSTEM_ERROR)]) {
      assert.deepEqual(classifyPaymentAnswer(exchange), {
        kind: 'settle',
        why: { step: 'payment_error', code: '0999', message: 'System error' },
      });
    }
  });
  it('asks the inquiry, not as after an error, for an answer without a four-digit code', () => {
    assert.deepEqual(classifyPaymentAnswer(plain({})), {
      kind: 'settle',
      why: { step: 'payment', code: 'MALFORMED_RESPONSE', message: 'no respCode' },
    });
    assert.deepEqual(classifyPaymentAnswer(plain({ respCode: '99', respDesc: 'odd' })), {
      kind: 'settle',
      why: { step: 'payment', code: '99', message: 'odd' },
    });
  });
  it('is indeterminate when it needs a buyer on another page (documented: 1001)', () => {
    assert.deepEqual(classifyPaymentAnswer(plain({ respCode: '1001', respDesc: 'Redirect to 3DS' })), {
      kind: 'outcome',
      outcome: { kind: 'indeterminate', code: '1001', message: 'Do Payment needs a buyer on another page: Redirect to 3DS' },
    });
  });
  it('is retryable for a refused token (documented: 9040)', () => {
    assert.deepEqual(classifyPaymentAnswer(plain({ respCode: '9040', respDesc: 'The token is invalid' })), {
      kind: 'outcome',
      outcome: { kind: 'retryable', code: '9040', message: 'The token is invalid' },
    });
  });
  it('is declined for a refusal of its content (documented: 9005)', () => {
    assert.deepEqual(classifyPaymentAnswer(plain({ respCode: '9005', respDesc: 'Some mandatory fields are missing' })), {
      kind: 'outcome',
      outcome: { kind: 'declined', code: '9005', message: 'Some mandatory fields are missing' },
    });
  });
});

describe('settleCharge: the signed inquiry decides a charge', () => {
  it('is indeterminate under the first answer’s code when the inquiry is unavailable', () => {
    const request = chargeOf(INQUIRY_PAID.invoiceNo);
    assert.deepEqual(settleCharge({ kind: 'unavailable', code: '0999', message: 'System error' }, request, PAYMENT_ERROR), {
      kind: 'indeterminate',
      code: '0999',
      message: 'System error; inquiry failed: 0999 System error',
    });
  });
  it('is succeeded for an invoice paid exactly as asked', () => {
    assert.deepEqual(settleCharge(answered(INQUIRY_PAID), chargeOf(INQUIRY_PAID.invoiceNo, { amountMinor: 1999 }), PAYMENT), {
      kind: 'succeeded',
      gatewayTradeNo: '3000001',
      amountMinor: 1999,
      currency: 'CNY',
    });
  });
  it('is indeterminate for a paid answer that does not hold together', () => {
    const { tranRef: _t, ...noTranRef } = INQUIRY_PAID;
    assert.deepEqual(settleCharge(answered(noTranRef), chargeOf(INQUIRY_PAID.invoiceNo, { amountMinor: 1999 }), PAYMENT), {
      kind: 'indeterminate',
      code: 'MALFORMED_RESPONSE',
      message: 'paid invoice without tranRef, amount or currency',
    });
  });
  it('is indeterminate AMOUNT_MISMATCH for an invoice paid another amount or currency after Do Payment', () => {
    const request = chargeOf(INQUIRY_PAID.invoiceNo);
    assert.deepEqual(settleCharge(answered(INQUIRY_PAID), request, PAYMENT), {
      kind: 'indeterminate',
      code: 'AMOUNT_MISMATCH',
      message: 'invoice paid 1999 CNY, asked 16800 CNY',
    });
    const otherCurrency = settleCharge(
      answered(INQUIRY_PAID),
      chargeOf(INQUIRY_PAID.invoiceNo, { amountMinor: 1999, currency: 'THB' }),
      PAYMENT,
    );
    assert.deepEqual([otherCurrency.kind, 'code' in otherCurrency && otherCurrency.code], ['indeterminate', 'AMOUNT_MISMATCH']);
  });
  it('is indeterminate 9015 for an invoice paid another amount when paymentToken said 9015', () => {
    assert.deepEqual(settleCharge(answered(INQUIRY_PAID), chargeOf(INQUIRY_PAID.invoiceNo, { amountMinor: 1998 }), EXISTING), {
      kind: 'indeterminate',
      code: '9015',
      message: 'invoice paid 1999 CNY, asked 1998 CNY',
    });
  });
  it('after 9015: declines an invoice open for another amount or currency, or cancelled', () => {
    const declined = { kind: 'declined', code: '9015', message: EXISTING.message };
    assert.deepEqual(
      settleCharge(answered(INQUIRY_PENDING), chargeOf(INQUIRY_PENDING.invoiceNo, { amountMinor: 17000 }), EXISTING),
      declined,
    );
    assert.deepEqual(
      settleCharge(answered(INQUIRY_DECLINED), chargeOf(INQUIRY_DECLINED.invoiceNo, { currency: 'THB' }), EXISTING),
      declined,
    );
    const cancelled = { ...EXISTING, message: TOKEN_9015_CANCELLED.respDesc };
    assert.deepEqual(settleCharge(answered(INQUIRY_CANCELLED), chargeOf(INQUIRY_CANCELLED.invoiceNo), cancelled), {
      kind: 'declined',
      code: '9015',
      message: 'Existing invoice number: the invoice is cancelled',
    });
  });
  it('after 9015: is retryable for an invoice open for this very amount', () => {
    assert.deepEqual(settleCharge(answered(INQUIRY_DECLINED), chargeOf(INQUIRY_DECLINED.invoiceNo), EXISTING), {
      kind: 'retryable',
      code: '9015',
      message: `${EXISTING.message}; the invoice is open for this amount`,
    });
  });
  it('after a Do Payment error: retryable when the inquiry finds no approval (0001, or a decline)', () => {
    assert.deepEqual(settleCharge(answered(INQUIRY_PENDING), chargeOf(INQUIRY_PENDING.invoiceNo), PAYMENT_ERROR), {
      kind: 'retryable',
      code: '0999',
      message: 'System error; the inquiry finds no approval (0001)',
    });
    assert.deepEqual(settleCharge(answered(INQUIRY_DECLINED), chargeOf(INQUIRY_DECLINED.invoiceNo), PAYMENT_ERROR), {
      kind: 'retryable',
      code: '0999',
      message: 'System error; the inquiry finds no approval (4051)',
    });
  });
  it('after a Do Payment error: still declined when the invoice is cancelled, still indeterminate when in progress', () => {
    assert.deepEqual(settleCharge(answered(INQUIRY_CANCELLED), chargeOf(INQUIRY_CANCELLED.invoiceNo), PAYMENT_ERROR), {
      kind: 'declined',
      code: '0003',
      message: 'Transaction is cancelled',
    });
    const inProgress = { ...INQUIRY_PENDING, respCode: '2001', respDesc: 'Transaction is in progress' };
    assert.deepEqual(settleCharge(answered(inProgress), chargeOf(inProgress.invoiceNo), PAYMENT_ERROR), {
      kind: 'indeterminate',
      code: '2001',
      message: 'Transaction is in progress',
    });
  });
  it('after Do Payment: declined for the card host’s decline and for a cancelled invoice', () => {
    assert.deepEqual(settleCharge(answered(INQUIRY_DECLINED), chargeOf(INQUIRY_DECLINED.invoiceNo), PAYMENT), {
      kind: 'declined',
      code: '4051',
      message: 'Insufficient funds',
    });
    assert.deepEqual(settleCharge(answered(INQUIRY_CANCELLED), chargeOf(INQUIRY_CANCELLED.invoiceNo), PAYMENT), {
      kind: 'declined',
      code: '0003',
      message: 'Transaction is cancelled',
    });
  });
  it('after Do Payment: indeterminate while the invoice is pending', () => {
    assert.deepEqual(settleCharge(answered(INQUIRY_PENDING), chargeOf(INQUIRY_PENDING.invoiceNo), PAYMENT), {
      kind: 'indeterminate',
      code: '0001',
      message: 'Transaction is pending',
    });
  });
  it('is indeterminate for an inquiry that says nothing of the invoice (2002, 0999, no respCode)', () => {
    assert.deepEqual(settleCharge(answered(INQUIRY_NOT_FOUND), chargeOf(INQUIRY_NOT_FOUND.invoiceNo), PAYMENT), {
      kind: 'indeterminate',
      code: '2002',
      message: `${PAYMENT.message}; inquiry answered 2002 Transaction not found`,
    });
    assert.deepEqual(settleCharge(answered(INQUIRY_SYSTEM_ERROR), chargeOf(INQUIRY_SYSTEM_ERROR.invoiceNo), PAYMENT_ERROR), {
      kind: 'indeterminate',
      code: '0999',
      message: 'System error; inquiry answered 0999 System error',
    });
    assert.deepEqual(settleCharge(answered({}), chargeOf('X'), PAYMENT_ERROR), {
      kind: 'indeterminate',
      code: '0999',
      message: 'System error; inquiry answered  no respCode',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// The hosted payment page

describe('hostedPageOf', () => {
  it('is the page for an http(s) webPaymentUrl', () => {
    assert.deepEqual(hostedPageOf(TOKEN_ISSUED.webPaymentUrl), { kind: 'url', url: TOKEN_ISSUED.webPaymentUrl });
  });
  it('is indeterminate without one, or for another scheme', () => {
    for (const url of [undefined, 'javascript:alert(1)', '//evil.example/pay']) {
      assert.deepEqual(hostedPageOf(url), {
        kind: 'outcome',
        outcome: { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'paymentToken success without a webPaymentUrl' },
      });
    }
  });
});

describe('hostedPageOutcome: the page, unless the inquiry says the invoice is done', () => {
  const url = TOKEN_ISSUED.webPaymentUrl;
  const page = { kind: 'awaiting_buyer', action: { kind: 'redirect', url } };
  it('is the page when the inquiry cannot be asked', () => {
    assert.deepEqual(hostedPageOutcome({ kind: 'unavailable', code: 'TIMEOUT', message: 'slow' }, chargeOf('X'), url), page);
  });
  it('is the page for an open invoice (nobody paid, or a decline on the page)', () => {
    assert.deepEqual(hostedPageOutcome(answered(INQUIRY_PENDING), chargeOf(INQUIRY_PENDING.invoiceNo), url), page);
    assert.deepEqual(hostedPageOutcome(answered(INQUIRY_DECLINED), chargeOf(INQUIRY_DECLINED.invoiceNo), url), page);
  });
  it('is succeeded for an invoice paid as asked', () => {
    assert.deepEqual(hostedPageOutcome(answered(INQUIRY_PAID), chargeOf(INQUIRY_PAID.invoiceNo, { amountMinor: 1999 }), url), {
      kind: 'succeeded',
      gatewayTradeNo: '3000001',
      amountMinor: 1999,
      currency: 'CNY',
    });
  });
  it('is indeterminate for an invoice paid another amount, or a paid answer that does not hold together', () => {
    assert.deepEqual(hostedPageOutcome(answered(INQUIRY_PAID), chargeOf(INQUIRY_PAID.invoiceNo), url), {
      kind: 'indeterminate',
      code: 'AMOUNT_MISMATCH',
      message: 'invoice paid, but not as asked',
    });
    assert.deepEqual(hostedPageOutcome(answered(INQUIRY_PAID), chargeOf('POOTHERINVOICE000000'), url), {
      kind: 'indeterminate',
      code: 'MALFORMED_RESPONSE',
      message: 'invoice paid, but not as asked',
    });
  });
  it('is declined for a cancelled invoice (its page is dead)', () => {
    assert.deepEqual(hostedPageOutcome(answered(INQUIRY_CANCELLED), chargeOf(INQUIRY_CANCELLED.invoiceNo), url), {
      kind: 'declined',
      code: '0003',
      message: 'Transaction is cancelled',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Close

describe('closeVerdictOf: what the inquiry says a close must do', () => {
  it('is indeterminate when the inquiry is unavailable', () => {
    assert.deepEqual(closeVerdictOf({ kind: 'unavailable', code: '9042', message: 'Hash value mismatch' }), {
      kind: 'final',
      outcome: { kind: 'indeterminate', code: '9042', message: 'paymentInquiry: Hash value mismatch' },
    });
  });
  it('is already_paid with the charge for a paid invoice', () => {
    const found = tradeOf(answered(INQUIRY_PAID), INQUIRY_PAID.invoiceNo);
    assert.deepEqual(closeVerdictOf(found), {
      kind: 'final',
      outcome: { kind: 'already_paid', charges: [{ gatewayTradeNo: '3000001', amountMinor: 1999, currency: 'CNY' }] },
    });
  });
  it('is closed for a cancelled invoice', () => {
    assert.deepEqual(closeVerdictOf(tradeOf(answered(INQUIRY_CANCELLED), INQUIRY_CANCELLED.invoiceNo)), {
      kind: 'final',
      outcome: { kind: 'closed' },
    });
  });
  it('is closed for an invoice never created', () => {
    assert.deepEqual(closeVerdictOf(tradeOf(answered(INQUIRY_NOT_FOUND), INQUIRY_NOT_FOUND.invoiceNo)), {
      kind: 'final',
      outcome: { kind: 'closed' },
    });
  });
  it('is open for an unpaid invoice: cancel it', () => {
    assert.deepEqual(closeVerdictOf(tradeOf(answered(INQUIRY_DECLINED), INQUIRY_DECLINED.invoiceNo)), { kind: 'open' });
  });
});

describe('classifyCancelAnswer: cancelTransaction', () => {
  it('is indeterminate when never sent or in doubt (not closed, or not known to be)', () => {
    assert.deepEqual(classifyCancelAnswer(NOT_SENT, 'X'), {
      kind: 'final',
      outcome: { kind: 'indeterminate', code: 'ECONNREFUSED', message: `cancelTransaction: ${NOT_SENT.message}` },
    });
    assert.deepEqual(classifyCancelAnswer(TIMEOUT, 'X'), {
      kind: 'final',
      outcome: { kind: 'indeterminate', code: 'TIMEOUT', message: `cancelTransaction: ${TIMEOUT.message}` },
    });
  });
  it('is indeterminate for a plain refusal, under its code', () => {
    assert.deepEqual(classifyCancelAnswer(plain(SYSTEM_ERROR), 'X'), {
      kind: 'final',
      outcome: { kind: 'indeterminate', code: '0999', message: 'System error' },
    });
    assert.deepEqual(classifyCancelAnswer(plain({}), 'X'), {
      kind: 'final',
      outcome: { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'no respCode' },
    });
  });
  it('is indeterminate for a signed answer about another invoice', () => {
    assert.deepEqual(classifyCancelAnswer(signed(CANCEL_DONE), 'POOTHERINVOICE000000'), {
      kind: 'final',
      outcome: { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'cancelTransaction answered for another invoiceNo' },
    });
  });
  it('is closed for 0000, 0003 and 2002', () => {
    for (const respCode of ['0000', '0003', '2002']) {
      assert.deepEqual(classifyCancelAnswer(signed({ ...CANCEL_DONE, respCode }), CANCEL_DONE.invoiceNo), {
        kind: 'final',
        outcome: { kind: 'closed' },
      });
    }
  });
  it('is a refusal for the second inquiry to weigh: 9015 (paid meanwhile), 0999, no respCode', () => {
    assert.deepEqual(classifyCancelAnswer(signed(CANCEL_PAID), CANCEL_PAID.invoiceNo), {
      kind: 'refused',
      code: '9015',
      message: 'cancelTransaction refused: Existing invoice number: the invoice is already paid',
    });
    assert.deepEqual(classifyCancelAnswer(signed(CANCEL_SYSTEM_ERROR), CANCEL_SYSTEM_ERROR.invoiceNo), {
      kind: 'refused',
      code: '0999',
      message: 'cancelTransaction refused: System error',
    });
    assert.deepEqual(classifyCancelAnswer(signed({ invoiceNo: 'X' }), 'X'), {
      kind: 'refused',
      code: 'MALFORMED_RESPONSE',
      message: 'cancelTransaction refused: no respCode',
    });
  });
});

describe('closeAfterRefusal: the second inquiry after a refused cancel', () => {
  const refusal = { code: '0999', message: 'cancelTransaction refused: System error' };
  it('is already_paid when the buyer paid in between', () => {
    const closed = closeAfterRefusal(tradeOf(answered(INQUIRY_PAID), INQUIRY_PAID.invoiceNo), refusal);
    assert.equal(closed.kind, 'already_paid');
  });
  it('is closed when the cancel went through after all', () => {
    assert.deepEqual(closeAfterRefusal(tradeOf(answered(INQUIRY_CANCELLED), INQUIRY_CANCELLED.invoiceNo), refusal), { kind: 'closed' });
  });
  it('is indeterminate under the refusal while the invoice is still open', () => {
    assert.deepEqual(closeAfterRefusal(tradeOf(answered(INQUIRY_PENDING), INQUIRY_PENDING.invoiceNo), refusal), {
      kind: 'indeterminate',
      ...refusal,
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Refund and refund status

describe('classifyRefundAnswer: refund (processType R)', () => {
  it('is retryable when never sent, indeterminate when in doubt', () => {
    assert.deepEqual(classifyRefundAnswer(NOT_SENT, refundOf(REFUND_DONE)), {
      kind: 'retryable',
      code: 'ECONNREFUSED',
      message: `refund: ${NOT_SENT.message}`,
    });
    assert.deepEqual(classifyRefundAnswer(TIMEOUT, refundOf(REFUND_DONE)), {
      kind: 'indeterminate',
      code: 'TIMEOUT',
      message: `refund: ${TIMEOUT.message}`,
    });
  });
  it('is retryable for an unsealed refusal of the envelope (02 not a JWS, 13 signature)', () => {
    for (const [respCode, respDesc] of [
      ['13', 'Invalid hash value.'],
      ['02', 'Invalid Request'],
    ] as const) {
      assert.deepEqual(classifyRefundAnswer(plainXml({ respCode, respDesc }), refundOf(REFUND_DONE)), {
        kind: 'retryable',
        code: respCode,
        message: respDesc,
      });
    }
  });
  it('is indeterminate for any other unsealed answer, a 00 success included (it is nobody’s word)', () => {
    assert.deepEqual(
      classifyRefundAnswer(plainXml({ respCode: '99', respDesc: 'Unable to complete the request.' }), refundOf(REFUND_DONE)),
      {
        kind: 'indeterminate',
        code: '99',
        message: 'Unable to complete the request.',
      },
    );
    assert.deepEqual(classifyRefundAnswer(plainXml(REFUND_DONE), refundOf(REFUND_DONE)), {
      kind: 'indeterminate',
      code: '00',
      message: 'Success',
    });
    assert.deepEqual(classifyRefundAnswer(plainXml({}), refundOf(REFUND_DONE)), {
      kind: 'indeterminate',
      code: 'MALFORMED_RESPONSE',
      message: 'no respCode',
    });
  });
  it('is succeeded for a sealed 00 RF record of this refund (idempotencyID echoed or not)', () => {
    assert.deepEqual(classifyRefundAnswer(sealed(REFUND_DONE), refundOf(REFUND_DONE)), {
      kind: 'succeeded',
      gatewayRefundId: '7000001',
      amountMinor: 16800,
    });
    const { idempotencyID: _i, ...noEcho } = REFUND_DONE;
    assert.deepEqual(classifyRefundAnswer(sealed(noEcho), refundOf(REFUND_DONE)), {
      kind: 'succeeded',
      gatewayRefundId: '7000001',
      amountMinor: 16800,
    });
  });
  it('is pending for a 00 RP record, failed for a 00 RFF or RR record', () => {
    assert.deepEqual(classifyRefundAnswer(sealed({ ...REFUND_DONE, status: 'RP' }), refundOf(REFUND_DONE)), {
      kind: 'pending',
      gatewayRefundId: '7000001',
    });
    assert.deepEqual(classifyRefundAnswer(sealed({ ...REFUND_DONE, status: 'RR1' }), refundOf(REFUND_DONE)), {
      kind: 'failed',
      code: 'RR1',
      message: 'refund rejected',
    });
    assert.deepEqual(classifyRefundAnswer(sealed({ ...REFUND_DONE, status: 'RFF' }), refundOf(REFUND_DONE)), {
      kind: 'failed',
      code: 'RFF',
      message: 'refund failed',
    });
  });
  it('is indeterminate for a 00 record that is not this refund’s or does not hold together', () => {
    const request = refundOf(REFUND_DONE);
    const { refundReferenceNo: _r, ...noReference } = REFUND_DONE;
    const { status: _s, ...noStatus } = REFUND_DONE;
    for (const fields of [
      { ...REFUND_DONE, idempotencyID: 'RFOTHER' },
      { ...REFUND_DONE, currencyCode: 'THB' },
      { ...REFUND_DONE, amount: '168.001' },
      { ...REFUND_DONE, status: 'XX' },
      noReference,
      noStatus,
    ]) {
      assert.deepEqual(classifyRefundAnswer(sealed(fields), request), {
        kind: 'indeterminate',
        code: 'MALFORMED_RESPONSE',
        message: 'refund success without a matching refund record',
      });
    }
    assert.deepEqual(classifyRefundAnswer(sealed({ ...REFUND_DONE, invoiceNo: 'POOTHERINVOICE000000' }), request), {
      kind: 'indeterminate',
      code: 'MALFORMED_RESPONSE',
      message: 'refund answer for another invoice',
    });
  });
  it('is pending for 42 and 51 (documented)', () => {
    assert.deepEqual(classifyRefundAnswer(sealed({ ...REFUND_DONE, respCode: '42', respDesc: 'Refund pending.' }), refundOf(REFUND_DONE)), {
      kind: 'pending',
      gatewayRefundId: '7000001',
    });
    assert.deepEqual(classifyRefundAnswer(sealed({ ...REFUND_40, respCode: '51', respDesc: 'Pending' }), refundOf(REFUND_40)), {
      kind: 'pending',
      gatewayRefundId: null,
    });
  });
  it('fails for good for a refusal (40 more than charged, 49 fully refunded, 12 not paid) and an unknown invoice (16)', () => {
    for (const answer of [REFUND_40, REFUND_49, REFUND_12, REFUND_16]) {
      assert.deepEqual(classifyRefundAnswer(sealed(answer), refundOf(answer)), {
        kind: 'failed',
        code: answer.respCode,
        message: answer.respDesc,
      });
    }
  });
  it('is retryable for a sealed refusal of the keys (96 unable to decrypt, 14 merchant): nothing was processed', () => {
    assert.deepEqual(classifyRefundAnswer(sealed({ ...REFUND_40, respCode: '96', respDesc: 'Unable to decrypt.' }), refundOf(REFUND_40)), {
      kind: 'retryable',
      code: '96',
      message: 'Unable to decrypt.',
    });
  });
  it('is indeterminate for 99 and an answer without a respCode (it may have been processed)', () => {
    assert.deepEqual(classifyRefundAnswer(sealed(REFUND_99), refundOf(REFUND_99)), {
      kind: 'indeterminate',
      code: '99',
      message: 'Unable to complete the request.',
    });
    assert.deepEqual(classifyRefundAnswer(sealed({ invoiceNo: 'X' }), refundOf({ invoiceNo: 'X' })), {
      kind: 'indeterminate',
      code: 'MALFORMED_RESPONSE',
      message: 'no respCode',
    });
  });
});

describe('classifyRefundStatus: refund status (processType RS)', () => {
  const query = { outTradeNo: STATUS_FIELDS.invoiceNo, gatewayTradeNo: '3000031', refundId: 'RF9F8E3720D6EF46A2CF74' };
  it('is unavailable when never sent or in doubt', () => {
    assert.deepEqual(classifyRefundStatus(NOT_SENT, query), {
      kind: 'unavailable',
      code: 'ECONNREFUSED',
      message: `refund status: ${NOT_SENT.message}`,
    });
    assert.deepEqual(classifyRefundStatus(TIMEOUT, query), {
      kind: 'unavailable',
      code: 'TIMEOUT',
      message: `refund status: ${TIMEOUT.message}`,
    });
  });
  it('is unavailable for an unsealed answer', () => {
    assert.deepEqual(classifyRefundStatus(plainXml({ respCode: '13', respDesc: 'Invalid hash value.' }), query), {
      kind: 'unavailable',
      code: '13',
      message: 'Invalid hash value.',
    });
  });
  it('answers this refund’s record from the list, in the currency the answer carries', () => {
    assert.deepEqual(classifyRefundStatus(sealed(STATUS_FIELDS, STATUS_ITEMS), query), {
      kind: 'answered',
      refund: { kind: 'succeeded', gatewayRefundId: '7000001', amountMinor: 16800 },
    });
    assert.deepEqual(classifyRefundStatus(sealed(STATUS_FIELDS, STATUS_ITEMS), { ...query, refundId: 'RFFIRST' }), {
      kind: 'answered',
      refund: { kind: 'succeeded', gatewayRefundId: '7000000', amountMinor: 3200 },
    });
    const jpy = sealed({ ...STATUS_FIELDS, currencyCode: 'JPY' }, [{ ...STATUS_ITEMS[1], amount: '1500' }]);
    assert.deepEqual(classifyRefundStatus(jpy, query), {
      kind: 'answered',
      refund: { kind: 'succeeded', gatewayRefundId: '7000001', amountMinor: 1500 },
    });
    assert.deepEqual(classifyRefundStatus(sealed(STATUS_FIELDS, [{ ...STATUS_ITEMS[1], status: 'RP' }]), query), {
      kind: 'answered',
      refund: { kind: 'pending' },
    });
  });
  it('answers not_found when the sealed list has no record under this idempotencyID, or 2C2P has no such transaction (16)', () => {
    assert.deepEqual(classifyRefundStatus(sealed(STATUS_FIELDS, STATUS_ITEMS), { ...query, refundId: 'RFNEVERSENT' }), {
      kind: 'answered',
      refund: { kind: 'not_found' },
    });
    assert.deepEqual(classifyRefundStatus(sealed(STATUS_FIELDS), query), { kind: 'answered', refund: { kind: 'not_found' } });
    assert.deepEqual(classifyRefundStatus(sealed(REFUND_STATUS_16), { ...query, outTradeNo: REFUND_16.invoiceNo }), {
      kind: 'answered',
      refund: { kind: 'not_found' },
    });
  });
  it('is unavailable for a malformed record, another invoice, a refusal (17) or an unknown code (99)', () => {
    assert.deepEqual(classifyRefundStatus(sealed(STATUS_FIELDS, [{ ...STATUS_ITEMS[1], amount: 'x' }]), query), {
      kind: 'unavailable',
      code: 'MALFORMED_RESPONSE',
      message: 'refund status with a malformed refund record',
    });
    assert.deepEqual(classifyRefundStatus(sealed({ ...STATUS_FIELDS, invoiceNo: 'POOTHER' }, STATUS_ITEMS), query), {
      kind: 'unavailable',
      code: 'MALFORMED_RESPONSE',
      message: 'refund status for another invoice',
    });
    for (const [respCode, respDesc] of [
      ['17', 'Request type is invalid.'],
      ['99', 'Unable to complete the request.'],
    ] as const) {
      assert.deepEqual(classifyRefundStatus(sealed({ ...STATUS_FIELDS, respCode, respDesc }), query), {
        kind: 'unavailable',
        code: respCode,
        message: respDesc,
      });
    }
  });
});

describe('the maintenance XML and its answer', () => {
  it('writes the request 2C2P documents, escaped, and reads an answer with its refund list', () => {
    assert.equal(
      xmlDocument('PaymentProcessRequest', [
        ['version', '3.8'],
        ['invoiceNo', 'A<&>'],
        ['notifyURL', undefined],
      ]),
      '<PaymentProcessRequest>\n  <version>3.8</version>\n  <invoiceNo>A&lt;&amp;&gt;</invoiceNo>\n</PaymentProcessRequest>',
    );
    const xml = `<?xml version="1.0"?><PaymentProcessResponse><respCode>00</respCode><respDesc>A &amp; B</respDesc>
      <refundList><refund><idempotencyID>X</idempotencyID><amount>1.00</amount></refund><refund><idempotencyID>Y</idempotencyID></refund></refundList>
      </PaymentProcessResponse>`;
    assert.deepEqual(parseXml(xml), {
      name: 'PaymentProcessResponse',
      fields: { respCode: '00', respDesc: 'A & B' },
      lists: { refundList: [{ idempotencyID: 'X', amount: '1.00' }, { idempotencyID: 'Y' }] },
    });
  });
  it('refuses a DOCTYPE, CDATA, unknown entities, mismatched tags and trailing text', () => {
    for (const xml of [
      '<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><a><b>&e;</b></a>',
      '<a><b><![CDATA[x]]></b></a>',
      '<a><b>&e;</b></a>',
      '<a><b>x</c></a>',
      '<a><b>x</b></a>trailing',
      '<a><b>x</b>',
    ]) {
      assert.equal(parseXml(xml), null, xml);
    }
  });
  it('reads an HTTP answer: not sent for a non-200, in doubt for what is neither its XML nor a JWS that opens', async () => {
    const never = () => Promise.resolve(null);
    assert.deepEqual(await readMaintenanceAnswer(502, 'bad gateway', never), {
      kind: 'not_sent',
      code: 'HTTP_502',
      message: 'HTTP 502 from the maintenance API',
    });
    assert.deepEqual((await readMaintenanceAnswer(200, '<html>oops</html>', never)).kind, 'in_doubt');
    assert.deepEqual((await readMaintenanceAnswer(200, 'eyJ.eyJ.sig', never)).kind, 'in_doubt');
    const opened = await readMaintenanceAnswer(200, 'eyJ.eyJ.sig', () =>
      Promise.resolve('<PaymentProcessResponse><respCode>00</respCode></PaymentProcessResponse>'),
    );
    assert.deepEqual(opened, { kind: 'sealed', answer: { name: 'PaymentProcessResponse', fields: { respCode: '00' }, lists: {} } });
    const plainAnswer = await readMaintenanceAnswer(200, '<PaymentProcessResponse><respCode>13</respCode></PaymentProcessResponse>', never);
    assert.deepEqual(plainAnswer.kind, 'plain');
  });
});

// ---------------------------------------------------------------------------------------------
// The backend notification

describe('notificationPayloadOf: the body before its signature', () => {
  it('is the JWT of {"payload": …}', () => {
    assert.deepEqual(notificationPayloadOf('{"payload":"eyJhbGciOiJIUzI1NiJ9.e30.x"}'), {
      kind: 'payload',
      token: 'eyJhbGciOiJIUzI1NiJ9.e30.x',
    });
  });
  it('rejects a body that is not JSON', () => {
    assert.deepEqual(notificationPayloadOf('payload=x'), { kind: 'rejected', reason: 'body is not JSON' });
  });
  it('rejects JSON that is not an object', () => {
    for (const body of ['[]', 'null', '"x"'])
      assert.deepEqual(notificationPayloadOf(body), { kind: 'rejected', reason: 'body is not a JSON object' });
  });
  it('rejects a missing, empty or non-string payload', () => {
    for (const body of ['{}', '{"payload":""}', '{"payload":{"respCode":"0000"}}']) {
      assert.deepEqual(notificationPayloadOf(body), { kind: 'rejected', reason: 'missing payload' });
    }
  });
});

describe('classifyNotification: the verified claims as a verdict', () => {
  it('verifies a paid invoice as succeeded, keyed by invoiceNo', () => {
    assert.deepEqual(classifyNotification(NOTIFIED_PAID), {
      kind: 'verified',
      notification: {
        gateway: '2c2p',
        eventId: 'POMXALB46O5202CEBEE2',
        merchantId: MERCHANT,
        outTradeNo: 'POMXALB46O5202CEBEE2',
        status: 'succeeded',
        gatewayTradeNo: '3000020',
        amountMinor: 5000,
        currency: 'CNY',
      },
    });
  });
  it('verifies a decline as other, which settles nothing', () => {
    const verdict = classifyNotification(NOTIFIED_DECLINED);
    assert.ok(verdict.kind === 'verified');
    assert.deepEqual([verdict.notification.status, verdict.notification.gatewayTradeNo], ['other', '3000021']);
  });
  it('verifies a decline without a tranRef too, with none', () => {
    const { tranRef: _t, ...noTranRef } = NOTIFIED_DECLINED;
    const verdict = classifyNotification(noTranRef);
    assert.ok(verdict.kind === 'verified');
    assert.deepEqual([verdict.notification.status, verdict.notification.gatewayTradeNo], ['other', '']);
  });
  it('rejects claims missing merchantID, invoiceNo, currencyCode or respCode', () => {
    for (const field of ['merchantID', 'invoiceNo', 'currencyCode', 'respCode']) {
      assert.deepEqual(classifyNotification({ ...NOTIFIED_PAID, [field]: '' }), { kind: 'rejected', reason: `missing ${field}` });
    }
  });
  it('rejects an amount finer than the currency, or none', () => {
    assert.deepEqual(classifyNotification(NOTIFIED_FINE_AMOUNT), { kind: 'rejected', reason: 'invalid amount 1.001' });
    const { amount: _a, ...noAmount } = NOTIFIED_PAID;
    assert.deepEqual(classifyNotification(noAmount), { kind: 'rejected', reason: 'invalid amount undefined' });
  });
  it('rejects a success without a tranRef', () => {
    assert.deepEqual(classifyNotification(NOTIFIED_NO_TRAN_REF), { kind: 'rejected', reason: 'missing tranRef' });
  });
});

function pick(failure: TransportFailure): { code: string; message: string } {
  return { code: failure.code, message: failure.message };
}
