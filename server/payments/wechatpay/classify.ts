/**
 * What WeChat Pay's answers mean: pure functions from a parsed, signature-checked answer (or a
 * decrypted notification resource) to PayOnce's outcomes. No I/O, no configuration and no keys here:
 * whatever an answer is compared with (the order asked about, the merchant) is passed in.
 */
import type {
  ChargeOutcome,
  CloseOutcome,
  NotificationVerdict,
  QueryOutcome,
  RefundOutcome,
  RefundQuery,
  RefundQueryOutcome,
  RefundStatus,
  TradeStatus,
} from '@/server/payments/gateway';
import { assertNever, stringField } from '@/server/payments/transport';
import { parseJson, readRefund, readTransaction, type Json, type Transaction, type WechatRefund } from './wire';

/** What one query by out_trade_no found, before PayOnce's TradeStatus flattens PAYERROR away. */
export type Lookup =
  { kind: 'found'; transaction: Transaction } | { kind: 'not_found' } | { kind: 'unavailable'; code: string; message: string };

/** The answer to 查询订单 (GET …/out-trade-no/{no}?mchid=) about the order `asked` names. */
export function classifyLookup(status: number, body: Json | null, asked: { outTradeNo: string; mchid: string }): Lookup {
  if (status === 404 && stringField(body, 'code') === 'ORDER_NOT_EXIST') return { kind: 'not_found' };
  if (status !== 200) return unavailable(status, body);
  const transaction = readTransaction(body);
  if (typeof transaction === 'string') return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: transaction };
  // An answer about another order or merchant is not an answer to our question.
  if (transaction.outTradeNo !== asked.outTradeNo || transaction.mchid !== asked.mchid) {
    return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'query answered for another order' };
  }
  return { kind: 'found', transaction };
}

function unavailable(status: number, body: Json | null): { kind: 'unavailable'; code: string; message: string } {
  return {
    kind: 'unavailable',
    code: stringField(body, 'code') ?? `HTTP_${status}`,
    message: stringField(body, 'message') ?? `HTTP ${status}`,
  };
}

export function tradeStatus(transaction: Transaction): TradeStatus {
  switch (transaction.state) {
    // PAYERROR: the last payment failed but the order stays payable (another buyer may pay it).
    case 'NOTPAY':
    case 'USERPAYING':
    case 'PAYERROR':
      return { kind: 'pending' };
    // REFUND ("转入退款") means it was paid; refunds are a separate flow and never un-pay an order.
    case 'SUCCESS':
    case 'REFUND':
      return {
        kind: 'succeeded',
        gatewayTradeNo: transaction.transactionId ?? '',
        amountMinor: transaction.total,
        currency: transaction.currency,
      };
    case 'CLOSED':
    case 'REVOKED':
      return { kind: 'closed' };
    default:
      return assertNever(transaction.state);
  }
}

export function queryOutcome(found: Lookup): QueryOutcome {
  switch (found.kind) {
    case 'unavailable':
      return { kind: 'unavailable', code: found.code, message: found.message };
    case 'not_found':
      return { kind: 'answered', trade: { kind: 'not_found' } };
    case 'found':
      return { kind: 'answered', trade: tradeStatus(found.transaction) };
    default:
      return assertNever(found);
  }
}

// ---------------------------------------------------------------------------------------------
// Charge: Native下单, then the order as queried

/**
 * The create errors WeChat documents, by what they mean for this attempt. A declarative table: every
 * code is named once, with its meaning.
 */
const CREATE_ERRORS = {
  // The request itself is wrong; sending it again cannot help. ORDER_CLOSED included: the order was
  // closed (the checkout moved elsewhere, or it expired) and this gateway will never take money under
  // this out_trade_no again.
  PARAM_ERROR: 'declined',
  INVALID_REQUEST: 'declined',
  ORDER_CLOSED: 'declined',
  RULE_LIMIT: 'declined',
  TRADE_ERROR: 'declined',
  NOT_ENOUGH: 'declined',
  ACCOUNT_ERROR: 'declined',
  // Our configuration is wrong: nothing was processed, and it is not the buyer's fault to store.
  APPID_MCHID_NOT_MATCH: 'retryable',
  MCH_NOT_EXISTS: 'retryable',
  NO_AUTH: 'retryable',
  // The out_trade_no exists with other parameters, or is paid / closed: a query tells which.
  OUT_TRADE_NO_USED: 'out_trade_no_used',
} as const satisfies Record<string, 'declined' | 'retryable' | 'out_trade_no_used'>;

/** A create's answer: an open order to pay, a used out_trade_no to look at, or the charge's outcome. */
export type CreateAnswer =
  | { kind: 'created'; codeUrl: string }
  | { kind: 'out_trade_no_used'; message: string }
  | Extract<ChargeOutcome, { kind: 'declined' | 'retryable' | 'indeterminate' }>;

export function classifyCreate(status: number, body: Json | null): CreateAnswer {
  if (status === 200) {
    const codeUrl = stringField(body, 'code_url');
    return codeUrl
      ? { kind: 'created', codeUrl }
      : { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'create answered 200 without code_url' };
  }
  const code = stringField(body, 'code');
  const message = stringField(body, 'message') ?? `HTTP ${status}`;
  const meaning = status >= 400 && status < 500 ? documented(CREATE_ERRORS, code) : undefined;
  // Another 2xx/3xx/4xx or an error code we do not know: not proof that nothing happened.
  if (!code || !meaning) return { kind: 'indeterminate', code: code ?? `HTTP_${status}`, message };
  return meaning === 'out_trade_no_used' ? { kind: meaning, message } : { kind: meaning, code, message };
}

/** What `table` says `code` means, if `code` is one of its own keys. */
function documented<T extends string>(table: Readonly<Record<string, T>>, code: string | undefined): T | undefined {
  return code !== undefined && Object.hasOwn(table, code) ? table[code] : undefined;
}

/** A paid transaction is this charge's success only for exactly the amount and currency asked. */
export function paidOutcome(transaction: Transaction, asked: { amountMinor: number; currency: string }): ChargeOutcome {
  if (transaction.total !== asked.amountMinor || transaction.currency !== asked.currency) {
    return {
      kind: 'indeterminate',
      code: 'AMOUNT_MISMATCH',
      message: `order paid ${transaction.total} ${transaction.currency}, asked ${asked.amountMinor} ${asked.currency}`,
    };
  }
  return {
    kind: 'succeeded',
    gatewayTradeNo: transaction.transactionId ?? '',
    amountMinor: transaction.total,
    currency: transaction.currency,
  };
}

/** One query while a test buyer pays the order just created: the charge's outcome, or still waiting. */
export type Polled = ChargeOutcome | { kind: 'waiting'; code: string; message: string };

export function classifyPolled(found: Lookup, asked: { amountMinor: number; currency: string }): Polled {
  switch (found.kind) {
    case 'found':
      return polledTransaction(found.transaction, asked);
    case 'not_found':
      // We were just told it was created; an unknown order here is lag or a different gateway.
      return { kind: 'waiting', code: 'ORDER_NOT_EXIST', message: 'created order not found by query' };
    case 'unavailable':
      return { kind: 'waiting', code: found.code, message: found.message };
    default:
      return assertNever(found);
  }
}

function polledTransaction(transaction: Transaction, asked: { amountMinor: number; currency: string }): Polled {
  switch (transaction.state) {
    case 'SUCCESS':
    case 'REFUND':
      return paidOutcome(transaction, asked);
    case 'PAYERROR':
      return { kind: 'declined', code: 'PAYERROR', message: transaction.stateDesc };
    case 'CLOSED':
    case 'REVOKED':
      return { kind: 'declined', code: transaction.state, message: transaction.stateDesc };
    case 'NOTPAY':
    case 'USERPAYING':
      return { kind: 'waiting', code: transaction.state, message: transaction.stateDesc };
    default:
      return assertNever(transaction.state);
  }
}

/**
 * 403 OUT_TRADE_NO_USED (`message`), then a query of the order: paid already (a retry whose answer
 * was lost), or not this order's terms.
 */
export function classifyUsedOutTradeNo(found: Lookup, asked: { amountMinor: number; currency: string }, message: string): ChargeOutcome {
  switch (found.kind) {
    case 'unavailable':
      return { kind: 'indeterminate', code: 'OUT_TRADE_NO_USED', message: `${message}; query failed: ${found.message}` };
    case 'not_found':
      return { kind: 'indeterminate', code: 'OUT_TRADE_NO_USED', message: `${message}; query found no order` };
    case 'found':
      break;
    default:
      return assertNever(found);
  }
  const { transaction } = found;
  switch (transaction.state) {
    case 'SUCCESS':
    case 'REFUND':
      return paidOutcome(transaction, asked);
    case 'USERPAYING':
      // Someone is paying the existing order right now: its outcome is not known yet.
      return { kind: 'indeterminate', code: 'OUT_TRADE_NO_USED', message: `${message}; order is USERPAYING` };
    case 'NOTPAY':
    case 'PAYERROR':
    case 'CLOSED':
    case 'REVOKED':
      return { kind: 'declined', code: 'OUT_TRADE_NO_USED', message: `${message} (order is ${transaction.state})` };
    default:
      return assertNever(transaction.state);
  }
}

// ---------------------------------------------------------------------------------------------
// Close: query first, close only an order nobody is paying

/** The charges a paid transaction stands for, as close reports them. */
function alreadyPaid(transaction: Transaction): CloseOutcome {
  return {
    kind: 'already_paid',
    charges: [{ gatewayTradeNo: transaction.transactionId ?? '', amountMinor: transaction.total, currency: transaction.currency }],
  };
}

/** The query before a close: the close's outcome already, or `open` (NOTPAY / PAYERROR) to be closed. */
export function classifyBeforeClose(found: Lookup): CloseOutcome | { kind: 'open' } {
  switch (found.kind) {
    case 'unavailable':
      return { kind: 'indeterminate', code: found.code, message: `query before close failed: ${found.message}` };
    case 'not_found':
      // [unverified] WeChat does not say whether a later create under this out_trade_no would be
      // refused; the close API itself answers ORDER_NOT_EXIST, so there is nothing to close here.
      return { kind: 'closed' };
    case 'found':
      break;
    default:
      return assertNever(found);
  }
  const { transaction } = found;
  switch (transaction.state) {
    case 'SUCCESS':
    case 'REFUND':
      return alreadyPaid(transaction);
    case 'USERPAYING':
      return { kind: 'indeterminate', code: 'USERPAYING', message: `${transaction.stateDesc}: the buyer is paying now` };
    case 'CLOSED':
    case 'REVOKED':
      return { kind: 'closed' };
    case 'NOTPAY':
    case 'PAYERROR':
      return { kind: 'open' };
    default:
      return assertNever(transaction.state);
  }
}

/**
 * What the close API's refusals mean. ORDERPAID ("订单已支付，不能发起关单，请当作已支付的正常交易")
 * is the documented one; ORDER_PAID and TRADE_ERROR are read the same way, since the v3 spelling is
 * unverified: all three are settled by querying, never trusted blindly. ORDER_NOT_EXIST and
 * ORDER_CLOSED / ORDERCLOSED mean nothing can be paid under this out_trade_no.
 */
const CLOSE_ERRORS = {
  ORDERPAID: 'refused',
  ORDER_PAID: 'refused',
  TRADE_ERROR: 'refused',
  ORDER_NOT_EXIST: 'closed',
  ORDER_CLOSED: 'closed',
  ORDERCLOSED: 'closed',
} as const satisfies Record<string, 'refused' | 'closed'>;

/** The close API's answer: the close's outcome, or `refused` (paid, it says) to be settled by a query. */
export function classifyClose(
  status: number,
  body: Json | null,
): Extract<CloseOutcome, { kind: 'closed' | 'indeterminate' }> | { kind: 'refused'; code: string; message: string } {
  if (status === 204) return { kind: 'closed' };
  const code = stringField(body, 'code');
  const message = stringField(body, 'message') ?? `HTTP ${status}`;
  const meaning = status >= 400 && status < 500 ? documented(CLOSE_ERRORS, code) : undefined;
  if (!code || !meaning) return { kind: 'indeterminate', code: code ?? `HTTP_${status}`, message };
  // Refused: paid between our query and the close (or refused for a reason the query will show).
  return meaning === 'closed' ? { kind: 'closed' } : { kind: 'refused', code, message };
}

/** The query after a refused close (`code`, `message`): what the order turned out to be. */
export function classifyAfterRefusedClose(found: Lookup, code: string, message: string): CloseOutcome {
  if (found.kind !== 'found') return { kind: 'indeterminate', code, message: `${message}; query after close: ${found.kind}` };
  const { transaction } = found;
  switch (transaction.state) {
    case 'SUCCESS':
    case 'REFUND':
      return alreadyPaid(transaction);
    case 'CLOSED':
    case 'REVOKED':
      return { kind: 'closed' };
    case 'NOTPAY':
    case 'PAYERROR':
    case 'USERPAYING':
      return { kind: 'indeterminate', code, message: `${message} (order is ${transaction.state})` };
    default:
      return assertNever(transaction.state);
  }
}

// ---------------------------------------------------------------------------------------------
// Refunds: 申请退款 and 查询单笔退款

/** The refund errors WeChat documents for 申请退款: each means this refund id failed for good. */
const REFUND_ERRORS: ReadonlySet<string> = new Set([
  // The request breaks a business rule (exceeds the refundable amount, total is not the order's, the
  // same out_refund_no with other terms) or is malformed.
  'INVALID_REQUEST',
  'PARAM_ERROR',
  // "订单号不存在": unknown or unpaid order.
  'RESOURCE_NOT_EXISTS',
  // The merchant's balance cannot cover it, the buyer's account cannot take it, or we may not refund:
  // nothing was refunded, and a person has to act before this refund id can go through.
  'NOT_ENOUGH',
  'USER_ACCOUNT_ABNORMAL',
  'NO_AUTH',
  'MCH_NOT_EXISTS',
]);

/** The refund asked about: its out_refund_no, order, charge (when known) and, for 申请退款, amount. */
export type AskedRefund = RefundQuery & { amountMinor?: number };

/** An answer about another refund, order or amount is not an answer to our question. */
function refundMismatch(refund: WechatRefund, asked: AskedRefund): string | null {
  if (refund.outRefundNo !== asked.refundId) return `answered for refund ${refund.outRefundNo}`;
  if (refund.outTradeNo !== asked.outTradeNo) return `answered for order ${refund.outTradeNo}`;
  if (asked.gatewayTradeNo && refund.transactionId !== asked.gatewayTradeNo) return `answered for transaction ${refund.transactionId}`;
  if (asked.amountMinor !== undefined && refund.refund !== asked.amountMinor)
    return `refund of ${refund.refund}, asked ${asked.amountMinor}`;
  return null;
}

export function refundStatus(refund: WechatRefund): Exclude<RefundStatus, { kind: 'not_found' }> {
  switch (refund.status) {
    case 'SUCCESS':
      return { kind: 'succeeded', gatewayRefundId: refund.refundId, amountMinor: refund.refund };
    case 'PROCESSING':
      return { kind: 'pending' };
    // CLOSED: "退款关闭", nothing was refunded. ABNORMAL: the money could not reach the buyer (e.g. a
    // cancelled card) and waits for the merchant's 异常退款 — a person must act either way.
    case 'CLOSED':
    case 'ABNORMAL':
      return { kind: 'failed', code: `REFUND_${refund.status}`, message: `WeChat Pay refund ${refund.refundId} is ${refund.status}` };
    default:
      return assertNever(refund.status);
  }
}

/** A refund in a 200 answer, if it is the one asked about; otherwise what is wrong with it. */
function answeredRefund(body: Json | null, asked: AskedRefund): WechatRefund | string {
  const answered = readRefund(body, 'status');
  return typeof answered === 'string' ? answered : (refundMismatch(answered, asked) ?? answered);
}

/** The answer to 申请退款 (POST /v3/refund/domestic/refunds) for the refund `asked`. */
export function classifyRefund(status: number, body: Json | null, asked: AskedRefund): RefundOutcome {
  if (status === 200) {
    const answered = answeredRefund(body, asked);
    if (typeof answered === 'string') return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: answered };
    const result = refundStatus(answered);
    return result.kind === 'pending' ? { kind: 'pending', gatewayRefundId: answered.refundId } : result;
  }
  const code = stringField(body, 'code');
  const message = stringField(body, 'message') ?? `HTTP ${status}`;
  if (status >= 400 && status < 500 && code && REFUND_ERRORS.has(code)) {
    return { kind: 'failed', code, message };
  }
  // Another status or an error code we do not know: not proof that nothing was refunded.
  return { kind: 'indeterminate', code: code ?? `HTTP_${status}`, message };
}

/** The answer to 查询单笔退款 (GET /v3/refund/domestic/refunds/{out_refund_no}) about `asked`. */
export function classifyRefundQuery(status: number, body: Json | null, asked: AskedRefund): RefundQueryOutcome {
  // WeChat positively says it has no refund under this out_refund_no.
  if (status === 404 && stringField(body, 'code') === 'RESOURCE_NOT_EXISTS') return { kind: 'answered', refund: { kind: 'not_found' } };
  if (status !== 200) return unavailable(status, body);
  const answered = answeredRefund(body, asked);
  if (typeof answered === 'string') return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: answered };
  return { kind: 'answered', refund: refundStatus(answered) };
}

// ---------------------------------------------------------------------------------------------
// Notifications: the envelope, then the decrypted resource

/** A notification's encrypted resource, as the envelope carries it. */
export interface EncryptedResource {
  originalType: 'transaction' | 'refund';
  ciphertext: string;
  nonce: string;
  associatedData: string;
}

/** A notification body (its signature already verified): the envelope and its resource, or why not. */
export function readEnvelope(rawBody: string): { envelope: Json; resource: EncryptedResource } | { kind: 'rejected'; reason: string } {
  const envelope = parseJson(rawBody);
  if (!envelope) return { kind: 'rejected', reason: 'body is not a JSON object' };
  const resource = envelope.resource;
  if (typeof resource !== 'object' || resource === null) return { kind: 'rejected', reason: 'missing resource' };
  const r = resource as Json;
  if (r.algorithm !== 'AEAD_AES_256_GCM') return { kind: 'rejected', reason: `unsupported algorithm ${String(r.algorithm)}` };
  if (r.original_type !== 'transaction' && r.original_type !== 'refund') {
    return { kind: 'rejected', reason: `unexpected original_type ${String(r.original_type)}` };
  }
  const text = (value: unknown) => (typeof value === 'string' ? value : '');
  return {
    envelope,
    resource: {
      originalType: r.original_type,
      ciphertext: text(r.ciphertext),
      nonce: text(r.nonce),
      associatedData: text(r.associated_data),
    },
  };
}

/** The verdict on a notification whose resource (`plaintext`, of `originalType`) decrypted. */
export function classifyNotification(envelope: Json, originalType: 'transaction' | 'refund', plaintext: string): NotificationVerdict {
  const resource = parseJson(plaintext) ?? null;
  // A refund: REFUND.SUCCESS / REFUND.ABNORMAL / REFUND.CLOSED.
  return originalType === 'refund' ? refundVerdict(envelope, resource) : transactionVerdict(envelope, resource);
}

function transactionVerdict(envelope: Json, resource: Json | null): NotificationVerdict {
  const transaction = readTransaction(resource);
  if (typeof transaction === 'string') return { kind: 'rejected', reason: transaction };
  if (!transaction.transactionId) return { kind: 'rejected', reason: 'missing transaction_id' };
  const succeeded = envelope.event_type === 'TRANSACTION.SUCCESS' && transaction.state === 'SUCCESS';
  return {
    kind: 'verified',
    notification: {
      gateway: 'wechatpay',
      // design.md §5: webhook:wechatpay:{transaction_id}. The notification `id` would also be
      // constant across retries, but the transaction id is what makes two notifications about one
      // payment one event.
      eventId: transaction.transactionId,
      merchantId: transaction.mchid,
      outTradeNo: transaction.outTradeNo,
      status: succeeded ? 'succeeded' : 'other',
      gatewayTradeNo: transaction.transactionId,
      amountMinor: transaction.total,
      currency: transaction.currency,
    },
  };
}

/** The event and the resource must agree before either is believed. */
function refundEventStatus(event: unknown, refund: WechatRefund): 'succeeded' | 'failed' | 'other' {
  if (event === 'REFUND.SUCCESS' && refund.status === 'SUCCESS') return 'succeeded';
  if ((event === 'REFUND.CLOSED' && refund.status === 'CLOSED') || (event === 'REFUND.ABNORMAL' && refund.status === 'ABNORMAL')) {
    return 'failed';
  }
  return 'other';
}

function refundVerdict(envelope: Json, resource: Json | null): NotificationVerdict {
  const eventId = stringField(envelope, 'id');
  if (!eventId) return { kind: 'rejected', reason: 'missing notification id' };
  const refund = readRefund(resource, 'refund_status');
  if (typeof refund === 'string') return { kind: 'rejected', reason: refund };
  const mchid = stringField(resource, 'mchid');
  if (!mchid) return { kind: 'rejected', reason: 'missing mchid' };
  const amount = resource?.amount;
  // The refund resource carries no currency: a domestic (境内) merchant refunds in CNY only.
  const currency = typeof amount === 'object' && amount !== null ? (stringField(amount as Json, 'currency') ?? 'CNY') : 'CNY';
  return {
    kind: 'refund',
    notification: {
      gateway: 'wechatpay',
      // The notification id is constant across retries of one notification, and a refund has one
      // notification per outcome.
      eventId,
      merchantId: mchid,
      outTradeNo: refund.outTradeNo,
      refundId: refund.outRefundNo,
      gatewayRefundId: refund.refundId,
      status: refundEventStatus(envelope.event_type, refund),
      amountMinor: refund.refund,
      currency,
    },
  };
}
