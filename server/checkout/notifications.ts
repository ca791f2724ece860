/**
 * Gateway notifications (webhooks): verify, check, dedupe, settle, acknowledge — in that order.
 *
 * Framework-free: it takes a standard Request and returns a standard Response, so each route handler
 * in app/api/webhooks/ is one call to it. A notification is acknowledged only after its effects have
 * committed; a duplicate that arrives while the first is still being processed is NOT acknowledged,
 * so the gateway tries again later instead of believing it was handled.
 */
import { eq } from 'drizzle-orm';
import { orders } from '../../db/schema';
import {
  executeIdempotent,
  KeyReusedError,
  RequestInProgressError,
  respond,
} from '../idempotency';
import type { GatewayId, NotificationReply } from '../payments/gateway';
import { CheckoutError } from './errors';
import type { CheckoutServices } from './services';
import { settleSucceededCharge } from './settle';

function toResponse(reply: NotificationReply): Response {
  // A 204 may carry no body at all (WeChat Pay acknowledges with 200 or 204).
  return new Response(reply.status === 204 ? null : reply.body, { status: reply.status, headers: reply.headers });
}

/** A refusal that records nothing: the gateway sees a 4xx with the reason in plain text. */
function refuse(status: number, reason: string): Response {
  return new Response(reason, { status, headers: { 'content-type': 'text/plain; charset=utf-8' } });
}

export async function handleGatewayNotification(
  services: CheckoutServices,
  gatewayId: GatewayId,
  request: Request,
): Promise<Response> {
  const gateway = services.gateways[gatewayId];
  if (!gateway) return refuse(404, 'GATEWAY_NOT_CONFIGURED');
  const count = (result: string) => services.metrics?.notifications.inc({ gateway: gatewayId, result });

  // 1. Signature first: nothing of an unverified body is read, let alone stored.
  const rawBody = await request.text();
  const verdict = await gateway.verifyNotification({ headers: request.headers, rawBody });
  if (verdict.kind === 'rejected') {
    count('rejected');
    return refuse(400, `INVALID_SIGNATURE: ${verdict.reason}`);
  }
  const notification = verdict.notification;

  // 2. It must be for this merchant and, if it reports a payment, for this order's exact amount.
  if (notification.merchantId !== gateway.merchantId) {
    count('rejected');
    return refuse(400, 'MERCHANT_MISMATCH');
  }
  if (notification.status !== 'succeeded') {
    // Only a success settles anything; other statuses are acknowledged so they stop. They never
    // touch the dedupe key, so a later success for the same trade is still processed.
    count('ignored');
    return toResponse(gateway.notificationReply(true));
  }
  const [order] = await services.db
    .select({ amountMinor: orders.amountMinor, currency: orders.currency })
    .from(orders)
    .where(eq(orders.outTradeNo, notification.outTradeNo));
  if (!order) {
    // Not acknowledged: a payment we cannot place must not be forgotten by the gateway either.
    return refuse(404, 'ORDER_NOT_FOUND');
  }
  if (order.amountMinor !== notification.amountMinor || order.currency !== notification.currency) {
    count('rejected');
    return refuse(400, 'AMOUNT_MISMATCH');
  }

  // 3. Dedupe through the same core as the API, then settle and store the outcome in one transaction.
  try {
    const result = await executeIdempotent(
      services.idempotencyStore,
      {
        scope: `webhook:${gatewayId}`,
        key: notification.eventId,
        path: `webhook.${gatewayId}`,
        input: {
          outTradeNo: notification.outTradeNo,
          gatewayTradeNo: notification.gatewayTradeNo,
          amountMinor: notification.amountMinor,
          currency: notification.currency,
        },
      },
      async (key) => {
        const phase = await key.atomicPhase(async (tx) => {
          const paid = await settleSucceededCharge(tx, {
            gateway: gatewayId,
            outTradeNo: notification.outTradeNo,
            gatewayTradeNo: notification.gatewayTradeNo,
            amountMinor: notification.amountMinor,
            currency: notification.currency,
            source: 'notification',
          });
          return respond(200, { settled: true, orderId: paid.orderId });
        });
        return phase.response;
      },
      services.idempotencyOptions,
    );
    // 4. Acknowledge only now that the effects are durable (or were, for a replayed duplicate).
    count(result.replayed ? 'duplicate' : 'processed');
    return toResponse(gateway.notificationReply(true));
  } catch (error) {
    if (error instanceof RequestInProgressError) {
      count('in_flight');
      // The first copy is still being processed: make the gateway come back rather than risk
      // acknowledging something that may yet roll back.
      return toResponse(gateway.notificationReply(false));
    }
    if (error instanceof KeyReusedError) return refuse(409, 'CONFLICTING_NOTIFICATION');
    if (error instanceof CheckoutError) return refuse(error.httpStatus, error.reason);
    console.error(`[webhook:${gatewayId}] processing failed; the gateway will retry`, error);
    return toResponse(gateway.notificationReply(false));
  }
}
