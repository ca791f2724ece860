/**
 * Stripe's webhooks: the `Stripe-Signature` check (the SDK's constructEvent — HMAC-SHA256, v1 only,
 * never by hand — plus the same tolerance towards the future), then the event re-fetched by id from
 * the API (GET /v1/events/{id}) and only that copy handed to ./classify, and the reply that stops
 * Stripe's deliveries or asks for another.
 */
import Stripe from 'stripe';
import type { NotificationReply, NotificationVerdict } from '@/server/payments/gateway';
import { call } from './call';
import { classifyEvent } from './classify';
import type { StripeContext } from './config';

/** Stripe's webhook tolerance (and the SDK's default): a signature older than 5 minutes — or dated more than 5 minutes ahead — is refused. */
const WEBHOOK_TOLERANCE_SECONDS = 300;

/** The event a signature header signs, or why it is refused. */
function constructEvent(
  stripe: Stripe,
  rawBody: string,
  header: string,
  webhookSecret: string,
): { ok: true; event: Stripe.Event } | { ok: false; reason: string } {
  try {
    return { ok: true, event: stripe.webhooks.constructEvent(rawBody, header, webhookSecret, WEBHOOK_TOLERANCE_SECONDS) };
  } catch (err) {
    if (err instanceof Stripe.errors.StripeSignatureVerificationError) {
      return { ok: false, reason: `invalid signature: ${err.message.split('\n')[0] ?? ''}` };
    }
    return { ok: false, reason: `unreadable event: ${err instanceof Error ? err.message : String(err)}` };
  }
}

/**
 * The SDK bounds only the past. A signature dated in the future is no more Stripe's than a stale one:
 * someone holding a leaked secret could mint events that stay "fresh" for as long as they like. The
 * same window, the other way (the signature itself is valid, so `t` is Stripe's).
 */
function futureSignature(header: string, nowSeconds: number): string | undefined {
  const signedAt = Number(/(?:^|,)\s*t=(\d{1,12})(?:,|$)/.exec(header)?.[1]);
  if (Number.isFinite(signedAt) && signedAt - nowSeconds <= WEBHOOK_TOLERANCE_SECONDS) return undefined;
  return `signature timestamp ${signedAt} is more than ${WEBHOOK_TOLERANCE_SECONDS} s in the future`;
}

export async function verifyNotification(ctx: StripeContext, request: { headers: Headers; rawBody: string }): Promise<NotificationVerdict> {
  const header = request.headers.get('stripe-signature');
  if (!header) return { kind: 'rejected', reason: 'missing Stripe-Signature header' };
  const verified = constructEvent(ctx.stripe, request.rawBody, header, ctx.config.webhookSecret);
  if (!verified.ok) return { kind: 'rejected', reason: verified.reason };
  const ahead = futureSignature(header, Date.now() / 1000);
  if (ahead) return { kind: 'rejected', reason: ahead };
  // Signed by Stripe from here on — yet a leaked signing secret signs anything. Stripe advises
  // re-fetching the event: only the API's own copy is acted on, whatever the delivered body says.
  return refetched(ctx, verified.event.id);
}

/**
 * The event as the API has it, classified; the dedupe key stays the delivered id, which is the
 * fetched one's. An id the API does not know (a body signed with a leaked secret, another account's
 * or mode's event, one older than the API keeps) is acknowledged and ignored: Stripe creates an
 * event before delivering it, so no retry will ever find it, and refusing it would only make Stripe
 * deliver it for three days and then disable the endpoint. A re-fetch that fails otherwise (network,
 * 5xx, a rate limit) is not acknowledged, so Stripe delivers it again later.
 */
async function refetched(ctx: StripeContext, eventId: string): Promise<NotificationVerdict> {
  const fetched = await call(() => ctx.stripe.events.retrieve(eventId));
  if (fetched.ok) return classifyEvent(fetched.value, ctx.config.accountId);
  const { failure } = fetched;
  if (failure.kind === 'invalid_request' && failure.code === 'resource_missing') {
    const notification = {
      gateway: 'stripe' as const,
      eventId,
      merchantId: ctx.config.accountId,
      outTradeNo: '',
      status: 'other' as const,
    };
    return { kind: 'verified', notification: { ...notification, gatewayTradeNo: '', amountMinor: 0, currency: '' } };
  }
  return { kind: 'unavailable', reason: `event ${eventId} could not be re-fetched from Stripe (${failure.code}): deliver again` };
}

export function notificationReply(ack: boolean): NotificationReply {
  // Any 2xx stops Stripe's retries; anything else makes it deliver again on its schedule.
  return ack
    ? { status: 200, headers: { 'content-type': 'application/json' }, body: '{"received":true}' }
    : { status: 503, headers: { 'content-type': 'application/json' }, body: '{"received":false}' };
}
