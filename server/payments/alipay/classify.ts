/**
 * What Alipay's answers mean: the parsed answer of each method (trade.pay, precreate, close and
 * cancel, refund, trade.query, the refund query) and a notification's form, read into PayOnce's
 * terms. Pure functions of the answer and of what was asked: no I/O, no keys, no SDK.
 */
import type { NotificationVerdict, QueryOutcome, RefundQueryOutcome, TradeStatus } from '@/server/payments/gateway';
import { decimalToMinor } from '@/server/payments/money';
import { stringField } from '@/server/payments/transport';

/** A parsed answer (the SDK's `<method>_response` object), snake_case as Alipay writes it. */
export type Fields = Record<string, unknown>;

/** Alipay face-to-face and page pay settle in CNY only. */
export const CURRENCY = 'CNY';

/** The parts every answer has: `code`, `sub_code` ('' when absent) and the most specific message. */
interface Head {
  code: string;
  subCode: string;
  message: string;
}

function headOf(response: Fields): Head {
  const code = stringField(response, 'code') ?? '';
  return {
    code,
    subCode: stringField(response, 'sub_code') ?? '',
    message: stringField(response, 'sub_msg') ?? stringField(response, 'msg') ?? code,
  };
}

/** Alipay's refund has no id of its own on the wire: it is named by its trade and out_request_no. */
export function gatewayRefundIdOf(tradeNo: string, outRequestNo: string): string {
  return `${tradeNo}:${outRequestNo}`;
}

// ---------------------------------------------------------------------------------------------
// alipay.trade.pay

/** trade.pay sub-codes that end this attempt for good: the trade stays open for another buyer. */
export type DeclineSubCode =
  | 'ACQ.BUYER_BALANCE_NOT_ENOUGH'
  | 'ACQ.BUYER_ENABLE_STATUS_FORBID'
  | 'ACQ.PAYMENT_AUTH_CODE_INVALID'
  | 'ACQ.CONTEXT_INCONSISTENT'
  | 'ACQ.TRADE_HAS_CLOSE'
  | 'ACQ.TRADE_BUYER_NOT_MATCH'
  | 'ACQ.INVALID_PARAMETER';

export type PayAnswer =
  /** Paid, for exactly the amount asked. */
  | { kind: 'paid'; tradeNo: string; amountMinor: number }
  /** ACQ.TRADE_HAS_SUCCESS: believe it only once a query shows it for this amount. */
  | { kind: 'already_paid' }
  | { kind: 'declined'; subCode: DeclineSubCode; message: string }
  /** Rejected by the gateway's public checks (40001/40002/40006): nothing was processed. */
  | { kind: 'refused'; code: string; message: string }
  /** 10003 USERPAYING, 20000, ACQ.SYSTEM_ERROR, a code we do not know, a success we cannot read: may have been charged. */
  | { kind: 'in_doubt'; code: string; message: string };

/** trade.pay's answer to a charge of `askedMinor` fen. */
export function classifyPay(response: Fields, askedMinor: number): PayAnswer {
  const head = headOf(response);
  switch (head.code) {
    case '10000':
      return classifyPaid(response, askedMinor);
    case '10003': // USERPAYING: waiting for the buyer to confirm in the app; the outcome comes later.
      return { kind: 'in_doubt', code: 'ACQ.USERPAYING', message: head.message };
    case '20000': // Service Currently Unavailable: Alipay's own "unknown result, query it".
      return { kind: 'in_doubt', code: head.subCode || '20000', message: head.message };
    case '40001':
    case '40002':
    case '40006':
      return { kind: 'refused', code: head.subCode || head.code, message: head.message };
    case '40004':
      return classifyPayBusinessFailure(head);
    default:
      return { kind: 'in_doubt', code: head.code || 'MALFORMED_RESPONSE', message: head.message };
  }
}

/** A 10000: paid, but only what names its trade and carries the amount asked counts as paid. */
function classifyPaid(response: Fields, askedMinor: number): PayAnswer {
  const tradeNo = stringField(response, 'trade_no');
  const totalAmount = stringField(response, 'total_amount');
  if (!tradeNo || !totalAmount) return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: 'success without trade_no' };
  const amountMinor = decimalToMinor(totalAmount);
  if (amountMinor !== askedMinor) {
    return { kind: 'in_doubt', code: 'AMOUNT_MISMATCH', message: `paid ${totalAmount}, asked ${askedMinor} fen` };
  }
  return { kind: 'paid', tradeNo, amountMinor };
}

function classifyPayBusinessFailure({ subCode, message }: Head): PayAnswer {
  switch (subCode) {
    case 'ACQ.TRADE_HAS_SUCCESS':
      return { kind: 'already_paid' };
    case 'ACQ.BUYER_BALANCE_NOT_ENOUGH':
    case 'ACQ.BUYER_ENABLE_STATUS_FORBID':
    case 'ACQ.PAYMENT_AUTH_CODE_INVALID':
    case 'ACQ.CONTEXT_INCONSISTENT':
    case 'ACQ.TRADE_HAS_CLOSE':
    case 'ACQ.TRADE_BUYER_NOT_MATCH':
    case 'ACQ.INVALID_PARAMETER':
      return { kind: 'declined', subCode, message };
    default:
      // ACQ.SYSTEM_ERROR, or an unlisted business failure: not proof that nothing was charged.
      return { kind: 'in_doubt', code: subCode || '40004', message };
  }
}

// ---------------------------------------------------------------------------------------------
// alipay.trade.precreate

/** precreate sub-codes that refuse the QR code for good. */
export type PrecreateRefusalSubCode =
  'ACQ.TRADE_HAS_CLOSE' | 'ACQ.CONTEXT_INCONSISTENT' | 'ACQ.TRADE_BUYER_NOT_MATCH' | 'ACQ.INVALID_PARAMETER';

export type PrecreateAnswer =
  | { kind: 'qr_code'; qrCode: string }
  /** ACQ.TRADE_HAS_SUCCESS: the buyer paid this trade already; believe it only once a query shows it. */
  | { kind: 'already_paid' }
  | { kind: 'declined'; subCode: PrecreateRefusalSubCode; message: string }
  /** No code was handed out (20000, public checks, ACQ.SYSTEM_ERROR, unknown codes); precreate moves no money. */
  | { kind: 'no_code'; code: string; message: string };

export function classifyPrecreate(response: Fields): PrecreateAnswer {
  const head = headOf(response);
  if (head.code === '10000') {
    const qrCode = stringField(response, 'qr_code');
    if (!qrCode) return { kind: 'no_code', code: 'MALFORMED_RESPONSE', message: 'precreate success without qr_code' };
    return { kind: 'qr_code', qrCode };
  }
  if (head.code === '40004') {
    switch (head.subCode) {
      case 'ACQ.TRADE_HAS_SUCCESS':
        return { kind: 'already_paid' };
      case 'ACQ.TRADE_HAS_CLOSE':
      case 'ACQ.CONTEXT_INCONSISTENT':
      case 'ACQ.TRADE_BUYER_NOT_MATCH':
      case 'ACQ.INVALID_PARAMETER':
        return { kind: 'declined', subCode: head.subCode, message: head.message };
      default:
        break;
    }
  }
  return { kind: 'no_code', code: head.subCode || head.code || 'MALFORMED_RESPONSE', message: head.message };
}

// ---------------------------------------------------------------------------------------------
// alipay.trade.close / alipay.trade.cancel

export type CloseMethod = 'alipay.trade.close' | 'alipay.trade.cancel';

export type CloseAnswer =
  | { kind: 'closed' }
  /** trade.cancel found the trade paid and refunded it in full (action "refund"). */
  | { kind: 'refunded_by_cancel'; message: string }
  /** The trade is not (or no longer) in the state the call expected: settle it with a query. */
  | { kind: 'state_changed'; code: string; message: string }
  /** Not processed (public checks) or outcome unknown: the trade may still take money. */
  | { kind: 'in_doubt'; code: string; message: string };

export function classifyClose(response: Fields, method: CloseMethod): CloseAnswer {
  const head = headOf(response);
  switch (head.code) {
    case '10000':
      return method === 'alipay.trade.close' ? { kind: 'closed' } : classifyCancelAction(response);
    case '40004':
      return classifyCloseBusinessFailure(head);
    default:
      // 20000, 40001/40002/40006 (nothing was processed, so nothing was closed either), unknown codes.
      return { kind: 'in_doubt', code: head.subCode || head.code || 'MALFORMED_RESPONSE', message: head.message };
  }
}

/**
 * trade.cancel says what it did. "close": the trade (or the out_trade_no) can take no money.
 * "refund": the buyer had paid after all and Alipay gave the money back in full. Anything else is
 * not an answer we can rely on.
 */
function classifyCancelAction(response: Fields): CloseAnswer {
  const action = stringField(response, 'action');
  if (action === 'close') return { kind: 'closed' };
  if (action === 'refund') {
    return { kind: 'refunded_by_cancel', message: 'trade.cancel found the trade paid and refunded it in full (action refund)' };
  }
  return { kind: 'in_doubt', code: 'UNKNOWN_CANCEL_ACTION', message: `trade.cancel action ${action ?? '(none)'}` };
}

function classifyCloseBusinessFailure({ subCode, message }: Head): CloseAnswer {
  switch (subCode) {
    case 'ACQ.TRADE_STATUS_ERROR': // trade.close of a paid (or otherwise not open) trade
    case 'ACQ.TRADE_HAS_SUCCESS':
    case 'ACQ.TRADE_HAS_FINISHED':
    case 'ACQ.TRADE_NOT_EXIST':
      return { kind: 'state_changed', code: subCode, message };
    default:
      // ACQ.SYSTEM_ERROR, a cancel with retry_flag "Y", or a code we do not know.
      return { kind: 'in_doubt', code: subCode || '40004', message };
  }
}

// ---------------------------------------------------------------------------------------------
// alipay.trade.refund

/** trade.refund sub-codes that refuse the refund for good: nothing was refunded, a person must look. */
export type RefundRefusalSubCode =
  | 'ACQ.TRADE_NOT_EXIST'
  | 'ACQ.TRADE_STATUS_ERROR'
  | 'ACQ.TRADE_HAS_FINISHED'
  | 'ACQ.TRADE_NOT_ALLOW_REFUND'
  | 'ACQ.REASON_TRADE_REFUND_FEE_ERR'
  | 'ACQ.REFUND_AMT_NOT_EQUAL_TOTAL'
  | 'ACQ.REFUND_FEE_ERROR'
  | 'ACQ.DISCORDANT_REPEAT_REQUEST'
  | 'ACQ.SELLER_BALANCE_NOT_ENOUGH'
  | 'ACQ.REASON_TRADE_BEEN_FREEZEN'
  | 'ACQ.INVALID_PARAMETER';

export type RefundAnswer =
  /** fund_change "Y": this call moved the money. */
  | { kind: 'refunded'; tradeNo: string | undefined }
  /** 10000 without fund_change "Y": a repeat of a refund already made, or one Alipay must confirm. */
  | { kind: 'confirm_by_query' }
  | { kind: 'refused'; subCode: RefundRefusalSubCode; message: string }
  /** Rejected by the gateway's public checks (40001/40002/40006): nothing was processed. */
  | { kind: 'not_processed'; code: string; message: string }
  | { kind: 'in_doubt'; code: string; message: string };

export function classifyRefund(response: Fields): RefundAnswer {
  const head = headOf(response);
  switch (head.code) {
    case '10000':
      return stringField(response, 'fund_change') === 'Y'
        ? { kind: 'refunded', tradeNo: stringField(response, 'trade_no') }
        : { kind: 'confirm_by_query' };
    case '40001':
    case '40002':
    case '40006':
      return { kind: 'not_processed', code: head.subCode || head.code, message: head.message };
    case '40004':
      return classifyRefundBusinessFailure(head);
    default:
      // 20000 Service Currently Unavailable: Alipay's own "unknown result, query it".
      return { kind: 'in_doubt', code: head.subCode || head.code || 'MALFORMED_RESPONSE', message: head.message };
  }
}

function classifyRefundBusinessFailure({ subCode, message }: Head): RefundAnswer {
  switch (subCode) {
    case 'ACQ.TRADE_NOT_EXIST':
    case 'ACQ.TRADE_STATUS_ERROR':
    case 'ACQ.TRADE_HAS_FINISHED':
    case 'ACQ.TRADE_NOT_ALLOW_REFUND':
    case 'ACQ.REASON_TRADE_REFUND_FEE_ERR':
    case 'ACQ.REFUND_AMT_NOT_EQUAL_TOTAL':
    case 'ACQ.REFUND_FEE_ERROR':
    case 'ACQ.DISCORDANT_REPEAT_REQUEST':
    case 'ACQ.SELLER_BALANCE_NOT_ENOUGH':
    case 'ACQ.REASON_TRADE_BEEN_FREEZEN':
    case 'ACQ.INVALID_PARAMETER':
      return { kind: 'refused', subCode, message };
    default:
      // ACQ.SYSTEM_ERROR or a code we do not know: not proof that nothing was refunded.
      return { kind: 'in_doubt', code: subCode || '40004', message };
  }
}

// ---------------------------------------------------------------------------------------------
// alipay.trade.query, alipay.trade.fastpay.refund.query

/** An answer that is neither a success nor "no such trade": the query could not tell. */
function queryUnavailable(response: Fields, fallbackMessage: string): { kind: 'unavailable'; code: string; message: string } {
  return {
    kind: 'unavailable',
    code: stringField(response, 'sub_code') ?? stringField(response, 'code') ?? 'MALFORMED_RESPONSE',
    message: stringField(response, 'sub_msg') ?? stringField(response, 'msg') ?? fallbackMessage,
  };
}

function isTradeNotExist(response: Fields): boolean {
  return stringField(response, 'code') === '40004' && stringField(response, 'sub_code') === 'ACQ.TRADE_NOT_EXIST';
}

/** trade_status as a query tells it; a partly refunded trade stays TRADE_SUCCESS (paid). */
const TRADE_STATES: Readonly<Record<string, 'pending' | 'closed' | 'paid'>> = {
  WAIT_BUYER_PAY: 'pending',
  TRADE_CLOSED: 'closed',
  TRADE_SUCCESS: 'paid',
  TRADE_FINISHED: 'paid',
};

/**
 * trade.query in PayOnce's terms. A fully refunded trade is TRADE_CLOSED and reads `closed` (it can
 * neither take nor keep money); a partly refunded one stays TRADE_SUCCESS and is `succeeded` for its
 * whole total_amount: refunds are tracked through refund()/queryRefund(), never netted here.
 */
export function classifyTradeQuery(response: Fields): QueryOutcome {
  if (isTradeNotExist(response)) return { kind: 'answered', trade: { kind: 'not_found' } };
  if (stringField(response, 'code') !== '10000') return queryUnavailable(response, 'trade.query failed');
  const status = stringField(response, 'trade_status');
  const state = status !== undefined && Object.hasOwn(TRADE_STATES, status) ? TRADE_STATES[status] : undefined;
  if (state === 'paid') return paidTrade(response);
  if (state) return { kind: 'answered', trade: { kind: state } };
  return { kind: 'unavailable', code: 'UNKNOWN_TRADE_STATUS', message: `trade_status ${status ?? '(none)'}` };
}

function paidTrade(response: Fields): QueryOutcome {
  const tradeNo = stringField(response, 'trade_no');
  const amountMinor = decimalToMinor(stringField(response, 'total_amount') ?? '');
  if (!tradeNo || amountMinor === null) {
    return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'paid trade without trade_no or amount' };
  }
  const trade: TradeStatus = { kind: 'succeeded', gatewayTradeNo: tradeNo, amountMinor, currency: CURRENCY };
  return { kind: 'answered', trade };
}

/**
 * The refund query's answer about the refund `asked.refundId` of `asked.gatewayTradeNo`. Alipay:
 * "10000 only means the query ran; if it returns the refund's data the refund succeeded, if not, it
 * did not — retry with the same out_request_no" (and a query right after the refund may not see it
 * yet: repeating the same out_request_no is safe either way).
 */
export function classifyRefundQuery(response: Fields, asked: { gatewayTradeNo: string; refundId: string }): RefundQueryOutcome {
  // No trade, so certainly no refund of it.
  if (isTradeNotExist(response)) return { kind: 'answered', refund: { kind: 'not_found' } };
  if (stringField(response, 'code') !== '10000') return queryUnavailable(response, 'refund query failed');
  const refundAmount = stringField(response, 'refund_amount');
  if (refundAmount === undefined) return { kind: 'answered', refund: { kind: 'not_found' } };
  const amountMinor = decimalToMinor(refundAmount);
  if (amountMinor === null) return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: `refund_amount ${refundAmount}` };
  const refundStatus = stringField(response, 'refund_status');
  // REFUND_SUCCESS is the only status Alipay documents; an absent one means success for refunds made
  // with trade.refund. Any other is not final as far as we can tell.
  if (refundStatus !== undefined && refundStatus !== 'REFUND_SUCCESS') return { kind: 'answered', refund: { kind: 'pending' } };
  const tradeNo = stringField(response, 'trade_no') ?? asked.gatewayTradeNo;
  return { kind: 'answered', refund: { kind: 'succeeded', gatewayRefundId: gatewayRefundIdOf(tradeNo, asked.refundId), amountMinor } };
}

// ---------------------------------------------------------------------------------------------
// Notifications (trade_status_sync)

/** A notification's form fields, each name once. */
export type NotificationForm = Record<string, string>;

/**
 * The form of a notification, before its signature is checked: rejected when a name appears twice
 * (the signed and the read value could differ), `sign` is missing, or `sign_type` is not RSA2 (only
 * RSA2 is configured; a downgrade to RSA, SHA-1, announced by the message itself is refused).
 */
export function readNotificationForm(rawBody: string): { kind: 'form'; fields: NotificationForm } | { kind: 'rejected'; reason: string } {
  const fields: NotificationForm = {};
  for (const [key, value] of new URLSearchParams(rawBody)) {
    if (Object.hasOwn(fields, key)) return { kind: 'rejected', reason: `duplicate field ${key}` };
    fields[key] = value;
  }
  if (!fields.sign) return { kind: 'rejected', reason: 'missing sign' };
  if (fields.sign_type !== undefined && fields.sign_type !== 'RSA2') {
    return { kind: 'rejected', reason: `unsupported sign_type ${fields.sign_type}` };
  }
  return { kind: 'form', fields };
}

const REQUIRED_NOTIFICATION_FIELDS = ['app_id', 'out_trade_no', 'trade_no', 'trade_status', 'total_amount'] as const;

/** What a notification whose signature verified says: a payment's status, or a refund. */
export function classifyNotification(fields: NotificationForm): NotificationVerdict {
  for (const field of REQUIRED_NOTIFICATION_FIELDS) {
    if (!fields[field]) return { kind: 'rejected', reason: `missing ${field}` };
  }
  const amountMinor = decimalToMinor(fields.total_amount ?? '');
  if (amountMinor === null) return { kind: 'rejected', reason: `invalid total_amount ${fields.total_amount}` };
  // A refund triggers the same trade_status_sync as the payment, to the payment's notify_url, with
  // trade_status still TRADE_SUCCESS after a partial refund: only refund_fee / out_biz_no /
  // gmt_refund tell it apart, and it must never be read as a (second) payment.
  if (fields.refund_fee !== undefined || fields.out_biz_no !== undefined || fields.gmt_refund !== undefined) {
    return classifyRefundNotification(fields);
  }
  const tradeStatus = fields.trade_status;
  return {
    kind: 'verified',
    notification: {
      gateway: 'alipay',
      eventId: fields.out_trade_no ?? '',
      merchantId: fields.app_id ?? '',
      outTradeNo: fields.out_trade_no ?? '',
      status: tradeStatus === 'TRADE_SUCCESS' || tradeStatus === 'TRADE_FINISHED' ? 'succeeded' : 'other',
      gatewayTradeNo: fields.trade_no ?? '',
      amountMinor,
      currency: CURRENCY,
    },
  };
}

function classifyRefundNotification(fields: NotificationForm): NotificationVerdict {
  const refundId = fields.out_biz_no;
  if (!refundId) return { kind: 'rejected', reason: 'missing out_biz_no' };
  const refundedMinor = decimalToMinor(fields.refund_fee ?? '');
  if (refundedMinor === null) return { kind: 'rejected', reason: `invalid refund_fee ${fields.refund_fee}` };
  const outTradeNo = fields.out_trade_no ?? '';
  return {
    kind: 'refund',
    notification: {
      gateway: 'alipay',
      // One notification per refund (its notify_id is per delivery series, the refund id is ours).
      eventId: `${outTradeNo}:refund:${refundId}`,
      merchantId: fields.app_id ?? '',
      outTradeNo,
      refundId,
      gatewayRefundId: gatewayRefundIdOf(fields.trade_no ?? '', refundId),
      // Alipay only notifies refunds that went through.
      status: 'succeeded',
      // refund_fee is the trade's total refunded so far — Alipay's notification carries no
      // per-refund amount. With PayOnce's one refund per charge the two are the same.
      amountMinor: refundedMinor,
      currency: CURRENCY,
    },
  };
}
