/**
 * Settling a successful charge: the one place an order becomes paid, whoever learns of the charge
 * first — the pay request's own response, the gateway's notification, or the reconciler's query.
 * Each calls this inside its own transaction; whichever comes second finds the order paid by the same
 * trade and changes nothing.
 */
import { and, eq, sql } from 'drizzle-orm';
import type { Transaction } from '@/db/client';
import { orders, orderTrades, outbox, payments, refunds, type OrderStatus, type PaymentSource } from '@/db/schema';
import type { GatewayId } from '@/server/payments/gateway';
import { CheckoutError } from './refusals';
import { journal } from './journal';
import { orderMayTake, requireOrderTransition } from './order-state';

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

/**
 * What recording a successful charge did:
 *   paid       — this charge pays the order (now, or it already did: the same charge learnt of again)
 *   refunding  — the money must not stay (the order is paid by another charge, or expired): it is
 *                recorded as `excess` with a refund that the refund worker will send.
 *                `paid` is the order's own payment when the order is paid.
 */
export type SettleOutcome =
  | { kind: 'paid'; paid: PaidOrder }
  | { kind: 'refunding'; orderId: string; orderStatus: OrderStatus; refundId: string; paid: PaidOrder | undefined };

export const ORDER_PAID_EMAIL_TOPIC = 'email.order_paid';

export async function lockOrderByOutTradeNo(tx: Transaction, outTradeNo: string) {
  const [order] = await tx.select().from(orders).where(eq(orders.outTradeNo, outTradeNo)).for('update');
  return order;
}

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

/**
 * Records a successful charge, whoever learnt of it. Call inside a transaction; the order row is
 * locked first, so the pay request, a notification and the reconciler serialise on it.
 *
 *   - the same charge again (same gateway and gateway trade number) → what it was the first time;
 *   - the order is payable (awaiting_payment, paying) → this charge pays it: payment, order, trade,
 *     outbox email, together;
 *   - anything else (paid by another charge, expired) → money that must not stay: an `excess`
 *     payment and its refund, together. A late payment never revives an expired order: its stock went
 *     back when it expired and may already be sold, so the buyer gets the money back instead.
 */
export async function settleSucceededCharge(tx: Transaction, charge: SucceededCharge): Promise<SettleOutcome> {
  const order = await lockOrderByOutTradeNo(tx, charge.outTradeNo);
  if (!order) throw new CheckoutError('ORDER_NOT_FOUND', `No order with out_trade_no ${charge.outTradeNo}.`);
  if (order.amountMinor !== charge.amountMinor || order.currency !== charge.currency) {
    throw new CheckoutError(
      'AMOUNT_MISMATCH',
      `Charged ${charge.amountMinor} ${charge.currency}, but the order is ${order.amountMinor} ${order.currency}.`,
    );
  }
  const known = await knownCharge(tx, order, charge);
  if (known) return known;
  await markTradePaid(tx, order, charge);
  if (!orderMayTake('charge_succeeded', order.status)) return recordExcessCharge(tx, order, charge);
  return recordPayment(tx, order, charge);
}

/** The same charge, learnt of a second time: what it did then, with nothing changed. */
async function knownCharge(tx: Transaction, order: LockedOrder, charge: SucceededCharge): Promise<SettleOutcome | undefined> {
  const [known] = await tx
    .select({ id: payments.id, role: payments.role })
    .from(payments)
    .where(
      and(
        eq(payments.orderId, order.id),
        eq(payments.gateway, charge.gateway),
        eq(payments.gatewayTradeNo, charge.gatewayTradeNo),
        eq(payments.status, 'succeeded'),
      ),
    );
  if (!known) return undefined;
  const paid = await paidOrderView(tx, order.id);
  if (known.role === 'payment') {
    if (!paid) throw new Error(`order ${order.id} has a payment but no paid view`);
    return { kind: 'paid', paid };
  }
  const [refund] = await tx.select({ refundId: refunds.refundId }).from(refunds).where(eq(refunds.paymentId, known.id));
  if (!refund) throw new Error(`excess payment ${known.id} has no refund`);
  return { kind: 'refunding', orderId: order.id, orderStatus: order.status, refundId: refund.refundId, paid };
}

/** Whatever happens next, this trade can take no more money: it is paid. */
async function markTradePaid(tx: Transaction, order: LockedOrder, charge: SucceededCharge): Promise<void> {
  await tx
    .insert(orderTrades)
    .values({ orderId: order.id, gateway: charge.gateway, status: 'paid', openedAttempt: Math.max(order.paymentAttempt, 1) })
    .onConflictDoUpdate({
      target: [orderTrades.orderId, orderTrades.gateway],
      set: { status: 'paid', closedAt: sql`now()`, updatedAt: sql`now()` },
    });
}

/** The charge pays the order: the payment row, the order paid, the confirmation email, the journal. */
async function recordPayment(tx: Transaction, order: LockedOrder, charge: SucceededCharge): Promise<SettleOutcome> {
  const attempt = Math.max(order.paymentAttempt, 1);
  const { gateway, outTradeNo, gatewayTradeNo, amountMinor, currency, source } = charge;
  await tx
    .insert(payments)
    .values({ orderId: order.id, gateway, outTradeNo, attempt, amountMinor, currency, status: 'succeeded', gatewayTradeNo, source });
  const paidRow = await requireOrderTransition(tx, order.id, 'charge_succeeded', {});
  // One confirmation email per paid order, however many paths settle it: the unique dedupe key
  // turns every later insert into a no-op. `paidAt` is the order's own paid_at, so the email tells
  // the buyer the time the order records, not the (later) time the relay sends it.
  await tx
    .insert(outbox)
    .values({
      topic: ORDER_PAID_EMAIL_TOPIC,
      dedupeKey: `order-paid-email:${order.id}`,
      payload: {
        ...{ orderId: order.id, customerId: order.customerId, outTradeNo: order.outTradeNo },
        ...{ amountMinor: order.amountMinor, currency: order.currency, gateway },
        ...(paidRow.paidAt ? { paidAt: paidRow.paidAt.toISOString() } : {}),
      },
    })
    .onConflictDoNothing();
  await journal(tx, { orderId: order.id, kind: 'payment.succeeded', data: { ...journaledCharge(charge), attempt } });
  await journal(tx, { orderId: order.id, kind: 'email.queued', data: { email: 'order_paid' } });
  return {
    kind: 'paid',
    paid: { orderId: order.id, status: 'paid', payment: { gateway, outTradeNo, amountMinor, currency, gatewayTradeNo } },
  };
}

/** A charge as the journal tells it: which gateway, which trade, how much, and who learnt of it. */
function journaledCharge(charge: SucceededCharge) {
  const { gateway, gatewayTradeNo, amountMinor, currency, source } = charge;
  return { gateway, gatewayTradeNo, amountMinor, currency, via: source };
}

type LockedOrder = NonNullable<Awaited<ReturnType<typeof lockOrderByOutTradeNo>>>;

/** Money that must not stay: the charge as `excess` and its refund, in the caller's transaction. */
async function recordExcessCharge(tx: Transaction, order: LockedOrder, charge: SucceededCharge): Promise<SettleOutcome> {
  const [payment] = await tx
    .insert(payments)
    .values({
      orderId: order.id,
      gateway: charge.gateway,
      outTradeNo: charge.outTradeNo,
      attempt: Math.max(order.paymentAttempt, 1),
      amountMinor: charge.amountMinor,
      currency: charge.currency,
      status: 'succeeded',
      gatewayTradeNo: charge.gatewayTradeNo,
      source: charge.source,
      role: 'excess',
    })
    .returning({ id: payments.id });
  if (!payment) throw new Error('inserting the excess payment returned no row');
  // The order row is locked, so counting its refunds cannot race another refund of the same order.
  const [{ n } = { n: 0 }] = await tx
    .select({ n: sql<number>`count(*)::int` })
    .from(refunds)
    .where(eq(refunds.orderId, order.id));
  const refundId = refundIdFor(order.outTradeNo, n + 1);
  await tx.insert(refunds).values({
    orderId: order.id,
    paymentId: payment.id,
    gateway: charge.gateway,
    outTradeNo: charge.outTradeNo,
    gatewayTradeNo: charge.gatewayTradeNo,
    refundId,
    amountMinor: charge.amountMinor,
    currency: charge.currency,
    reason: order.status === 'paid' ? 'duplicate_charge' : 'order_not_payable',
  });
  await journal(tx, {
    orderId: order.id,
    kind: 'payment.excess',
    data: { ...journaledCharge(charge), orderStatus: order.status, refundId },
  });
  return {
    kind: 'refunding',
    orderId: order.id,
    orderStatus: order.status,
    refundId,
    paid: order.status === 'paid' ? await paidOrderView(tx, order.id) : undefined,
  };
}
