/**
 * Authorise, then capture, at Stripe: a PaymentIntent confirmed with capture_method manual waits in
 * requires_capture, and is captured (`POST /v1/payment_intents/{id}/capture`, all or part, once) or
 * canceled (the hold released). Stripe cancels it by itself when the authorisation lapses (7 days
 * for card payments).
 *
 * Exactly once: each capture carries the Idempotency-Key `payonce-capture-{captureId}`, so a retry of
 * the same capture replays its first answer; a capture by anyone else (another operator, another
 * captureId) meets a PaymentIntent that is no longer requires_capture, and Stripe's refusal carries
 * the PaymentIntent as it is — succeeded (the money taken, amount_received) or canceled (released).
 * Nothing is decided by guessing: a capture whose answer was lost is in doubt until read again.
 */
import type Stripe from 'stripe';
import type { CaptureOutcome, CaptureRequest, ReleaseOutcome, ReleaseRequest } from '@/server/payments/gateway';
import { assertNever } from '@/server/payments/transport';
import { call } from './call';
import type { StripeContext } from './config';
import type { Called, Failure } from './failure';

export function captureIdempotencyKey(captureId: string): string {
  return `payonce-capture-${captureId}`;
}

export async function capture(ctx: StripeContext, request: CaptureRequest): Promise<CaptureOutcome> {
  const captured = await call(() =>
    ctx.stripe.paymentIntents.capture(
      request.gatewayTradeNo,
      { amount_to_capture: request.amountMinor },
      { idempotencyKey: captureIdempotencyKey(request.captureId) },
    ),
  );
  return captureVerdict(request, captured);
}

export async function release(ctx: StripeContext, request: ReleaseRequest): Promise<ReleaseOutcome> {
  // No Idempotency-Key of ours, as for close(): a cancel is idempotent by the PaymentIntent's state.
  const canceled = await call(() => ctx.stripe.paymentIntents.cancel(request.gatewayTradeNo, { cancellation_reason: 'abandoned' }));
  return releaseVerdict(request, canceled);
}

/** What an authorised PaymentIntent is now, for a capture: taken, released, still held, or unknown. */
function heldState(intent: Stripe.PaymentIntent, request: Pick<CaptureRequest, 'gatewayTradeNo' | 'currency'>): CaptureOutcome | 'held' {
  if (intent.id !== request.gatewayTradeNo || intent.currency !== request.currency.toLowerCase()) {
    return { kind: 'indeterminate', code: 'WRONG_PAYMENT_INTENT', message: `answer for ${intent.id} ${intent.currency}` };
  }
  switch (intent.status) {
    case 'succeeded':
      return { kind: 'captured', amountMinor: intent.amount_received };
    case 'canceled':
      return {
        kind: 'released',
        code: intent.cancellation_reason === 'automatic' ? 'AUTHORIZATION_EXPIRED' : 'AUTHORIZATION_CANCELED',
        message: `PaymentIntent ${intent.id} was canceled (${intent.cancellation_reason ?? 'no reason'})`,
      };
    case 'requires_capture':
      return 'held';
    default:
      return { kind: 'indeterminate', code: 'NOT_AUTHORIZED', message: `PaymentIntent ${intent.id} is ${intent.status}` };
  }
}

export function captureVerdict(request: CaptureRequest, captured: Called<Stripe.PaymentIntent>): CaptureOutcome {
  if (captured.ok) {
    const state = heldState(captured.value, request);
    return state === 'held'
      ? { kind: 'indeterminate', code: 'NOT_CAPTURED', message: `PaymentIntent ${captured.value.id} still requires_capture` }
      : state;
  }
  return captureFailure(request, captured.failure);
}

function captureFailure(request: CaptureRequest, failure: Failure): CaptureOutcome {
  switch (failure.kind) {
    case 'invalid_request': {
      // Someone got there first: the refusal carries the PaymentIntent as it is now.
      if (failure.code === 'payment_intent_unexpected_state' && failure.intent) {
        const state = heldState(failure.intent, request);
        if (state !== 'held') return state;
      }
      if (failure.code === 'amount_too_large') return { kind: 'refused', code: 'AMOUNT_TOO_LARGE', message: failure.message };
      return { kind: 'indeterminate', code: failure.code, message: failure.message };
    }
    case 'idempotency_conflict':
      // This captureId already ran with another amount: what it did is the PaymentIntent's state.
      return { kind: 'indeterminate', code: failure.code, message: failure.message };
    case 'card_declined':
      return { kind: 'indeterminate', code: failure.code, message: failure.message };
    case 'not_sent':
      return { kind: 'retryable', code: failure.code, message: failure.message };
    case 'in_doubt':
      return { kind: 'indeterminate', code: failure.code, message: failure.message };
    default:
      return assertNever(failure);
  }
}

export function releaseVerdict(request: ReleaseRequest, canceled: Called<Stripe.PaymentIntent>): ReleaseOutcome {
  const judge = (intent: Stripe.PaymentIntent): ReleaseOutcome | undefined => {
    if (intent.status === 'canceled') return { kind: 'released' };
    if (intent.status === 'succeeded') return { kind: 'captured', amountMinor: intent.amount_received };
    return undefined;
  };
  if (canceled.ok) {
    return (
      judge(canceled.value) ?? {
        kind: 'indeterminate',
        code: 'NOT_CANCELED',
        message: `${request.gatewayTradeNo} is ${canceled.value.status}`,
      }
    );
  }
  const failure = canceled.failure;
  if (failure.kind === 'invalid_request' && failure.code === 'payment_intent_unexpected_state' && failure.intent) {
    const now = judge(failure.intent);
    if (now) return now;
  }
  if (failure.kind === 'not_sent') return { kind: 'retryable', code: failure.code, message: failure.message };
  return { kind: 'indeterminate', code: failure.code, message: failure.message };
}
