/**
 * The Stripe adapter, through the official stripe-node SDK, mapped onto PayOnce's closed set of
 * outcomes (./gateway). Two ways to pay one attempt's PaymentIntent (`POST /v1/payment_intents`):
 *  - a sandbox test buyer: created with its test PaymentMethod and confirm=true, answered at once;
 *  - the buyer's own card step (buyerSteps ['card'] when `cardStep` is configured): created with no
 *    payment method and no confirm, answered `awaiting_buyer` with the PaymentIntent's client_secret,
 *    the publishable key and Stripe.js's URL. The page mounts Stripe.js's card Element and calls
 *    stripe.confirmCardPayment(clientSecret), which confirms from the browser; the order settles by the
 *    payment_intent.succeeded webhook or by query(). A declined card leaves the PaymentIntent in
 *    requires_payment_method for the buyer's next card: still waiting, never a decline of the attempt.
 *
 * Stripe knows nothing of our out_trade_no (it travels as metadata), so it cannot refuse a second
 * charge for a paid order the way Alipay does. What makes a retry safe here is Stripe's idempotency
 * layer, fed with a key derived from the order's payment attempt — `payonce-{outTradeNo}-attempt-{n}`,
 * never the SDK's random one: a retry of the same attempt (after a timeout, a crash, a lost answer)
 * replays the first answer, a decline included, and a new attempt after a decline is a new request.
 * Stripe keeps keys for 24 h; past that, and as a second line behind the order-level guard, every
 * charge first looks for a PaymentIntent of this order that already succeeded ("already paid").
 *
 * Points the stripe-node (23.1) source makes that this file relies on:
 *  - The SDK retries connection errors, timeouts, 409s and 5xx itself (maxNetworkRetries), with the
 *    same Idempotency-Key, and obeys `Stripe-Should-Retry`. Its final error only describes the LAST
 *    try, so a `tracingHttpClient` records whether any earlier try may have reached Stripe: a refused
 *    connection is "certainly not charged" only if no try before it got through.
 *  - Errors are classes by HTTP status: 402 StripeCardError (decline_code on it), 400/404
 *    StripeInvalidRequestError or StripeIdempotencyError (type idempotency_error), 401/403, 429
 *    StripeRateLimitError, anything else (409, 5xx) StripeAPIError; transport failures
 *    StripeConnectionError whose `detail` is the Node error (ECONNREFUSED, ETIMEDOUT, …).
 *  - Search is eventually consistent ("don't use search in read-after-write flows"), so query() and
 *    the "already paid" look-up add a strongly consistent list of the last hour's PaymentIntents;
 *    query() never says "not found" unless it could read that whole window.
 *  - webhooks.constructEvent verifies `Stripe-Signature` (HMAC-SHA256, v1 scheme only) and the
 *    timestamp tolerance; the signature is never checked by hand here.
 *  - A closed connection is retried once even with maxNetworkRetries 0 (same Idempotency-Key), and an
 *    error status whose body has no `error` object resolves as if it were the resource: `call()`
 *    turns the latter back into a failure by the status the tracing client saw.
 *
 * Closing and refunding (each attempt is its own PaymentIntent, so oneTradePerOrder is false):
 *  - close() finds the order's PaymentIntents as query() does and cancels every one that could still
 *    take money (cancellation_reason abandoned); succeeded ones are reported (already_paid), never
 *    canceled; a processing one, a cancel in doubt or a look-up that could not read the whole recent
 *    window makes the answer indeterminate.
 *  - Events of another account, and of PaymentIntents without our metadata.out_trade_no, are
 *    acknowledged and ignored: nothing of theirs is ours to settle.
 *  - refund() is POST /v1/refunds with Idempotency-Key `payonce-refund-{refundId}` and
 *    metadata.refund_id / metadata.out_trade_no; queryRefund() lists the PaymentIntent's refunds and
 *    matches metadata.refund_id. refund.* webhook events become refund notifications; charge.refunded
 *    is acknowledged and ignored (`other`).
 *
 * No SDK type leaves this file.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import Stripe from 'stripe';
import { MAX_TRIES_PER_GATEWAY_CALL } from './gateway';
import { classifyConnectionFailure, connectionFailure, DEFAULT_GATEWAY_TIMEOUT_MS, assertNever } from './transport';
import type {
  BuyerStep,
  ChargeOutcome,
  ChargeRequest,
  CloseOutcome,
  CloseRequest,
  NotificationReply,
  NotificationVerdict,
  PaymentGateway,
  PaymentNotification,
  QueryOutcome,
  RefundOutcome,
  RefundQuery,
  RefundQueryOutcome,
  RefundRequest,
  RefundStatus,
  SucceededTrade,
  TestBuyer,
  TradeStatus,
} from './gateway';

export interface StripeGatewayConfig {
  /** sk_live_… / sk_test_… (or a restricted key allowed to create, read and search PaymentIntents). */
  secretKey: string;
  /** The webhook endpoint's signing secret, whsec_…. */
  webhookSecret: string;
  /** The account webhook events must belong to (acct_…): PaymentGateway.merchantId. */
  accountId: string;
  /** The API's address; defaults to Stripe's own (api.stripe.com:443, https). */
  host?: string;
  port?: number | string;
  protocol?: 'http' | 'https';
  /** The PaymentMethod each sandbox test buyer pays with (pm_card_visa, …). */
  testBuyers: Record<TestBuyer, string>;
  /** The page's card step (Stripe.js with the publishable key); absent, only test buyers can pay. */
  cardStep?: { publishableKey: string; scriptUrl: string };
  /** Per try; the SDK tries 1 + maxNetworkRetries times. Default 5000 ms. */
  timeoutMs?: number;
  /** Default 2, the SDK's own (MAX_TRIES_PER_GATEWAY_CALL counts on it). */
  maxNetworkRetries?: number;
}

/** Stripe's ceiling for `amount`: eight digits in the smallest currency unit. */
const MAX_AMOUNT = 99_999_999;
const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** Stripe's webhook tolerance (and the SDK's default): a signature older than 5 minutes — or dated more than 5 minutes ahead — is refused. */
const WEBHOOK_TOLERANCE_SECONDS = 300;
/** Search can lag "up to an hour during outages": query() lists this window strongly consistently. */
const RECENT_WINDOW_SECONDS = 3600;
/** Clocks differ (ours, Stripe's): a list window that starts at a moment of ours starts this much earlier. */
const CLOCK_MARGIN_SECONDS = 120;
/** At most this many pages of 100 of that window; beyond it a "not found" cannot be trusted. */
const MAX_RECENT_PAGES = 5;
/** The before-charge "already paid" look-up is a best effort: short, and never retried. */
const GUARD_TIMEOUT_MS = 3000;
/** Refunds of one PaymentIntent read by queryRefund, 100 a page; beyond it "not found" is not trusted. */
const MAX_REFUND_PAGES = 10;
/** RefundRequest.refundId's own rule (gateway.ts): what every gateway's refund id accepts at once. */
const REFUND_ID_PATTERN = /^[A-Za-z0-9]{1,32}$/;
/** Stripe's metadata value limit. */
const METADATA_MAX_VALUE_LENGTH = 500;

// ---------------------------------------------------------------------------------------------
// One call to Stripe

/** Answers that show the request was never executed: rate limited, or refused in front of Stripe. */
function provesNotProcessed(status: number): boolean {
  return status === 429 || status === 502 || status === 503;
}

/** What the tries of one SDK call saw, across the SDK's own retries. */
interface CallTrace {
  mayHaveBeenProcessed: boolean;
  /** The HTTP status of the last try that got an answer. */
  lastStatus?: number;
}

const currentCall = new AsyncLocalStorage<CallTrace>();

/**
 * The SDK's own Node client, watched: every try of the current call (the SDK's retries run inside the
 * same async context) marks the call as possibly processed when it got through to Stripe — a timeout,
 * a reset, a 409 (another request with this key is executing) or a 5xx that is not a refusal.
 */
function tracingHttpClient(): Stripe.HttpClient {
  const inner = Stripe.createNodeHttpClient();
  return {
    getClientName: () => inner.getClientName(),
    makeRequest: (host, port, path, method, headers, requestData, protocol, timeout) =>
      inner.makeRequest(host, port, path, method, headers, requestData, protocol, timeout).then(
        (response) => {
          const trace = currentCall.getStore();
          const status = response.getStatusCode();
          if (trace) trace.lastStatus = status;
          if (trace && (status === 409 || (status >= 500 && !provesNotProcessed(status)))) trace.mayHaveBeenProcessed = true;
          return response;
        },
        (error: unknown) => {
          const trace = currentCall.getStore();
          if (trace && !classifyConnectionFailure(error).neverSent) trace.mayHaveBeenProcessed = true;
          throw error;
        },
      ),
  };
}

type Called<T> = { ok: true; value: T } | { ok: false; failure: Failure };

/** Why a call has no usable answer, in the terms a charge needs. */
type Failure =
  /** 402: the card was declined; terminal for this attempt. */
  | { kind: 'card_declined'; code: string; message: string }
  /**
   * 400/404: Stripe refused the request itself; the same request would be refused again. `intent` is
   * the PaymentIntent a payment_intent_unexpected_state refusal carries (its current state).
   */
  | { kind: 'invalid_request'; code: string; message: string; intent?: Stripe.PaymentIntent }
  /** 400 idempotency_error: this attempt's key was used with other parameters or on another endpoint. */
  | { kind: 'idempotency_conflict'; message: string }
  /** Certainly not executed: refused connection, 429, 502/503, 401/403 — and no earlier try got through. */
  | { kind: 'not_processed'; code: string; message: string }
  /** May have been executed: timeout, reset, 409 in use, 500/504, unreadable answer. */
  | { kind: 'in_doubt'; code: string; message: string };

function classify(err: unknown, mayHaveBeenProcessed: boolean): Failure {
  const message = err instanceof Error ? err.message : String(err);
  const notProcessed = (code: string): Failure =>
    mayHaveBeenProcessed
      ? { kind: 'in_doubt', code: `${code}_AFTER_EARLIER_TRY`, message: `${message} (an earlier try may have reached Stripe)` }
      : { kind: 'not_processed', code, message };

  if (err instanceof Stripe.errors.StripeCardError) {
    return { kind: 'card_declined', code: err.decline_code || err.code || 'card_declined', message };
  }
  if (err instanceof Stripe.errors.StripeIdempotencyError) return { kind: 'idempotency_conflict', message };
  if (err instanceof Stripe.errors.StripeInvalidRequestError) {
    return {
      kind: 'invalid_request',
      code: err.code ?? 'invalid_request_error',
      message,
      ...(err.payment_intent ? { intent: err.payment_intent } : {}),
    };
  }
  if (err instanceof Stripe.errors.StripeRateLimitError) return notProcessed('rate_limit');
  if (err instanceof Stripe.errors.StripeAuthenticationError) return notProcessed('authentication_error');
  if (err instanceof Stripe.errors.StripePermissionError) return notProcessed('permission_error');
  if (err instanceof Stripe.errors.StripeConnectionError) {
    const { kind, code } = connectionFailure(err.detail, message, 'CONNECTION_ERROR');
    if (kind === 'not_sent') return notProcessed(code);
    // ETIMEDOUT, ECONNRESET, a body cut short: the request may have been executed.
    return { kind: 'in_doubt', code, message };
  }
  if (err instanceof Stripe.errors.StripeAPIError) {
    const status = err.statusCode ?? 0;
    if (provesNotProcessed(status)) return notProcessed(`HTTP_${status}`);
    // 409 idempotency_key_in_use: the first request with this key is still executing. 500: Stripe
    // stores it once execution began and asks callers to treat the result as indeterminate.
    return { kind: 'in_doubt', code: err.code ?? (status ? `HTTP_${status}` : 'api_error'), message };
  }
  // Not an error the SDK recognised (or an unknown Stripe error class): it may hide a charge.
  return { kind: 'in_doubt', code: 'SDK_ERROR', message };
}

// ---------------------------------------------------------------------------------------------
// PaymentIntents

/** The statuses this adapter knows; anything else Stripe adds later is treated as "in doubt". */
type KnownStatus =
  'requires_payment_method' | 'requires_confirmation' | 'requires_action' | 'processing' | 'requires_capture' | 'canceled' | 'succeeded';

const KNOWN_STATUSES: readonly string[] = [
  'requires_payment_method',
  'requires_confirmation',
  'requires_action',
  'processing',
  'requires_capture',
  'canceled',
  'succeeded',
] satisfies KnownStatus[];

function knownStatus(intent: Stripe.PaymentIntent): KnownStatus | 'unknown' {
  return KNOWN_STATUSES.includes(intent.status) ? (intent.status as KnownStatus) : 'unknown';
}

/** Search's string syntax: quote the value, backslash-escape quotes and backslashes inside it. */
function outTradeNoQuery(outTradeNo: string): string {
  return `metadata['out_trade_no']:'${outTradeNo.replace(/['\\]/g, (ch) => `\\${ch}`)}'`;
}

/** The oldest first: when an order was (wrongly) charged twice, its first payment is the one we report. */
function oldestFirst(intents: readonly Stripe.PaymentIntent[]): Stripe.PaymentIntent[] {
  return [...intents].sort((a, b) => a.created - b.created || a.id.localeCompare(b.id));
}

function paidTrade(intent: Stripe.PaymentIntent): TradeStatus | undefined {
  const amountMinor = intent.amount_received;
  if (!Number.isSafeInteger(amountMinor) || amountMinor <= 0) return undefined;
  return { kind: 'succeeded', gatewayTradeNo: intent.id, amountMinor, currency: intent.currency.toUpperCase() };
}

function sameCharge(intent: Stripe.PaymentIntent, request: ChargeRequest): boolean {
  return intent.amount_received === request.amountMinor && intent.currency === request.currency.toLowerCase();
}

// ---------------------------------------------------------------------------------------------
// Refunds

/** The refund statuses this adapter knows (Refund.status); anything newer is treated as in doubt. */
type KnownRefundStatus = 'pending' | 'requires_action' | 'succeeded' | 'failed' | 'canceled';
const KNOWN_REFUND_STATUSES: readonly string[] = [
  'pending',
  'requires_action',
  'succeeded',
  'failed',
  'canceled',
] satisfies KnownRefundStatus[];

function knownRefundStatus(refund: Stripe.Refund): KnownRefundStatus | 'unknown' {
  return refund.status !== null && KNOWN_REFUND_STATUSES.includes(refund.status) ? (refund.status as KnownRefundStatus) : 'unknown';
}

/** A Stripe Refund in PayOnce's terms; `unknown` statuses are reported as pending (settle later). */
function refundStatusOf(refund: Stripe.Refund): RefundStatus {
  const status = knownRefundStatus(refund);
  switch (status) {
    case 'succeeded':
      return { kind: 'succeeded', gatewayRefundId: refund.id, amountMinor: refund.amount };
    case 'pending':
    case 'requires_action':
    case 'unknown':
      // Not final yet (a bank that takes days, a customer who must confirm details): ask again later.
      return { kind: 'pending' };
    case 'failed':
    case 'canceled':
      return { kind: 'failed', code: refund.failure_reason ?? `refund_${status}`, message: `Refund ${refund.id} is ${status}` };
    default:
      return assertNever(status);
  }
}

/**
 * Stripe's refund reason is a closed set (duplicate, fraudulent, requested_by_customer): a refund of a
 * second charge for one order is a duplicate; everything else PayOnce gives back is on the buyer's
 * behalf. The free text travels in metadata.
 */
function stripeRefundReason(reason: string): 'duplicate' | 'requested_by_customer' {
  return /duplicate|double|second|重复/i.test(reason) ? 'duplicate' : 'requested_by_customer';
}

// ---------------------------------------------------------------------------------------------
// The gateway

export function createStripeGateway(config: StripeGatewayConfig): PaymentGateway {
  const stripe = new Stripe(config.secretKey, {
    ...(config.host !== undefined ? { host: config.host } : {}),
    ...(config.port !== undefined ? { port: config.port } : {}),
    ...(config.protocol !== undefined ? { protocol: config.protocol } : {}),
    maxNetworkRetries: config.maxNetworkRetries ?? MAX_TRIES_PER_GATEWAY_CALL - 1,
    timeout: config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS,
    httpClient: tracingHttpClient(),
  });

  /** The card step needs the page's Stripe.js and the publishable key; without them only test buyers pay. */
  const buyerSteps: readonly BuyerStep[] = config.cardStep ? ['card'] : [];

  async function call<T>(fn: () => Promise<T>): Promise<Called<T>> {
    const trace: CallTrace = { mayHaveBeenProcessed: false };
    try {
      const value = await currentCall.run(trace, fn);
      // The SDK resolves an error status whose body has no `error` object (a proxy's or load
      // balancer's page) as if it were the resource: an answer that says nothing about the request.
      const status = trace.lastStatus ?? 200;
      if (status >= 300) {
        const message = `HTTP ${status} without a Stripe error body`;
        if (provesNotProcessed(status) && !trace.mayHaveBeenProcessed)
          return { ok: false, failure: { kind: 'not_processed', code: `HTTP_${status}`, message } };
        return { ok: false, failure: { kind: 'in_doubt', code: `HTTP_${status}`, message } };
      }
      return { ok: true, value };
    } catch (err) {
      return { ok: false, failure: classify(err, trace.mayHaveBeenProcessed) };
    }
  }

  function failureMessage(failure: Failure): { code: string; message: string } {
    return failure.kind === 'idempotency_conflict'
      ? { code: 'idempotency_error', message: failure.message }
      : { code: failure.code, message: failure.message };
  }

  /**
   * Every PaymentIntent of one order: search, plus a strongly consistent list of the recent window
   * that search may not show yet. `complete` is false when that window was too busy to read whole.
   */
  async function findIntents(
    outTradeNo: string,
    maxPages: number,
    options: Stripe.RequestOptions = {},
    /** Nothing of interest was created before this: the list window starts here (less a margin). */
    createdSince?: Date,
  ): Promise<Called<{ intents: Stripe.PaymentIntent[]; complete: boolean }>> {
    const searched = await call(() => stripe.paymentIntents.search({ query: outTradeNoQuery(outTradeNo), limit: 100 }, options));
    if (!searched.ok) return searched;
    const byId = new Map(searched.value.data.map((intent) => [intent.id, intent]));
    const windowStart = Math.floor(Date.now() / 1000) - RECENT_WINDOW_SECONDS;
    const since = createdSince ? Math.max(windowStart, Math.floor(createdSince.getTime() / 1000) - CLOCK_MARGIN_SECONDS) : windowStart;
    let startingAfter: string | undefined;
    for (let page = 0; page < maxPages; page += 1) {
      const listed = await call(() =>
        stripe.paymentIntents.list(
          { created: { gte: since }, limit: 100, ...(startingAfter ? { starting_after: startingAfter } : {}) },
          options,
        ),
      );
      if (!listed.ok) return listed;
      // The list is fresher than the search index: its copy wins.
      for (const intent of listed.value.data) if (intent.metadata?.out_trade_no === outTradeNo) byId.set(intent.id, intent);
      startingAfter = listed.value.data.at(-1)?.id;
      if (!listed.value.has_more || !startingAfter) return { ok: true, value: { intents: [...byId.values()], complete: true } };
    }
    return { ok: true, value: { intents: [...byId.values()], complete: false } };
  }

  async function query(outTradeNo: string): Promise<QueryOutcome> {
    const found = await findIntents(outTradeNo, MAX_RECENT_PAGES);
    if (!found.ok) return { kind: 'unavailable', ...failureMessage(found.failure) };
    const { intents, complete } = found.value;
    if (intents.length === 0) {
      return complete
        ? { kind: 'answered', trade: { kind: 'not_found' } }
        : {
            kind: 'unavailable',
            code: 'SEARCH_INCOMPLETE',
            message: 'too many recent PaymentIntents to rule out one search does not show yet',
          };
    }
    const ordered = oldestFirst(intents);
    const paid = ordered.find((intent) => intent.status === 'succeeded');
    if (paid) {
      const trade = paidTrade(paid);
      return trade
        ? { kind: 'answered', trade }
        : { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: `succeeded PaymentIntent ${paid.id} without amount_received` };
    }
    let open = false;
    for (const intent of ordered) {
      const status = knownStatus(intent);
      switch (status) {
        case 'processing':
        case 'requires_capture':
        case 'requires_action':
          // Money may still move (a bank confirms, a capture, the buyer finishing 3-D Secure): not an
          // answer the reconciler may reopen the order on. Ask again later.
          return { kind: 'unavailable', code: `PAYMENT_${status.toUpperCase()}`, message: `PaymentIntent ${intent.id} is ${status}` };
        case 'unknown':
          return { kind: 'unavailable', code: 'UNKNOWN_STATUS', message: `PaymentIntent ${intent.id} is ${intent.status}` };
        case 'requires_payment_method':
        case 'requires_confirmation':
          open = true;
          break;
        case 'canceled':
        case 'succeeded':
          break;
        default:
          assertNever(status);
      }
    }
    return { kind: 'answered', trade: open ? { kind: 'pending' } : { kind: 'closed' } };
  }

  /** A charge's PaymentIntent, as create answered it (or replayed it). */
  function outcomeOf(intent: Stripe.PaymentIntent, request: ChargeRequest): ChargeOutcome {
    const status = knownStatus(intent);
    switch (status) {
      case 'succeeded': {
        if (!sameCharge(intent, request)) {
          return {
            kind: 'indeterminate',
            code: 'AMOUNT_MISMATCH',
            message: `PaymentIntent ${intent.id} received ${intent.amount_received} ${intent.currency}, asked ${request.amountMinor} ${request.currency}`,
          };
        }
        return {
          kind: 'succeeded',
          gatewayTradeNo: intent.id,
          amountMinor: intent.amount_received,
          currency: request.currency.toUpperCase(),
        };
      }
      case 'requires_payment_method': {
        // With confirm=true Stripe answers a decline with a 402; a 200 in this state still carries it.
        const error = intent.last_payment_error;
        if (error)
          return {
            kind: 'declined',
            code: error.decline_code || error.code || 'payment_failed',
            message: error.message ?? 'payment failed',
          };
        return { kind: 'indeterminate', code: 'REQUIRES_PAYMENT_METHOD', message: `PaymentIntent ${intent.id} was not confirmed` };
      }
      case 'canceled':
        return { kind: 'declined', code: 'payment_intent_canceled', message: `PaymentIntent ${intent.id} is canceled` };
      case 'requires_action':
      case 'requires_confirmation':
      case 'processing':
      case 'requires_capture':
        // Settled later by the webhook or a query, never by guessing.
        return { kind: 'indeterminate', code: status, message: `PaymentIntent ${intent.id} is ${status}` };
      case 'unknown':
        return { kind: 'indeterminate', code: 'UNKNOWN_STATUS', message: `PaymentIntent ${intent.id} is ${intent.status}` };
      default:
        return assertNever(status);
    }
  }

  /**
   * The card step's PaymentIntent: open for the buyer's card (the page confirms it with Stripe.js),
   * or already paid. A retry of the same attempt is answered from Stripe's idempotency layer with the
   * PaymentIntent as it was when it was created, so a replay is read again for its current state: the
   * buyer may have paid (or tried a card and been declined) in between.
   */
  async function cardStepOutcome(
    created: Stripe.Response<Stripe.PaymentIntent>,
    request: ChargeRequest,
    cardStep: NonNullable<StripeGatewayConfig['cardStep']>,
  ): Promise<ChargeOutcome> {
    let intent: Stripe.PaymentIntent = created;
    if (created.lastResponse?.headers?.['idempotent-replayed'] === 'true') {
      const current = await call(() => stripe.paymentIntents.retrieve(created.id));
      if (!current.ok) {
        // The PaymentIntent exists and may have been paid since: only a query or the webhook can tell.
        const { code, message } = failureMessage(current.failure);
        return { kind: 'indeterminate', code, message: `PaymentIntent ${created.id} could not be read again: ${message}` };
      }
      intent = current.value;
    }
    const status = knownStatus(intent);
    switch (status) {
      case 'requires_payment_method':
      case 'requires_confirmation':
      case 'requires_action': {
        // Waiting for the buyer, after a declined card too: Stripe keeps the PaymentIntent payable and
        // the buyer may try another card on the same page. requires_action is the buyer mid-3-D Secure.
        const clientSecret = intent.client_secret;
        if (!clientSecret) {
          return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: `PaymentIntent ${intent.id} without client_secret` };
        }
        if (intent.amount !== request.amountMinor || intent.currency !== request.currency.toLowerCase()) {
          return {
            kind: 'indeterminate',
            code: 'AMOUNT_MISMATCH',
            message: `PaymentIntent ${intent.id} is for ${intent.amount} ${intent.currency}, asked ${request.amountMinor} ${request.currency}`,
          };
        }
        return {
          kind: 'awaiting_buyer',
          action: { kind: 'card', scriptUrl: cardStep.scriptUrl, publishableKey: cardStep.publishableKey, clientSecret },
        };
      }
      case 'succeeded':
      case 'canceled':
      case 'processing':
      case 'requires_capture':
      case 'unknown':
        return outcomeOf(intent, request);
      default:
        return assertNever(status);
    }
  }

  async function charge(request: ChargeRequest): Promise<ChargeOutcome> {
    // Checked before any call: these can only be programming errors, and Stripe would refuse them.
    if (!/^[A-Za-z]{3}$/.test(request.currency)) {
      return { kind: 'declined', code: 'INVALID_CURRENCY', message: `not an ISO 4217 currency: ${request.currency}` };
    }
    if (!Number.isSafeInteger(request.amountMinor) || request.amountMinor < 1 || request.amountMinor > MAX_AMOUNT) {
      return { kind: 'declined', code: 'INVALID_AMOUNT', message: `amount must be 1 … ${MAX_AMOUNT} in minor units` };
    }
    if (!Number.isSafeInteger(request.attempt) || request.attempt < 1) {
      return { kind: 'declined', code: 'INVALID_ATTEMPT', message: `attempt must be a positive integer, got ${request.attempt}` };
    }
    const cardStep = request.buyer === undefined ? config.cardStep : undefined;
    if (request.buyer === undefined) {
      const step = request.buyerStep ?? buyerSteps[0];
      if (step !== 'card' || !cardStep) {
        return {
          kind: 'declined',
          code: 'BUYER_STEP_UNSUPPORTED',
          message: `Stripe offers the buyer step ${buyerSteps.join(', ') || '(none: STRIPE_PUBLISHABLE_KEY is not set)'}, not ${step ?? 'none'}`,
        };
      }
    }
    const paymentMethod = request.buyer === undefined ? undefined : config.testBuyers[request.buyer];
    if (request.buyer !== undefined && !paymentMethod) {
      return { kind: 'declined', code: 'NO_PAYMENT_METHOD', message: 'no payment method configured for this buyer' };
    }
    const idempotencyKey = `payonce-${request.outTradeNo}-attempt-${request.attempt}`;
    if (idempotencyKey.length > MAX_IDEMPOTENCY_KEY_LENGTH) {
      return { kind: 'declined', code: 'INVALID_OUT_TRADE_NO', message: 'out_trade_no too long for an idempotency key' };
    }

    // "Already paid": a PaymentIntent of this order that succeeded (a lost answer, an expired key, an
    // attempt started by mistake). A best effort behind the order guard and the key — short, never
    // retried, one page of the recent list — that must not stand between the buyer and a working API.
    const earlier = await findIntents(request.outTradeNo, 1, {
      maxNetworkRetries: 0,
      timeout: Math.min(GUARD_TIMEOUT_MS, config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS),
    });
    if (earlier.ok) {
      const intents = oldestFirst(earlier.value.intents);
      const paid = intents.find((intent) => intent.status === 'succeeded');
      if (paid) return outcomeOf(paid, request);
      const busy = intents.find((intent) => intent.status === 'processing' || intent.status === 'requires_capture');
      if (busy)
        return {
          kind: 'indeterminate',
          code: `PAYMENT_${busy.status.toUpperCase()}`,
          message: `PaymentIntent ${busy.id} is ${busy.status}`,
        };
    }

    const created = await call(() =>
      stripe.paymentIntents.create(
        {
          amount: request.amountMinor,
          currency: request.currency.toLowerCase(),
          // A test buyer's card is confirmed here, server-side. The buyer's own card is confirmed by
          // Stripe.js in their browser with the client secret: no payment method and no confirm here.
          ...(paymentMethod !== undefined ? { confirm: true, payment_method: paymentMethod } : {}),
          // Cards only: no redirect-based method, so no return_url. (Since API version 2026-09-30 this
          // replaces payment_method_types, which is now refused.)
          allowed_payment_method_types: ['card'],
          description: request.subject,
          metadata: {
            out_trade_no: request.outTradeNo,
            attempt: String(request.attempt),
            // Where the sandbox delivers this PaymentIntent's events while the account has registered no
            // webhook endpoint (its old stand-in for the Dashboard's); real Stripe ignores it.
            notify_url: request.notifyUrl,
          },
        },
        { idempotencyKey },
      ),
    );
    if (created.ok) {
      if (!cardStep) return outcomeOf(created.value, request);
      return cardStepOutcome(created.value, request, cardStep);
    }

    const failure = created.failure;
    switch (failure.kind) {
      case 'card_declined':
        return { kind: 'declined', code: failure.code, message: failure.message };
      case 'invalid_request':
        return { kind: 'declined', code: failure.code, message: failure.message };
      case 'not_processed':
        return { kind: 'retryable', code: failure.code, message: failure.message };
      case 'in_doubt':
        return { kind: 'indeterminate', code: failure.code, message: failure.message };
      case 'idempotency_conflict': {
        // This attempt's key already ran with other parameters (another buyer, amount or notify URL):
        // what it did is only known from the order's PaymentIntents.
        const found = await query(request.outTradeNo);
        if (found.kind === 'answered' && found.trade.kind === 'succeeded' && found.trade.amountMinor === request.amountMinor) {
          return found.trade.currency === request.currency.toUpperCase()
            ? {
                kind: 'succeeded',
                gatewayTradeNo: found.trade.gatewayTradeNo,
                amountMinor: found.trade.amountMinor,
                currency: found.trade.currency,
              }
            : { kind: 'indeterminate', code: 'idempotency_error', message: failure.message };
        }
        return { kind: 'indeterminate', code: 'idempotency_error', message: failure.message };
      }
      default:
        return assertNever(failure);
    }
  }

  /**
   * What one PaymentIntent means for a close: nothing to do, a payment to report, one to cancel, or a
   * state that may still move money and cannot be canceled (a card payment processing).
   */
  type IntentVerdict =
    { kind: 'final' } | { kind: 'paid'; trade: SucceededTrade } | { kind: 'cancel' } | { kind: 'in_doubt'; code: string; message: string };

  function closeVerdict(intent: Stripe.PaymentIntent): IntentVerdict {
    const status = knownStatus(intent);
    switch (status) {
      case 'canceled':
        return { kind: 'final' };
      case 'succeeded': {
        const trade = paidTrade(intent);
        return trade?.kind === 'succeeded'
          ? { kind: 'paid', trade: { gatewayTradeNo: trade.gatewayTradeNo, amountMinor: trade.amountMinor, currency: trade.currency } }
          : { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: `succeeded PaymentIntent ${intent.id} without amount_received` };
      }
      case 'requires_payment_method':
      case 'requires_confirmation':
      case 'requires_action':
      case 'requires_capture':
        // Payable (or, requires_capture, authorized): a cancel makes it refuse every later confirm,
        // and releases an authorization. A buyer mid-3-D Secure loses the race cleanly: Stripe
        // serializes the two, so the cancel either wins or is refused with the new status.
        return { kind: 'cancel' };
      case 'processing':
        // A card payment being processed cannot be canceled and may still succeed.
        return { kind: 'in_doubt', code: 'PAYMENT_PROCESSING', message: `PaymentIntent ${intent.id} is processing` };
      case 'unknown':
        return { kind: 'in_doubt', code: 'UNKNOWN_STATUS', message: `PaymentIntent ${intent.id} is ${intent.status}` };
      default:
        return assertNever(status);
    }
  }

  /**
   * Cancels one PaymentIntent. No Idempotency-Key of ours: a cancel is idempotent by the PaymentIntent's
   * own state (a second one is refused with the status `canceled`), and a stable key would pin a stored
   * 500 for 24 h; the SDK's own key still covers its retries within this call.
   */
  async function cancelIntent(intent: Stripe.PaymentIntent): Promise<IntentVerdict> {
    const canceled = await call(() => stripe.paymentIntents.cancel(intent.id, { cancellation_reason: 'abandoned' }));
    if (canceled.ok) {
      return canceled.value.status === 'canceled'
        ? { kind: 'final' }
        : { kind: 'in_doubt', code: 'NOT_CANCELED', message: `PaymentIntent ${intent.id} is ${canceled.value.status} after cancel` };
    }
    const failure = canceled.failure;
    switch (failure.kind) {
      case 'invalid_request': {
        // payment_intent_unexpected_state: it moved on before our cancel (the buyer paid, or another
        // close got there first). The refusal carries its current state; judge that instead.
        if (failure.code === 'payment_intent_unexpected_state' && failure.intent) {
          const now = closeVerdict(failure.intent);
          return now.kind === 'cancel' ? { kind: 'in_doubt', code: failure.code, message: failure.message } : now;
        }
        return { kind: 'in_doubt', code: failure.code, message: failure.message };
      }
      case 'card_declined':
      case 'not_processed':
      case 'in_doubt':
        return { kind: 'in_doubt', code: failure.code, message: failure.message };
      case 'idempotency_conflict':
        return { kind: 'in_doubt', code: 'idempotency_error', message: failure.message };
      default:
        return assertNever(failure);
    }
  }

  async function close(request: CloseRequest): Promise<CloseOutcome> {
    // The same look-up as query(): search plus the strongly consistent list of the recent window.
    const found = await findIntents(request.outTradeNo, MAX_RECENT_PAGES, {}, request.openedAt);
    if (!found.ok) return { kind: 'indeterminate', ...failureMessage(found.failure) };
    const paid: SucceededTrade[] = [];
    let doubt: { code: string; message: string } | undefined;
    for (const intent of oldestFirst(found.value.intents)) {
      let verdict = closeVerdict(intent);
      if (verdict.kind === 'cancel') verdict = await cancelIntent(intent);
      switch (verdict.kind) {
        case 'final':
          break;
        case 'paid':
          paid.push(verdict.trade);
          break;
        case 'cancel':
          // cancelIntent never answers "cancel"; treated as in doubt should it ever do.
          doubt ??= { code: 'NOT_CANCELED', message: `PaymentIntent ${intent.id} is still open` };
          break;
        case 'in_doubt':
          doubt ??= { code: verdict.code, message: verdict.message };
          break;
        default:
          assertNever(verdict);
      }
    }
    // Whatever was found has been canceled; anything the look-up could not reach may still be open.
    if (!found.value.complete) {
      return {
        kind: 'indeterminate',
        code: 'SEARCH_INCOMPLETE',
        message: 'too many recent PaymentIntents to rule out one search does not show yet',
      };
    }
    if (doubt) return { kind: 'indeterminate', ...doubt };
    return paid.length > 0 ? { kind: 'already_paid', charges: paid } : { kind: 'closed' };
  }

  /** Finds a refund by PayOnce's refundId among the PaymentIntent's refunds (metadata.refund_id). */
  async function queryRefund(request: RefundQuery): Promise<RefundQueryOutcome> {
    let startingAfter: string | undefined;
    for (let page = 0; page < MAX_REFUND_PAGES; page += 1) {
      const listed = await call(() =>
        stripe.refunds.list({
          payment_intent: request.gatewayTradeNo,
          limit: 100,
          ...(startingAfter ? { starting_after: startingAfter } : {}),
        }),
      );
      if (!listed.ok) {
        const failure = listed.failure;
        // No such PaymentIntent: Stripe positively says it holds no refund of it.
        if (failure.kind === 'invalid_request' && failure.code === 'resource_missing')
          return { kind: 'answered', refund: { kind: 'not_found' } };
        return { kind: 'unavailable', ...failureMessage(failure) };
      }
      const mine = listed.value.data.filter((refund) => refund.metadata?.refund_id === request.refundId);
      // Two Stripe refunds under one refundId would be a bug upstream; the one that moved money wins.
      const best = mine.find((r) => r.status === 'succeeded') ?? mine.find((r) => r.status === 'pending') ?? mine[0];
      if (best) return { kind: 'answered', refund: refundStatusOf(best) };
      startingAfter = listed.value.data.at(-1)?.id;
      if (!listed.value.has_more || !startingAfter) return { kind: 'answered', refund: { kind: 'not_found' } };
    }
    return {
      kind: 'unavailable',
      code: 'REFUND_LIST_INCOMPLETE',
      message: `more than ${MAX_REFUND_PAGES * 100} refunds of ${request.gatewayTradeNo}`,
    };
  }

  async function refund(request: RefundRequest): Promise<RefundOutcome> {
    // Checked before any call: programming errors that Stripe would refuse anyway.
    if (!REFUND_ID_PATTERN.test(request.refundId)) {
      return {
        kind: 'failed',
        code: 'INVALID_REFUND_ID',
        message: `refundId must be 1-32 letters or digits, got ${JSON.stringify(request.refundId)}`,
      };
    }
    if (!Number.isSafeInteger(request.amountMinor) || request.amountMinor < 1 || request.amountMinor > MAX_AMOUNT) {
      return { kind: 'failed', code: 'INVALID_AMOUNT', message: `amount must be 1 … ${MAX_AMOUNT} in minor units` };
    }
    if (!/^pi_[A-Za-z0-9]+$/.test(request.gatewayTradeNo)) {
      return { kind: 'failed', code: 'INVALID_GATEWAY_TRADE_NO', message: `not a PaymentIntent id: ${request.gatewayTradeNo}` };
    }
    // Stripe's only refund deduplication is the Idempotency-Key, and it is pruned after 24 h: past that
    // the same refundId would refund again while money is left. So look for it first (metadata.refund_id);
    // a look-up that fails leaves it to the key, which covers every repeat within the day.
    const earlier = await queryRefund({
      outTradeNo: request.outTradeNo,
      gatewayTradeNo: request.gatewayTradeNo,
      refundId: request.refundId,
    });
    if (earlier.kind === 'answered') {
      const seen = earlier.refund;
      switch (seen.kind) {
        case 'succeeded':
          return { kind: 'succeeded', gatewayRefundId: seen.gatewayRefundId, amountMinor: seen.amountMinor };
        case 'pending':
          return { kind: 'pending', gatewayRefundId: null };
        case 'failed':
          return { kind: 'failed', code: seen.code, message: seen.message };
        case 'not_found':
          break;
        default:
          assertNever(seen);
      }
    }
    // The key derives from refundId (never the SDK's random one): a retry of this refund — after a lost
    // answer, a crash, or concurrently — replays the first answer instead of refunding again.
    const idempotencyKey = `payonce-refund-${request.refundId}`;
    const created = await call(() =>
      stripe.refunds.create(
        {
          payment_intent: request.gatewayTradeNo,
          amount: request.amountMinor,
          reason: stripeRefundReason(request.reason),
          metadata: {
            refund_id: request.refundId,
            out_trade_no: request.outTradeNo,
            ...(request.reason ? { reason: request.reason.slice(0, METADATA_MAX_VALUE_LENGTH) } : {}),
          },
        },
        { idempotencyKey },
      ),
    );
    if (created.ok) {
      const refunded = created.value;
      if (refunded.amount !== request.amountMinor || refunded.payment_intent !== request.gatewayTradeNo) {
        return {
          kind: 'indeterminate',
          code: 'REFUND_MISMATCH',
          message: `Refund ${refunded.id} is ${refunded.amount} of ${String(refunded.payment_intent)}, asked ${request.amountMinor} of ${request.gatewayTradeNo}`,
        };
      }
      const status = refundStatusOf(refunded);
      switch (status.kind) {
        case 'succeeded':
          return { kind: 'succeeded', gatewayRefundId: refunded.id, amountMinor: refunded.amount };
        case 'pending':
          return { kind: 'pending', gatewayRefundId: refunded.id };
        case 'failed':
          return { kind: 'failed', code: status.code, message: status.message };
        case 'not_found':
          return { kind: 'indeterminate', code: 'REFUND_NOT_FOUND', message: 'Stripe answered without a refund' };
        default:
          return assertNever(status);
      }
    }

    const failure = created.failure;
    switch (failure.kind) {
      case 'invalid_request': {
        // amount_too_large / charge_already_refunded can also mean THIS refund already went through
        // and its key was pruned (> 24 h), so the retry ran anew on a refunded charge: look first.
        if (failure.code === 'amount_too_large' || failure.code === 'charge_already_refunded') {
          const earlier = await queryRefund({
            outTradeNo: request.outTradeNo,
            gatewayTradeNo: request.gatewayTradeNo,
            refundId: request.refundId,
          });
          if (earlier.kind === 'unavailable')
            return {
              kind: 'indeterminate',
              code: failure.code,
              message: `${failure.message} (and the look-up failed: ${earlier.message})`,
            };
          const seen = earlier.refund;
          if (seen.kind === 'succeeded') return { kind: 'succeeded', gatewayRefundId: seen.gatewayRefundId, amountMinor: seen.amountMinor };
          if (seen.kind === 'pending') return { kind: 'pending', gatewayRefundId: null };
        }
        // Exceeds the charge, unpaid PaymentIntent, unknown PaymentIntent (404): refused for good.
        return { kind: 'failed', code: failure.code, message: failure.message };
      }
      case 'card_declined':
        return { kind: 'failed', code: failure.code, message: failure.message };
      case 'not_processed':
        return { kind: 'retryable', code: failure.code, message: failure.message };
      case 'in_doubt':
        return { kind: 'indeterminate', code: failure.code, message: failure.message };
      case 'idempotency_conflict':
        // This refundId already ran with other parameters (another amount or PaymentIntent): what it
        // did is only known from queryRefund, and repeating it cannot help.
        return { kind: 'indeterminate', code: 'idempotency_error', message: failure.message };
      default:
        return assertNever(failure);
    }
  }

  async function verifyNotification(request: { headers: Headers; rawBody: string }): Promise<NotificationVerdict> {
    const header = request.headers.get('stripe-signature');
    if (!header) return { kind: 'rejected', reason: 'missing Stripe-Signature header' };
    let event: Stripe.Event;
    try {
      event = stripe.webhooks.constructEvent(request.rawBody, header, config.webhookSecret, WEBHOOK_TOLERANCE_SECONDS);
    } catch (err) {
      if (err instanceof Stripe.errors.StripeSignatureVerificationError) {
        return { kind: 'rejected', reason: `invalid signature: ${err.message.split('\n')[0] ?? ''}` };
      }
      return { kind: 'rejected', reason: `unreadable event: ${err instanceof Error ? err.message : String(err)}` };
    }
    // The SDK bounds only the past. A signature dated in the future is no more Stripe's than a stale
    // one: someone holding a leaked secret could mint events that stay "fresh" for as long as they
    // like. The same window, the other way (the signature itself is valid, so `t` is Stripe's).
    const signedAt = Number(/(?:^|,)\s*t=(\d{1,12})(?:,|$)/.exec(header)?.[1]);
    if (!Number.isFinite(signedAt) || signedAt - Date.now() / 1000 > WEBHOOK_TOLERANCE_SECONDS) {
      return { kind: 'rejected', reason: `signature timestamp ${signedAt} is more than ${WEBHOOK_TOLERANCE_SECONDS} s in the future` };
    }

    // Signed by Stripe from here on; what follows only checks the event is one we can read.
    if (typeof event.id !== 'string' || event.id === '') return { kind: 'rejected', reason: 'event without id' };
    const merchantId = config.accountId;
    if (typeof event.account === 'string' && event.account !== '' && event.account !== config.accountId) {
      // Another account's event (an endpoint that also receives connected accounts' events): none of
      // its PaymentIntents or refunds is ours, whatever its metadata says. Acknowledged and ignored —
      // refusing it would only make Stripe retry it for three days and then disable the endpoint.
      return { kind: 'verified', notification: ignoredNotification(event.id) };
    }
    const object: unknown = event.data?.object;
    if (typeof object === 'object' && object !== null && (object as { object?: unknown }).object === 'refund') {
      return refundNotification(event.id, merchantId, object as Stripe.Refund);
    }
    const intent =
      typeof object === 'object' && object !== null && (object as { object?: unknown }).object === 'payment_intent'
        ? (object as Stripe.PaymentIntent)
        : undefined;
    const outTradeNo = intent?.metadata?.out_trade_no;
    if (!intent || typeof outTradeNo !== 'string' || outTradeNo === '') {
      // Not about one of our orders (another event type, a PaymentIntent made elsewhere): acknowledged
      // and ignored, or Stripe would retry it for three days and then disable the endpoint.
      return {
        kind: 'verified',
        notification: {
          gateway: 'stripe',
          eventId: event.id,
          merchantId,
          outTradeNo: typeof outTradeNo === 'string' ? outTradeNo : '',
          status: 'other',
          gatewayTradeNo: intent?.id ?? '',
          amountMinor: 0,
          currency: '',
        },
      };
    }
    const succeeded = event.type === 'payment_intent.succeeded';
    const amountMinor: unknown = succeeded ? intent.amount_received : intent.amount;
    if (typeof amountMinor !== 'number' || !Number.isSafeInteger(amountMinor) || amountMinor < 0) {
      return { kind: 'rejected', reason: `invalid amount ${JSON.stringify(amountMinor)}` };
    }
    if (typeof intent.currency !== 'string' || !/^[a-z]{3}$/i.test(intent.currency)) {
      return { kind: 'rejected', reason: `invalid currency ${JSON.stringify(intent.currency)}` };
    }
    return {
      kind: 'verified',
      notification: {
        gateway: 'stripe',
        // design.md §5: webhook:stripe:{event id}. Stripe keeps the id across retries of one event.
        eventId: event.id,
        merchantId,
        outTradeNo,
        status: succeeded && intent.status === 'succeeded' ? 'succeeded' : 'other',
        gatewayTradeNo: intent.id,
        amountMinor,
        currency: intent.currency.toUpperCase(),
      },
    };
  }

  /** An event that is not about one of our orders: acknowledged so Stripe stops sending it, settles nothing. */
  function ignoredNotification(eventId: string): PaymentNotification {
    return {
      gateway: 'stripe',
      eventId,
      merchantId: config.accountId,
      outTradeNo: '',
      status: 'other',
      gatewayTradeNo: '',
      amountMinor: 0,
      currency: '',
    };
  }

  /**
   * refund.created / refund.updated (and the legacy charge.refund.updated): every event whose object is
   * a Refund. Its refund_id is PayOnce's own (metadata.refund_id, set by refund()); a Refund without one
   * was made elsewhere (the Dashboard, another integration) and is reported as `other`.
   * `charge.refunded` carries the Charge, not the Refund: it stays an ignored `other` payment
   * notification — the refund.* event of the same refund says everything it does.
   */
  function refundNotification(eventId: string, merchantId: string, refund: Stripe.Refund): NotificationVerdict {
    const refundId = refund.metadata?.refund_id;
    const outTradeNo = refund.metadata?.out_trade_no;
    const ours = typeof refundId === 'string' && refundId !== '';
    if (typeof refund.id !== 'string' || refund.id === '') return { kind: 'rejected', reason: 'refund without id' };
    if (ours && (typeof refund.amount !== 'number' || !Number.isSafeInteger(refund.amount) || refund.amount < 0)) {
      return { kind: 'rejected', reason: `invalid refund amount ${JSON.stringify(refund.amount)}` };
    }
    if (ours && (typeof refund.currency !== 'string' || !/^[a-z]{3}$/i.test(refund.currency))) {
      return { kind: 'rejected', reason: `invalid refund currency ${JSON.stringify(refund.currency)}` };
    }
    let status: 'succeeded' | 'failed' | 'other' = 'other';
    if (ours) {
      const known = knownRefundStatus(refund);
      switch (known) {
        case 'succeeded':
          status = 'succeeded';
          break;
        case 'failed':
        case 'canceled':
          status = 'failed';
          break;
        case 'pending':
        case 'requires_action':
        case 'unknown':
          status = 'other';
          break;
        default:
          assertNever(known);
      }
    }
    return {
      kind: 'refund',
      notification: {
        gateway: 'stripe',
        eventId,
        merchantId,
        outTradeNo: typeof outTradeNo === 'string' ? outTradeNo : '',
        refundId: ours ? refundId : '',
        gatewayRefundId: refund.id,
        status,
        amountMinor: ours ? refund.amount : 0,
        currency: ours ? refund.currency.toUpperCase() : '',
      },
    };
  }

  function notificationReply(ack: boolean): NotificationReply {
    // Any 2xx stops Stripe's retries; anything else makes it deliver again on its schedule.
    return ack
      ? { status: 200, headers: { 'content-type': 'application/json' }, body: '{"received":true}' }
      : { status: 503, headers: { 'content-type': 'application/json' }, body: '{"received":false}' };
  }

  return {
    id: 'stripe',
    merchantId: config.accountId,
    // Every attempt is a PaymentIntent of its own: the previous one is closed before a new one opens.
    oneTradePerOrder: false,
    buyerSteps,
    hasTestBuyers: Object.values(config.testBuyers).some(Boolean),
    charge,
    query,
    close,
    refund,
    queryRefund,
    verifyNotification,
    notificationReply,
  };
}
