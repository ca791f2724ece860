/**
 * Authorise, then capture (STRIPE_CAPTURE_METHOD=manual): the buyer's payment only holds the money,
 * and the merchant takes it at shipment — all or part, once — or lets it go.
 *
 *   the buyer pays        → the order `authorized`, a payment `authorized` (settleAuthorizedCharge)
 *   the merchant decides  → one authorization_actions row per authorisation (decideCapture,
 *                           decideRelease): two operators, a double click and a retry all meet it
 *   the worker carries it → server/jobs/authorization-worker.ts, the same capture id every try
 *   the gateway answers   → captured: the order `paid` for what was taken (settleCapture, reached
 *                           through settleSucceededCharge from the answer, the notification or a
 *                           query); released or lapsed: the order `voided`, stock back
 *                           (settleVoidedAuthorization)
 *
 * Every path locks the order row first, so the worker's answer, the gateway's notification and the
 * reconciler serialise on it and whichever comes second changes nothing. An authorisation landing on
 * an order that cannot take it (paid, authorised by another trade, expired) is released, never kept.
 */
import { and, eq, inArray, isNotNull, sql } from 'drizzle-orm';
import type { Transaction } from '@/db/client';
import { authorizationActions, orders, payments, refunds, type AuthorizationAction, type OrderStatus } from '@/db/schema';
import { respond, type Responded, type StoredResponse } from '@payonce/idempotency';
import type { GatewayId } from '@/server/payments/gateway';
import { restockOrder } from './catalogue';
import { journal } from './journal';
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
import { orderMayTake, requireOrderTransition } from './order-state';
import { CheckoutError } from './refusals';

/** The body of checkout.pay when the buyer's money is held (201), and of every later attempt. */
export interface AuthorizedOrder {
  orderId: string;
  status: 'authorized';
  payment: { gateway: GatewayId; outTradeNo: string; amountMinor: number; currency: string; gatewayTradeNo: string };
}

/**
 * What recording an authorisation did: it holds the money for the order (`authorized`, now or before);
 * it had been captured (`paid`) or released (`voided`) already; or the order could not take it and it
 * is being released (`releasing`), with the order's own payment when it has one.
 */
export type AuthorizationOutcome =
  | { kind: 'authorized'; authorized: AuthorizedOrder }
  | { kind: 'paid'; paid: PaidOrder }
  | { kind: 'voided'; orderId: string }
  | { kind: 'releasing'; orderId: string; orderStatus: OrderStatus; answer: PaidOrder | AuthorizedOrder | undefined };

/** The settle outcome of a captured authorisation: ./settle's SettleOutcome. */
export type CaptureSettled =
  | { kind: 'paid'; paid: PaidOrder }
  | { kind: 'refunding'; orderId: string; orderStatus: OrderStatus; refundId: string; paid: PaidOrder | undefined };

type HeldPayment = Pick<
  typeof payments.$inferSelect,
  'id' | 'role' | 'status' | 'authorizedMinor' | 'amountMinor' | 'currency' | 'gateway' | 'gatewayTradeNo'
>;

const heldColumns = {
  id: payments.id,
  role: payments.role,
  status: payments.status,
  authorizedMinor: payments.authorizedMinor,
  amountMinor: payments.amountMinor,
  currency: payments.currency,
  gateway: payments.gateway,
  gatewayTradeNo: payments.gatewayTradeNo,
};

/** The authorisation this trade is, whatever became of it since (held, captured or released). */
export async function heldAuthorization(
  tx: Transaction,
  orderId: string,
  trade: { gateway: GatewayId; gatewayTradeNo: string },
): Promise<HeldPayment | undefined> {
  const [held] = await tx
    .select(heldColumns)
    .from(payments)
    .where(
      and(
        eq(payments.orderId, orderId),
        eq(payments.gateway, trade.gateway),
        eq(payments.gatewayTradeNo, trade.gatewayTradeNo),
        isNotNull(payments.authorizedMinor),
      ),
    );
  return held;
}

/** The authorised order as checkout.pay answers it; undefined when the order holds no authorisation. */
export async function authorizedOrderView(tx: Transaction, orderId: string): Promise<AuthorizedOrder | undefined> {
  const [payment] = await tx
    .select()
    .from(payments)
    .where(and(eq(payments.orderId, orderId), eq(payments.status, 'authorized'), eq(payments.role, 'payment')));
  if (!payment || payment.gatewayTradeNo === null) return undefined;
  const { gateway, outTradeNo, amountMinor, currency, gatewayTradeNo } = payment;
  return { orderId, status: 'authorized', payment: { gateway: gateway as GatewayId, outTradeNo, amountMinor, currency, gatewayTradeNo } };
}

// ── The buyer's payment holds the money ──────────────────────────────────────────────────────────

/**
 * Records an authorisation, whoever learnt of it (the pay response, the notification, the
 * reconciler). Call inside a transaction; the order row is locked first.
 *   - the same authorisation again → what it became;
 *   - the order is payable → it holds the money for it: payment, order, trade, together;
 *   - anything else → an `excess` authorisation and its release, together: a hold is never kept on
 *     an order that is paid, authorised by another trade, or over.
 */
export async function settleAuthorizedCharge(tx: Transaction, charge: SucceededCharge): Promise<AuthorizationOutcome> {
  const order = await lockOrderByOutTradeNo(tx, charge.outTradeNo);
  if (!order) throw new CheckoutError('ORDER_NOT_FOUND', `No order with out_trade_no ${charge.outTradeNo}.`);
  if (order.amountMinor !== charge.amountMinor || order.currency !== charge.currency) {
    throw new CheckoutError(
      'AMOUNT_MISMATCH',
      `Authorised ${charge.amountMinor} ${charge.currency}, but the order is ${order.amountMinor} ${order.currency}.`,
    );
  }
  const known = await heldAuthorization(tx, order.id, charge);
  if (known) return knownAuthorization(tx, order, known);
  await markTradePaid(tx, order, charge);
  const attempt = Math.max(order.paymentAttempt, 1);
  const role = orderMayTake('charge_authorized', order.status) ? 'payment' : 'excess';
  const [payment] = await tx
    .insert(payments)
    .values({
      ...{ orderId: order.id, gateway: charge.gateway, outTradeNo: charge.outTradeNo, attempt, role },
      ...{ amountMinor: charge.amountMinor, authorizedMinor: charge.amountMinor, currency: charge.currency },
      ...{ status: 'authorized', gatewayTradeNo: charge.gatewayTradeNo, source: charge.source },
    })
    .returning({ id: payments.id });
  if (!payment) throw new Error('inserting the authorisation returned no row');
  if (role === 'excess') return releaseExcess(tx, order, payment.id, charge);
  await requireOrderTransition(tx, order.id, 'charge_authorized', {});
  await journal(tx, { orderId: order.id, kind: 'payment.authorized', data: { ...journaledCharge(charge), attempt } });
  const authorized = await authorizedOrderView(tx, order.id);
  if (!authorized) throw new Error(`order ${order.id} was just authorised but has no authorisation`);
  return { kind: 'authorized', authorized };
}

async function knownAuthorization(tx: Transaction, order: LockedOrder, known: HeldPayment): Promise<AuthorizationOutcome> {
  if (known.role === 'excess')
    return { kind: 'releasing', orderId: order.id, orderStatus: order.status, answer: await orderAnswer(tx, order) };
  switch (known.status) {
    case 'authorized': {
      const authorized = await authorizedOrderView(tx, order.id);
      if (!authorized) throw new Error(`order ${order.id} holds an authorisation but has no view of it`);
      return { kind: 'authorized', authorized };
    }
    case 'succeeded': {
      const paid = await paidOrderView(tx, order.id);
      if (!paid) throw new Error(`order ${order.id} was captured but has no paid view`);
      return { kind: 'paid', paid };
    }
    case 'voided':
    case 'declined':
      return { kind: 'voided', orderId: order.id };
    default: {
      const unknown: never = known.status;
      throw new Error(`unknown payment status ${String(unknown)}`);
    }
  }
}

/** What checkout.pay answers about the order now: its payment, its authorisation, or nothing. */
async function orderAnswer(tx: Transaction, order: LockedOrder): Promise<PaidOrder | AuthorizedOrder | undefined> {
  if (order.status === 'paid') return paidOrderView(tx, order.id);
  if (order.status === 'authorized') return authorizedOrderView(tx, order.id);
  return undefined;
}

/** A hold the order cannot take: released by the authorization worker, decided here. */
async function releaseExcess(
  tx: Transaction,
  order: LockedOrder,
  paymentId: string,
  charge: SucceededCharge,
): Promise<AuthorizationOutcome> {
  const captureId = await insertAction(tx, order, paymentId, charge, {
    action: 'release',
    amountMinor: null,
    reason: 'excess_authorization',
    decidedBy: 'payonce',
  });
  await journal(tx, {
    orderId: order.id,
    kind: 'payment.excess_authorization',
    data: { ...journaledCharge(charge), orderStatus: order.status, captureId },
  });
  return { kind: 'releasing', orderId: order.id, orderStatus: order.status, answer: await orderAnswer(tx, order) };
}

// ── The gateway took the money ───────────────────────────────────────────────────────────────────

/**
 * A capture of the authorisation `held`, as the gateway reports it (`charge.amountMinor` is what it
 * took, at most what was held). The order is paid for that much, once; a capture that lands where it
 * must not stay (an excess authorisation, an order voided meanwhile) is refunded.
 */
export async function settleCapture(
  tx: Transaction,
  order: LockedOrder,
  held: HeldPayment,
  charge: SucceededCharge,
): Promise<CaptureSettled> {
  if (held.status === 'succeeded') return knownCapture(tx, order, held);
  if (charge.currency !== held.currency || held.authorizedMinor === null || charge.amountMinor > held.authorizedMinor) {
    throw new CheckoutError(
      'AMOUNT_MISMATCH',
      `Captured ${charge.amountMinor} ${charge.currency}, but ${held.authorizedMinor} ${held.currency} was authorised.`,
    );
  }
  const paysOrder = held.role === 'payment' && order.status === 'authorized';
  await tx
    .update(payments)
    .set({ status: 'succeeded', amountMinor: charge.amountMinor, role: paysOrder ? 'payment' : 'excess', capturedAt: sql`now()` })
    .where(eq(payments.id, held.id));
  await settleAction(tx, held.id, { status: 'succeeded', capturedMinor: charge.amountMinor });
  const captured = { ...journaledCharge(charge), authorizedMinor: held.authorizedMinor };
  if (!paysOrder) {
    const refundId = await queueRefund(tx, order, held.id, charge);
    await journal(tx, { orderId: order.id, kind: 'payment.excess', data: { ...captured, orderStatus: order.status, refundId } });
    return { kind: 'refunding', orderId: order.id, orderStatus: order.status, refundId, paid: await paidOrderView(tx, order.id) };
  }
  const paidRow = await requireOrderTransition(tx, order.id, 'charge_captured', {});
  await journal(tx, { orderId: order.id, kind: 'payment.captured', data: captured });
  await queuePaidEmail(tx, order, { gateway: charge.gateway, amountMinor: charge.amountMinor, paidAt: paidRow.paidAt });
  const paid = await paidOrderView(tx, order.id);
  if (!paid) throw new Error(`order ${order.id} was just captured but has no paid view`);
  return { kind: 'paid', paid };
}

async function knownCapture(tx: Transaction, order: LockedOrder, held: HeldPayment): Promise<CaptureSettled> {
  const paid = await paidOrderView(tx, order.id);
  if (held.role === 'payment') {
    if (!paid) throw new Error(`order ${order.id} was captured but has no paid view`);
    return { kind: 'paid', paid };
  }
  const [refund] = await tx.select({ refundId: refunds.refundId }).from(refunds).where(eq(refunds.paymentId, held.id));
  if (!refund) throw new Error(`excess capture ${held.id} has no refund`);
  return { kind: 'refunding', orderId: order.id, orderStatus: order.status, refundId: refund.refundId, paid };
}

// ── The hold is gone ─────────────────────────────────────────────────────────────────────────────

/**
 * The gateway says this authorisation can take nothing any more: released (as we decided) or lapsed. The
 * order it held the money for is voided and gives its stock back, once. `unknown`: not an
 * authorisation of ours; `captured`: too late, the money was taken (the capture settles it).
 */
export async function settleVoidedAuthorization(
  tx: Transaction,
  trade: { gateway: GatewayId; outTradeNo: string; gatewayTradeNo: string },
): Promise<'voided' | 'unknown' | 'captured'> {
  const order = await lockOrderByOutTradeNo(tx, trade.outTradeNo);
  if (!order) return 'unknown';
  const held = await heldAuthorization(tx, order.id, trade);
  if (!held) return 'unknown';
  if (held.status === 'succeeded') return 'captured';
  if (held.status !== 'authorized') return 'voided';
  await tx.update(payments).set({ status: 'voided' }).where(eq(payments.id, held.id));
  const [action] = await tx
    .select({ action: authorizationActions.action })
    .from(authorizationActions)
    .where(eq(authorizationActions.paymentId, held.id));
  // Released when we decided so; otherwise the gateway let it go on its own (lapsed).
  const how = action?.action === 'release' ? 'released' : 'lapsed';
  await settleAction(
    tx,
    held.id,
    action?.action === 'capture'
      ? { status: 'failed', lastError: `AUTHORIZATION_${how.toUpperCase()}: nothing left to capture` }
      : { status: 'succeeded' },
  );
  await journal(tx, {
    orderId: order.id,
    kind: 'payment.authorization_voided',
    data: { gateway: trade.gateway, gatewayTradeNo: trade.gatewayTradeNo, amountMinor: held.authorizedMinor, how, role: held.role },
  });
  if (held.role === 'payment' && order.status === 'authorized') {
    await requireOrderTransition(tx, order.id, 'authorization_voided', {});
    await restockOrder(tx, order.id);
    await journal(tx, { orderId: order.id, kind: 'order.voided', data: { restocked: true, how } });
  }
  return 'voided';
}

/** The authorisation's decision, settled once (a later answer for it changes nothing). */
async function settleAction(
  tx: Transaction,
  paymentId: string,
  result: { status: 'succeeded'; capturedMinor?: number } | { status: 'failed'; lastError: string },
): Promise<void> {
  await tx
    .update(authorizationActions)
    .set({ ...result, settledAt: sql`now()`, leaseUntil: null })
    .where(and(eq(authorizationActions.paymentId, paymentId), inArray(authorizationActions.status, ['pending', 'sent'])));
}

// ── The merchant decides ─────────────────────────────────────────────────────────────────────────

/** A decision about an order's authorisation, as the merchant's procedures answer it (202). */
export interface AuthorizationDecision {
  orderId: string;
  action: AuthorizationAction;
  /** A capture: what is to be taken. */
  amountMinor: number | null;
  /** What was held. */
  authorizedMinor: number;
  currency: string;
  status: 'pending' | 'sent' | 'succeeded' | 'failed';
  capturedMinor: number | null;
  decidedBy: string;
}

export type DecisionResponse = StoredResponse<AuthorizationDecision, 202>;

/**
 * merchant.capture in one transaction: take `amountMinor` (default: all that is held) of the order's
 * authorisation. The authorization worker sends it; the answer is the decision (202), and the order
 * shows the capture once the gateway confirms it. Asking again for the same capture answers the same
 * decision; a different one (another amount, a release) is refused: an authorisation is decided once.
 */
export function decideCapture(
  input: { orderId: string; amountMinor?: number | undefined },
  decidedBy: string,
): (tx: Transaction) => Promise<Responded<DecisionResponse>> {
  return (tx) => decide(tx, input.orderId, { action: 'capture', amountMinor: input.amountMinor }, decidedBy);
}

/** merchant.release: let the order's authorisation go; the order is voided once the gateway confirms. */
export function decideRelease(input: { orderId: string }, decidedBy: string): (tx: Transaction) => Promise<Responded<DecisionResponse>> {
  return (tx) => decide(tx, input.orderId, { action: 'release', amountMinor: undefined }, decidedBy);
}

async function decide(
  tx: Transaction,
  orderId: string,
  wanted: { action: AuthorizationAction; amountMinor: number | undefined },
  decidedBy: string,
): Promise<Responded<DecisionResponse>> {
  const [order] = await tx.select().from(orders).where(eq(orders.id, orderId)).for('update');
  if (!order) throw new CheckoutError('ORDER_NOT_FOUND', 'No such order.');
  const [held] = await tx
    .select(heldColumns)
    .from(payments)
    .where(and(eq(payments.orderId, orderId), eq(payments.role, 'payment'), isNotNull(payments.authorizedMinor)));
  const [existing] = held ? await tx.select().from(authorizationActions).where(eq(authorizationActions.paymentId, held.id)) : [];
  if (held && existing) return sameDecision(existing, held, wanted);
  if (!held || order.status !== 'authorized') throw notAuthorized(order.status);
  const authorizedMinor = held.authorizedMinor ?? held.amountMinor;
  const amountMinor = wanted.action === 'capture' ? (wanted.amountMinor ?? authorizedMinor) : null;
  if (amountMinor !== null && (amountMinor < 1 || amountMinor > authorizedMinor)) {
    throw new CheckoutError(
      'CAPTURE_AMOUNT_INVALID',
      `A capture takes 1 … ${authorizedMinor} ${held.currency} (what is authorised); asked ${amountMinor}.`,
    );
  }
  const charge = {
    gateway: held.gateway as GatewayId,
    outTradeNo: order.outTradeNo,
    gatewayTradeNo: held.gatewayTradeNo ?? '',
    currency: held.currency,
  };
  const captureId = await insertAction(tx, order, held.id, charge, { action: wanted.action, amountMinor, reason: 'merchant', decidedBy });
  await journal(tx, {
    orderId,
    kind: `authorization.${wanted.action}_decided`,
    data: { captureId, amountMinor, authorizedMinor, by: decidedBy },
  });
  const [row] = await tx.select().from(authorizationActions).where(eq(authorizationActions.captureId, captureId));
  if (!row) throw new Error(`decision ${captureId} was just written but cannot be read`);
  return respond(202, decisionView(row, authorizedMinor));
}

/** Asked again: the decision already taken, if it is this one; otherwise a refusal that says which it is. */
function sameDecision(
  existing: typeof authorizationActions.$inferSelect,
  held: HeldPayment,
  wanted: { action: AuthorizationAction; amountMinor: number | undefined },
): Responded<DecisionResponse> {
  const authorizedMinor = held.authorizedMinor ?? held.amountMinor;
  const same =
    existing.action === wanted.action && (wanted.action === 'release' || (wanted.amountMinor ?? authorizedMinor) === existing.amountMinor);
  if (!same) {
    const what = existing.action === 'capture' ? `a capture of ${existing.amountMinor} ${existing.currency}` : 'a release';
    throw new CheckoutError(
      'AUTHORIZATION_ALREADY_DECIDED',
      `This order's authorisation was already decided: ${what} (${existing.status}).`,
    );
  }
  return respond(202, decisionView(existing, authorizedMinor));
}

function notAuthorized(status: OrderStatus): CheckoutError {
  switch (status) {
    case 'voided':
      return new CheckoutError('AUTHORIZATION_RELEASED', 'The order’s authorisation was released or lapsed; nothing can be captured.');
    case 'paid':
      return new CheckoutError(
        'ORDER_NOT_AUTHORIZED',
        'The order was paid at once (automatic capture); there is no authorisation to decide.',
      );
    default:
      return new CheckoutError('ORDER_NOT_AUTHORIZED', `The order is ${status}; only an authorised order can be captured or released.`);
  }
}

function decisionView(row: typeof authorizationActions.$inferSelect, authorizedMinor: number): AuthorizationDecision {
  const { orderId, action, amountMinor, currency, status, capturedMinor, decidedBy } = row;
  return { orderId, action, amountMinor, authorizedMinor, currency, status, capturedMinor, decidedBy };
}

/**
 * The capture id sent to the gateway for an order's n-th decision: `C` + the out_trade_no's body + n
 * in base 36 — fixed here, before any call, and the gateway's idempotency key is made from it.
 */
export function captureIdFor(outTradeNo: string, sequence: number): string {
  return `C${outTradeNo.replace(/^PO/, '')}${sequence.toString(36).toUpperCase()}`;
}

async function insertAction(
  tx: Transaction,
  order: LockedOrder,
  paymentId: string,
  trade: { gateway: GatewayId; outTradeNo: string; gatewayTradeNo: string; currency: string },
  decision: { action: AuthorizationAction; amountMinor: number | null; reason: 'merchant' | 'excess_authorization'; decidedBy: string },
): Promise<string> {
  // The order row is locked, so counting its decisions cannot race another decision of the same order.
  const [{ n } = { n: 0 }] = await tx
    .select({ n: sql<number>`count(*)::int` })
    .from(authorizationActions)
    .where(eq(authorizationActions.orderId, order.id));
  const captureId = captureIdFor(order.outTradeNo, n + 1);
  await tx.insert(authorizationActions).values({
    ...{ orderId: order.id, paymentId, gateway: trade.gateway, outTradeNo: trade.outTradeNo, gatewayTradeNo: trade.gatewayTradeNo },
    ...{ action: decision.action, amountMinor: decision.amountMinor, currency: trade.currency, captureId },
    ...{ reason: decision.reason, decidedBy: decision.decidedBy },
  });
  return captureId;
}
