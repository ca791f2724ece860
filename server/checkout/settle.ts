/**
 * Settling a successful charge: the one place an order becomes paid, whoever learns of the charge
 * first — the pay request's own response, the gateway's notification, or the reconciler's query.
 * Each calls this inside its own transaction; whichever comes second finds the order paid by the same
 * trade and changes nothing.
 */
import { and, eq } from 'drizzle-orm';
import type { Transaction } from '@/db/client';
import { payments, refunds, type OrderStatus } from '@/db/schema';
import { CheckoutError } from './refusals';
import { journal } from './journal';
import { orderMayTake, requireOrderTransition } from './order-state';
import { heldAuthorization, settleCapture } from './authorizations';
import {
  journaledCharge,
  lockOrderByOutTradeNo,
  markTradePaid,
  paidOrderView,
  queuePaidEmail,
  queueRefund,
  type LockedOrder,
  type PaidOrder,
  type SucceededCharge,
} from './order-payments';

export { ORDER_PAID_EMAIL_TOPIC, lockOrderByOutTradeNo, paidOrderView, refundIdFor } from './order-payments';
export type { PaidOrder, SucceededCharge } from './order-payments';

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
  // The capture of an authorisation we hold: it may take less than the order (a partial capture).
  const held = await heldAuthorization(tx, order.id, charge);
  if (held) return settleCapture(tx, order, held, charge);
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

/** The charge pays the order: the payment row, the order paid, the confirmation email, the journal. */
async function recordPayment(tx: Transaction, order: LockedOrder, charge: SucceededCharge): Promise<SettleOutcome> {
  const attempt = Math.max(order.paymentAttempt, 1);
  const { gateway, outTradeNo, gatewayTradeNo, amountMinor, currency, source } = charge;
  await tx
    .insert(payments)
    .values({ orderId: order.id, gateway, outTradeNo, attempt, amountMinor, currency, status: 'succeeded', gatewayTradeNo, source });
  const paidRow = await requireOrderTransition(tx, order.id, 'charge_succeeded', {});
  await journal(tx, { orderId: order.id, kind: 'payment.succeeded', data: { ...journaledCharge(charge), attempt } });
  await queuePaidEmail(tx, order, { gateway, amountMinor: order.amountMinor, paidAt: paidRow.paidAt });
  return {
    kind: 'paid',
    paid: { orderId: order.id, status: 'paid', payment: { gateway, outTradeNo, amountMinor, currency, gatewayTradeNo } },
  };
}

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
  const refundId = await queueRefund(tx, order, payment.id, charge);
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
