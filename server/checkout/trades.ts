/**
 * One open trade per order.
 *
 * Every gateway keeps a trade payable after a decline (Alipay WAIT_BUYER_PAY, WeChat NOTPAY/PAYERROR
 * with a still-valid QR code, a Stripe PaymentIntent in requires_payment_method, a 2C2P invoice), and
 * each gateway has its own namespace, so the buyer can still complete an abandoned trade after paying
 * elsewhere. So before an order opens a trade anywhere else, and before it expires, every other trade
 * it opened is closed at its gateway, and the gateway's answer decides:
 *
 *   closed           → go on;
 *   already paid     → settle that payment (the order is paid; nothing new is charged);
 *   payment reversed → remember it on the trade for good (its success notification must not pay the
 *                      order), then as in doubt;
 *   in doubt         → stop: no new attempt and no expiry until a later close or the reconciler settles it.
 *
 * The gateway call happens outside any transaction; its answer is recorded in a short transaction that
 * changes the trade only if it is still the trade that was closed (same opening attempt).
 */
import { and, eq, inArray, ne, sql } from 'drizzle-orm';
import type { Executor, Transaction } from '@/db/client';
import { orderTrades, orders, type TradeState } from '@/db/schema';
import type { GatewayId, SucceededTrade } from '@/server/payments/gateway';
import { assertNever } from '@/server/payments/transport';
import type { CheckoutServices } from './services';
import { journal, journaledCall } from './journal';
import { FINAL_ORDER_STATUSES } from './order-state';
import { settleSucceededCharge, type SettleOutcome } from './settle';

export interface OrderRef {
  id: string;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
}

export type CloseTradesResult =
  /** Nothing else can take money: go on. */
  | { kind: 'clear' }
  /** A closed trade turned out paid; the order is settled by it (or the money is being refunded). */
  | { kind: 'settled'; outcome: SettleOutcome }
  /** A close could not be confirmed: no new attempt, no expiry, until it is. */
  | { kind: 'in_doubt'; gateway: string; code: string; message: string };

/**
 * Closes every open trade of the order except `keep` (the gateway about to be used again, when that
 * gateway reuses one trade per order). Stops at the first trade that is paid or in doubt.
 */
export async function closeOpenTrades(
  services: CheckoutServices,
  order: OrderRef,
  options: { keep?: GatewayId | null } = {},
): Promise<CloseTradesResult> {
  const open = await services.db
    .select()
    .from(orderTrades)
    .where(
      and(
        eq(orderTrades.orderId, order.id),
        eq(orderTrades.status, 'open'),
        options.keep ? ne(orderTrades.gateway, options.keep) : undefined,
      ),
    );
  for (const trade of open) {
    const closed = await closeTrade(services, order, trade);
    if (closed.kind !== 'clear') return closed;
  }
  return { kind: 'clear' };
}

type TradeRow = typeof orderTrades.$inferSelect;

/** The in-doubt code of a close that reversed a payment (CloseOutcome `payment_reversed`). */
export const PAYMENT_REVERSED = 'PAYMENT_REVERSED';

/** One trade closed at its gateway (outside any transaction), and the answer recorded. */
async function closeTrade(services: CheckoutServices, order: OrderRef, trade: TradeRow): Promise<CloseTradesResult> {
  const gatewayId = trade.gateway as GatewayId;
  const gateway = services.gateways[gatewayId];
  if (!gateway) {
    // A gateway no longer configured cannot be asked; its trade may still be payable there.
    return { kind: 'in_doubt', gateway: gatewayId, code: 'GATEWAY_NOT_CONFIGURED', message: `${gatewayId} is not configured` };
  }
  const outcome = await journaledCall(
    services.db,
    { orderId: order.id, gateway: gatewayId, operation: 'close', request: { outTradeNo: order.outTradeNo } },
    () =>
      gateway.close({ outTradeNo: order.outTradeNo, amountMinor: order.amountMinor, currency: order.currency, openedAt: trade.openedAt }),
  );
  const thisTrade = and(eq(orderTrades.orderId, order.id), eq(orderTrades.gateway, gatewayId));
  switch (outcome.kind) {
    case 'closed':
      await services.db.transaction((tx) => recordClosed(tx, order.id, trade));
      return { kind: 'clear' };
    case 'already_paid':
      // The buyer paid this trade before it could be closed. That payment settles the order — or,
      // when it is the second success, is refunded — and no new charge is made.
      return { kind: 'settled', outcome: await services.db.transaction((tx) => settleCharges(tx, order, gatewayId, outcome.charges)) };
    case 'payment_reversed':
      await services.db.transaction(async (tx) => {
        const reversedAt = sql`coalesce(${orderTrades.paymentReversedAt}, now())`;
        await tx
          .update(orderTrades)
          .set({ paymentReversedAt: reversedAt, ...closeError(PAYMENT_REVERSED, outcome.message) })
          .where(thisTrade);
        await journal(tx, { orderId: order.id, kind: 'trade.payment_reversed', data: { gateway: gatewayId, message: outcome.message } });
      });
      return { kind: 'in_doubt', gateway: gatewayId, code: PAYMENT_REVERSED, message: outcome.message };
    case 'indeterminate':
      await services.db.update(orderTrades).set(closeError(outcome.code, outcome.message)).where(thisTrade);
      return { kind: 'in_doubt', gateway: gatewayId, code: outcome.code, message: outcome.message };
    default:
      return assertNever(outcome);
  }
}

/** The close that could not tell, kept on the trade to be shown and retried. */
function closeError(code: string, message: string) {
  return { lastCloseError: `${code}: ${message}`.slice(0, 500), updatedAt: sql`now()` };
}

/** Closed, if it is still the trade that was closed (the same opening attempt). */
async function recordClosed(tx: Transaction, orderId: string, trade: TradeRow): Promise<void> {
  const closed = await tx
    .update(orderTrades)
    .set({ status: 'closed', closedAt: sql`now()`, lastCloseError: null, updatedAt: sql`now()` })
    .where(
      and(
        eq(orderTrades.orderId, orderId),
        eq(orderTrades.gateway, trade.gateway),
        eq(orderTrades.status, 'open'),
        eq(orderTrades.openedAttempt, trade.openedAttempt),
      ),
    )
    .returning({ gateway: orderTrades.gateway });
  if (closed.length > 0) {
    await journal(tx, { orderId, kind: 'trade.closed', data: { gateway: trade.gateway, attempt: trade.openedAttempt } });
  }
}

/** The charges a close found paid, settled together; the order's own payment is the outcome, if one is. */
async function settleCharges(tx: Transaction, order: OrderRef, gateway: GatewayId, charges: SucceededTrade[]): Promise<SettleOutcome> {
  let settled: SettleOutcome | undefined;
  for (const charge of charges) {
    const result = await settleSucceededCharge(tx, { gateway, outTradeNo: order.outTradeNo, ...charge, source: 'close' });
    if (!settled || result.kind === 'paid') settled = result;
  }
  if (!settled) throw new Error(`close of ${gateway} answered already_paid without charges`);
  return settled;
}

/** Inside the attempt's transaction: is any trade other than `keep` still open? */
export async function otherOpenTrades(tx: Transaction, orderId: string, keep: GatewayId | null): Promise<string[]> {
  const rows = await tx
    .select({ gateway: orderTrades.gateway })
    .from(orderTrades)
    .where(and(eq(orderTrades.orderId, orderId), eq(orderTrades.status, 'open'), keep ? ne(orderTrades.gateway, keep) : undefined));
  return rows.map((row) => row.gateway);
}

/** The state of the order's trade at one gateway, if it ever opened one there. */
export async function tradeState(db: Executor, orderId: string, gateway: GatewayId): Promise<TradeState | undefined> {
  const [row] = await db
    .select({ status: orderTrades.status })
    .from(orderTrades)
    .where(and(eq(orderTrades.orderId, orderId), eq(orderTrades.gateway, gateway)));
  return row?.status;
}

/**
 * Inside the attempt's transaction: the trade this attempt may create is open from now on, before
 * the gateway is called — a crash right after the call must still leave it on the list to close.
 */
export async function markTradeOpen(tx: Transaction, orderId: string, gateway: GatewayId, attempt: number): Promise<void> {
  await tx
    .insert(orderTrades)
    .values({ orderId, gateway, status: 'open', openedAttempt: attempt })
    .onConflictDoUpdate({
      target: [orderTrades.orderId, orderTrades.gateway],
      set: { status: 'open', openedAttempt: attempt, openedAt: sql`now()`, closedAt: null, updatedAt: sql`now()` },
      // A paid trade stays paid: an attempt on a paid order never gets this far.
      setWhere: ne(orderTrades.status, 'paid'),
    });
}

/** Orders that are over (paid, expired) but still hold an open trade: the reconciler's sweep. */
export async function settledOrdersWithOpenTrades(services: CheckoutServices, limit: number): Promise<OrderRef[]> {
  return services.db
    .selectDistinct({ id: orders.id, outTradeNo: orders.outTradeNo, amountMinor: orders.amountMinor, currency: orders.currency })
    .from(orders)
    .innerJoin(orderTrades, and(eq(orderTrades.orderId, orders.id), eq(orderTrades.status, 'open')))
    .where(inArray(orders.status, [...FINAL_ORDER_STATUSES]))
    .limit(limit);
}
