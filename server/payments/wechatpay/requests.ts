/**
 * What each call to WeChat Pay sends: the paths of 下单, 查询订单, 关闭订单, 申请退款 and 查询单笔退款,
 * the bodies of a charge and a refund, and the checks a charge or refund passes before anything is sent.
 */
import type { ChargeOutcome, ChargeRequest, RefundOutcome, RefundRequest } from '@/server/payments/gateway';
import type { WechatPayGatewayConfig } from './config';
import type { Json } from './wire';

/** WeChat's description is string(127): "不能超过127个字符". */
const MAX_DESCRIPTION_CHARS = 127;
/** WeChat's reason is string(80). */
const MAX_REFUND_REASON_CHARS = 80;
/** PayOnce's refund ids: [A-Za-z0-9], ≤ 32 (../gateway), well inside out_refund_no's 1–64 of [0-9A-Za-z_-|*@]. */
const REFUND_ID_RE = /^[A-Za-z0-9]{1,32}$/;

export const CREATE_PATH = '/v3/pay/transactions/native';
export const REFUND_PATH = '/v3/refund/domestic/refunds';

export function queryPath(mchid: string, outTradeNo: string): string {
  return `/v3/pay/transactions/out-trade-no/${encodeURIComponent(outTradeNo)}?mchid=${encodeURIComponent(mchid)}`;
}

export function closePath(outTradeNo: string): string {
  return `/v3/pay/transactions/out-trade-no/${encodeURIComponent(outTradeNo)}/close`;
}

/** 查询单笔退款（通过商户退款单号）. */
export function refundQueryPath(refundId: string): string {
  return `${REFUND_PATH}/${encodeURIComponent(refundId)}`;
}

/** Why a charge is declined before any call, or null to send it. */
export function invalidCharge(request: ChargeRequest): Extract<ChargeOutcome, { kind: 'declined' }> | null {
  // These can only be programming errors, and WeChat would refuse them.
  if (!Number.isSafeInteger(request.amountMinor) || request.amountMinor < 1) {
    return { kind: 'declined', code: 'INVALID_AMOUNT', message: 'amount must be a positive integer in minor units' };
  }
  if (!/^[A-Z]{3}$/.test(request.currency)) {
    return { kind: 'declined', code: 'INVALID_CURRENCY', message: `invalid currency ${request.currency}` };
  }
  // The buyer's own step: Native pay's QR code is the only one this adapter offers.
  if (!request.buyer && request.buyerStep !== undefined && request.buyerStep !== 'qr') {
    return { kind: 'declined', code: 'UNSUPPORTED_BUYER_STEP', message: `WeChat Pay Native offers the qr step, not ${request.buyerStep}` };
  }
  return null;
}

/** Native下单's body. */
export function chargePayload(config: WechatPayGatewayConfig, request: ChargeRequest): Json {
  // No test buyer, no attach: the real buyer scans the code_url.
  const attach = request.buyer ? config.testBuyers[request.buyer] : '';
  // `request.attempt` is not sent: WeChat deduplicates on out_trade_no alone, and a new attempt after
  // a decline is meant to reopen the same order. The description is cut deterministically, so every
  // attempt sends identical parameters.
  return {
    appid: config.appid,
    mchid: config.mchid,
    description: [...request.subject].slice(0, MAX_DESCRIPTION_CHARS).join(''),
    out_trade_no: request.outTradeNo,
    notify_url: request.notifyUrl,
    amount: { total: request.amountMinor, currency: request.currency },
    ...(attach ? { attach } : {}),
  };
}

/** Why a refund fails before any call, or null to send it. */
export function invalidRefund(request: RefundRequest): Extract<RefundOutcome, { kind: 'failed' }> | null {
  // Only a programming error can break these, and WeChat would refuse them.
  if (!REFUND_ID_RE.test(request.refundId)) {
    return { kind: 'failed', code: 'INVALID_REFUND_ID', message: `refund id must be 1-32 letters or digits, got ${request.refundId}` };
  }
  if (
    !Number.isSafeInteger(request.amountMinor) ||
    !Number.isSafeInteger(request.chargeAmountMinor) ||
    request.amountMinor < 1 ||
    request.amountMinor > request.chargeAmountMinor
  ) {
    return { kind: 'failed', code: 'INVALID_AMOUNT', message: `cannot refund ${request.amountMinor} of ${request.chargeAmountMinor}` };
  }
  return null;
}

/** 申请退款's body, with out_refund_no = PayOnce's refundId. */
export function refundPayload(request: RefundRequest): Json {
  return {
    // transaction_id and out_trade_no are 二选一: the transaction is the charge being refunded.
    ...(request.gatewayTradeNo ? { transaction_id: request.gatewayTradeNo } : { out_trade_no: request.outTradeNo }),
    out_refund_no: request.refundId,
    ...(request.reason ? { reason: [...request.reason].slice(0, MAX_REFUND_REASON_CHARS).join('') } : {}),
    ...(request.notifyUrl ? { notify_url: request.notifyUrl } : {}),
    amount: { refund: request.amountMinor, total: request.chargeAmountMinor, currency: request.currency },
  };
}
