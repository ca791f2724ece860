/**
 * Gateway notifications (webhooks): verify, check, dedupe, settle, acknowledge — in that order.
 *
 * Framework-free: it takes a standard Request and returns a standard Response, so each route handler
 * in app/api/webhooks/ is one call to it. A notification is acknowledged only after its effects have
 * committed; a duplicate that arrives while the first is still being processed is NOT acknowledged,
 * so the gateway tries again later instead of believing it was handled.
 */
import { and, eq, isNotNull, sql } from 'drizzle-orm';
import type { Transaction } from '@/db/client';
import { orders, orderTrades, payments, refunds } from '@/db/schema';
import { MAX_BODY_BYTES, readBodyWithin } from '@payonce/idempotency/fetch';
import { recordPaymentException } from './payment-exceptions';
import { journal } from './journal';
import { settleRefundFromNotification } from './refunds';
import { executeIdempotent, KeyReusedError, refusalHeaders, RequestInProgressError, respond } from '@payonce/idempotency';
import type { GatewayId, NotificationReply, PaymentGateway, PaymentNotification, RefundNotification } from '@/server/payments/gateway';
import { CheckoutError, type CheckoutReason } from './refusals';
import type { CheckoutServices } from './services';
import { settleSucceededCharge } from './settle';
import { settleAuthorizedCharge, settleVoidedAuthorization } from './authorizations';
import { inSpan } from '@/server/tracing/traces';

function toResponse(reply: NotificationReply): Response {
  // A 204 may carry no body at all (WeChat Pay acknowledges with 200 or 204).
  return new Response(reply.status === 204 ? null : reply.body, { status: reply.status, headers: reply.headers });
}

/**
 * A refusal that records nothing: the gateway sees the reason's status (./refusals.ts) and the reason
 * in plain text, with what was wrong when there is more to say.
 */
export function notificationRefusal(reason: CheckoutReason, detail?: string): Response {
  return refusalResponse(new CheckoutError(reason, detail ?? reason));
}

const refuse = notificationRefusal;

function refusalResponse(refusal: CheckoutError): Response {
  const body = refusal.message === refusal.reason ? refusal.reason : `${refusal.reason}: ${refusal.message}`;
  return new Response(body, {
    status: refusal.httpStatus,
    headers: { 'content-type': 'text/plain; charset=utf-8', ...refusalHeaders(refusal) },
  });
}

type Count = (result: string) => void;

export async function handleGatewayNotification(services: CheckoutServices, gatewayId: GatewayId, request: Request): Promise<Response> {
  const gateway = services.gateways[gatewayId];
  if (!gateway) return refuse('GATEWAY_NOT_CONFIGURED');
  const count: Count = (result) => services.metrics?.notifications.inc({ gateway: gatewayId, result });

  // 1. Signature first: nothing of an unverified body is read, let alone stored. The body is read
  // only up to the limit, so an oversized one (signed or not) costs no memory and records nothing.
  const body = await readBodyWithin(request, MAX_BODY_BYTES);
  if (body.kind === 'too_large') {
    count('rejected');
    return refuse('PAYLOAD_TOO_LARGE');
  }
  const rawBody = new TextDecoder().decode(body.bytes);
  const verdict = await gateway.verifyNotification({ headers: request.headers, rawBody });
  if (verdict.kind === 'rejected') {
    count('rejected');
    return refuse('INVALID_SIGNATURE', verdict.reason);
  }
  // Genuine, but not readable now: not acknowledged, so the gateway delivers it again later.
  if (verdict.kind === 'unavailable') {
    count('unavailable');
    console.warn(`[payonce] ${gatewayId} notification not processed yet: ${verdict.reason}`);
    return toResponse(gateway.notificationReply(false));
  }
  // 2. It must be for this merchant.
  if (verdict.notification.merchantId !== gateway.merchantId) {
    count('rejected');
    return refuse('MERCHANT_MISMATCH');
  }
  if (verdict.kind === 'refund') return handleRefundNotification(services, gatewayId, verdict.notification, count);
  return handlePaymentNotification(services, gateway, verdict.notification, count);
}

/** A verified payment notification for this merchant: placed on its order, then settled once. */
async function handlePaymentNotification(
  services: CheckoutServices,
  gateway: PaymentGateway,
  notification: PaymentNotification,
  count: Count,
): Promise<Response> {
  if (notification.status === 'other') {
    // Only a success, an authorisation or its release settles anything; other statuses are
    // acknowledged so they stop. They never touch the dedupe key, so a later success for the same
    // trade is still processed.
    count('ignored');
    return toResponse(gateway.notificationReply(true));
  }
  if (notification.status === 'canceled') return handleVoidedNotification(services, gateway, notification, count);
  const order = await placeOnOrder(services, gateway.id, notification, count);
  if (order instanceof Response) return order;

  // A close of this order's trade reversed a payment made at that instant (Alipay's cancel refunds
  // it): this notification may be that payment's, whose money is on its way back. The trade's state
  // at the gateway decides; unknown, the gateway is asked to deliver again later.
  if (order.closeReversedPayment) {
    const answer = await gateway.query(notification.outTradeNo);
    if (answer.kind === 'unavailable') return toResponse(gateway.notificationReply(false));
    if (answer.trade.kind !== 'succeeded') {
      count('ignored');
      return toResponse(gateway.notificationReply(true));
    }
  }

  // 3. Dedupe through the same core as the API, then settle and store the outcome in one transaction.
  const { outTradeNo, gatewayTradeNo, currency } = notification;
  // What moved: for the capture of an authorisation, what was taken (maybe less than the order).
  const amountMinor = notification.capturedMinor ?? notification.amountMinor;
  const charge = { gateway: gateway.id, outTradeNo, gatewayTradeNo, amountMinor, currency, source: 'notification' } as const;
  const held = notification.status === 'authorized';
  const spanAttributes = { 'payonce.out_trade_no': outTradeNo, 'payonce.event_id': notification.eventId, 'payonce.gateway': gateway.id };
  return inSpan(`webhook.${gateway.id}`, order.id, spanAttributes, () =>
    processOnce(
      services,
      gateway.id,
      { orderId: order.id, eventId: notification.eventId, about: 'payment' },
      {
        key: notification.eventId,
        path: `webhook.${gateway.id}`,
        input: { outTradeNo, gatewayTradeNo, amountMinor, currency, ...(held ? { authorized: true } : {}) },
      },
      async (tx) => {
        if (held) {
          const settled = await settleAuthorizedCharge(tx, charge);
          return { settled: settled.kind, orderId: order.id };
        }
        const settled = await settleSucceededCharge(tx, charge);
        return settled.kind === 'paid'
          ? { settled: 'paid', orderId: settled.paid.orderId }
          : { settled: 'refunding', orderId: settled.orderId, refundId: settled.refundId };
      },
      count,
    ),
  );
}

/**
 * An authorisation released or lapsed at the gateway (Stripe payment_intent.canceled): the order it
 * held the money for is voided and restocked, once. A cancel of anything else — a PaymentIntent a
 * close abandoned, another system's — is acknowledged and changes nothing.
 */
async function handleVoidedNotification(
  services: CheckoutServices,
  gateway: PaymentGateway,
  notification: PaymentNotification,
  count: Count,
): Promise<Response> {
  const { outTradeNo, gatewayTradeNo } = notification;
  const [held] = await services.db
    .select({ orderId: payments.orderId })
    .from(payments)
    .where(and(eq(payments.gateway, gateway.id), eq(payments.gatewayTradeNo, gatewayTradeNo), isNotNull(payments.authorizedMinor)));
  if (!held) {
    count('ignored');
    return toResponse(gateway.notificationReply(true));
  }
  const spanAttributes = { 'payonce.out_trade_no': outTradeNo, 'payonce.event_id': notification.eventId, 'payonce.gateway': gateway.id };
  return inSpan(`webhook.${gateway.id}`, held.orderId, spanAttributes, () =>
    processOnce(
      services,
      gateway.id,
      { orderId: held.orderId, eventId: notification.eventId, about: 'payment' },
      { key: notification.eventId, path: `webhook.${gateway.id}`, input: { outTradeNo, gatewayTradeNo, canceled: true } },
      async (tx) => ({
        settled: await settleVoidedAuthorization(tx, { gateway: gateway.id, outTradeNo, gatewayTradeNo }),
        orderId: held.orderId,
      }),
      count,
    ),
  );
}

/**
 * The order a payment notification is for, for this exact amount — or the refusal, with the payment
 * recorded for a person to follow up: money may really have moved, so it is never dropped, and the
 * gateway is not told it was handled, so it keeps it too.
 */
async function placeOnOrder(services: CheckoutServices, gatewayId: GatewayId, notification: PaymentNotification, count: Count) {
  const [order] = await services.db
    .select({
      id: orders.id,
      amountMinor: orders.amountMinor,
      currency: orders.currency,
      // A close of this order's trade at this gateway reversed a payment made at that instant.
      closeReversedPayment: sql<boolean>`exists (select 1 from ${orderTrades}
        where ${orderTrades.orderId} = ${orders.id} and ${orderTrades.gateway} = ${gatewayId}
          and ${orderTrades.paymentReversedAt} is not null)`,
    })
    .from(orders)
    .where(eq(orders.outTradeNo, notification.outTradeNo));
  const { eventId, outTradeNo, capturedMinor } = notification;
  if (!order) {
    // Recorded once however often the gateway retries.
    const exception = { kind: 'unknown_order', dedupeKey: `unknown-order:${gatewayId}:${eventId}`, orderId: null } as const;
    await recordPaymentException(services.db, { ...exception, gateway: gatewayId, outTradeNo, details: { ...notification } });
    count('unplaced');
    return refuse('ORDER_NOT_FOUND');
  }
  // Less taken than the trade's amount is a partial capture only of an authorisation we hold for it.
  const partial = capturedMinor !== undefined && capturedMinor !== notification.amountMinor;
  if (
    order.amountMinor !== notification.amountMinor ||
    order.currency !== notification.currency ||
    (partial && !(await holdsAuthorization(services, gatewayId, notification.gatewayTradeNo, capturedMinor)))
  ) {
    // Correctly signed, so money may really have moved — for the wrong amount: never settled.
    const exception = { kind: 'amount_mismatch', dedupeKey: `amount-mismatch:${gatewayId}:${eventId}`, orderId: order.id } as const;
    const details = { ...notification, orderAmountMinor: order.amountMinor, orderCurrency: order.currency };
    await recordPaymentException(services.db, { ...exception, gateway: gatewayId, outTradeNo, details });
    count('unplaced');
    return refuse('AMOUNT_MISMATCH');
  }
  return order;
}

/** Whether this trade is an authorisation of ours that held at least `takenMinor`. */
async function holdsAuthorization(services: CheckoutServices, gatewayId: GatewayId, gatewayTradeNo: string, takenMinor: number) {
  const [held] = await services.db
    .select({ authorizedMinor: payments.authorizedMinor })
    .from(payments)
    .where(and(eq(payments.gateway, gatewayId), eq(payments.gatewayTradeNo, gatewayTradeNo), isNotNull(payments.authorizedMinor)));
  return held?.authorizedMinor !== null && held?.authorizedMinor !== undefined && takenMinor <= held.authorizedMinor;
}

/**
 * A refund notification (WeChat Pay REFUND.*, Stripe refund.*, Alipay's refund trade_status_sync):
 * settles our refund row if it is one of ours, through the same dedupe as payments. A refund that is
 * not ours (another system on the same merchant account) is acknowledged and ignored.
 */
async function handleRefundNotification(
  services: CheckoutServices,
  gatewayId: GatewayId,
  notification: RefundNotification,
  count: Count,
): Promise<Response> {
  if (notification.status === 'other') {
    count('ignored');
    return toResponse(services.gateways[gatewayId]!.notificationReply(true));
  }
  const [ours] = await services.db
    .select({ orderId: refunds.orderId })
    .from(refunds)
    .where(and(eq(refunds.refundId, notification.refundId), eq(refunds.gateway, gatewayId)));
  const spanAttributes = {
    'payonce.refund_id': notification.refundId,
    'payonce.event_id': notification.eventId,
    'payonce.gateway': gatewayId,
  };
  return inSpan(`webhook.${gatewayId}.refund`, ours?.orderId, spanAttributes, () =>
    processOnce(
      services,
      gatewayId,
      { orderId: ours?.orderId ?? null, eventId: notification.eventId, about: 'refund' },
      {
        key: `refund:${notification.eventId}`,
        path: `webhook.${gatewayId}.refund`,
        input: { refundId: notification.refundId, status: notification.status, amountMinor: notification.amountMinor },
      },
      async (tx) => ({ refund: notification.refundId, known: await settleRefundFromNotification(tx, services, notification) }),
      count,
    ),
  );
}

/**
 * Runs a notification's effects once, whatever the duplicates, and answers the gateway: acknowledged
 * only once the effects are durable (or were, for a replayed duplicate); a duplicate that arrives
 * while the first copy is still in flight is not acknowledged, so the gateway comes back rather than
 * believe something that may yet roll back.
 */
async function processOnce(
  services: CheckoutServices,
  gatewayId: GatewayId,
  event: { orderId: string | null; eventId: string; about: 'payment' | 'refund' },
  request: { key: string; path: string; input: unknown },
  effects: (tx: Transaction) => Promise<unknown>,
  count: Count,
): Promise<Response> {
  const gateway = services.gateways[gatewayId]!;
  try {
    const result = await executeIdempotent(
      services.idempotencyStore,
      {
        scope: `webhook:${gatewayId}`,
        ...request,
        // The failure drills' seam (./fault-points.ts): the notification's key is claimed, its effects not yet run.
        afterClaim: () =>
          services.faults?.hit('after_claim', {
            procedure: `webhook.${gatewayId}`,
            gateway: gatewayId,
            ...(event.orderId ? { orderId: event.orderId } : {}),
          }) ?? Promise.resolve(),
      },
      {
        // One phase: a copy arriving while the first is in this transaction waits on its key's insert
        // and is answered as a duplicate once it commits.
        onePhase: async (tx) => {
          const outcome = await effects(tx);
          await journal(tx, {
            orderId: event.orderId,
            gateway: gatewayId,
            kind: 'notification.processed',
            data: { gateway: gatewayId, eventId: event.eventId, about: event.about, verified: true, acknowledged: true, outcome },
          });
          return respond(200, outcome);
        },
      },
      services.idempotencyOptions,
    );
    if (result.replayed) {
      await journal(services.db, {
        orderId: event.orderId,
        gateway: gatewayId,
        kind: 'notification.duplicate',
        data: { gateway: gatewayId, eventId: event.eventId, about: event.about, verified: true, acknowledged: true },
      });
    }
    count(result.replayed ? 'duplicate' : 'processed');
    return toResponse(gateway.notificationReply(true));
  } catch (error) {
    if (error instanceof RequestInProgressError) {
      await journal(services.db, {
        orderId: event.orderId,
        gateway: gatewayId,
        kind: 'notification.in_flight',
        data: { gateway: gatewayId, eventId: event.eventId, about: event.about, verified: true, acknowledged: false },
      });
      count('in_flight');
      return toResponse(gateway.notificationReply(false));
    }
    if (error instanceof KeyReusedError) return refuse('CONFLICTING_NOTIFICATION');
    if (error instanceof CheckoutError) return refusalResponse(error);
    console.error(`[webhook:${gatewayId}] processing failed; the gateway will retry`, error);
    return toResponse(gateway.notificationReply(false));
  }
}
