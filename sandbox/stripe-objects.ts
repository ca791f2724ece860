/**
 * The JSON the sandbox's Stripe answers with: ids, PaymentIntent / PaymentMethod / Event objects and
 * the error envelope `{ error: { type, code, decline_code?, message, param?, payment_intent? } }`,
 * shaped like the API reference (https://docs.stripe.com/api) so stripe-node parses them unchanged.
 */
import { randomInt } from 'node:crypto';
import type { TestCard } from './stripe-cards';

/**
 * The API version the sandbox's account is pinned to, reported in `Stripe-Version` when a request does
 * not choose one, and in events (Stripe renders events in the account's or the endpoint's version).
 * It is stripe-node 23.1's pinned version, so the objects below are read with the types they have.
 */
export const ACCOUNT_API_VERSION = '2026-10-28.endive';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

export function base62(length: number): string {
  let out = '';
  for (let i = 0; i < length; i += 1) out += BASE62[randomInt(BASE62.length)];
  return out;
}

/** Stripe's object ids: a type prefix and 24 base62 characters (`pi_3Mtw…`). */
export function newId(prefix: 'pi' | 'ch' | 'pm' | 'evt' | 'pmc' | 're' | 'txn' | 'we'): string {
  return `${prefix}_${base62(24)}`;
}

export function newRequestId(): string {
  return `req_${base62(14)}`;
}

export function unixNow(): number {
  return Math.floor(Date.now() / 1000);
}

// ---------------------------------------------------------------------------------------------
// Errors

export type ErrorType = 'api_error' | 'card_error' | 'idempotency_error' | 'invalid_request_error';

export interface StripeErrorBody {
  type: ErrorType;
  message: string;
  code?: string;
  decline_code?: string;
  param?: string;
  doc_url?: string;
  [extra: string]: unknown;
}

export function errorBody(error: StripeErrorBody): { error: StripeErrorBody } {
  const withDoc: StripeErrorBody =
    error.code && !error.doc_url ? { ...error, doc_url: `https://docs.stripe.com/error-codes/${error.code.replaceAll('_', '-')}` } : error;
  return { error: withDoc };
}

// ---------------------------------------------------------------------------------------------
// PaymentMethod

export interface PaymentMethodObject {
  id: string;
  object: 'payment_method';
  [field: string]: unknown;
}

/** A card PaymentMethod as the API returns it; `pm_card_visa` becomes a fresh `pm_…` like on Stripe. */
export function paymentMethodObject(id: string, card: TestCard, created: number): PaymentMethodObject {
  return {
    id,
    object: 'payment_method',
    allow_redisplay: 'unspecified',
    billing_details: {
      address: { city: null, country: null, line1: null, line2: null, postal_code: null, state: null },
      email: null,
      name: null,
      phone: null,
      tax_id: null,
    },
    card: {
      brand: card.brand,
      checks: { address_line1_check: null, address_postal_code_check: null, cvc_check: 'pass' },
      country: card.country,
      display_brand: card.brand,
      exp_month: 12,
      exp_year: new Date().getUTCFullYear() + 3,
      fingerprint: `sbx${card.number.slice(-8)}`,
      funding: card.funding,
      generated_from: null,
      last4: card.number.slice(-4),
      networks: { available: [card.brand], preferred: null },
      regulated_status: 'unregulated',
      three_d_secure_usage: { supported: true },
      wallet: null,
    },
    created,
    customer: null,
    customer_account: null,
    livemode: false,
    metadata: {},
    type: 'card',
  };
}

// ---------------------------------------------------------------------------------------------
// PaymentIntent

/** The metadata key the ledger files a PaymentIntent's charges under. */
export const OUT_TRADE_NO_KEY = 'out_trade_no';

export type PaymentIntentStatus =
  'requires_payment_method' | 'requires_confirmation' | 'requires_action' | 'processing' | 'requires_capture' | 'canceled' | 'succeeded';

/** A decline (card_error, with the charge) or a failed 3-D Secure authentication (no charge made). */
export interface LastPaymentError {
  type: 'card_error' | 'invalid_request_error';
  code: string;
  decline_code?: string;
  message: string;
  charge?: string;
  doc_url: string;
  payment_method: PaymentMethodObject;
}

export interface PaymentIntentObject {
  id: string;
  object: 'payment_intent';
  amount: number;
  amount_received: number;
  currency: string;
  status: PaymentIntentStatus;
  metadata: Record<string, string>;
  payment_method: string | null;
  latest_charge: string | null;
  last_payment_error: LastPaymentError | null;
  automatic_payment_methods: { enabled: boolean; allow_redirects?: 'always' | 'never' } | null;
  canceled_at: number | null;
  cancellation_reason: string | null;
  created: number;
  [field: string]: unknown;
}

/**
 * What a publishable key sees of a PaymentIntent (retrieve or confirm with its client secret): the
 * fields Stripe.js needs to show the result. Stripe leaves out what only the merchant may read —
 * metadata above all [unverified: the exact list; Stripe documents "a subset of properties"].
 */
const PUBLIC_PAYMENT_INTENT_FIELDS = [
  'id',
  'object',
  'amount',
  'amount_details',
  'automatic_payment_methods',
  'canceled_at',
  'cancellation_reason',
  'capture_method',
  'client_secret',
  'confirmation_method',
  'created',
  'currency',
  'description',
  'last_payment_error',
  'livemode',
  'next_action',
  'payment_method',
  'payment_method_types',
  'processing',
  'receipt_email',
  'setup_future_usage',
  'shipping',
  'status',
] as const;

export type PublicPaymentIntent = Partial<PaymentIntentObject>;

export function publicPaymentIntent(intent: PaymentIntentObject): PublicPaymentIntent {
  const out: Record<string, unknown> = {};
  for (const field of PUBLIC_PAYMENT_INTENT_FIELDS) if (field in intent) out[field] = intent[field];
  return out as PublicPaymentIntent;
}

export interface NewPaymentIntent {
  amount: number;
  currency: string;
  description: string | null;
  metadata: Record<string, string>;
  automaticPaymentMethods: { enabled: boolean; allow_redirects: 'always' | 'never' } | null;
  allowedPaymentMethodTypes: string[] | null;
  receiptEmail: string | null;
  status: 'requires_payment_method' | 'requires_confirmation';
  /** manual: confirm only authorises; the merchant captures (or cancels) within the window. */
  captureMethod: 'automatic' | 'automatic_async' | 'manual';
}

export function paymentIntentObject(input: NewPaymentIntent, created: number): PaymentIntentObject {
  const id = newId('pi');
  return {
    id,
    object: 'payment_intent',
    allowed_payment_method_types: input.allowedPaymentMethodTypes,
    amount: input.amount,
    amount_capturable: 0,
    amount_details: { tip: {} },
    amount_received: 0,
    application: null,
    application_fee_amount: null,
    automatic_payment_methods: input.automaticPaymentMethods,
    canceled_at: null,
    cancellation_reason: null,
    capture_method: input.captureMethod,
    client_secret: `${id}_secret_${base62(25)}`,
    confirmation_method: 'automatic',
    created,
    currency: input.currency,
    customer: null,
    customer_account: null,
    description: input.description,
    excluded_payment_method_types: null,
    last_payment_error: null,
    latest_charge: null,
    livemode: false,
    metadata: input.metadata,
    next_action: null,
    on_behalf_of: null,
    payment_method: null,
    payment_method_configuration_details: input.automaticPaymentMethods ? { id: newId('pmc'), parent: null } : null,
    payment_method_options: {
      card: { installments: null, mandate_options: null, network: null, request_three_d_secure: 'automatic' },
    },
    payment_method_types: ['card'],
    processing: null,
    receipt_email: input.receiptEmail,
    review: null,
    setup_future_usage: null,
    shipping: null,
    source: null,
    statement_descriptor: null,
    statement_descriptor_suffix: null,
    status: input.status,
    transfer_data: null,
    transfer_group: null,
  };
}

// ---------------------------------------------------------------------------------------------
// Refund and Charge

/** The metadata key PayOnce files its own refund id under (Stripe keeps refund ids of its own). */
export const REFUND_ID_KEY = 'refund_id';

export type RefundStatus = 'pending' | 'requires_action' | 'succeeded' | 'failed' | 'canceled';

/** A Refund as https://docs.stripe.com/api/refunds/object renders it (card refunds: no destination details). */
export interface RefundObject {
  id: string;
  object: 'refund';
  amount: number;
  balance_transaction: string | null;
  charge: string;
  created: number;
  currency: string;
  destination_details: { type: 'card'; card: { reference_status: string; reference_type: string; type: 'refund' } };
  metadata: Record<string, string>;
  payment_intent: string;
  reason: string | null;
  receipt_number: null;
  source_transfer_reversal: null;
  status: RefundStatus;
  transfer_reversal: null;
  [field: string]: unknown;
}

export function refundObject(input: {
  amount: number;
  currency: string;
  charge: string;
  paymentIntent: string;
  reason: string | null;
  metadata: Record<string, string>;
  status: RefundStatus;
  created: number;
}): RefundObject {
  return {
    id: newId('re'),
    object: 'refund',
    amount: input.amount,
    balance_transaction: input.status === 'succeeded' || input.status === 'pending' ? newId('txn') : null,
    charge: input.charge,
    created: input.created,
    currency: input.currency,
    destination_details: {
      type: 'card',
      card: { reference_status: 'pending', reference_type: 'acquirer_reference_number', type: 'refund' },
    },
    metadata: input.metadata,
    payment_intent: input.paymentIntent,
    reason: input.reason,
    receipt_number: null,
    source_transfer_reversal: null,
    status: input.status,
    transfer_reversal: null,
  };
}

/**
 * The Charge a `charge.refunded` event carries: the fields a receiver reads (amounts, refunded, the
 * PaymentIntent). Since API version 2022-11-15 a Charge no longer embeds its refunds list.
 * [unverified] that Stripe copies the PaymentIntent's metadata onto its Charge; the sandbox does.
 */
export interface ChargeObject {
  id: string;
  object: 'charge';
  amount: number;
  amount_captured: number;
  amount_refunded: number;
  captured: boolean;
  created: number;
  currency: string;
  metadata: Record<string, string>;
  paid: boolean;
  payment_intent: string;
  payment_method: string | null;
  refunded: boolean;
  status: 'succeeded' | 'failed';
  [field: string]: unknown;
}

export function chargeObject(input: {
  id: string;
  intent: PaymentIntentObject;
  amountRefunded: number;
  created: number;
  /** A declined attempt: nothing captured, the decline's codes (its PaymentIntent's last_payment_error). */
  failed?: { code: string; declineCode: string; message: string; paymentMethod: string };
}): ChargeObject {
  const failed = input.failed;
  // An authorisation (capture_method manual) is a succeeded charge not yet captured; its capture may
  // take part of it.
  const manual = input.intent.capture_method === 'manual';
  const captured = !failed && input.intent.status !== 'requires_capture';
  const amount = failed || manual ? input.intent.amount : input.intent.amount_received;
  const amountCaptured = captured ? input.intent.amount_received : 0;
  return {
    id: input.id,
    object: 'charge',
    amount,
    amount_captured: amountCaptured,
    amount_refunded: input.amountRefunded,
    balance_transaction: null,
    captured,
    created: input.created,
    currency: input.intent.currency,
    description: input.intent.description ?? null,
    failure_code: failed?.code ?? null,
    failure_message: failed?.message ?? null,
    livemode: false,
    metadata: { ...input.intent.metadata },
    outcome: failed
      ? {
          network_status: 'declined_by_network',
          reason: failed.declineCode,
          seller_message: 'The bank did not return any further details with this decline.',
          type: 'issuer_declined',
        }
      : { network_status: 'approved_by_network', reason: null, seller_message: 'Payment complete.', type: 'authorized' },
    paid: !failed,
    payment_intent: input.intent.id,
    payment_method: failed ? failed.paymentMethod : input.intent.payment_method,
    refunded: captured && input.amountRefunded >= amountCaptured,
    status: failed ? 'failed' : 'succeeded',
  };
}

// ---------------------------------------------------------------------------------------------
// Events

/**
 * What the sandbox emits. `payment_intent.requires_action`, `payment_intent.amount_capturable_updated`
 * and `charge.captured` are for the flows that stop half-way (3-D Secure, manual capture): emitEvent
 * sends them as it sends the rest. No card flow here is `processing`, so no such event is sent.
 */
export type EventType =
  | 'payment_intent.created'
  | 'payment_intent.requires_action'
  | 'payment_intent.amount_capturable_updated'
  | 'payment_intent.succeeded'
  | 'payment_intent.payment_failed'
  | 'payment_intent.canceled'
  | 'charge.succeeded'
  | 'charge.failed'
  | 'charge.captured'
  | 'charge.refunded'
  | 'refund.created'
  | 'refund.updated'
  | 'refund.failed';

export type EventDataObject = PaymentIntentObject | RefundObject | ChargeObject;

export interface EventObject {
  id: string;
  object: 'event';
  api_version: string;
  created: number;
  data: { object: EventDataObject };
  livemode: false;
  pending_webhooks: number;
  request: { id: string | null; idempotency_key: string | null };
  type: EventType;
}

/**
 * No `account`: Stripe sets it only on events of Connect's connected accounts, which the sandbox does
 * not emulate. Which merchant an event is for is the endpoint's account (its signing secret).
 */
export function eventObject(input: {
  type: EventType;
  object: EventDataObject;
  requestId: string | null;
  idempotencyKey: string | null;
  /** How many endpoints the event is being delivered to. */
  pendingWebhooks: number;
}): EventObject {
  return {
    id: newId('evt'),
    object: 'event',
    api_version: ACCOUNT_API_VERSION,
    created: unixNow(),
    data: { object: input.object },
    livemode: false,
    pending_webhooks: input.pendingWebhooks,
    request: { id: input.requestId, idempotency_key: input.idempotencyKey },
    type: input.type,
  };
}
