/**
 * The payment journal (table payment_events): what happened to an order's money, in the order it
 * happened, in a hash chain per order that `npm run audit` verifies. The 幕后 (under the hood) view
 * reads it.
 *
 * Rule of use: an event is appended in the same transaction as the effect it records — the order
 * created with its stock, the payment settled with the order, the refund sent with its row — so the
 * journal never shows an effect that rolled back and never lacks one that committed. What changes
 * nothing in our database (a replayed answer, a 409, a gateway call and its answer) is appended on
 * its own, when it happens. Inside a transaction, append after the order row is locked: appends to one
 * stream queue on a lock of their own, and taking it before the row lock could deadlock.
 *
 * Nothing here updates or deletes; the table refuses it anyway.
 */
import { sql } from 'drizzle-orm';
import type { Executor } from '@/db/client';
import type { GatewayId } from '@/server/payments/gateway';
import { annotateSpan, inSpan } from '@/server/tracing/traces';

export type PaymentEventKind =
  /** A checkout API request and what the guard made of it (claimed, replayed, 409, 422, released…). */
  | 'request'
  | 'order.created'
  | 'order.expired'
  /** Phase 1 of checkout.pay: the order is `paying`, attempt n through one gateway. */
  | 'attempt.started'
  /** The reconciler found no money moved for an attempt nobody finished: the order is payable again. */
  | 'attempt.abandoned'
  | 'payment.succeeded'
  | 'payment.declined'
  /** The gateway's trade is open and waits for the buyer's own step (QR code, card, hosted page). */
  | 'payment.awaiting_buyer'
  /** A success that must not stay (second success, expired order): recorded as excess, refund queued. */
  | 'payment.excess'
  /** Authorise, then capture (./authorizations): the money held for the order, not taken yet. */
  | 'payment.authorized'
  /** An authorisation the order cannot take (paid, authorised elsewhere, over): its release decided. */
  | 'payment.excess_authorization'
  /** The authorisation captured: the order paid for what was taken. */
  | 'payment.captured'
  /** The authorisation released (by the merchant, or as excess) or lapsed at the gateway. */
  | 'payment.authorization_voided'
  /** The merchant decided to capture, or to release, the order's authorisation. */
  | 'authorization.capture_decided'
  | 'authorization.release_decided'
  /** The gateway refused the decision for good (more than held, nothing left): the order stays as it is. */
  | 'authorization.refused'
  /** The order's authorisation is gone without a capture: the order is over and its stock back. */
  | 'order.voided'
  | 'gateway.call'
  | 'gateway.answer'
  | 'trade.closed'
  /** A close reversed a payment made at that instant: its success notification will not pay the order. */
  | 'trade.payment_reversed'
  | 'notification.processed'
  | 'notification.duplicate'
  | 'notification.in_flight'
  /** An operator (or the back office) asked to give back all or part of a paid order: who, how much, why. */
  | 'refund.requested'
  | 'refund.succeeded'
  | 'refund.failed'
  | 'email.queued'
  | 'email.sent'
  | 'exception.recorded'
  /** Drills and demo mode only: a fault was injected here on purpose (answer dropped, process killed…). */
  | 'fault.injected'
  /** The merchant's people (server/operators), on the `operators` stream: who was let in, and what changed. */
  | 'operator.added'
  | 'operator.role_changed'
  | 'operator.password_changed'
  | 'operator.disabled'
  | 'operator.enabled'
  | 'operator.signed_in'
  | 'operator.sign_in_refused'
  | 'operator.signed_out'
  /** 对账 (server/reconciliation), on the `reconciliation` stream: a day reconciled, a mismatch resolved and by whom. */
  | 'reconciliation.run'
  | 'reconciliation.resolved';

export interface PaymentEventInput {
  /** The order it belongs to; null for what belongs to no order (a notification for an unknown one). */
  orderId: string | null;
  /** Stream of an order-less event: `gateway:{id}`. */
  gateway?: GatewayId | string;
  /** Or a stream of its own (`operators`), for what is neither an order's nor a gateway's. */
  stream?: string;
  kind: PaymentEventKind;
  data: Record<string, unknown>;
}

export function streamOf(event: Pick<PaymentEventInput, 'orderId' | 'gateway' | 'stream'>): string {
  if (event.orderId) return `order:${event.orderId}`;
  return event.stream ?? `gateway:${event.gateway ?? 'unknown'}`;
}

/** Appends one event, in the caller's transaction when given one. */
export async function journal(db: Executor, event: PaymentEventInput): Promise<void> {
  await db.execute(
    sql`select append_payment_event(${streamOf(event)}, ${event.orderId}::uuid, ${event.kind}, ${JSON.stringify(event.data)}::jsonb)`,
  );
}

/** A merchant's request about an order (merchant.capture, .release), with who made it: journaled if the order exists. */
export async function journalMerchantRequest(db: Executor, orderId: string, data: Record<string, unknown>): Promise<void> {
  await db.execute(sql`
    select append_payment_event('order:' || o.id::text, o.id, 'request', ${JSON.stringify(data)}::jsonb)
      from orders o
     where o.id = ${orderId}::uuid`);
}

/**
 * Appends a request event to the order's stream only if the order is this customer's: a request
 * naming someone else's order (answered 404) must not write into that order's history.
 */
export async function journalRequest(db: Executor, customerId: string, orderId: string, data: Record<string, unknown>): Promise<void> {
  await db.execute(sql`
    select append_payment_event('order:' || o.id::text, o.id, 'request',
                                ${JSON.stringify(data)}::jsonb || jsonb_build_object('attempt', o.payment_attempt))
      from orders o
     where o.id = ${orderId}::uuid and o.customer_id = ${customerId}::uuid`);
}

export type GatewayOperation = 'charge' | 'query' | 'close' | 'refund' | 'refund_query' | 'capture' | 'release';

/**
 * A gateway call and its answer, each journaled when it happens: the call before it is sent (so a
 * crash while it is in flight still shows that it went out), the answer as soon as it arrives.
 */
export async function journaledCall<T>(
  db: Executor,
  call: { orderId: string; gateway: GatewayId; operation: GatewayOperation; request: Record<string, unknown> },
  send: () => Promise<T>,
  summarise: (answer: T) => Record<string, unknown> = outcomeOf,
): Promise<T> {
  return inSpan(`gateway.${call.operation}`, call.orderId, { 'payonce.gateway': call.gateway, 'payonce.operation': call.operation }, () =>
    journaledSend(db, call, send, summarise),
  );
}

async function journaledSend<T>(
  db: Executor,
  call: { orderId: string; gateway: GatewayId; operation: GatewayOperation; request: Record<string, unknown> },
  send: () => Promise<T>,
  summarise: (answer: T) => Record<string, unknown>,
): Promise<T> {
  const base = { gateway: call.gateway, operation: call.operation };
  await journal(db, { orderId: call.orderId, kind: 'gateway.call', data: { ...base, ...call.request } });
  const started = performance.now();
  let answer: T;
  try {
    answer = await send();
  } catch (error) {
    const ms = Math.round(performance.now() - started);
    await journal(db, {
      orderId: call.orderId,
      kind: 'gateway.answer',
      data: { ...base, outcome: 'error', message: error instanceof Error ? error.message : String(error), ms },
    });
    throw error;
  }
  const ms = Math.round(performance.now() - started);
  const summary = summarise(answer);
  if (typeof summary.outcome === 'string') annotateSpan({ 'payonce.outcome': summary.outcome });
  await journal(db, { orderId: call.orderId, kind: 'gateway.answer', data: { ...base, ...summary, ms } });
  return answer;
}

/** A gateway outcome (`{ kind, …fields }`, no SDK types) as journal data: `{ outcome, …fields }`. */
function outcomeOf(answer: unknown): Record<string, unknown> {
  if (answer === null || typeof answer !== 'object' || !('kind' in answer)) return { outcome: 'answered' };
  const { kind, ...fields } = answer as { kind: string } & Record<string, unknown>;
  return { outcome: kind, ...fields };
}
