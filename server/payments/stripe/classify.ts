/**
 * What Stripe's answers mean, in PayOnce's closed sets of outcomes: pure functions from a parsed
 * answer (a PaymentIntent, a Refund, a verified Event) to an outcome or a verdict. A call that
 * brought no answer is ./failure's. Nothing here calls Stripe, reads the clock or the configuration.
 */
import type Stripe from 'stripe';
import type {
  ChargeOutcome,
  ChargeRequest,
  CloseOutcome,
  NotificationVerdict,
  PaymentNotification,
  QueryOutcome,
  RefundOutcome,
  RefundQueryOutcome,
  RefundRequest,
  RefundStatus,
  SucceededTrade,
  TradeStatus,
} from '@/server/payments/gateway';
import { assertNever, refundOutcomeOf } from '@/server/payments/transport';
import type { CardStepConfig } from './config';
import type { Called } from './failure';

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

/** The oldest first: when an order was (wrongly) charged twice, its first payment is the one we report. */
export function oldestFirst(intents: readonly Stripe.PaymentIntent[]): Stripe.PaymentIntent[] {
  return [...intents].sort((a, b) => a.created - b.created || a.id.localeCompare(b.id));
}

function paidTrade(intent: Stripe.PaymentIntent): SucceededTrade | undefined {
  const amountMinor = intent.amount_received;
  if (!Number.isSafeInteger(amountMinor) || amountMinor <= 0) return undefined;
  return { gatewayTradeNo: intent.id, amountMinor, currency: intent.currency.toUpperCase() };
}

/** An authorisation: what the PaymentIntent holds (capture_method manual, requires_capture). */
function heldTrade(intent: Stripe.PaymentIntent): SucceededTrade {
  return { gatewayTradeNo: intent.id, amountMinor: intent.amount, currency: intent.currency.toUpperCase() };
}

const stateOf = (intent: Stripe.PaymentIntent) => `PaymentIntent ${intent.id} is ${intent.status}`;

/** A charge's PaymentIntent, as create answered it (or replayed it). */
export function classifyPay(intent: Stripe.PaymentIntent, request: ChargeRequest): ChargeOutcome {
  const status = knownStatus(intent);
  switch (status) {
    case 'succeeded': {
      if (intent.amount_received !== request.amountMinor || intent.currency !== request.currency.toLowerCase()) {
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
        return { kind: 'declined', code: error.decline_code || error.code || 'payment_failed', message: error.message ?? 'payment failed' };
      return { kind: 'indeterminate', code: 'REQUIRES_PAYMENT_METHOD', message: `PaymentIntent ${intent.id} was not confirmed` };
    }
    case 'canceled':
      return { kind: 'declined', code: 'payment_intent_canceled', message: stateOf(intent) };
    case 'requires_capture':
      // capture_method manual: the whole amount is held for the order, nothing taken yet.
      if (intent.amount !== request.amountMinor || intent.currency !== request.currency.toLowerCase()) {
        return {
          kind: 'indeterminate',
          code: 'AMOUNT_MISMATCH',
          message: `PaymentIntent ${intent.id} holds ${intent.amount} ${intent.currency}, asked ${request.amountMinor} ${request.currency}`,
        };
      }
      return { kind: 'authorized', gatewayTradeNo: intent.id, amountMinor: intent.amount, currency: request.currency.toUpperCase() };
    case 'requires_action':
    case 'requires_confirmation':
    case 'processing':
      // Settled later by the webhook or a query, never by guessing.
      return { kind: 'indeterminate', code: status, message: stateOf(intent) };
    case 'unknown':
      return { kind: 'indeterminate', code: 'UNKNOWN_STATUS', message: stateOf(intent) };
    default:
      return assertNever(status);
  }
}

/**
 * The card step's PaymentIntent (as it is now): open for the buyer's card, so the page confirms it
 * with Stripe.js, or already past that and read as a charge's answer.
 */
export function classifyCardStep(intent: Stripe.PaymentIntent, request: ChargeRequest, cardStep: CardStepConfig): ChargeOutcome {
  const status = knownStatus(intent);
  switch (status) {
    case 'requires_payment_method':
    case 'requires_confirmation':
    case 'requires_action': {
      // Waiting for the buyer, after a declined card too: Stripe keeps the PaymentIntent payable and
      // the buyer may try another card on the same page. requires_action is the buyer mid-3-D Secure.
      const clientSecret = intent.client_secret;
      if (!clientSecret)
        return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: `PaymentIntent ${intent.id} without client_secret` };
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
      return classifyPay(intent, request);
    default:
      return assertNever(status);
  }
}

/**
 * The before-charge look-up: a PaymentIntent of this order that already succeeded is the charge's
 * answer (read like create's, so another amount is a mismatch), one that may still move money makes
 * it indeterminate; undefined lets the charge go ahead.
 */
export function classifyEarlierIntents(intents: readonly Stripe.PaymentIntent[], request: ChargeRequest): ChargeOutcome | undefined {
  const ordered = oldestFirst(intents);
  const paid = ordered.find((intent) => intent.status === 'succeeded' || intent.status === 'requires_capture');
  if (paid) return classifyPay(paid, request);
  const busy = ordered.find((intent) => intent.status === 'processing');
  if (busy) return { kind: 'indeterminate', code: `PAYMENT_${busy.status.toUpperCase()}`, message: stateOf(busy) };
  return undefined;
}

/** A query's answer from a succeeded trade in another currency: not the charge that was asked for. */
export function inCurrency(found: QueryOutcome, currency: string): QueryOutcome {
  if (found.kind !== 'answered' || found.trade.kind !== 'succeeded' || found.trade.currency === currency) return found;
  const { gatewayTradeNo, currency: paidIn } = found.trade;
  return {
    kind: 'unavailable',
    code: 'CURRENCY_MISMATCH',
    message: `PaymentIntent ${gatewayTradeNo} was paid in ${paidIn}, asked ${currency}`,
  };
}

const SEARCH_INCOMPLETE = {
  code: 'SEARCH_INCOMPLETE',
  message: 'too many recent PaymentIntents to rule out one search does not show yet',
} as const;

/**
 * Every PaymentIntent of one order as a query's answer. `complete` is false when the look-up could
 * not read the whole recent window: then "not found" cannot be said.
 */
export function classifyTrade(intents: readonly Stripe.PaymentIntent[], complete: boolean): QueryOutcome {
  const ordered = oldestFirst(intents);
  const paid = ordered.find((intent) => intent.status === 'succeeded');
  if (paid) {
    const trade = paidTrade(paid);
    return trade
      ? { kind: 'answered', trade: { kind: 'succeeded', ...trade } }
      : { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: `succeeded PaymentIntent ${paid.id} without amount_received` };
  }
  const held = ordered.find((intent) => intent.status === 'requires_capture');
  if (held) return { kind: 'answered', trade: { kind: 'authorized', ...heldTrade(held) } };
  // Anything short of a payment found is an answer only when every PaymentIntent was read: a paid one
  // in the unread part would otherwise let the reconciler reopen the order for a second payment.
  if (!complete) return { kind: 'unavailable', ...SEARCH_INCOMPLETE };
  if (intents.length === 0) return { kind: 'answered', trade: { kind: 'not_found' } };
  let open = false;
  for (const intent of ordered) {
    const state = unpaidState(intent);
    if (state.kind === 'unavailable') return state;
    open ||= state.kind === 'open';
  }
  const trade: TradeStatus = open ? { kind: 'pending' } : { kind: 'closed' };
  return { kind: 'answered', trade };
}

/**
 * What each PaymentIntent status says of an order that has no succeeded one: still payable, final,
 * or in motion — money may still move (a bank confirms, a capture, the buyer finishing 3-D Secure),
 * which is no answer the reconciler may reopen the order on: ask again later.
 */
const UNPAID_STATES = {
  requires_payment_method: 'open',
  requires_confirmation: 'open',
  canceled: 'final',
  succeeded: 'final',
  processing: 'in_motion',
  requires_capture: 'in_motion',
  requires_action: 'in_motion',
  unknown: 'unknown',
} as const satisfies Record<KnownStatus | 'unknown', 'open' | 'final' | 'in_motion' | 'unknown'>;

/** One PaymentIntent of an order that has no succeeded one: still payable, final, or in motion. */
function unpaidState(intent: Stripe.PaymentIntent): { kind: 'open' | 'final' } | { kind: 'unavailable'; code: string; message: string } {
  const status = knownStatus(intent);
  const state = UNPAID_STATES[status];
  if (state === 'open' || state === 'final') return { kind: state };
  const code = state === 'unknown' ? 'UNKNOWN_STATUS' : `PAYMENT_${status.toUpperCase()}`;
  return { kind: 'unavailable', code, message: stateOf(intent) };
}

// ---------------------------------------------------------------------------------------------
// Closing

/** What one PaymentIntent means for a close once nothing more is to be done to it. */
export type Settled = { kind: 'final' } | { kind: 'paid'; trade: SucceededTrade } | { kind: 'in_doubt'; code: string; message: string };

/** Settled, or one to cancel (payable, or authorized and not captured). */
export type IntentVerdict = Settled | { kind: 'cancel' };

export function closeVerdict(intent: Stripe.PaymentIntent): IntentVerdict {
  const status = knownStatus(intent);
  switch (status) {
    case 'canceled':
      return { kind: 'final' };
    case 'succeeded': {
      const trade = paidTrade(intent);
      return trade
        ? { kind: 'paid', trade }
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
      return { kind: 'in_doubt', code: 'UNKNOWN_STATUS', message: stateOf(intent) };
    default:
      return assertNever(status);
  }
}

/** The answer to one cancel of the PaymentIntent `intentId`. */
export function classifyCancel(intentId: string, canceled: Called<Stripe.PaymentIntent>): Settled {
  if (canceled.ok) {
    const { status } = canceled.value;
    return status === 'canceled'
      ? { kind: 'final' }
      : { kind: 'in_doubt', code: 'NOT_CANCELED', message: `PaymentIntent ${intentId} is ${status} after cancel` };
  }
  const failure = canceled.failure;
  // payment_intent_unexpected_state: it moved on before our cancel (the buyer paid, or another close
  // got there first). The refusal carries its current state; judge that instead.
  if (failure.kind === 'invalid_request' && failure.code === 'payment_intent_unexpected_state' && failure.intent) {
    const now = closeVerdict(failure.intent);
    if (now.kind !== 'cancel') return now;
  }
  return { kind: 'in_doubt', code: failure.code, message: failure.message };
}

/**
 * A close of every PaymentIntent of one order, oldest first: any doubt makes it indeterminate (the
 * first one found is reported), else the payments found are reported, else it is closed.
 */
export function classifyClose(settled: readonly Settled[], complete: boolean): CloseOutcome {
  // Whatever was found has been canceled; anything the look-up could not reach may still be open.
  if (!complete) return { kind: 'indeterminate', ...SEARCH_INCOMPLETE };
  const doubt = settled.find((verdict) => verdict.kind === 'in_doubt');
  if (doubt) return { kind: 'indeterminate', code: doubt.code, message: doubt.message };
  const charges = settled.flatMap((verdict) => (verdict.kind === 'paid' ? [verdict.trade] : []));
  return charges.length > 0 ? { kind: 'already_paid', charges } : { kind: 'closed' };
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
export function classifyRefundStatus(refund: Stripe.Refund): RefundStatus {
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

/** PayOnce's refund among one page of a PaymentIntent's refunds (metadata.refund_id). */
export function findRefundIn(refunds: readonly Stripe.Refund[], refundId: string): Stripe.Refund | undefined {
  const mine = refunds.filter((refund) => refund.metadata?.refund_id === refundId);
  // Two Stripe refunds under one refundId would be a bug upstream; the one that moved money wins.
  return mine.find((r) => r.status === 'succeeded') ?? mine.find((r) => r.status === 'pending') ?? mine[0];
}

/** The look-up before a refund: the refund's outcome when this refundId already ran, else undefined. */
export function classifyEarlierRefund(earlier: RefundQueryOutcome): RefundOutcome | undefined {
  if (earlier.kind === 'unavailable') return undefined;
  const seen = earlier.refund;
  switch (seen.kind) {
    case 'succeeded':
      return { kind: 'succeeded', gatewayRefundId: seen.gatewayRefundId, amountMinor: seen.amountMinor };
    case 'pending':
      return { kind: 'pending', gatewayRefundId: null };
    case 'failed':
      return { kind: 'failed', code: seen.code, message: seen.message };
    case 'not_found':
      return undefined;
    default:
      return assertNever(seen);
  }
}

/** The Refund create answered: the asked refund of the asked PaymentIntent, or in doubt. */
export function classifyRefund(refunded: Stripe.Refund, request: RefundRequest): RefundOutcome {
  if (refunded.amount !== request.amountMinor || refunded.payment_intent !== request.gatewayTradeNo) {
    return {
      kind: 'indeterminate',
      code: 'REFUND_MISMATCH',
      message: `Refund ${refunded.id} is ${refunded.amount} of ${String(refunded.payment_intent)}, asked ${request.amountMinor} of ${request.gatewayTradeNo}`,
    };
  }
  return refundOutcomeOf(classifyRefundStatus(refunded), refunded.id, {
    code: 'REFUND_NOT_FOUND',
    message: 'Stripe answered without a refund',
  });
}

// ---------------------------------------------------------------------------------------------
// Notifications (a verified Event)

const CURRENCY = /^[a-z]{3}$/i;
const isObject = (value: unknown): value is { object?: unknown } => typeof value === 'object' && value !== null;
const isAmount = (value: unknown): value is number => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;

/** An event that is not about one of our orders: acknowledged so Stripe stops sending it, settles nothing. */
function ignoredNotification(eventId: string, merchantId: string, outTradeNo = '', gatewayTradeNo = ''): PaymentNotification {
  return { gateway: 'stripe', eventId, merchantId, outTradeNo, status: 'other', gatewayTradeNo, amountMinor: 0, currency: '' };
}

/** A verified Event of the account `accountId` in PayOnce's terms. */
export function classifyEvent(event: Stripe.Event, accountId: string): NotificationVerdict {
  if (typeof event.id !== 'string' || event.id === '') return { kind: 'rejected', reason: 'event without id' };
  if (typeof event.account === 'string' && event.account !== '' && event.account !== accountId) {
    // Another account's event (an endpoint that also receives connected accounts' events): none of
    // its PaymentIntents or refunds is ours, whatever its metadata says. Acknowledged and ignored —
    // refusing it would only make Stripe retry it for three days and then disable the endpoint.
    return { kind: 'verified', notification: ignoredNotification(event.id, accountId) };
  }
  const object: unknown = event.data?.object;
  if (isObject(object) && object.object === 'refund') return classifyRefundEvent(event.id, accountId, object as Stripe.Refund);
  const intent = isObject(object) && object.object === 'payment_intent' ? (object as Stripe.PaymentIntent) : undefined;
  const outTradeNo = intent?.metadata?.out_trade_no;
  if (!intent || typeof outTradeNo !== 'string' || outTradeNo === '') {
    // Not about one of our orders (another event type, a PaymentIntent made elsewhere): acknowledged
    // and ignored, or Stripe would retry it for three days and then disable the endpoint.
    const notification = ignoredNotification(event.id, accountId, typeof outTradeNo === 'string' ? outTradeNo : '', intent?.id ?? '');
    return { kind: 'verified', notification };
  }
  const status = eventStatus(event.type, intent);
  // The PaymentIntent's amount is what the order is for; a capture may have taken less.
  const amountMinor: unknown = intent.amount;
  if (!isAmount(amountMinor)) return { kind: 'rejected', reason: `invalid amount ${JSON.stringify(amountMinor)}` };
  const received: unknown = intent.amount_received;
  if (status === 'succeeded' && !isAmount(received))
    return { kind: 'rejected', reason: `invalid amount_received ${JSON.stringify(received)}` };
  if (typeof intent.currency !== 'string' || !CURRENCY.test(intent.currency)) {
    return { kind: 'rejected', reason: `invalid currency ${JSON.stringify(intent.currency)}` };
  }
  return {
    kind: 'verified',
    notification: {
      gateway: 'stripe',
      // design.md §5: webhook:stripe:{event id}. Stripe keeps the id across retries of one event.
      eventId: event.id,
      merchantId: accountId,
      outTradeNo,
      status,
      gatewayTradeNo: intent.id,
      amountMinor,
      ...(status === 'succeeded' && received !== amountMinor ? { capturedMinor: received as number } : {}),
      currency: intent.currency.toUpperCase(),
    },
  };
}

/**
 * Which of a PaymentIntent's events move an order, judged on the PaymentIntent as the API has it (the
 * handler re-fetched the event): succeeded takes the money (a payment, or the capture of an
 * authorisation); amount_capturable_updated holds it (capture_method manual); canceled releases a hold
 * (by us, or lapsed after seven days). Every other event is acknowledged and changes nothing.
 */
function eventStatus(type: string, intent: Stripe.PaymentIntent): PaymentNotification['status'] {
  if (type === 'payment_intent.succeeded' && intent.status === 'succeeded') return 'succeeded';
  if (type === 'payment_intent.amount_capturable_updated' && intent.status === 'requires_capture') return 'authorized';
  if (type === 'payment_intent.canceled' && intent.status === 'canceled') return 'canceled';
  return 'other';
}

/**
 * refund.created / refund.updated (and the legacy charge.refund.updated): every event whose object is
 * a Refund. Its refund_id is PayOnce's own (metadata.refund_id, set by refund()); a Refund without one
 * was made elsewhere (the Dashboard, another integration) and is reported as `other`.
 * `charge.refunded` carries the Charge, not the Refund: it stays an ignored `other` payment
 * notification — the refund.* event of the same refund says everything it does.
 */
function classifyRefundEvent(eventId: string, merchantId: string, refund: Stripe.Refund): NotificationVerdict {
  const refundId = refund.metadata?.refund_id;
  const outTradeNo = refund.metadata?.out_trade_no;
  const ours = typeof refundId === 'string' && refundId !== '';
  if (typeof refund.id !== 'string' || refund.id === '') return { kind: 'rejected', reason: 'refund without id' };
  if (ours && !isAmount(refund.amount)) return { kind: 'rejected', reason: `invalid refund amount ${JSON.stringify(refund.amount)}` };
  if (ours && (typeof refund.currency !== 'string' || !CURRENCY.test(refund.currency))) {
    return { kind: 'rejected', reason: `invalid refund currency ${JSON.stringify(refund.currency)}` };
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
      status: ours ? refundEventStatus(refund) : 'other',
      amountMinor: ours ? refund.amount : 0,
      currency: ours ? refund.currency.toUpperCase() : '',
    },
  };
}

function refundEventStatus(refund: Stripe.Refund): 'succeeded' | 'failed' | 'other' {
  const known = knownRefundStatus(refund);
  switch (known) {
    case 'succeeded':
      return 'succeeded';
    case 'failed':
    case 'canceled':
      return 'failed';
    case 'pending':
    case 'requires_action':
    case 'unknown':
      return 'other';
    default:
      return assertNever(known);
  }
}
