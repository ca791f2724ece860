/**
 * The Stripe adapter: a server-side card payment (`POST /v1/payment_intents` with confirm=true)
 * through the official stripe-node SDK, mapped onto PayOnce's closed set of outcomes (./gateway).
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
 *
 * No SDK type leaves this file.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import Stripe from 'stripe';
import type {
  ChargeOutcome,
  ChargeRequest,
  NotificationReply,
  NotificationVerdict,
  PaymentGateway,
  QueryOutcome,
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
  /** Per try; the SDK tries 1 + maxNetworkRetries times. Default 5000 ms. */
  timeoutMs?: number;
  /** Default 2, the SDK's own. */
  maxNetworkRetries?: number;
}

/** Stripe's ceiling for `amount`: eight digits in the smallest currency unit. */
const MAX_AMOUNT = 99_999_999;
const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** Stripe's webhook tolerance (and the SDK's default): a signature older than 5 minutes is refused. */
const WEBHOOK_TOLERANCE_SECONDS = 300;
/** Search can lag "up to an hour during outages": query() lists this window strongly consistently. */
const RECENT_WINDOW_SECONDS = 3600;
/** At most this many pages of 100 of that window; beyond it a "not found" cannot be trusted. */
const MAX_RECENT_PAGES = 5;
/** The before-charge "already paid" look-up is a best effort: short, and never retried. */
const GUARD_TIMEOUT_MS = 3000;

// ---------------------------------------------------------------------------------------------
// One call to Stripe

/** Connection failures that happen before a single byte of the request reaches Stripe. */
const NEVER_SENT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

/** Answers that show the request was never executed: rate limited, or refused in front of Stripe. */
function provesNotProcessed(status: number): boolean {
  return status === 429 || status === 502 || status === 503;
}

/** What the tries of one SDK call saw, across the SDK's own retries. */
interface CallTrace {
  mayHaveBeenProcessed: boolean;
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
          if (trace && (status === 409 || (status >= 500 && !provesNotProcessed(status)))) trace.mayHaveBeenProcessed = true;
          return response;
        },
        (error: unknown) => {
          const trace = currentCall.getStore();
          if (trace && !NEVER_SENT_CODES.has(errorCode(error) ?? '')) trace.mayHaveBeenProcessed = true;
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
  /** 400/404: Stripe refused the request itself; the same request would be refused again. */
  | { kind: 'invalid_request'; code: string; message: string }
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
    return { kind: 'invalid_request', code: err.code ?? 'invalid_request_error', message };
  }
  if (err instanceof Stripe.errors.StripeRateLimitError) return notProcessed('rate_limit');
  if (err instanceof Stripe.errors.StripeAuthenticationError) return notProcessed('authentication_error');
  if (err instanceof Stripe.errors.StripePermissionError) return notProcessed('permission_error');
  if (err instanceof Stripe.errors.StripeConnectionError) {
    const detail: unknown = err.detail;
    const code = errorCode(detail) ?? 'CONNECTION_ERROR';
    if (NEVER_SENT_CODES.has(code)) return notProcessed(code);
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
  | 'requires_payment_method'
  | 'requires_confirmation'
  | 'requires_action'
  | 'processing'
  | 'requires_capture'
  | 'canceled'
  | 'succeeded';

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

function assertNever(value: never): never {
  throw new Error(`unhandled case: ${JSON.stringify(value)}`);
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
// The gateway

export function createStripeGateway(config: StripeGatewayConfig): PaymentGateway {
  const stripe = new Stripe(config.secretKey, {
    ...(config.host !== undefined ? { host: config.host } : {}),
    ...(config.port !== undefined ? { port: config.port } : {}),
    ...(config.protocol !== undefined ? { protocol: config.protocol } : {}),
    maxNetworkRetries: config.maxNetworkRetries ?? 2,
    timeout: config.timeoutMs ?? 5000,
    httpClient: tracingHttpClient(),
  });

  async function call<T>(fn: () => Promise<T>): Promise<Called<T>> {
    const trace: CallTrace = { mayHaveBeenProcessed: false };
    try {
      return { ok: true, value: await currentCall.run(trace, fn) };
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
  ): Promise<Called<{ intents: Stripe.PaymentIntent[]; complete: boolean }>> {
    const searched = await call(() => stripe.paymentIntents.search({ query: outTradeNoQuery(outTradeNo), limit: 100 }, options));
    if (!searched.ok) return searched;
    const byId = new Map(searched.value.data.map((intent) => [intent.id, intent]));
    const since = Math.floor(Date.now() / 1000) - RECENT_WINDOW_SECONDS;
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
        : { kind: 'unavailable', code: 'SEARCH_INCOMPLETE', message: 'too many recent PaymentIntents to rule out one search does not show yet' };
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
        return { kind: 'succeeded', gatewayTradeNo: intent.id, amountMinor: intent.amount_received, currency: request.currency.toUpperCase() };
      }
      case 'requires_payment_method': {
        // With confirm=true Stripe answers a decline with a 402; a 200 in this state still carries it.
        const error = intent.last_payment_error;
        if (error) return { kind: 'declined', code: error.decline_code || error.code || 'payment_failed', message: error.message ?? 'payment failed' };
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
    const paymentMethod = config.testBuyers[request.buyer ?? 'ok'];
    if (!paymentMethod) return { kind: 'declined', code: 'NO_PAYMENT_METHOD', message: 'no payment method configured for this buyer' };
    const idempotencyKey = `payonce-${request.outTradeNo}-attempt-${request.attempt}`;
    if (idempotencyKey.length > MAX_IDEMPOTENCY_KEY_LENGTH) {
      return { kind: 'declined', code: 'INVALID_OUT_TRADE_NO', message: 'out_trade_no too long for an idempotency key' };
    }

    // "Already paid": a PaymentIntent of this order that succeeded (a lost answer, an expired key, an
    // attempt started by mistake). A best effort behind the order guard and the key — short, never
    // retried, one page of the recent list — that must not stand between the buyer and a working API.
    const earlier = await findIntents(request.outTradeNo, 1, {
      maxNetworkRetries: 0,
      timeout: Math.min(GUARD_TIMEOUT_MS, config.timeoutMs ?? 5000),
    });
    if (earlier.ok) {
      const intents = oldestFirst(earlier.value.intents);
      const paid = intents.find((intent) => intent.status === 'succeeded');
      if (paid) return outcomeOf(paid, request);
      const busy = intents.find((intent) => intent.status === 'processing' || intent.status === 'requires_capture');
      if (busy) return { kind: 'indeterminate', code: `PAYMENT_${busy.status.toUpperCase()}`, message: `PaymentIntent ${busy.id} is ${busy.status}` };
    }

    const created = await call(() =>
      stripe.paymentIntents.create(
        {
          amount: request.amountMinor,
          currency: request.currency.toLowerCase(),
          confirm: true,
          payment_method: paymentMethod,
          // Cards only, confirmed server-side: no redirect-based method, so no return_url. (Since API
          // version 2026-09-30 this replaces payment_method_types, which is now refused.)
          allowed_payment_method_types: ['card'],
          description: request.subject,
          metadata: {
            out_trade_no: request.outTradeNo,
            attempt: String(request.attempt),
            // The sandbox's stand-in for the Dashboard's webhook endpoint; real Stripe ignores it.
            notify_url: request.notifyUrl,
          },
        },
        { idempotencyKey },
      ),
    );
    if (created.ok) return outcomeOf(created.value, request);

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
            ? { kind: 'succeeded', gatewayTradeNo: found.trade.gatewayTradeNo, amountMinor: found.trade.amountMinor, currency: found.trade.currency }
            : { kind: 'indeterminate', code: 'idempotency_error', message: failure.message };
        }
        return { kind: 'indeterminate', code: 'idempotency_error', message: failure.message };
      }
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

    // Signed by Stripe from here on; what follows only checks the event is one we can read.
    if (typeof event.id !== 'string' || event.id === '') return { kind: 'rejected', reason: 'event without id' };
    const merchantId = typeof event.account === 'string' && event.account !== '' ? event.account : config.accountId;
    const object: unknown = event.data?.object;
    const intent = typeof object === 'object' && object !== null && (object as { object?: unknown }).object === 'payment_intent'
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

  function notificationReply(ack: boolean): NotificationReply {
    // Any 2xx stops Stripe's retries; anything else makes it deliver again on its schedule.
    return ack
      ? { status: 200, headers: { 'content-type': 'application/json' }, body: '{"received":true}' }
      : { status: 503, headers: { 'content-type': 'application/json' }, body: '{"received":false}' };
  }

  return {
    id: 'stripe',
    merchantId: config.accountId,
    charge,
    query,
    verifyNotification,
    notificationReply,
  };
}
