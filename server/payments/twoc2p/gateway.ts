/**
 * The 2C2P adapter (PGW v4.3 server-to-server card payment and the hosted payment page): each method
 * builds its request (./requests), makes the call (./exchange) and hands the answer to ./classify.
 * How the protocol is spoken — the three calls of a charge, close, refunds, what is [unverified] —
 * is told in docs/gateways.md, "2C2P: the protocol as this adapter speaks it".
 */
import type * as Gateway from '@/server/payments/gateway';
import { statement } from './statement';
import { gatewayOf } from '@/server/payments/gateway';
import { keyFromText } from '@/server/payments/rsa-keys';
import { DEFAULT_GATEWAY_TIMEOUT_MS } from '@/server/payments/transport';
import {
  classifyCancelAnswer,
  classifyPaymentAnswer,
  classifyTokenAnswer,
  closeAfterRefusal,
  closeVerdictOf,
  GATEWAY_ID,
  hostedPageOf,
  hostedPageOutcome,
  inquiryOf,
  settleCharge,
  tradeOf,
  type Inquiry,
  type SettleReason,
  type TokenAnswer,
} from './classify';
import { classifyRefundAnswer, classifyRefundStatus } from './classify-refund';
import { post, postJwt, type Connection } from './exchange';
import { jwtKey, type Claims } from './jwt';
import { postMaintenance, type MaintenanceConnection } from './maintenance';
import { notificationReply, verifyNotification } from './notification';
import {
  cancelClaims,
  chargeRefusal,
  doPaymentBody,
  hostedPageTokenClaims,
  inquiryClaims,
  refundFields,
  refundRefusal,
  refundStatusFields,
  testCardTokenClaims,
} from './requests';

export interface TwoC2pGatewayConfig {
  /** The merchant ID 2C2P registered (AN25). */
  merchantId: string;
  /** The merchant's secret key from 2C2P's merchant portal (signs and verifies every JWT). */
  secretKey: string;
  /** The API base including the version, e.g. https://sandbox-pgw.2c2p.com/payment/4.3. */
  baseUrl: string;
  /** The Payment Maintenance API (refunds), e.g. https://t.2c2p.com/PaymentAction/2.0/action. */
  maintenanceUrl: string;
  /** 对账: the daily reconciliation report's address; absent, 2C2P offers no statement here. */
  settlementReportUrl?: string;
  /** The merchant's RSA private key (PEM or base64 DER) whose public key is registered with 2C2P. */
  merchantPrivateKey: string;
  /** 2C2P's public key (PEM: SPKI or an X.509 certificate) from the merchant portal. */
  twoc2pPublicKey: string;
  /** Sandbox card numbers standing in for the buyer's card. */
  testBuyers: Record<Gateway.TestBuyer, string>;
  /** Per-request timeout; default 5000 ms. */
  timeoutMs?: number;
}

/** What every method needs: how to reach 2C2P, as whom, and the sandbox's test cards. */
interface TwoC2p extends Connection {
  merchantId: string;
  testBuyers: Record<Gateway.TestBuyer, string>;
  maintenance: MaintenanceConnection;
}

export function createTwoC2pGateway(config: TwoC2pGatewayConfig): Gateway.PaymentGateway {
  if (!config.merchantId) throw new Error('2C2P merchantId is required');
  if (!config.secretKey) throw new Error('2C2P secretKey is required');
  const key = jwtKey(config.secretKey);
  const timeoutMs = config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS;
  const ctx: TwoC2p = {
    merchantId: config.merchantId,
    testBuyers: config.testBuyers,
    key,
    baseUrl: config.baseUrl.replace(/\/+$/, ''),
    timeoutMs,
    maintenance: {
      maintenanceUrl: config.maintenanceUrl,
      merchantId: config.merchantId,
      merchantPrivateKey: keyFromText(config.merchantPrivateKey, 'private'),
      twoc2pPublicKey: keyFromText(config.twoc2pPublicKey, 'public'),
      timeoutMs,
    },
  };
  const traits: Gateway.GatewayTraits = {
    id: GATEWAY_ID,
    merchantId: config.merchantId,
    // One invoiceNo per order: a new attempt asks for a new payment token on the same invoice.
    oneTradePerOrder: true,
    // The hosted payment page: the buyer enters the card on 2C2P's page and comes back to returnUrl.
    buyerSteps: ['redirect'],
    hasTestBuyers: Object.values(config.testBuyers).some(Boolean),
  };
  const verify = (on: TwoC2p, request: { headers: Headers; rawBody: string }) => verifyNotification(on.key, request);
  const gateway = gatewayOf(traits, ctx, { charge, query, close, refund, queryRefund, verifyNotification: verify, notificationReply });
  const reportUrl = config.settlementReportUrl;
  if (!reportUrl) return gateway;
  const report = { url: reportUrl, merchantId: config.merchantId, secretKey: config.secretKey, timeoutMs };
  return { ...gateway, statement: (date, options) => statement(report, date, options?.currencies ?? []) };
}

// ---------------------------------------------------------------------------------------------
// paymentInquiry

async function inquire(ctx: TwoC2p, invoiceNo: string): Promise<Inquiry> {
  return inquiryOf(await postJwt(ctx, 'paymentInquiry', inquiryClaims(ctx.merchantId, invoiceNo)));
}

async function query(ctx: TwoC2p, outTradeNo: string): Promise<Gateway.QueryOutcome> {
  return tradeOf(await inquire(ctx, outTradeNo), outTradeNo);
}

// ---------------------------------------------------------------------------------------------
// charge

async function charge(ctx: TwoC2p, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  const refusal = chargeRefusal(request);
  if (refusal) return refusal;
  if (request.buyer === undefined) return chargeByHostedPage(ctx, request);
  const cardNo = ctx.testBuyers[request.buyer];
  if (!cardNo) return { kind: 'declined', code: 'NO_TEST_CARD', message: 'no card configured for this buyer' };
  return chargeByTestCard(ctx, request, cardNo);
}

/** A test buyer's card: paymentToken, Do Payment, then the signed inquiry decides. */
async function chargeByTestCard(ctx: TwoC2p, request: Gateway.ChargeRequest, cardNo: string): Promise<Gateway.ChargeOutcome> {
  const issued = await requestPaymentToken(ctx, request, testCardTokenClaims(ctx.merchantId, request));
  if (issued.kind === 'outcome') return issued.outcome;
  const paid = classifyPaymentAnswer(await post(ctx, 'payment', doPaymentBody(issued.paymentToken, cardNo, new Date())));
  if (paid.kind === 'outcome') return paid.outcome;
  return settle(ctx, request, paid.why);
}

/**
 * The buyer's own step: a payment token whose webPaymentUrl the buyer's browser is sent to, and no Do
 * Payment (the page is where the card is entered, 3-D Secure included). The page sends the buyer back
 * to returnUrl and 2C2P posts the signed result to notifyUrl; query() reads it from paymentInquiry.
 */
async function chargeByHostedPage(ctx: TwoC2p, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  const issued = await requestPaymentToken(ctx, request, hostedPageTokenClaims(ctx.merchantId, request));
  if (issued.kind === 'outcome') return issued.outcome;
  const page = hostedPageOf(issued.webPaymentUrl);
  if (page.kind === 'outcome') return page.outcome;
  return hostedPageOutcome(await inquire(ctx, request.outTradeNo), request, page.url);
}

/** paymentToken: opens (or reopens) the invoice; 9015 is settled by the signed inquiry. */
async function requestPaymentToken(
  ctx: TwoC2p,
  request: Gateway.ChargeRequest,
  claims: Claims,
): Promise<Exclude<TokenAnswer, { kind: 'existing_invoice' }>> {
  const answer = classifyTokenAnswer(await postJwt(ctx, 'paymentToken', claims));
  if (answer.kind !== 'existing_invoice') return answer;
  return { kind: 'outcome', outcome: await settle(ctx, request, { step: 'existing_invoice', code: answer.code, message: answer.message }) };
}

async function settle(ctx: TwoC2p, request: Gateway.ChargeRequest, why: SettleReason): Promise<Gateway.ChargeOutcome> {
  return settleCharge(await inquire(ctx, request.outTradeNo), request, why);
}

// ---------------------------------------------------------------------------------------------
// close

/** The inquiry first (paid, cancelled or never created: nothing to cancel), then cancelTransaction. */
async function close(ctx: TwoC2p, request: Gateway.CloseRequest): Promise<Gateway.CloseOutcome> {
  const before = closeVerdictOf(await query(ctx, request.outTradeNo));
  if (before.kind !== 'open') return before.outcome;
  const cancel = classifyCancelAnswer(
    await postJwt(ctx, 'cancelTransaction', cancelClaims(ctx.merchantId, request.outTradeNo)),
    request.outTradeNo,
  );
  if (cancel.kind === 'final') return cancel.outcome;
  // Refused: the buyer may have paid in between, so the invoice's own state decides.
  return closeAfterRefusal(await query(ctx, request.outTradeNo), cancel);
}

// ---------------------------------------------------------------------------------------------
// refund and refund status: the Payment Maintenance API (./maintenance)

async function refund(ctx: TwoC2p, request: Gateway.RefundRequest): Promise<Gateway.RefundOutcome> {
  const refusal = refundRefusal(request);
  if (refusal) return refusal;
  return classifyRefundAnswer(await postMaintenance(ctx.maintenance, refundFields(request)), request);
}

async function queryRefund(ctx: TwoC2p, request: Gateway.RefundQuery): Promise<Gateway.RefundQueryOutcome> {
  return classifyRefundStatus(await postMaintenance(ctx.maintenance, refundStatusFields(request)), request);
}
