/**
 * What `stripe listen --forward-to` does for a local run: register the app's webhook endpoint with
 * Stripe (here, the PSP sandbox's Stripe) and hand its signing secret to the app. Stripe delivers events
 * only to endpoints registered in the Dashboard or through POST /v1/webhook_endpoints — never to an
 * address a PaymentIntent carries — so a deployment registers its endpoint once, and sets
 * STRIPE_WEBHOOK_SECRET to the `whsec_…` Stripe answered (docs/operations.md).
 *
 * The secret is returned only when the endpoint is created, so an endpoint left by an earlier run for
 * the same URL is deleted and a new one made: one endpoint per URL, whose secret this run knows.
 */
import Stripe from 'stripe';

/** The events the app's webhook handles; every other type would only be acknowledged and dropped. */
export const STRIPE_WEBHOOK_EVENTS = [
  'payment_intent.succeeded',
  'payment_intent.payment_failed',
  'payment_intent.canceled',
  // Authorise, then capture: the buyer's money held (capture_method manual).
  'payment_intent.amount_capturable_updated',
  'refund.created',
  'refund.updated',
  'charge.refunded',
] as const;

/**
 * Registers `${appUrl}/api/webhooks/stripe` with the Stripe account of `env` (STRIPE_SECRET_KEY, and
 * STRIPE_API_BASE for the sandbox) and returns the endpoint's signing secret; undefined when Stripe is
 * not configured.
 */
export async function registerStripeWebhookEndpoint(env: Record<string, string | undefined>, appUrl: string): Promise<string | undefined> {
  const secretKey = env.STRIPE_SECRET_KEY;
  if (!secretKey) return undefined;
  const base = env.STRIPE_API_BASE ? new URL(env.STRIPE_API_BASE) : undefined;
  const stripe = new Stripe(secretKey, {
    ...(base ? { host: base.hostname, port: base.port || undefined, protocol: base.protocol === 'http:' ? 'http' : 'https' } : {}),
    maxNetworkRetries: 2,
  });
  const url = new URL('/api/webhooks/stripe', appUrl).toString();
  for await (const endpoint of stripe.webhookEndpoints.list({ limit: 100 })) {
    if (endpoint.url === url) await stripe.webhookEndpoints.del(endpoint.id);
  }
  const created = await stripe.webhookEndpoints.create({
    url,
    enabled_events: [...STRIPE_WEBHOOK_EVENTS],
    description: 'PayOnce (registered at start, as stripe listen would)',
  });
  if (!created.secret) throw new Error(`Stripe created webhook endpoint ${created.id} without a signing secret`);
  return created.secret;
}
