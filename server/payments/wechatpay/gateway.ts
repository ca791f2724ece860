/**
 * The WeChat Pay adapter: API v3 Native payment, spoken with node:crypto and fetch only. Each method
 * builds its request (./requests), makes one signed call (./exchange) and hands the answer to
 * ./classify for the outcome. How this adapter speaks the protocol — charges, idempotency, trust,
 * close and refund — is told in docs/gateways.md ("WeChat Pay: the protocol as this adapter speaks it").
 */
import type * as Gateway from '@/server/payments/gateway';
import { gatewayOf } from '@/server/payments/gateway';
import { chargeOrRefundFailure, closeFailure, queryFailure } from '@/server/payments/transport';
import {
  classifyAfterRefusedClose,
  classifyBeforeClose,
  classifyClose,
  classifyCreate,
  classifyLookup,
  classifyPolled,
  classifyRefund,
  classifyRefundQuery,
  classifyUsedOutTradeNo,
  queryOutcome,
  type Lookup,
} from './classify';
import type { WechatPayGatewayConfig } from './config';
import { call, createClient, unanswered, type Client } from './exchange';
import { notificationReply, verifyNotification } from './notification';
import { statement } from './statement';
import {
  chargePayload,
  closePath,
  CREATE_PATH,
  invalidCharge,
  invalidRefund,
  queryPath,
  REFUND_PATH,
  refundPayload,
  refundQueryPath,
} from './requests';

const DEFAULT_POLL_WINDOW_MS = 2000;

/** A client, and how long a charge with a test buyer waits for the payment. */
interface Context extends Client {
  pollWindowMs: number;
}

export function createWechatPayGateway(config: WechatPayGatewayConfig): Gateway.PaymentGateway {
  const context: Context = { ...createClient(config), pollWindowMs: config.pollWindowMs ?? DEFAULT_POLL_WINDOW_MS };
  const traits: Gateway.GatewayTraits = {
    id: 'wechatpay',
    merchantId: config.mchid,
    // Every attempt of an order is the same WeChat order (same out_trade_no, reopened after a decline).
    oneTradePerOrder: true,
    buyerSteps: ['qr'],
    hasTestBuyers: Object.values(config.testBuyers).some(Boolean),
  };
  const query = async (on: Context, outTradeNo: string) => queryOutcome(await lookup(on, outTradeNo));
  const verify = async (on: Context, request: { headers: Headers; rawBody: string }) => verifyNotification(on, request);
  const gateway = gatewayOf(traits, context, { charge, query, close, refund, queryRefund, verifyNotification: verify, notificationReply });
  return { ...gateway, statement: (date) => statement(context, date) };
}

/** 查询订单 by out_trade_no. */
async function lookup(client: Client, outTradeNo: string): Promise<Lookup> {
  const exchange = await call(client, 'GET', queryPath(client.config.mchid, outTradeNo));
  if (exchange.kind !== 'answered') return queryFailure(unanswered(exchange));
  return classifyLookup(exchange.status, exchange.body, { outTradeNo, mchid: client.config.mchid });
}

/**
 * Native下单. Without a test buyer the order waits for the buyer to scan its code_url; with one, the
 * order is queried until the test buyer has paid or failed to.
 */
async function charge(context: Context, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  const invalid = invalidCharge(request);
  if (invalid) return invalid;
  const exchange = await call(context, 'POST', CREATE_PATH, chargePayload(context.config, request));
  // Never sent, or refused (401 SIGN_ERROR, 429 FREQUENCY_LIMITED, 5xx SYSTEM_ERROR:
  // "请用相同参数重新调用"): retryable. Should a 5xx hide a processed create, the retry meets
  // OUT_TRADE_NO_USED and queries, so retrying the same attempt is safe. Sent but unanswered:
  // indeterminate.
  if (exchange.kind !== 'answered') return chargeOrRefundFailure(unanswered(exchange));
  const answer = classifyCreate(exchange.status, exchange.body);
  switch (answer.kind) {
    case 'created':
      // The code_url is not a secret: whoever scans it pays this merchant for this order, which is
      // what the page is for; it stays usable for 2 h while the order is open, so storing and
      // replaying it with the 202 is safe (a replay after that shows an expired code: pay again).
      return request.buyer ? awaitPayment(context, request) : { kind: 'awaiting_buyer', action: { kind: 'qr', qrCode: answer.codeUrl } };
    case 'out_trade_no_used':
      return classifyUsedOutTradeNo(await lookup(context, request.outTradeNo), request, answer.message);
    default:
      return answer;
  }
}

/** Queries the order just created until someone has paid or failed to, for up to pollWindowMs. */
async function awaitPayment(context: Context, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  const deadline = Date.now() + context.pollWindowMs;
  for (let round = 0; ; round += 1) {
    const polled = classifyPolled(await lookup(context, request.outTradeNo), request);
    if (polled.kind !== 'waiting') return polled;
    // Back off 100, 200, 400, 500, 500… ms; the last query is made at the end of the window.
    const remaining = deadline - Date.now();
    // Nobody has paid (yet): the notification or a later query settles it.
    if (remaining <= 0) return { kind: 'indeterminate', code: polled.code, message: polled.message };
    await new Promise((resolve) => setTimeout(resolve, Math.min(100 * 2 ** round, 500, remaining)));
  }
}

/**
 * Close by querying first: the close API cannot tell "paid" from other refusals reliably, and
 * must not be sent while the buyer is entering a password (USERPAYING: the payment's outcome is
 * seconds away, and closing under it is exactly the race this is meant to avoid).
 */
async function close(client: Client, request: Gateway.CloseRequest): Promise<Gateway.CloseOutcome> {
  const before = classifyBeforeClose(await lookup(client, request.outTradeNo));
  if (before.kind !== 'open') return before;
  const exchange = await call(client, 'POST', closePath(request.outTradeNo), { mchid: client.config.mchid });
  // Not closed (or not known to be): the caller holds the next attempt until a later close.
  if (exchange.kind !== 'answered') return closeFailure(unanswered(exchange));
  const closed = classifyClose(exchange.status, exchange.body);
  if (closed.kind !== 'refused') return closed;
  return classifyAfterRefusedClose(await lookup(client, request.outTradeNo), closed.code, closed.message);
}

/**
 * 申请退款 with out_refund_no = our refundId: WeChat's own rule ("同一退款单号多次请求只退一笔") is what
 * makes a repeat safe, so transport failures are classified exactly as for charge. WeChat answers
 * PROCESSING (`pending`) until the refund is final.
 */
async function refund(client: Client, request: Gateway.RefundRequest): Promise<Gateway.RefundOutcome> {
  const invalid = invalidRefund(request);
  if (invalid) return invalid;
  const exchange = await call(client, 'POST', REFUND_PATH, refundPayload(request));
  // Never sent, or refused (401/429/5xx, "请用相同参数重新调用"): retryable, since a repeat with the
  // same out_refund_no cannot refund twice even if a 5xx hid a processed one. Sent but unanswered:
  // indeterminate.
  if (exchange.kind !== 'answered') return chargeOrRefundFailure(unanswered(exchange));
  return classifyRefund(exchange.status, exchange.body, request);
}

/** 查询单笔退款 by out_refund_no = our refundId. */
async function queryRefund(client: Client, request: Gateway.RefundQuery): Promise<Gateway.RefundQueryOutcome> {
  const exchange = await call(client, 'GET', refundQueryPath(request.refundId));
  if (exchange.kind !== 'answered') return queryFailure(unanswered(exchange));
  return classifyRefundQuery(exchange.status, exchange.body, request);
}
