/**
 * WeChat Pay's objects as they come off the wire: a body parsed as JSON, and the transaction (查询订单,
 * TRANSACTION.* resources) and refund (申请退款, 查询单笔退款, REFUND.* resources) read from it and
 * checked for shape. What they mean for a charge, close or refund is ./classify.
 */
import { stringField } from '@/server/payments/transport';

export type Json = Record<string, unknown>;

/** A body as JSON: an object, null for an empty body, undefined for anything else. */
export function parseJson(text: string): Json | null | undefined {
  if (text === '') return null;
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
  } catch {
    return undefined;
  }
}

export type TradeState = 'SUCCESS' | 'REFUND' | 'NOTPAY' | 'CLOSED' | 'REVOKED' | 'USERPAYING' | 'PAYERROR';

const TRADE_STATES: ReadonlySet<string> = new Set<TradeState>([
  'SUCCESS',
  'REFUND',
  'NOTPAY',
  'CLOSED',
  'REVOKED',
  'USERPAYING',
  'PAYERROR',
]);

export interface Transaction {
  mchid: string;
  outTradeNo: string;
  state: TradeState;
  stateDesc: string;
  transactionId: string | undefined;
  total: number;
  currency: string;
}

/** Reads a query answer or a decrypted notification resource; a string says what is wrong. */
export function readTransaction(body: Json | null): Transaction | string {
  const state = stringField(body, 'trade_state');
  if (!state || !TRADE_STATES.has(state)) return `unknown trade_state ${state ?? '(none)'}`;
  const amount = body?.amount;
  if (typeof amount !== 'object' || amount === null) return 'missing amount';
  const total = (amount as Json).total;
  if (typeof total !== 'number' || !Number.isSafeInteger(total) || total < 0) return `invalid amount.total ${String(total)}`;
  const currency = (amount as Json).currency;
  if (typeof currency !== 'string' || currency === '') return 'missing amount.currency';
  const mchid = stringField(body, 'mchid');
  if (!mchid) return 'missing mchid';
  const outTradeNo = stringField(body, 'out_trade_no');
  if (!outTradeNo) return 'missing out_trade_no';
  const transactionId = stringField(body, 'transaction_id');
  // SUCCESS / REFUND mean money moved: WeChat's transaction id is then the proof we keep.
  if ((state === 'SUCCESS' || state === 'REFUND') && !transactionId) return `${state} without transaction_id`;
  return {
    mchid,
    outTradeNo,
    state: state as TradeState,
    stateDesc: stringField(body, 'trade_state_desc') ?? state,
    transactionId,
    total,
    currency,
  };
}

export type WechatRefundStatus = 'SUCCESS' | 'CLOSED' | 'PROCESSING' | 'ABNORMAL';

const REFUND_STATUSES: ReadonlySet<string> = new Set<WechatRefundStatus>(['SUCCESS', 'CLOSED', 'PROCESSING', 'ABNORMAL']);

export interface WechatRefund {
  refundId: string;
  outRefundNo: string;
  outTradeNo: string;
  transactionId: string;
  status: WechatRefundStatus;
  refund: number;
  total: number;
}

function readInt(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

/**
 * Reads a refund: the answer of 申请退款 / 查询单笔退款 (`status`) or a decrypted REFUND.* resource
 * (`refund_status`). A string says what is wrong.
 */
export function readRefund(body: Json | null, statusField: 'status' | 'refund_status'): WechatRefund | string {
  const status = stringField(body, statusField);
  if (!status || !REFUND_STATUSES.has(status)) return `unknown ${statusField} ${status ?? '(none)'}`;
  const refundId = stringField(body, 'refund_id');
  if (!refundId) return 'missing refund_id';
  const outRefundNo = stringField(body, 'out_refund_no');
  if (!outRefundNo) return 'missing out_refund_no';
  const outTradeNo = stringField(body, 'out_trade_no');
  if (!outTradeNo) return 'missing out_trade_no';
  const transactionId = stringField(body, 'transaction_id');
  if (!transactionId) return 'missing transaction_id';
  const amount = body?.amount;
  if (typeof amount !== 'object' || amount === null) return 'missing amount';
  const refund = readInt((amount as Json).refund);
  const total = readInt((amount as Json).total);
  if (refund === undefined || total === undefined) return 'invalid amount.refund or amount.total';
  return { refundId, outRefundNo, outTradeNo, transactionId, status: status as WechatRefundStatus, refund, total };
}
