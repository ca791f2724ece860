/**
 * The requests the Stripe adapter sends, built from PayOnce's: a charge's PaymentIntent and a
 * refund, each with its Idempotency-Key, and the checks that refuse before any call what can only be
 * a programming error (Stripe would refuse it anyway).
 */
import type Stripe from 'stripe';
import type { BuyerStep, ChargeOutcome, ChargeRequest, RefundOutcome, RefundRequest } from '@/server/payments/gateway';
import { DEFAULT_GATEWAY_TIMEOUT_MS } from '@/server/payments/transport';
import type { CardStepConfig, StripeGatewayConfig } from './config';

/** Stripe's ceiling for `amount`: eight digits in the smallest currency unit. */
const MAX_AMOUNT = 99_999_999;
const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** The before-charge "already paid" look-up is a best effort: short, and never retried. */
const GUARD_TIMEOUT_MS = 3000;
/** RefundRequest.refundId's own rule (gateway.ts): what every gateway's refund id accepts at once. */
const REFUND_ID_PATTERN = /^[A-Za-z0-9]{1,32}$/;
/** Stripe's metadata value limit. */
const METADATA_MAX_VALUE_LENGTH = 500;

/** A charge ready to send, or refused before any call. */
export type ChargePlan =
  | { kind: 'refused'; outcome: ChargeOutcome }
  | {
      kind: 'send';
      params: Stripe.PaymentIntentCreateParams;
      idempotencyKey: string;
      /** Present when the buyer takes the card step: the answer is a card form, not a payment. */
      cardStep?: CardStepConfig;
    };

const refused = (code: string, message: string): ChargePlan => ({ kind: 'refused', outcome: { kind: 'declined', code, message } });

/** A request that cannot be right whoever pays it: a currency, amount or attempt Stripe would refuse. */
function malformedCharge(request: ChargeRequest): ChargePlan | undefined {
  if (!/^[A-Za-z]{3}$/.test(request.currency)) return refused('INVALID_CURRENCY', `not an ISO 4217 currency: ${request.currency}`);
  if (!Number.isSafeInteger(request.amountMinor) || request.amountMinor < 1 || request.amountMinor > MAX_AMOUNT) {
    return refused('INVALID_AMOUNT', `amount must be 1 … ${MAX_AMOUNT} in minor units`);
  }
  if (!Number.isSafeInteger(request.attempt) || request.attempt < 1) {
    return refused('INVALID_ATTEMPT', `attempt must be a positive integer, got ${request.attempt}`);
  }
  return undefined;
}

/**
 * The charge's PaymentIntent. Its Idempotency-Key derives from the order's attempt — never the SDK's
 * random one — so a retry of the same attempt replays the first answer, a decline included.
 */
export function planCharge(request: ChargeRequest, config: StripeGatewayConfig, buyerSteps: readonly BuyerStep[]): ChargePlan {
  const malformed = malformedCharge(request);
  if (malformed) return malformed;
  const cardStep = request.buyer === undefined ? config.cardStep : undefined;
  if (request.buyer === undefined) {
    const step = request.buyerStep ?? buyerSteps[0];
    if (step !== 'card' || !cardStep) {
      const offered = buyerSteps.join(', ') || '(none: STRIPE_PUBLISHABLE_KEY is not set)';
      return refused('BUYER_STEP_UNSUPPORTED', `Stripe offers the buyer step ${offered}, not ${step ?? 'none'}`);
    }
  }
  const paymentMethod = request.buyer === undefined ? undefined : config.testBuyers[request.buyer];
  if (request.buyer !== undefined && !paymentMethod) return refused('NO_PAYMENT_METHOD', 'no payment method configured for this buyer');
  const idempotencyKey = `payonce-${request.outTradeNo}-attempt-${request.attempt}`;
  if (idempotencyKey.length > MAX_IDEMPOTENCY_KEY_LENGTH)
    return refused('INVALID_OUT_TRADE_NO', 'out_trade_no too long for an idempotency key');
  const params = paymentIntentParams(request, paymentMethod, config.captureMethod ?? 'automatic');
  return { kind: 'send', params, idempotencyKey, ...(cardStep ? { cardStep } : {}) };
}

function paymentIntentParams(
  request: ChargeRequest,
  paymentMethod: string | undefined,
  captureMethod: 'automatic' | 'manual',
): Stripe.PaymentIntentCreateParams {
  return {
    amount: request.amountMinor,
    currency: request.currency.toLowerCase(),
    // Manual: the buyer's payment only authorises; the merchant captures at shipment (../../checkout/authorizations).
    ...(captureMethod === 'manual' ? { capture_method: 'manual' as const } : {}),
    // A test buyer's card is confirmed here, server-side. The buyer's own card is confirmed by
    // Stripe.js in their browser with the client secret: no payment method and no confirm here.
    ...(paymentMethod !== undefined ? { confirm: true, payment_method: paymentMethod } : {}),
    // Cards only: no redirect-based method, so no return_url. (Since API version 2026-09-30 this
    // replaces payment_method_types, which is now refused.)
    allowed_payment_method_types: ['card'],
    description: request.subject,
    // No notify URL: Stripe delivers events only to the account's registered webhook endpoints.
    metadata: { out_trade_no: request.outTradeNo, attempt: String(request.attempt) },
  };
}

/**
 * The "already paid" look-up before a charge: a best effort behind the order guard and the key —
 * short and never retried — that must not stand between the buyer and a working API.
 */
export function guardOptions(config: StripeGatewayConfig): Stripe.RequestOptions {
  return { maxNetworkRetries: 0, timeout: Math.min(GUARD_TIMEOUT_MS, config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS) };
}

/** Search's string syntax: quote the value, backslash-escape quotes and backslashes inside it. */
export function outTradeNoQuery(outTradeNo: string): string {
  return `metadata['out_trade_no']:'${outTradeNo.replace(/['\\]/g, (ch) => `\\${ch}`)}'`;
}

/** A refund ready to send, or refused before any call. */
export type RefundPlan =
  { kind: 'refused'; outcome: RefundOutcome } | { kind: 'send'; params: Stripe.RefundCreateParams; idempotencyKey: string };

/**
 * The refund. Its Idempotency-Key derives from refundId (never the SDK's random one): a retry of this
 * refund — after a lost answer, a crash, or concurrently — replays the first answer instead of
 * refunding again; metadata.refund_id lets queryRefund find it once the key is pruned.
 */
export function planRefund(request: RefundRequest): RefundPlan {
  if (!REFUND_ID_PATTERN.test(request.refundId)) {
    const message = `refundId must be 1-32 letters or digits, got ${JSON.stringify(request.refundId)}`;
    return { kind: 'refused', outcome: { kind: 'failed', code: 'INVALID_REFUND_ID', message } };
  }
  if (!Number.isSafeInteger(request.amountMinor) || request.amountMinor < 1 || request.amountMinor > MAX_AMOUNT) {
    return {
      kind: 'refused',
      outcome: { kind: 'failed', code: 'INVALID_AMOUNT', message: `amount must be 1 … ${MAX_AMOUNT} in minor units` },
    };
  }
  if (!/^pi_[A-Za-z0-9]+$/.test(request.gatewayTradeNo)) {
    const message = `not a PaymentIntent id: ${request.gatewayTradeNo}`;
    return { kind: 'refused', outcome: { kind: 'failed', code: 'INVALID_GATEWAY_TRADE_NO', message } };
  }
  const params: Stripe.RefundCreateParams = {
    payment_intent: request.gatewayTradeNo,
    amount: request.amountMinor,
    reason: stripeRefundReason(request.reason),
    metadata: {
      refund_id: request.refundId,
      out_trade_no: request.outTradeNo,
      ...(request.reason ? { reason: request.reason.slice(0, METADATA_MAX_VALUE_LENGTH) } : {}),
    },
  };
  return { kind: 'send', params, idempotencyKey: `payonce-refund-${request.refundId}` };
}

/**
 * Stripe's refund reason is a closed set (duplicate, fraudulent, requested_by_customer): a refund of a
 * second charge for one order is a duplicate; everything else PayOnce gives back is on the buyer's
 * behalf. The free text travels in metadata.
 */
function stripeRefundReason(reason: string): 'duplicate' | 'requested_by_customer' {
  return /duplicate|double|second|重复/i.test(reason) ? 'duplicate' : 'requested_by_customer';
}
