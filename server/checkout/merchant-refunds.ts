/**
 * merchant.refund: an operator (or the back office) gives back all or part of a paid order — once per
 * request, and never more in total than was charged.
 *
 * One transaction, under the order's row lock, with the idempotency key's answer: the refund row is
 * written with its refund id fixed, and the refund worker (server/jobs/refund-worker.ts) sends it
 * through the gateway's own idempotent refund (Alipay out_request_no, WeChat out_refund_no, Stripe
 * Idempotency-Key, 2C2P idempotencyID), settling a lost answer or a crash by query, as it does the
 * refunds PayOnce makes itself. So:
 *   - a double click or a retry of one request replays its 202 (the key), and refunds once;
 *   - two operators at once each hold the order's lock in turn: the second sees the first's refund
 *     and is refused if together they would give back more than was charged;
 *   - every refund not failed counts against what is left, pending ones included: money on its way
 *     back is not refundable twice.
 */
import { and, eq, ne, sql } from 'drizzle-orm';
import type { Transaction } from '@/db/client';
import { orders, payments, refunds } from '@/db/schema';
import { respond, type Responded, type StoredResponse } from '@payonce/idempotency';
import { journal } from './journal';
import { refundIdFor } from './order-payments';
import { CheckoutError } from './refusals';

export interface MerchantRefundInput {
  orderId: string;
  amountMinor: number;
  /** In the operator's words: kept with the refund, journaled, sent to the gateway where it has a field. */
  reason: string;
}

/** The 202 answer: the refund decided, and what is left to refund after it. */
export interface MerchantRefund {
  orderId: string;
  refundId: string;
  amountMinor: number;
  currency: string;
  status: 'pending';
  /** Every refund of the order's payment not failed, this one included. */
  refundedMinor: number;
  refundableMinor: number;
  requestedBy: string;
}

export type MerchantRefundResponse = StoredResponse<MerchantRefund, 202>;

export function decideRefund(
  input: MerchantRefundInput,
  requestedBy: string,
): (tx: Transaction) => Promise<Responded<MerchantRefundResponse>> {
  return async (tx) => {
    const [order] = await tx.select().from(orders).where(eq(orders.id, input.orderId)).for('update');
    if (!order) throw new CheckoutError('ORDER_NOT_FOUND', 'No such order.');
    const [payment] = await tx
      .select()
      .from(payments)
      .where(and(eq(payments.orderId, order.id), eq(payments.role, 'payment'), eq(payments.status, 'succeeded')));
    if (order.status !== 'paid' || !payment?.gatewayTradeNo) {
      throw new CheckoutError('ORDER_NOT_REFUNDABLE', `The order is ${order.status}; only a paid order's payment can be refunded.`);
    }
    const refunded = await refundedFrom(tx, payment.id);
    const refundable = payment.amountMinor - refunded;
    if (input.amountMinor > refundable) {
      throw new CheckoutError(
        'REFUND_EXCEEDS_CHARGE',
        `${input.amountMinor} ${payment.currency} is more than is left to refund: ${refundable} of ${payment.amountMinor} (${refunded} refunded or on its way).`,
      );
    }
    // The order row is locked: counting its refunds cannot race another refund of the same order.
    const [{ n } = { n: 0 }] = await tx
      .select({ n: sql<number>`count(*)::int` })
      .from(refunds)
      .where(eq(refunds.orderId, order.id));
    const refundId = refundIdFor(order.outTradeNo, n + 1);
    await tx.insert(refunds).values({
      ...{ orderId: order.id, paymentId: payment.id, gateway: payment.gateway, outTradeNo: order.outTradeNo },
      ...{ gatewayTradeNo: payment.gatewayTradeNo, refundId, amountMinor: input.amountMinor, currency: payment.currency },
      ...{ reason: 'merchant', requestedBy, note: input.reason },
    });
    await journal(tx, {
      orderId: order.id,
      kind: 'refund.requested',
      data: {
        refundId,
        gateway: payment.gateway,
        amountMinor: input.amountMinor,
        currency: payment.currency,
        by: requestedBy,
        reason: input.reason,
      },
    });
    const refundedMinor = refunded + input.amountMinor;
    return respond(202, {
      ...{ orderId: order.id, refundId, amountMinor: input.amountMinor, currency: payment.currency, status: 'pending' as const },
      ...{ refundedMinor, refundableMinor: payment.amountMinor - refundedMinor, requestedBy },
    });
  };
}

/** What the payment has given back or is giving back: every refund of it that has not failed. */
async function refundedFrom(tx: Transaction, paymentId: string): Promise<number> {
  const [row] = await tx
    .select({ sum: sql<number>`coalesce(sum(${refunds.amountMinor}), 0)::int` })
    .from(refunds)
    .where(and(eq(refunds.paymentId, paymentId), ne(refunds.status, 'failed')));
  return row?.sum ?? 0;
}
