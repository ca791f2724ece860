/**
 * What settling a payment writes, shared by the paths that settle one (./settle for charges,
 * ./authorizations for authorisations and their captures): the order locked by out_trade_no, the
 * paid order's view, the trade marked paid, a refund queued, the confirmation email queued.
 */
import { and, eq, sql } from 'drizzle-orm';
import type { Transaction } from '@/db/client';
import { orders, orderTrades, outbox, payments, refunds, type PaymentSource } from '@/db/schema';
import type { GatewayId } from '@/server/payments/gateway';
import { journal } from './journal';

export interface SucceededCharge {
  gateway: GatewayId;
  outTradeNo: string;
  gatewayTradeNo: string;
  amountMinor: number;
  currency: string;
  source: PaymentSource;
}

/** The body of a successful checkout.pay, and of every later attempt on the paid order. */
export interface PaidOrder {
  orderId: string;
  status: 'paid';
  payment: {
    gateway: GatewayId;
    outTradeNo: string;
    amountMinor: number;
    currency: string;
    gatewayTradeNo: string;
  };
}

export const ORDER_PAID_EMAIL_TOPIC = 'email.order_paid';

export async function lockOrderByOutTradeNo(tx: Transaction, outTradeNo: string) {
  const [order] = await tx.select().from(orders).where(eq(orders.outTradeNo, outTradeNo)).for('update');
  return order;
}

export type LockedOrder = NonNullable<Awaited<ReturnType<typeof lockOrderByOutTradeNo>>>;

export async function paidOrderView(tx: Transaction, orderId: string): Promise<PaidOrder | undefined> {
  const [payment] = await tx
    .select()
    .from(payments)
    .where(and(eq(payments.orderId, orderId), eq(payments.status, 'succeeded'), eq(payments.role, 'payment')));
  if (!payment || payment.gatewayTradeNo === null) return undefined;
  return {
    orderId,
    status: 'paid',
    payment: {
      gateway: payment.gateway as GatewayId,
      outTradeNo: payment.outTradeNo,
      amountMinor: payment.amountMinor,
      currency: payment.currency,
      gatewayTradeNo: payment.gatewayTradeNo,
    },
  };
}

/**
 * The refund id sent to the gateway for an order's n-th refund: `R` + the out_trade_no's 18
 * characters + n in base 36. Fixed before the first call and stored, so every retry sends the same
 * one; [0-9A-Z] and ≤ 32 characters, inside every gateway's rule for refund ids.
 */
export function refundIdFor(outTradeNo: string, sequence: number): string {
  return `R${outTradeNo.replace(/^PO/, '')}${sequence.toString(36).toUpperCase()}`;
}

/** Whatever happens next, this trade can take no more money: it is paid (or holds the buyer's money). */
export async function markTradePaid(tx: Transaction, order: LockedOrder, charge: SucceededCharge): Promise<void> {
  await tx
    .insert(orderTrades)
    .values({ orderId: order.id, gateway: charge.gateway, status: 'paid', openedAttempt: Math.max(order.paymentAttempt, 1) })
    .onConflictDoUpdate({
      target: [orderTrades.orderId, orderTrades.gateway],
      set: { status: 'paid', closedAt: sql`now()`, updatedAt: sql`now()` },
    });
}

/** A charge as the journal tells it: which gateway, which trade, how much, and who learnt of it. */
export function journaledCharge(charge: SucceededCharge) {
  const { gateway, gatewayTradeNo, amountMinor, currency, source } = charge;
  return { gateway, gatewayTradeNo, amountMinor, currency, via: source };
}

/**
 * A refund of the whole of one recorded charge, queued for the refund worker in the caller's
 * transaction (the order row locked, so counting its refunds cannot race another refund of it).
 */
export async function queueRefund(
  tx: Transaction,
  order: LockedOrder,
  paymentId: string,
  charge: Pick<SucceededCharge, 'gateway' | 'outTradeNo' | 'gatewayTradeNo' | 'amountMinor' | 'currency'>,
): Promise<string> {
  const [{ n } = { n: 0 }] = await tx
    .select({ n: sql<number>`count(*)::int` })
    .from(refunds)
    .where(eq(refunds.orderId, order.id));
  const refundId = refundIdFor(order.outTradeNo, n + 1);
  await tx.insert(refunds).values({
    orderId: order.id,
    paymentId,
    gateway: charge.gateway,
    outTradeNo: charge.outTradeNo,
    gatewayTradeNo: charge.gatewayTradeNo,
    refundId,
    amountMinor: charge.amountMinor,
    currency: charge.currency,
    reason: order.status === 'paid' ? 'duplicate_charge' : 'order_not_payable',
  });
  return refundId;
}

/**
 * One confirmation email per paid order, however many paths settle it: the unique dedupe key turns
 * every later insert into a no-op. `paidAt` is the order's own paid_at, so the email tells the buyer
 * the time the order records, not the (later) time the relay sends it; `amountMinor` is what was taken.
 */
export async function queuePaidEmail(
  tx: Transaction,
  order: LockedOrder,
  paid: { gateway: GatewayId; amountMinor: number; paidAt: Date | null },
): Promise<void> {
  await tx
    .insert(outbox)
    .values({
      topic: ORDER_PAID_EMAIL_TOPIC,
      dedupeKey: `order-paid-email:${order.id}`,
      payload: {
        ...{ orderId: order.id, customerId: order.customerId, outTradeNo: order.outTradeNo },
        ...{ amountMinor: paid.amountMinor, currency: order.currency, gateway: paid.gateway },
        ...(paid.paidAt ? { paidAt: paid.paidAt.toISOString() } : {}),
      },
    })
    .onConflictDoNothing();
  await journal(tx, { orderId: order.id, kind: 'email.queued', data: { email: 'order_paid' } });
}
