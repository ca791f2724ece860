/**
 * Settling a successful charge: the one place an order becomes paid, whoever learns of the charge
 * first — the pay request's own response, the gateway's notification, or the reconciler's query.
 * Each calls this inside its own transaction; whichever comes second finds the order paid by the same
 * trade and changes nothing.
 */
import { and, eq, sql } from 'drizzle-orm';
import type { Transaction } from '../../db/client';
import { orders, outbox, payments } from '../../db/schema';
import type { GatewayId } from '../payments/gateway';
import { CheckoutError } from './errors';

export interface SucceededCharge {
  gateway: GatewayId;
  outTradeNo: string;
  gatewayTradeNo: string;
  amountMinor: number;
  currency: string;
  source: 'response' | 'notification' | 'reconciliation';
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
export const DUPLICATE_CHARGE_TOPIC = 'payment.duplicate_charge';

export async function lockOrderByOutTradeNo(tx: Transaction, outTradeNo: string) {
  const [order] = await tx.select().from(orders).where(eq(orders.outTradeNo, outTradeNo)).for('update');
  return order;
}

export async function paidOrderView(tx: Transaction, orderId: string): Promise<PaidOrder | undefined> {
  const [payment] = await tx
    .select()
    .from(payments)
    .where(and(eq(payments.orderId, orderId), eq(payments.status, 'succeeded')));
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

export async function settleSucceededCharge(tx: Transaction, charge: SucceededCharge): Promise<PaidOrder> {
  const order = await lockOrderByOutTradeNo(tx, charge.outTradeNo);
  if (!order) throw new CheckoutError(404, 'ORDER_NOT_FOUND', `No order with out_trade_no ${charge.outTradeNo}.`);
  if (order.amountMinor !== charge.amountMinor || order.currency !== charge.currency) {
    throw new CheckoutError(
      400,
      'AMOUNT_MISMATCH',
      `Charged ${charge.amountMinor} ${charge.currency}, but the order is ${order.amountMinor} ${order.currency}.`,
    );
  }

  if (order.status === 'paid') {
    const paid = await paidOrderView(tx, order.id);
    if (paid && paid.payment.gateway === charge.gateway && paid.payment.gatewayTradeNo === charge.gatewayTradeNo) {
      return paid; // the same charge, learnt of a second time
    }
    // A second, different charge for an already-paid order: the order guard exists so that this
    // never happens. If it does, it must not vanish: record it once for a refund.
    await tx
      .insert(outbox)
      .values({
        topic: DUPLICATE_CHARGE_TOPIC,
        dedupeKey: `duplicate-charge:${charge.gateway}:${charge.gatewayTradeNo}`,
        payload: { orderId: order.id, ...charge },
      })
      .onConflictDoNothing();
    if (!paid) throw new Error(`order ${order.id} is paid but has no successful payment`);
    return paid;
  }

  await tx.insert(payments).values({
    orderId: order.id,
    gateway: charge.gateway,
    outTradeNo: charge.outTradeNo,
    attempt: Math.max(order.paymentAttempt, 1),
    amountMinor: charge.amountMinor,
    currency: charge.currency,
    status: 'succeeded',
    gatewayTradeNo: charge.gatewayTradeNo,
    source: charge.source,
  });
  await tx
    .update(orders)
    .set({
      status: 'paid',
      paidAt: sql`now()`,
      updatedAt: sql`now()`,
      attemptKeyId: null,
    })
    .where(eq(orders.id, order.id));
  // One confirmation email per paid order, however many paths settle it: the unique dedupe key
  // turns every later insert into a no-op.
  await tx
    .insert(outbox)
    .values({
      topic: ORDER_PAID_EMAIL_TOPIC,
      dedupeKey: `order-paid-email:${order.id}`,
      payload: {
        orderId: order.id,
        customerId: order.customerId,
        outTradeNo: order.outTradeNo,
        amountMinor: order.amountMinor,
        currency: order.currency,
        gateway: charge.gateway,
      },
    })
    .onConflictDoNothing();

  return {
    orderId: order.id,
    status: 'paid',
    payment: {
      gateway: charge.gateway,
      outTradeNo: charge.outTradeNo,
      amountMinor: charge.amountMinor,
      currency: charge.currency,
      gatewayTradeNo: charge.gatewayTradeNo,
    },
  };
}
