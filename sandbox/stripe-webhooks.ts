/**
 * The sandbox's Stripe webhooks: signing, the retry schedule, and the notification test tool
 * (`POST /sandbox/stripe/notify`). Events are built and enqueued by sandbox/stripe.ts inside the charge's
 * transaction; the shared notifier delivers them with `stripeNotifier` on Stripe's schedule.
 *
 * The signing is written from Stripe's documentation, not taken from stripe-node, so that the SDK's
 * constructEvent verifying it proves the two agree.
 */
import { createHmac } from 'node:crypto';
import { z } from 'zod';
import { json, type SandboxRequest, type SandboxResponse } from './gateway-module';
import { postNotification, type GatewayNotifier, type NotificationRequest } from './notifier';
import { insertAttempt, type DeliveryResult, type Sql } from './store';
import { OUT_TRADE_NO_KEY, type EventObject, type EventType, type PaymentIntentObject, type PaymentIntentStatus } from './stripe-objects';

const GATEWAY = 'stripe';

/** What the tool needs of the running module. */
export interface WebhookContext {
  sql: Sql;
  accountId: string;
  webhookSecret: string;
  deliveryTimeoutMs: number;
}

/**
 * Stripe's documented signature: `t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<raw body>" keyed with the
 * whole whsec_ string>`. In test mode Stripe adds a `v0` signature made with a fake secret; receivers
 * must ignore every scheme but v1, and the sandbox's v0 checks that they do.
 */
export function stripeSignatureHeader(body: string, secret: string, timestamp: number, v1Override?: string): string {
  const v1 = v1Override ?? createHmac('sha256', secret).update(`${timestamp}.${body}`, 'utf8').digest('hex');
  const v0 = createHmac('sha256', 'whsec_sandbox_v0_is_not_a_real_signature').update(`${timestamp}.${body}`, 'utf8').digest('hex');
  return v1 === '' ? `t=${timestamp},v0=${v0}` : `t=${timestamp},v1=${v1},v0=${v0}`;
}

function webhookRequest(body: string, secret: string, timestamp: number, v1Override?: string): NotificationRequest {
  return {
    contentType: 'application/json; charset=utf-8',
    body,
    headers: {
      'stripe-signature': stripeSignatureHeader(body, secret, timestamp, v1Override),
      'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)',
      'cache-control': 'no-cache',
      accept: '*/*; q=0.5, application/xml',
    },
  };
}

/** "Any 2xx acknowledges"; redirects and everything else count as failed deliveries. */
function isStripeAck(status: number): boolean {
  return status >= 200 && status < 300;
}

/**
 * Stripe retries a live-mode event "for up to three days with an exponential back off" without
 * publishing the intervals [unverified]: 1m, 5m, 30m, 2h, 5h, 10h, 10h, 12h, 12h, 12h, 8h (12 deliveries
 * over ~71.6 h), compressed by SANDBOX_TIME_SCALE. The event id is the same on every delivery.
 */
const RETRY_MINUTES = [1, 5, 30, 120, 300, 600, 600, 720, 720, 720, 480] as const;

/** `webhookSecret` signs deliveries scheduled before each one carried its endpoint's own secret. */
export function stripeNotifier(webhookSecret: string): GatewayNotifier {
  return {
    retryIntervalsMs: RETRY_MINUTES.map((minutes) => minutes * 60_000),
    buildRequest: (fields, now) => webhookRequest(fields.event ?? '{}', fields.secret ?? webhookSecret, Math.floor(now.getTime() / 1000)),
    isAcknowledged: (status) => isStripeAck(status),
  };
}

// ---------------------------------------------------------------------------------------------
// POST /sandbox/stripe/notify — the notification test tool

class ToolError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** What `overrides` may change; every other key is refused so a typo cannot pass silently. */
const OVERRIDES: Record<string, string> = {
  amount: 'data.object.amount (and amount_received of a succeeded PaymentIntent); an integer, or any text',
  amount_received: 'data.object.amount_received',
  currency: 'data.object.currency',
  out_trade_no: "data.object.metadata.out_trade_no ('' removes it)",
  status: 'data.object.status',
  payment_intent: 'data.object.id',
  type: 'the event type',
  account: 'an `account` on the event, as Connect would set it',
  event_id: 'the event id',
  livemode: "the event's livemode (true/false)",
  timestamp: 'the signature timestamp t (unix seconds), e.g. an old one',
  signature: "the v1 signature itself ('' sends none)",
};

function numberOrText(value: string): number | string {
  return /^-?\d+$/.test(value) && Number.isSafeInteger(Number(value)) ? Number(value) : value;
}

function applyOverrides(event: EventObject, overrides: Record<string, string>): EventObject {
  // The tool only resends payment_intent.succeeded events: their object is a PaymentIntent.
  const intent = event.data.object as PaymentIntentObject;
  for (const [key, value] of Object.entries(overrides)) {
    switch (key) {
      case 'amount':
        intent.amount = numberOrText(value) as number;
        if (intent.status === 'succeeded') intent.amount_received = numberOrText(value) as number;
        break;
      case 'amount_received':
        intent.amount_received = numberOrText(value) as number;
        break;
      case 'currency':
        intent.currency = value;
        break;
      case 'out_trade_no':
        if (value === '') delete intent.metadata[OUT_TRADE_NO_KEY];
        else intent.metadata[OUT_TRADE_NO_KEY] = value;
        break;
      case 'status':
        intent.status = value as PaymentIntentStatus;
        break;
      case 'payment_intent':
        intent.id = value;
        break;
      case 'type':
        event.type = value as EventType;
        break;
      case 'account':
        (event as EventObject & { account?: string }).account = value;
        break;
      case 'event_id':
        event.id = value;
        break;
      case 'livemode':
        (event as { livemode: boolean }).livemode = value === 'true';
        break;
      default:
        break; // timestamp and signature shape the header, not the body
    }
  }
  return event;
}

const notifyToolBody = z.object({
  outTradeNo: z.string().min(1).max(500),
  copies: z.number().int().min(1).max(100).default(1),
  overrides: z.record(z.string(), z.string()).default({}),
});

/**
 * Sends `copies` deliveries of the trade's `payment_intent.succeeded` event at once, to each endpoint
 * it was delivered to. Overrides change the event BEFORE it is signed, so a tampered amount still
 * carries a valid signature (the receiver's amount check must catch it); the event id stays the
 * event's own unless overridden, so the copies are duplicates of one event. Every delivery goes into
 * the ledger; the event's own retry schedule is left alone.
 */
async function sendToolNotifications(
  ctx: WebhookContext,
  request: { outTradeNo: string; copies: number; overrides: Record<string, string> },
): Promise<DeliveryResult[]> {
  const unknown = Object.keys(request.overrides).filter((key) => !Object.hasOwn(OVERRIDES, key));
  if (unknown.length > 0) {
    const supported = Object.entries(OVERRIDES)
      .map(([key, what]) => `${key} (${what})`)
      .join('; ');
    throw new ToolError(400, 'INVALID_REQUEST', `unknown override ${unknown.join(', ')}; supported: ${supported}`);
  }
  const timestampText = request.overrides.timestamp;
  if (timestampText !== undefined && !/^\d+$/.test(timestampText)) {
    throw new ToolError(400, 'INVALID_REQUEST', 'overrides.timestamp must be unix seconds');
  }

  const events = await ctx.sql<{ id: string; payload: string; out_trade_no: string }[]>`
    SELECT id, payload, out_trade_no FROM psp_sandbox.stripe_events
     WHERE out_trade_no = ${request.outTradeNo} AND type = 'payment_intent.succeeded'
     ORDER BY (account_id = ${ctx.accountId}) DESC, created_at DESC
     LIMIT 1`;
  const event = events[0];
  if (!event) {
    const [intent] = await ctx.sql<{ id: string }[]>`
      SELECT id FROM psp_sandbox.stripe_payment_intents WHERE out_trade_no = ${request.outTradeNo} LIMIT 1`;
    if (!intent) throw new ToolError(404, 'TRADE_NOT_FOUND', `no Stripe PaymentIntent with metadata.out_trade_no ${request.outTradeNo}`);
    throw new ToolError(409, 'NOT_PAID', `no PaymentIntent with metadata.out_trade_no ${request.outTradeNo} has succeeded yet`);
  }
  // Where the event was scheduled to go: each registered endpoint it was sent to, with its secret.
  const targets = await ctx.sql<{ id: string; url: string; secret: string }[]>`
    SELECT id, notify_url AS url, coalesce(fields ->> 'secret', ${ctx.webhookSecret}) AS secret FROM psp_sandbox.notifications
     WHERE notify_id = ${event.id} OR notify_id LIKE ${`${event.id}:%`} ORDER BY id`;
  if (targets.length === 0) {
    throw new ToolError(
      409,
      'NO_WEBHOOK_ENDPOINT',
      `the event for ${request.outTradeNo} went to no webhook endpoint: register one (POST /v1/webhook_endpoints) that takes payment_intent.succeeded`,
    );
  }
  const body = JSON.stringify(applyOverrides(JSON.parse(event.payload) as EventObject, request.overrides), null, 2);

  const sends = targets.flatMap((target) =>
    Array.from({ length: request.copies }, async () => {
      const startedAt = new Date();
      const timestamp = timestampText !== undefined ? Number(timestampText) : Math.floor(startedAt.getTime() / 1000);
      const delivery = webhookRequest(body, target.secret, timestamp, request.overrides.signature);
      const result = await postNotification(target.url, delivery, ctx.deliveryTimeoutMs, startedAt, (status) => isStripeAck(status));
      await insertAttempt(ctx.sql, { id: target.id, gateway: GATEWAY, outTradeNo: event.out_trade_no }, 'tool', result);
      return result;
    }),
  );
  return Promise.all(sends);
}

export async function handleNotifyTool(ctx: WebhookContext, request: SandboxRequest): Promise<SandboxResponse> {
  if (request.method !== 'POST') return json(405, { error: { code: 'METHOD_NOT_ALLOWED', message: 'use POST' } });
  if (
    !String(request.headers['content-type'] ?? '')
      .toLowerCase()
      .includes('application/json')
  ) {
    return json(415, { error: { code: 'UNSUPPORTED_MEDIA_TYPE', message: 'send application/json' } });
  }
  let body: unknown;
  try {
    body = JSON.parse(request.body);
  } catch {
    return json(400, { error: { code: 'INVALID_JSON', message: 'the body is not valid JSON' } });
  }
  const parsed = notifyToolBody.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const message = issue ? `${issue.path.join('.') || 'body'}: ${issue.message}` : 'invalid';
    return json(400, { error: { code: 'INVALID_REQUEST', message } });
  }
  try {
    const deliveries = await sendToolNotifications(ctx, parsed.data);
    return json(200, {
      deliveries: deliveries.map((d) => ({ status: d.httpStatus, body: d.responseBody, ...(d.error ? { error: d.error } : {}) })),
    });
  } catch (error) {
    if (error instanceof ToolError) return json(error.status, { error: { code: error.code, message: error.message } });
    throw error;
  }
}
