/**
 * The Alipay adapter as a PaymentGateway: face-to-face payment with a test buyer's code, or the
 * buyer's own step (precreate's QR code, page pay's cashier). Each method builds its request
 * (./requests), makes its calls through the SDK client (./client), hands each answer to ./classify
 * and maps what it means onto PayOnce's outcomes. The protocol as this adapter speaks it — why a
 * repeat is confirmed by a query, why close() queries first — is in docs/gateways.md.
 */
import type * as Gateway from '@/server/payments/gateway';
import { statement } from './statement';
import { gatewayOf } from '@/server/payments/gateway';
import {
  assertNever,
  chargeOrRefundFailure,
  closeFailure,
  confirmPaidByQuery,
  DEFAULT_GATEWAY_TIMEOUT_MS,
  queryFailure,
} from '@/server/payments/transport';
import {
  classifyClose,
  classifyPay,
  classifyPrecreate,
  classifyRefund,
  classifyRefundQuery,
  classifyTradeQuery,
  CURRENCY,
  gatewayRefundIdOf,
  type CloseMethod,
} from './classify';
import { createAlipayClient, type AlipayClient } from './client';
import { notificationReply, verifyNotification } from './notification';
import {
  chargeRefusal,
  pagePayBizContent,
  payBizContent,
  precreateBizContent,
  refundBizContent,
  refundQueryBizContent,
  refundRefusal,
  tradeBizContent,
} from './requests';

export interface AlipayGatewayConfig {
  appId: string;
  /** PEM (PKCS#1 or PKCS#8) or the bare base64 that Alipay's key tool prints. */
  appPrivateKey: string;
  /** The Alipay (platform) public key: PEM or bare base64 SPKI. */
  alipayPublicKey: string;
  /** The OpenAPI 2.0 gateway, e.g. https://openapi.alipay.com/gateway.do or the sandbox's. */
  gatewayUrl: string;
  /** Sandbox payment codes standing in for the buyer's barcode. */
  testBuyerAuthCodes: Record<Gateway.TestBuyer, string>;
  /** Per-request timeout; default 5000 ms. */
  timeoutMs?: number;
}

/** What every method works with: the configuration and the one SDK client. */
interface Adapter {
  config: AlipayGatewayConfig;
  client: AlipayClient;
}

/** Throws when a configured key is not an RSA key. */
export function createAlipayGateway(config: AlipayGatewayConfig): Gateway.PaymentGateway {
  const adapter: Adapter = { config, client: createAlipayClient(config) };
  const traits: Gateway.GatewayTraits = {
    id: 'alipay',
    merchantId: config.appId,
    // Alipay keeps one trade per out_trade_no: a new attempt reopens the WAIT_BUYER_PAY trade.
    oneTradePerOrder: true,
    // The QR code first: it works on any screen; the redirect needs the buyer on a browser that can
    // leave the shop and come back.
    buyerSteps: ['qr', 'redirect'],
    hasTestBuyers: Object.values(config.testBuyerAuthCodes).some(Boolean),
  };
  const verify = (on: Adapter, request: { headers: Headers; rawBody: string }) => verifyNotification(on.client, request);
  const gateway = gatewayOf(traits, adapter, { charge, query, close, refund, queryRefund, verifyNotification: verify, notificationReply });
  return { ...gateway, statement: (date) => statement(adapter.client, date, config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS) };
}

async function query(adapter: Adapter, outTradeNo: string): Promise<Gateway.QueryOutcome> {
  const exchange = await adapter.client.call('alipay.trade.query', { bizContent: tradeBizContent(outTradeNo) });
  if (exchange.kind !== 'answered') return queryFailure(exchange);
  return classifyTradeQuery(exchange.response);
}

// ---------------------------------------------------------------------------------------------
// Charging

async function charge(adapter: Adapter, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  const refusal = chargeRefusal(request);
  if (refusal) return refusal;
  if (!request.buyer) return openForBuyer(adapter, request);
  const authCode = adapter.config.testBuyerAuthCodes[request.buyer];
  if (!authCode) return { kind: 'declined', code: 'NO_PAYMENT_CODE', message: 'no payment code configured for this buyer' };
  return payWithCode(adapter, request, authCode);
}

/**
 * The trade already paid (a retry whose answer was lost, or the buyer paid by their own step):
 * succeeded only if the trade says so, for this amount.
 */
function confirmPaid(adapter: Adapter, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  const expected = { amountMinor: request.amountMinor, currency: CURRENCY };
  return confirmPaidByQuery(() => query(adapter, request.outTradeNo), expected, 'ACQ.TRADE_HAS_SUCCESS');
}

/** alipay.trade.pay (scene bar_code) with the buyer's payment code. */
async function payWithCode(adapter: Adapter, request: Gateway.ChargeRequest, authCode: string): Promise<Gateway.ChargeOutcome> {
  const exchange = await adapter.client.call('alipay.trade.pay', {
    notifyUrl: request.notifyUrl,
    bizContent: payBizContent(request, authCode),
  });
  if (exchange.kind !== 'answered') return chargeOrRefundFailure(exchange);
  const answer = classifyPay(exchange.response, request.amountMinor);
  switch (answer.kind) {
    case 'paid':
      return { kind: 'succeeded', gatewayTradeNo: answer.tradeNo, amountMinor: answer.amountMinor, currency: CURRENCY };
    case 'already_paid':
      return confirmPaid(adapter, request);
    case 'declined':
      return { kind: 'declined', code: answer.subCode, message: answer.message };
    case 'refused':
      // Nothing was processed and nothing was charged. Retrying the same attempt is safe; it helps
      // once the configuration (key, app id) is fixed, which is not the buyer's fault to store.
      return { kind: 'retryable', code: answer.code, message: answer.message };
    case 'in_doubt':
      return { kind: 'indeterminate', code: answer.code, message: answer.message };
    default:
      return assertNever(answer);
  }
}

async function openForBuyer(adapter: Adapter, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  const step = request.buyerStep ?? 'qr';
  switch (step) {
    case 'qr':
      return precreate(adapter, request);
    case 'redirect':
      return pagePay(adapter, request);
    case 'card':
      return { kind: 'declined', code: 'UNSUPPORTED_BUYER_STEP', message: 'Alipay offers the qr and redirect steps' };
    default:
      return assertNever(step);
  }
}

/**
 * alipay.trade.precreate: the QR code the buyer scans. It moves no money by itself — only a buyer
 * who scans the code can pay — so a lost answer is `retryable` however it was lost: the retry gets
 * the same code, and whatever the buyer may already have paid is found by the notification or by
 * close()'s query.
 */
async function precreate(adapter: Adapter, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  const exchange = await adapter.client.call('alipay.trade.precreate', {
    notifyUrl: request.notifyUrl,
    bizContent: precreateBizContent(request),
  });
  if (exchange.kind !== 'answered') return { kind: 'retryable', code: exchange.code, message: exchange.message };
  const answer = classifyPrecreate(exchange.response);
  switch (answer.kind) {
    case 'qr_code':
      return { kind: 'awaiting_buyer', action: { kind: 'qr', qrCode: answer.qrCode } };
    case 'already_paid':
      return confirmPaid(adapter, request);
    case 'declined':
      return { kind: 'declined', code: answer.subCode, message: answer.message };
    case 'no_code':
      return { kind: 'retryable', code: answer.code, message: answer.message };
    default:
      return assertNever(answer);
  }
}

/**
 * alipay.trade.page.pay: the signed GET URL of Alipay's cashier, no HTTP call. A query first, so
 * that a trade the buyer already paid (or one that was closed) is answered as such instead of
 * sending the buyer to a cashier that would refuse them.
 */
async function pagePay(adapter: Adapter, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  if (!request.returnUrl) return { kind: 'declined', code: 'NO_RETURN_URL', message: 'the redirect step needs a returnUrl' };
  const found = await query(adapter, request.outTradeNo);
  if (found.kind === 'answered') {
    if (found.trade.kind === 'succeeded') return confirmPaid(adapter, request);
    if (found.trade.kind === 'closed') return { kind: 'declined', code: 'ACQ.TRADE_HAS_CLOSE', message: 'the trade is closed' };
  }
  // An unavailable query changes nothing: the gateway applies the same rules when the buyer arrives.
  let url: string;
  try {
    url = adapter.client.pagePayUrl({ bizContent: pagePayBizContent(request), notifyUrl: request.notifyUrl, returnUrl: request.returnUrl });
  } catch (err) {
    return { kind: 'retryable', code: 'SDK_ERROR', message: err instanceof Error ? err.message : String(err) };
  }
  return { kind: 'awaiting_buyer', action: { kind: 'redirect', url } };
}

// ---------------------------------------------------------------------------------------------
// Closing

/**
 * Query first: trade.close refuses a paid trade with the same ACQ.TRADE_STATUS_ERROR as a closed
 * one, and trade.cancel refunds a paid trade, so the trade's state picks the call.
 */
async function close(adapter: Adapter, request: Gateway.CloseRequest): Promise<Gateway.CloseOutcome> {
  const found = await query(adapter, request.outTradeNo);
  if (found.kind === 'unavailable') return { kind: 'indeterminate', code: found.code, message: found.message };
  const { trade } = found;
  switch (trade.kind) {
    case 'succeeded':
      // Never cancel (which would refund) nor refund here: the caller settles this payment.
      return {
        kind: 'already_paid',
        charges: [{ gatewayTradeNo: trade.gatewayTradeNo, amountMinor: trade.amountMinor, currency: trade.currency }],
      };
    case 'closed':
      return { kind: 'closed' };
    case 'pending':
      return closeWith(adapter, 'alipay.trade.close', request.outTradeNo);
    case 'not_found':
      // No trade yet, but a trade.pay of ours may still be on its way: cancel blocks the
      // out_trade_no so that it cannot be created (or paid) later.
      return closeWith(adapter, 'alipay.trade.cancel', request.outTradeNo);
    case 'authorized':
      // This adapter never authorises (Alipay's pre-authorisation is another product): never seen here.
      return { kind: 'indeterminate', code: 'UNEXPECTED_AUTHORIZATION', message: 'Alipay reported an authorisation' };
    default:
      return assertNever(trade);
  }
}

async function closeWith(adapter: Adapter, method: CloseMethod, outTradeNo: string): Promise<Gateway.CloseOutcome> {
  const exchange = await adapter.client.call(method, { bizContent: tradeBizContent(outTradeNo) });
  if (exchange.kind !== 'answered') return closeFailure(exchange);
  const answer = classifyClose(exchange.response, method);
  switch (answer.kind) {
    case 'closed':
      return { kind: 'closed' };
    case 'refunded_by_cancel':
      // The buyer paid between our query and the cancel, and Alipay refunded it. Not `already_paid`:
      // the checkout would settle the order on money that has gone back. Not `closed` either: the
      // payment's TRADE_SUCCESS notification is still on its way and a person should see that a
      // payment was made and reversed. It blocks a new attempt until a later close, whose query
      // then finds TRADE_CLOSED and answers `closed`.
      return { kind: 'payment_reversed', message: answer.message };
    case 'state_changed':
      // Typically the buyer paid between our query and the close: the query says so.
      return settleClose(adapter, outTradeNo, answer);
    case 'in_doubt':
      return { kind: 'indeterminate', code: answer.code, message: answer.message };
    default:
      return assertNever(answer);
  }
}

/** A second look after close/cancel said the trade was not where the first query left it. */
async function settleClose(
  adapter: Adapter,
  outTradeNo: string,
  refusal: { code: string; message: string },
): Promise<Gateway.CloseOutcome> {
  const found = await query(adapter, outTradeNo);
  if (found.kind === 'answered') {
    if (found.trade.kind === 'succeeded') {
      const { gatewayTradeNo, amountMinor, currency } = found.trade;
      return { kind: 'already_paid', charges: [{ gatewayTradeNo, amountMinor, currency }] };
    }
    if (found.trade.kind === 'closed') return { kind: 'closed' };
  }
  return { kind: 'indeterminate', code: refusal.code, message: refusal.message };
}

// ---------------------------------------------------------------------------------------------
// Refunding

async function refund(adapter: Adapter, request: Gateway.RefundRequest): Promise<Gateway.RefundOutcome> {
  const refusal = refundRefusal(request);
  if (refusal) return refusal;
  const exchange = await adapter.client.call('alipay.trade.refund', { bizContent: refundBizContent(request) });
  if (exchange.kind !== 'answered') return chargeOrRefundFailure(exchange);
  const answer = classifyRefund(exchange.response);
  switch (answer.kind) {
    case 'refunded':
      // Alipay refunded exactly refund_amount (its refund_fee is the trade's running total).
      return {
        kind: 'succeeded',
        gatewayRefundId: gatewayRefundIdOf(answer.tradeNo ?? request.gatewayTradeNo, request.refundId),
        amountMinor: request.amountMinor,
      };
    case 'confirm_by_query':
      return confirmRefund(adapter, request);
    case 'refused':
      return { kind: 'failed', code: answer.subCode, message: answer.message };
    case 'not_processed':
      return { kind: 'retryable', code: answer.code, message: answer.message };
    case 'in_doubt':
      return { kind: 'indeterminate', code: answer.code, message: answer.message };
    default:
      return assertNever(answer);
  }
}

/**
 * fund_change "N": most often this refundId's refund answered again (a retry after a lost answer).
 * Alipay's rule is to confirm with the refund query, which also gives its amount.
 */
async function confirmRefund(adapter: Adapter, request: Gateway.RefundRequest): Promise<Gateway.RefundOutcome> {
  const found = await queryRefund(adapter, request);
  if (found.kind === 'unavailable') return { kind: 'pending', gatewayRefundId: null };
  switch (found.refund.kind) {
    case 'succeeded':
      return { kind: 'succeeded', gatewayRefundId: found.refund.gatewayRefundId, amountMinor: found.refund.amountMinor };
    case 'failed':
      return { kind: 'failed', code: found.refund.code, message: found.refund.message };
    case 'pending':
    case 'not_found':
      // Accepted (10000) but not visible yet: Alipay's query can lag the refund.
      return { kind: 'pending', gatewayRefundId: null };
    default:
      return assertNever(found.refund);
  }
}

async function queryRefund(adapter: Adapter, request: Gateway.RefundQuery): Promise<Gateway.RefundQueryOutcome> {
  const exchange = await adapter.client.call('alipay.trade.fastpay.refund.query', { bizContent: refundQueryBizContent(request) });
  if (exchange.kind !== 'answered') return queryFailure(exchange);
  return classifyRefundQuery(exchange.response, request);
}
