/**
 * Giving back money that must not stay, exactly once: what a refund's row records.
 *
 * A refund row is written in the same transaction that records the excess charge (./settle), with its
 * refund id fixed there. The refund worker (server/jobs/refund-worker.ts) drives each row to a final
 * state through the gateway; a refund notification settles it too (settleRefundFromNotification).
 * Both end here, in markRefundSucceeded / markRefundFailed, which act once however often they are told.
 */
import { and, eq, inArray, sql } from 'drizzle-orm';
import type { Executor } from '@/db/client';
import { orders, outbox, refunds } from '@/db/schema';
import type { RefundNotification } from '@/server/payments/gateway';
import { recordPaymentException } from './payment-exceptions';
import { journal } from './journal';
import type { CheckoutServices } from './services';

export const REFUND_EMAIL_TOPIC = 'email.refund';

/** Final success, once: the refund row, and the customer's 退款通知 through the outbox. */
export async function markRefundSucceeded(tx: Executor, refundId: string, gatewayRefundId: string): Promise<boolean> {
  const [done] = await tx
    .update(refunds)
    .set({ status: 'succeeded', gatewayRefundId, settledAt: sql`now()`, leaseUntil: null, lastError: null })
    .where(and(eq(refunds.refundId, refundId), inArray(refunds.status, ['pending', 'sent', 'processing'])))
    .returning();
  if (!done) return false;
  const [order] = await tx.select({ customerId: orders.customerId }).from(orders).where(eq(orders.id, done.orderId));
  await journal(tx, {
    orderId: done.orderId,
    kind: 'refund.succeeded',
    data: { gateway: done.gateway, refundId, gatewayRefundId, amountMinor: done.amountMinor, currency: done.currency },
  });
  await journal(tx, { orderId: done.orderId, kind: 'email.queued', data: { email: 'refund', refundId } });
  await tx
    .insert(outbox)
    .values({
      topic: REFUND_EMAIL_TOPIC,
      dedupeKey: `refund-email:${refundId}`,
      payload: {
        orderId: done.orderId,
        customerId: order?.customerId ?? null,
        outTradeNo: done.outTradeNo,
        refundId,
        amountMinor: done.amountMinor,
        currency: done.currency,
        gateway: done.gateway,
        reason: done.reason,
        // The refund's own settled_at: the time the money went back, for the buyer's email.
        ...(done.settledAt ? { refundedAt: done.settledAt.toISOString() } : {}),
      },
    })
    .onConflictDoNothing();
  return true;
}

/** Final refusal: the refund row, and an exception for a person (money is still with us). */
export async function markRefundFailed(tx: Executor, refundId: string, error: string): Promise<boolean> {
  const [done] = await tx
    .update(refunds)
    .set({ status: 'failed', settledAt: sql`now()`, leaseUntil: null, lastError: error.slice(0, 500) })
    .where(and(eq(refunds.refundId, refundId), inArray(refunds.status, ['pending', 'sent', 'processing'])))
    .returning();
  if (!done) return false;
  await journal(tx, { orderId: done.orderId, kind: 'refund.failed', data: { gateway: done.gateway, refundId, error } });
  await recordPaymentException(tx, {
    kind: 'refund_failed',
    dedupeKey: `refund-failed:${refundId}`,
    gateway: done.gateway,
    outTradeNo: done.outTradeNo,
    orderId: done.orderId,
    details: { refundId, amountMinor: done.amountMinor, currency: done.currency, error },
  });
  return true;
}

/** A refund notification settles one of our refunds; false when the refund is not ours. */
export async function settleRefundFromNotification(
  tx: Executor,
  services: CheckoutServices,
  notification: RefundNotification,
): Promise<boolean> {
  const [refund] = await tx
    .select({ refundId: refunds.refundId, reason: refunds.reason, status: refunds.status })
    .from(refunds)
    .where(and(eq(refunds.refundId, notification.refundId), eq(refunds.gateway, notification.gateway)));
  if (!refund) return false;
  const count = (outcome: string) => services.metrics?.refunds.inc({ gateway: notification.gateway, reason: refund.reason, outcome });
  if (notification.status === 'succeeded') {
    if (await markRefundSucceeded(tx, notification.refundId, notification.gatewayRefundId)) count('succeeded');
  } else if (notification.status === 'failed') {
    if (await markRefundFailed(tx, notification.refundId, 'the gateway notified a failed refund')) count('failed');
  }
  return true;
}
