/**
 * What the adapter sends Alipay: the checks a charge or a refund passes before any call (only a
 * programming error fails them, and the gateway would refuse it anyway) and the biz_content of each
 * method, in Alipay's own snake_case names.
 */
import type { ChargeOutcome, ChargeRequest, RefundOutcome, RefundQuery, RefundRequest } from '@/server/payments/gateway';
import { minorToDecimal } from '@/server/payments/money';
import { CURRENCY, type Fields } from './classify';

/** Alipay's limit: 100,000,000.00 yuan. */
const MAX_AMOUNT_FEN = 10_000_000_000;
/** Alipay's limit on out_request_no; PayOnce's own refundId rule ([A-Za-z0-9], ≤ 32) is stricter. */
const OUT_REQUEST_NO_RE = /^[A-Za-z0-9_]{1,64}$/;
/** Alipay's limit on refund_reason, in characters. */
const MAX_REFUND_REASON = 256;

function isChargeableAmount(amountMinor: number): boolean {
  return Number.isSafeInteger(amountMinor) && amountMinor >= 1 && amountMinor <= MAX_AMOUNT_FEN;
}

/** The decline of a charge that cannot be right, or undefined when it may be sent. */
export function chargeRefusal(request: ChargeRequest): Extract<ChargeOutcome, { kind: 'declined' }> | undefined {
  if (request.currency !== CURRENCY) {
    return { kind: 'declined', code: 'UNSUPPORTED_CURRENCY', message: `Alipay face-to-face charges ${CURRENCY} only` };
  }
  if (!isChargeableAmount(request.amountMinor)) {
    return { kind: 'declined', code: 'INVALID_AMOUNT', message: 'amount must be 1 … 10,000,000,000 fen' };
  }
  return undefined;
}

/** The failure of a refund that cannot be right, or undefined when it may be sent. */
export function refundRefusal(request: RefundRequest): Extract<RefundOutcome, { kind: 'failed' }> | undefined {
  if (request.currency !== CURRENCY) {
    return { kind: 'failed', code: 'UNSUPPORTED_CURRENCY', message: `Alipay refunds ${CURRENCY} only` };
  }
  if (!isChargeableAmount(request.amountMinor)) {
    return { kind: 'failed', code: 'INVALID_AMOUNT', message: 'amount must be 1 … 10,000,000,000 fen' };
  }
  if (!OUT_REQUEST_NO_RE.test(request.refundId)) {
    return { kind: 'failed', code: 'INVALID_REFUND_ID', message: 'refundId must be 1–64 letters, digits or underscores' };
  }
  return undefined;
}

/**
 * alipay.trade.pay with the buyer's payment code. `request.attempt` is not sent: Alipay deduplicates
 * on out_trade_no alone, and a new attempt after a decline is meant to reopen the same WAIT_BUYER_PAY trade.
 */
export function payBizContent(request: ChargeRequest, authCode: string): Fields {
  return {
    out_trade_no: request.outTradeNo,
    scene: 'bar_code',
    auth_code: authCode,
    product_code: 'FACE_TO_FACE_PAYMENT',
    total_amount: minorToDecimal(request.amountMinor),
    subject: request.subject,
  };
}

export function precreateBizContent(request: ChargeRequest): Fields {
  return {
    out_trade_no: request.outTradeNo,
    total_amount: minorToDecimal(request.amountMinor),
    subject: request.subject,
  };
}

export function pagePayBizContent(request: ChargeRequest): Fields {
  return {
    out_trade_no: request.outTradeNo,
    total_amount: minorToDecimal(request.amountMinor),
    subject: request.subject,
    product_code: 'FAST_INSTANT_TRADE_PAY',
  };
}

/** trade.query, trade.close and trade.cancel name the trade by the order's out_trade_no. */
export function tradeBizContent(outTradeNo: string): Fields {
  return { out_trade_no: outTradeNo };
}

export function refundBizContent(request: RefundRequest): Fields {
  const reason = [...request.reason].slice(0, MAX_REFUND_REASON).join('');
  return {
    out_trade_no: request.outTradeNo,
    // Both names: Alipay refunds the trade they agree on, and refuses if they do not.
    ...(request.gatewayTradeNo ? { trade_no: request.gatewayTradeNo } : {}),
    refund_amount: minorToDecimal(request.amountMinor),
    // PayOnce's refundId IS Alipay's idempotency key for this refund.
    out_request_no: request.refundId,
    ...(reason ? { refund_reason: reason } : {}),
  };
}

export function refundQueryBizContent(request: RefundQuery): Fields {
  return {
    out_trade_no: request.outTradeNo,
    ...(request.gatewayTradeNo ? { trade_no: request.gatewayTradeNo } : {}),
    out_request_no: request.refundId,
  };
}
