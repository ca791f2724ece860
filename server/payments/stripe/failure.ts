/**
 * A call to Stripe that brought no usable answer: why (the SDK's errors — one class per HTTP status,
 * transport failures wrapped — or an error status the SDK read as a resource), and what that means
 * for a charge, a refund or a refund look-up. Pure: whether an earlier try may have reached Stripe
 * is an argument (./call traces it).
 */
import Stripe from 'stripe';
import type { ChargeOutcome, RefundOutcome, RefundQueryOutcome } from '@/server/payments/gateway';
import { assertNever, chargeOrRefundFailure, connectionFailure, type TransportFailure } from '@/server/payments/transport';

/** 402: the card was declined; terminal for this attempt. */
export type CardDeclined = { kind: 'card_declined'; code: string; message: string };
/**
 * 400/404: Stripe refused the request itself; the same request would be refused again. `intent` is
 * the PaymentIntent a payment_intent_unexpected_state refusal carries (its current state).
 */
export type InvalidRequest = { kind: 'invalid_request'; code: string; message: string; intent?: Stripe.PaymentIntent };
/** 400 idempotency_error: this key was used with other parameters or on another endpoint. */
export type IdempotencyConflict = { kind: 'idempotency_conflict'; code: 'idempotency_error'; message: string };

/**
 * Why a call has no usable answer. A transport failure is `not_sent` when Stripe certainly did not
 * execute the request (refused connection, 429, 502/503, 401/403, and no earlier try got through) and
 * `in_doubt` when it may have (timeout, reset, 409 in use, 500/504, an unreadable answer).
 */
export type Failure = TransportFailure | CardDeclined | InvalidRequest | IdempotencyConflict;

export type Called<T> = { ok: true; value: T } | { ok: false; failure: Failure };

/** Answers that show the request was never executed: rate limited, or refused in front of Stripe. */
function provesNotProcessed(status: number): boolean {
  return status === 429 || status === 502 || status === 503;
}

/** Whether a try that got this HTTP status may have been executed: 409 (in use) or a 5xx that is not a refusal. */
export function statusMayHaveBeenProcessed(status: number): boolean {
  return status === 409 || (status >= 500 && !provesNotProcessed(status));
}

/**
 * An SDK error in the adapter's terms. `earlierTryMayHaveReached`: a try before the last one may have
 * reached Stripe, so even a "certainly not executed" last try leaves the call in doubt.
 */
export function classifyError(err: unknown, earlierTryMayHaveReached: boolean): Failure {
  const message = err instanceof Error ? err.message : String(err);
  const notProcessed = (code: string): Failure =>
    earlierTryMayHaveReached
      ? { kind: 'in_doubt', code: `${code}_AFTER_EARLIER_TRY`, message: `${message} (an earlier try may have reached Stripe)` }
      : { kind: 'not_sent', code, message };

  if (err instanceof Stripe.errors.StripeCardError) {
    return { kind: 'card_declined', code: err.decline_code || err.code || 'card_declined', message };
  }
  if (err instanceof Stripe.errors.StripeIdempotencyError) return { kind: 'idempotency_conflict', code: 'idempotency_error', message };
  if (err instanceof Stripe.errors.StripeInvalidRequestError) {
    const code = err.code ?? 'invalid_request_error';
    return { kind: 'invalid_request', code, message, ...(err.payment_intent ? { intent: err.payment_intent } : {}) };
  }
  if (err instanceof Stripe.errors.StripeRateLimitError) return notProcessed('rate_limit');
  if (err instanceof Stripe.errors.StripeAuthenticationError) return notProcessed('authentication_error');
  if (err instanceof Stripe.errors.StripePermissionError) return notProcessed('permission_error');
  if (err instanceof Stripe.errors.StripeConnectionError) {
    const { kind, code } = connectionFailure(err.detail, message, 'CONNECTION_ERROR');
    // ETIMEDOUT, ECONNRESET, a body cut short: the request may have been executed.
    return kind === 'not_sent' ? notProcessed(code) : { kind: 'in_doubt', code, message };
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

/**
 * The SDK resolves an error status whose body has no `error` object (a proxy's or load balancer's
 * page) as if it were the resource: an answer that says nothing about the request. Undefined when
 * the status is a success.
 */
export function classifyBareStatus(status: number, mayHaveBeenProcessed: boolean): Failure | undefined {
  if (status < 300) return undefined;
  const message = `HTTP ${status} without a Stripe error body`;
  const kind = provesNotProcessed(status) && !mayHaveBeenProcessed ? 'not_sent' : 'in_doubt';
  return { kind, code: `HTTP_${status}`, message };
}

// ---------------------------------------------------------------------------------------------
// What a failure means for each operation

/** A replayed card-step PaymentIntent that could not be read again: it exists and may have been paid since. */
export function classifyUnreadReplay(intentId: string, failure: Failure): ChargeOutcome {
  return { kind: 'indeterminate', code: failure.code, message: `PaymentIntent ${intentId} could not be read again: ${failure.message}` };
}

/** A failed create, except an idempotency conflict (which only the order's PaymentIntents can settle). */
export function classifyChargeFailure(failure: Exclude<Failure, IdempotencyConflict>): ChargeOutcome {
  switch (failure.kind) {
    case 'card_declined':
    case 'invalid_request':
      return { kind: 'declined', code: failure.code, message: failure.message };
    case 'not_sent':
    case 'in_doubt':
      return chargeOrRefundFailure(failure);
    default:
      return assertNever(failure);
  }
}

/** A failed list of a PaymentIntent's refunds. No such PaymentIntent: Stripe positively holds no refund of it. */
export function classifyRefundListFailure(failure: Failure): RefundQueryOutcome {
  if (failure.kind === 'invalid_request' && failure.code === 'resource_missing') return { kind: 'answered', refund: { kind: 'not_found' } };
  return { kind: 'unavailable', code: failure.code, message: failure.message };
}

/**
 * amount_too_large / charge_already_refunded can also mean THIS refund already went through and its
 * key was pruned (> 24 h), so the retry ran anew on a refunded charge: such a refusal is looked up.
 */
export function refusalMayBeThisRefund(failure: Failure): boolean {
  return failure.kind === 'invalid_request' && (failure.code === 'amount_too_large' || failure.code === 'charge_already_refunded');
}

/** A failed refund create; `lookedUp`: what queryRefund found after a refusal refusalMayBeThisRefund names. */
export function classifyRefundFailure(failure: Failure, lookedUp?: RefundQueryOutcome): RefundOutcome {
  switch (failure.kind) {
    case 'invalid_request':
      return classifyRefundRefusal(failure, lookedUp);
    case 'card_declined':
      return { kind: 'failed', code: failure.code, message: failure.message };
    case 'not_sent':
    case 'in_doubt':
      return chargeOrRefundFailure(failure);
    case 'idempotency_conflict':
      // This refundId already ran with other parameters (another amount or PaymentIntent): what it
      // did is only known from queryRefund, and repeating it cannot help.
      return { kind: 'indeterminate', code: failure.code, message: failure.message };
    default:
      return assertNever(failure);
  }
}

function classifyRefundRefusal(failure: InvalidRequest, lookedUp: RefundQueryOutcome | undefined): RefundOutcome {
  if (lookedUp?.kind === 'unavailable') {
    return { kind: 'indeterminate', code: failure.code, message: `${failure.message} (and the look-up failed: ${lookedUp.message})` };
  }
  const seen = lookedUp?.refund;
  if (seen?.kind === 'succeeded') return { kind: 'succeeded', gatewayRefundId: seen.gatewayRefundId, amountMinor: seen.amountMinor };
  if (seen?.kind === 'pending') return { kind: 'pending', gatewayRefundId: null };
  // Exceeds the charge, unpaid PaymentIntent, unknown PaymentIntent (404): refused for good.
  return { kind: 'failed', code: failure.code, message: failure.message };
}
