/**
 * The order's life in one table: every status an order can be in, every change between them, who
 * causes it and under what condition. Nothing else writes `orders.status`.
 *
 *   from                        event               to                who
 *   awaiting_payment            attempt_started     paying            the pay request (phase 1)
 *   paying                      charge_declined     awaiting_payment  the pay request (phase 3)
 *   paying                      buyer_step_opened   awaiting_payment  the pay request (phase 3)
 *   awaiting_payment, paying    charge_succeeded    paid              pay response, notification,
 *                                                                     reconciler, close "already paid"
 *   awaiting_payment, paying    charge_authorized   authorized        as charge_succeeded, when the
 *                                                                     gateway only holds the money
 *   authorized                  charge_captured     paid              the capture's answer, notification
 *                                                                     or the reconciler
 *   authorized                  authorization_voided voided           the release's answer, a lapse
 *   paying                      attempt_abandoned   awaiting_payment  the reconciler
 *   awaiting_payment            expired             expired           the expiry job
 *
 * `paid`, `expired` and `voided` are over: nothing leaves them. A charge that still lands on an order that is
 * over is not a transition — it is money that must not stay, recorded as excess and refunded
 * (./settle). The table holds no other status (CHECK orders_status_known).
 *
 * Every transition is one conditional UPDATE (`where id = $1 and status in (from-states) and guard`)
 * inside the caller's transaction, reporting whether it matched. Actors that race — the pay request,
 * a notification, the reconciler on several instances, the expiry — each observe a state, try to move
 * the order from it, and exactly one wins; the others see `applied: false` and change nothing.
 */
import { and, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { PgUpdateSetSource } from 'drizzle-orm/pg-core';
import type { Transaction } from '@/db/client';
import { orders, ORDER_STATUSES, type OrderStatus } from '@/db/schema';
import type { GatewayId } from '@/server/payments/gateway';
import { CheckoutError } from './refusals';

/** What each transition needs from its caller: the fields it sets and the facts its guard checks. */
export interface OrderEventParams {
  /** `keyId`: the idempotency key that owns the attempt; `gateway`: where it is made. */
  attempt_started: { keyId: string; gateway: GatewayId };
  /** `keyId`: the key whose attempt the gateway declined. */
  charge_declined: { keyId: string };
  /** `keyId`: the key whose attempt opened a trade that now waits for the buyer's own step. */
  buyer_step_opened: { keyId: string };
  charge_succeeded: Record<string, never>;
  charge_authorized: Record<string, never>;
  charge_captured: Record<string, never>;
  authorization_voided: Record<string, never>;
  /** `attempt`: the attempt number the reconciler observed stuck. */
  attempt_abandoned: { attempt: number };
  /** `tradeInDoubt`: an open trade's close stayed in doubt past the grace, and the order expires anyway. */
  expired: { tradeInDoubt: boolean };
}

export type OrderEvent = keyof OrderEventParams;

export interface OrderTransition<P> {
  from: readonly OrderStatus[];
  to: OrderStatus;
  /** Who causes it, and why it is allowed. */
  cause: string;
  /** The condition, besides the from-state, under which the change may happen. */
  guard?: (params: P) => SQL | undefined;
  /** The columns that change with the status (updated_at always does). */
  set?: (params: P) => PgUpdateSetSource<typeof orders>;
}

export const ORDER_TRANSITIONS: { readonly [E in OrderEvent]: OrderTransition<OrderEventParams[E]> } = {
  // The pay request's phase 1, holding the order's row lock: at most one attempt in flight per order,
  // owned by one key. Only a payable order with no attempt in flight may start one; a `paying` order
  // answers 409 to any other key (./pay), so two tabs or two gateways never both charge.
  attempt_started: {
    from: ['awaiting_payment'],
    to: 'paying',
    cause: 'the pay request starts an attempt (phase 1)',
    set: ({ keyId, gateway }) => ({
      paymentAttempt: sql`${orders.paymentAttempt} + 1`,
      attemptKeyId: keyId,
      attemptGateway: gateway,
      attemptStartedAt: sql`now()`,
    }),
  },
  // The pay request's phase 3 after a terminal decline: the order is payable again (another card or
  // gateway may pay it). Only the key that owns the attempt gives it up — if the reconciler reopened
  // the order meanwhile and another key started a new attempt, that attempt is left alone.
  charge_declined: {
    from: ['paying'],
    to: 'awaiting_payment',
    cause: 'the pay request records the gateway’s decline (phase 3)',
    guard: ({ keyId }) => eq(orders.attemptKeyId, keyId),
    set: () => ({ attemptKeyId: null }),
  },
  // The pay request's phase 3 when the gateway's trade waits for the buyer (a QR code to scan, a page
  // to visit, a card to enter): nothing is in flight on our side any more, so the order is payable
  // again and its trade stays open, exactly as after a decline. The buyer's payment settles it by
  // notification or query; another attempt closes the trade first; expiry closes it. Only the key
  // that owns the attempt hands it over.
  buyer_step_opened: {
    from: ['paying'],
    to: 'awaiting_payment',
    cause: 'the pay request hands the open trade to the buyer’s own step (phase 3)',
    guard: ({ keyId }) => eq(orders.attemptKeyId, keyId),
    set: () => ({ attemptKeyId: null }),
  },
  // A successful charge, whoever learns of it first — the pay request's own answer, the gateway's
  // notification, the reconciler's query, or a close answered "already paid" (./settle, under the row
  // lock). A payable order is paid by it, with or without an attempt in flight: the buyer may complete
  // a trade the order left open after a decline or a reopen.
  charge_succeeded: {
    from: ['awaiting_payment', 'paying'],
    to: 'paid',
    cause: 'a successful charge is settled (pay response, notification, reconciler or close)',
    set: () => ({ paidAt: sql`now()`, attemptKeyId: null }),
  },
  // The same, when the gateway only holds the money (authorise now, capture at shipment): the buyer is
  // done and the order keeps its stock, but nothing is taken until the merchant captures.
  charge_authorized: {
    from: ['awaiting_payment', 'paying'],
    to: 'authorized',
    cause: 'a successful authorisation is settled (pay response, notification, reconciler)',
    set: () => ({ authorizedAt: sql`now()`, attemptKeyId: null }),
  },
  // The merchant's capture took the money (all or part), whoever learns of it first: the capture's
  // answer, the gateway's notification, or the reconciler's query.
  charge_captured: {
    from: ['authorized'],
    to: 'paid',
    cause: 'the capture of the order’s authorisation is settled',
    set: () => ({ paidAt: sql`now()` }),
  },
  // The hold is gone without a capture — the merchant released it, or it lapsed at the gateway: the
  // order is over and gives its stock back (the caller restocks only when this applied).
  authorization_voided: {
    from: ['authorized'],
    to: 'voided',
    cause: 'the order’s authorisation was released or lapsed',
  },
  // The reconciler found an attempt nobody finishes (no live lease) and the gateway reports no money
  // moved: the order is payable again. Guarded by the attempt number it observed, so an attempt
  // started after its query (a retry that reopened and went again) is never reopened by mistake.
  attempt_abandoned: {
    from: ['paying'],
    to: 'awaiting_payment',
    cause: 'the reconciler reopens an attempt the gateway never charged',
    guard: ({ attempt }) => eq(orders.paymentAttempt, attempt),
    set: () => ({ attemptKeyId: null }),
  },
  // The expiry job: an order still unpaid past its expiry gives its stock back (the caller restocks
  // only when this applied). Only once no trade is open — every trade is closed first, so none can
  // still take money — unless a close stayed in doubt past the grace; a payment that lands after that
  // is refunded.
  expired: {
    from: ['awaiting_payment'],
    to: 'expired',
    cause: 'the expiry job expires an unpaid order past its expiry',
    guard: ({ tradeInDoubt }) =>
      tradeInDoubt ? undefined : sql`not exists (select 1 from order_trades t where t.order_id = ${orders.id} and t.status = 'open')`,
  },
};

/** The table as rows, one per from-state. */
export function orderTransitionRows(): { from: OrderStatus; event: OrderEvent; to: OrderStatus; cause: string }[] {
  return (Object.keys(ORDER_TRANSITIONS) as OrderEvent[]).flatMap((event) => {
    const transition = ORDER_TRANSITIONS[event];
    return transition.from.map((from) => ({ from, event, to: transition.to, cause: transition.cause }));
  });
}

/** Whether the table lets an order in `status` take `event` (guards aside). */
export function orderMayTake(event: OrderEvent, status: OrderStatus): boolean {
  return ORDER_TRANSITIONS[event].from.includes(status);
}

/** Statuses nothing leaves: the order is over, and any trade it still holds open must be closed. */
export const FINAL_ORDER_STATUSES: readonly OrderStatus[] = ORDER_STATUSES.filter(
  (status) => !(Object.keys(ORDER_TRANSITIONS) as OrderEvent[]).some((event) => orderMayTake(event, status)),
);

/** The order row as a transition leaves it. */
export interface TransitionedOrder {
  id: string;
  status: OrderStatus;
  paymentAttempt: number;
  paidAt: Date | null;
}

export type TransitionResult = { applied: true; order: TransitionedOrder } | { applied: false };

/**
 * Applies `event` to the order inside the caller's transaction, as one conditional UPDATE. Not
 * applied (and nothing changed) when the order is not in one of the event's from-states or its guard
 * does not hold: another actor got there first, or the order was never eligible.
 */
export async function applyOrderTransition<E extends OrderEvent>(
  tx: Transaction,
  orderId: string,
  event: E,
  params: OrderEventParams[E],
): Promise<TransitionResult> {
  const transition: OrderTransition<OrderEventParams[E]> = ORDER_TRANSITIONS[event];
  const [order] = await tx
    .update(orders)
    .set({ ...transition.set?.(params), status: transition.to, updatedAt: sql`now()` })
    .where(and(eq(orders.id, orderId), inArray(orders.status, [...transition.from]), transition.guard?.(params)))
    .returning({ id: orders.id, status: orders.status, paymentAttempt: orders.paymentAttempt, paidAt: orders.paidAt });
  return order ? { applied: true, order } : { applied: false };
}

/** A transition the table does not allow from the order's current state (or whose guard failed). */
export class IllegalOrderTransitionError extends Error {
  constructor(
    readonly orderId: string,
    readonly event: OrderEvent,
    /** The status the order was found in; undefined when there is no such order. */
    readonly found: OrderStatus | undefined,
  ) {
    const { from, to } = ORDER_TRANSITIONS[event];
    super(
      found === undefined
        ? `Order ${orderId} cannot take ${event}: there is no such order.`
        : orderMayTake(event, found)
          ? `Order ${orderId} cannot take ${event} (${found} → ${to}): its guard does not hold.`
          : `Order ${orderId} cannot take ${event} from ${found}: ${event} moves an order from ${from.join(' or ')} to ${to}.`,
    );
    this.name = 'IllegalOrderTransitionError';
  }
}

/**
 * For callers that hold the order's row lock and have checked its state: the transition must apply.
 * If it does not, the caller's view and the table disagree — a bug, not a race — so this throws and
 * the caller's transaction rolls back.
 */
export async function requireOrderTransition<E extends OrderEvent>(
  tx: Transaction,
  orderId: string,
  event: E,
  params: OrderEventParams[E],
): Promise<TransitionedOrder> {
  const result = await applyOrderTransition(tx, orderId, event, params);
  if (result.applied) return result.order;
  const [current] = await tx.select({ status: orders.status }).from(orders).where(eq(orders.id, orderId));
  throw new IllegalOrderTransitionError(orderId, event, current?.status);
}

// The checkout's answers about an order's state, the same wherever they are given.

export function orderNotFound(): CheckoutError {
  return new CheckoutError('ORDER_NOT_FOUND', 'No such order.');
}

/** Another key owns the order's attempt in flight: two tabs or two gateways. */
export function orderPaymentInProgress(): CheckoutError {
  return new CheckoutError('ORDER_PAYMENT_IN_PROGRESS', 'Another payment attempt for this order is in progress.');
}

/** The order is over (expired) and takes no new attempt. */
export function orderNotPayable(status: OrderStatus): CheckoutError {
  return new CheckoutError('ORDER_NOT_PAYABLE', `The order is ${status} and can no longer be paid.`);
}
