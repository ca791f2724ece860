/**
 * checkout.pay as a switch over the key's recovery point, in three atomic phases, each its own
 * transaction, with the gateway call between them and never inside one:
 *
 *   started          → 1. start the attempt: the order guard; order → paying; recovery point
 *                          `attempt_started`. The order's other open trades are closed first (./trades):
 *                          a trade abandoned after a decline, or on another gateway, could otherwise
 *                          still be paid by the buyer later. A close is idempotent: no recovery point.
 *   attempt_started  → 2. charge: the gateway, by the order's out_trade_no (deduplicated by the gateway)
 *                      3. record its answer: payment row, order state, outbox and the stored response,
 *                          together (`recordSettled`, `recordDecline`, `recordAwaitingBuyer`)
 *
 * A crash anywhere leaves the key at its last recovery point; the retry that takes the key over
 * resumes there, so phase 1's effects are never repeated and phase 2 is repeated only as a call the
 * gateway recognises as the same one. Tests: test/checkout/pay.test.ts, one per recovery point and branch.
 */
import { and, eq } from 'drizzle-orm';
import type { Transaction } from '@/db/client';
import { orders, payments } from '@/db/schema';
import { recoveryPoint, respond, STARTED, type OwnedKey, type PhaseResult, type StoredResponse } from '@payonce/idempotency';
import type { BuyerAction, BuyerStep, ChargeOutcome, GatewayId, PaymentGateway, TestBuyer } from '@/server/payments/gateway';
import { assertNever } from '@/server/payments/transport';
import { CheckoutError } from './refusals';
import type { ReturnAddress } from './return-address';
import { notifyUrlFor, type CheckoutServices } from './services';
import { journal, journaledCall } from './journal';
import { applyOrderTransition, orderNotFound, orderNotPayable, orderPaymentInProgress, requireOrderTransition } from './order-state';
import { paidOrderView, settleSucceededCharge, type PaidOrder } from './settle';
import { authorizedOrderView, settleAuthorizedCharge, type AuthorizedOrder } from './authorizations';
import { closeOpenTrades, markTradeOpen, otherOpenTrades, tradeState } from './trades';

export interface PayInput {
  orderId: string;
  gateway: GatewayId;
  /** A sandbox test buyer: the charge answers at once (201 or 402). */
  buyer?: TestBuyer;
  /** Without a test buyer: the buyer's own step the page prefers; default the gateway's first. */
  buyerStep?: BuyerStep;
}

/** Recovery point after phase 1: the order is `paying` and this key owns the attempt. */
export const ATTEMPT_STARTED = 'attempt_started';

export interface DeclinedPayment {
  reason: 'PAYMENT_DECLINED';
  message: string;
  orderId: string;
  gateway: GatewayId;
  declineCode: string;
}

/** The trade is open at the gateway and waits for the buyer's own step; the order completes by notification or query. */
export interface AwaitingBuyer {
  orderId: string;
  status: 'awaiting_buyer';
  gateway: GatewayId;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  action: BuyerAction;
}

/**
 * checkout.pay's answers: the paid order (or, authorise-then-capture, the order whose money is held),
 * the buyer's step, or a terminal decline — each stored and replayed per key.
 */
export type PayResponse =
  | StoredResponse<PaidOrder, 201>
  | StoredResponse<AuthorizedOrder, 201>
  | StoredResponse<AwaitingBuyer, 202>
  | StoredResponse<DeclinedPayment, 402>;

/** What every step of one checkout.pay request works with. */
export interface PayContext {
  services: CheckoutServices;
  key: OwnedKey<Transaction>;
  customerId: string;
  input: PayInput;
  gateway: PaymentGateway;
  /**
   * The trade a new attempt keeps open: Alipay, WeChat Pay and 2C2P reopen the same trade on another
   * attempt at the same gateway (one out_trade_no), so it is not closed first. Stripe: null — every
   * attempt is a new PaymentIntent, and the old one is cancelled first.
   */
  keep: GatewayId | null;
  returnTo: ReturnAddress;
}

/**
 * checkout.pay for the guard: refused before anything is claimed when the gateway or the buyer does
 * not fit; then `pay` with the key this request owns. `returnTo` is where a gateway's own page sends
 * this buyer back to: the origin they are paying from (./return-address).
 */
export function payOrder(
  services: CheckoutServices,
  customerId: string,
  input: PayInput,
  returnTo: ReturnAddress,
): (key: OwnedKey<Transaction>) => Promise<PayResponse> {
  const gateway = services.gateways[input.gateway];
  if (!gateway) {
    throw new CheckoutError('GATEWAY_NOT_CONFIGURED', `The gateway ${input.gateway} is not configured.`);
  }
  checkBuyer(gateway, input);
  const keep = gateway.oneTradePerOrder ? input.gateway : null;
  return (key) => pay({ services, key, customerId, input, gateway, keep, returnTo });
}

/** More passes than this means the order keeps being reopened under this key: let the buyer retry. */
const MAX_PASSES = 4;

/**
 * The request from wherever its key stands: a new key starts the attempt, a key taken over from a
 * crashed or timed-out owner resumes at its recovery point, so phase 1 is never repeated and the
 * charge is repeated only as a call the gateway recognises as the same one.
 */
async function pay(context: PayContext): Promise<PayResponse> {
  for (let pass = 1; pass <= MAX_PASSES; pass++) {
    const { key } = context;
    switch (key.recoveryPoint) {
      case STARTED: {
        const started = await startAttempt(context);
        if (started.kind === 'response') return started.response;
        break; // the key now stands at ATTEMPT_STARTED
      }
      case ATTEMPT_STARTED: {
        const charged = await chargeAttempt(context);
        if (charged.kind === 'response') return charged.response;
        if (charged.kind === 'recovery_point') throw new Error(`checkout.pay: the charge cannot end at ${charged.name}`);
        // The attempt was closed while nobody worked on it (the reconciler found no charge at the
        // gateway): start a new one instead of failing.
        const restarted = await startAttempt(context);
        if (restarted.kind === 'response') return restarted.response;
        break;
      }
      default:
        throw new Error(`checkout.pay has no recovery point "${key.recoveryPoint}"`);
    }
  }
  throw orderPaymentInProgress();
}

// ── Phase 1: start the attempt ───────────────────────────────────────────────────────────────────

/**
 * The attempt phase's answer when the order still holds another open trade: nothing was written, and
 * those trades must be closed at their gateways (outside any transaction) before the attempt starts.
 */
const OTHER_TRADES_OPEN = { kind: 'none' } as const;

/** How often the close-then-start loop goes round before it gives the race to the other request. */
const OPEN_ATTEMPT_ROUNDS = 3;

/**
 * Phase 1, at once when the order holds no other open trade (the usual case), so that its answers
 * (already paid, this gateway's trade closed) come before any other trade is touched. Otherwise the
 * order's other trades are closed first; the phase re-checks them under the order's lock, so a trade
 * another tab opened in between is closed on the next round.
 */
async function startAttempt(context: PayContext): Promise<PhaseResult<PayResponse>> {
  for (let round = 1; round <= OPEN_ATTEMPT_ROUNDS; round++) {
    const started = await context.key.atomicPhase((tx) => attemptPhase(tx, context));
    if (started.kind !== OTHER_TRADES_OPEN.kind) return started;
    await closeOtherTrades(context);
  }
  throw orderPaymentInProgress();
}

/**
 * The order-level guard, in one transaction under the order's lock: at most one attempt in flight per
 * order, owned by one key, and no other trade open; a paid order answers with its payment and calls no
 * gateway.
 */
async function attemptPhase(tx: Transaction, context: PayContext): Promise<PhaseResult<PayResponse> | typeof OTHER_TRADES_OPEN> {
  const { key, input, keep } = context;
  const order = await lockOrder(tx, context);
  switch (order.status) {
    case 'paid':
      // Already paid (by another tab, another gateway, a notification): that payment is the answer.
      return paidAnswer(tx, order.id);
    case 'authorized':
      // The buyer's money is already held for it: that authorisation is the answer.
      return authorizedAnswer(tx, order.id);
    case 'paying':
      // Only the order sees two tabs or two gateways: they hold different keys.
      if (order.attemptKeyId !== key.id) throw orderPaymentInProgress();
      return recoveryPoint(ATTEMPT_STARTED); // our own attempt, found again after expiry
    case 'expired':
    case 'voided':
      throw orderNotPayable(order.status);
    case 'awaiting_payment':
      if (keep && (await tradeState(tx, order.id, keep)) === 'closed') return recordTradeClosed(tx, context, order.id);
      if ((await otherOpenTrades(tx, order.id, keep)).length > 0) return OTHER_TRADES_OPEN;
      await markTradeOpen(tx, order.id, input.gateway, order.paymentAttempt + 1);
      await requireOrderTransition(tx, order.id, 'attempt_started', { keyId: key.id, gateway: input.gateway });
      await journal(tx, {
        orderId: order.id,
        kind: 'attempt.started',
        data: { attempt: order.paymentAttempt + 1, gateway: input.gateway, ...(input.buyer ? { buyer: input.buyer } : {}) },
      });
      return recoveryPoint(ATTEMPT_STARTED);
    default:
      return assertNever(order.status);
  }
}

/** Closes the order's open trades other than the one kept, outside any transaction. */
async function closeOtherTrades(context: PayContext): Promise<void> {
  const order = await loadOrder(context);
  if (order.status !== 'awaiting_payment') return; // paid or taken meanwhile: the phase will say so
  const closed = await closeOpenTrades(context.services, order, { keep: context.keep });
  if (closed.kind === 'in_doubt') {
    throw new CheckoutError(
      'ORDER_PAYMENT_IN_PROGRESS',
      `An earlier payment attempt of this order (${closed.gateway}) is still being confirmed with the gateway; nothing was charged. Try again shortly.`,
      5,
    );
  }
  // 'settled': the closed trade had been paid; the attempt phase finds the order paid.
}

/**
 * This order's trade at this gateway was closed when it moved elsewhere, and the gateway never
 * reopens a closed out_trade_no: a terminal answer for this gateway, stored as a decline, with no call
 * that could only be refused — and no other trade closed for nothing.
 */
async function recordTradeClosed(tx: Transaction, context: PayContext, orderId: string): Promise<PhaseResult<PayResponse>> {
  const gateway = context.input.gateway;
  await journal(tx, {
    orderId,
    kind: 'payment.declined',
    data: { gateway, code: 'TRADE_CLOSED', message: 'trade closed earlier; no gateway call' },
  });
  return declinedAnswer(orderId, gateway, 'TRADE_CLOSED', '此订单在该支付方式的交易已关闭，请换一种支付方式。');
}

// ── Phase 2: the charge, outside any transaction ─────────────────────────────────────────────────

/** The attempt this key owns is no longer open: phase 1 must run again. */
const ATTEMPT_CLOSED = { kind: 'none' } as const;

/**
 * Phase 2 and then phase 3: the gateway called by the order's out_trade_no (deduplicated by the
 * gateway), then its answer recorded. ATTEMPT_CLOSED when the order is back to awaiting payment.
 */
async function chargeAttempt(context: PayContext): Promise<PhaseResult<PayResponse> | typeof ATTEMPT_CLOSED> {
  const { services, key, input, customerId } = context;
  const order = await loadOrder(context);
  switch (order.status) {
    case 'awaiting_payment':
      return ATTEMPT_CLOSED;
    case 'paid':
      // Settled meanwhile, e.g. by the gateway's notification racing this request.
      return key.atomicPhase((tx) => paidAnswer(tx, order.id));
    case 'authorized':
      return key.atomicPhase((tx) => authorizedAnswer(tx, order.id));
    case 'paying':
      if (order.attemptKeyId !== key.id) throw orderPaymentInProgress();
      break;
    default:
      throw orderNotPayable(order.status);
  }
  const fault = { procedure: 'checkout.pay', gateway: input.gateway, customerId, orderId: order.id };
  await services.faults?.hit('before_gateway_call', { ...fault, outTradeNo: order.outTradeNo });
  const outcome = await callGateway(context, order);
  // The gateway has answered (money may have moved) and nothing is committed: the drills crash here.
  await services.faults?.hit('after_gateway_call', fault);
  return recordOutcome(context, order, outcome);
}

/** The charge, journaled with what was asked and what came back. */
function callGateway(context: PayContext, order: Order): Promise<ChargeOutcome> {
  const { services, input, gateway, returnTo } = context;
  const { outTradeNo, amountMinor, currency, paymentAttempt: attempt } = order;
  return journaledCall(
    services.db,
    { orderId: order.id, gateway: input.gateway, operation: 'charge', request: { outTradeNo, attempt, amountMinor, currency } },
    () =>
      gateway.charge({
        outTradeNo,
        amountMinor,
        currency,
        subject: `PayOnce 订单 ${outTradeNo}`,
        attempt,
        ...(input.buyer ? { buyer: input.buyer } : { buyerStep: input.buyerStep ?? gateway.buyerSteps[0] }),
        notifyUrl: notifyUrlFor(services, input.gateway),
        returnUrl: returnTo.urlFor(order.id),
      }),
  );
}

// ── Phase 3: record what the gateway said ────────────────────────────────────────────────────────

async function recordOutcome(context: PayContext, order: Order, outcome: ChargeOutcome): Promise<PhaseResult<PayResponse>> {
  const { key } = context;
  switch (outcome.kind) {
    case 'succeeded': {
      const settled = await key.atomicPhase((tx) => recordSettled(tx, context, order, outcome));
      if (settled.kind !== 'none') return settled;
      // Thrown after the commit: the charge and its refund are on the books whatever the buyer hears.
      const status = 'orderStatus' in settled ? settled.orderStatus : 'not paid';
      throw new CheckoutError('ORDER_NOT_PAYABLE', `The order is ${status}; this charge is being refunded.`);
    }
    case 'authorized': {
      const held = await key.atomicPhase((tx) => recordAuthorized(tx, context, order, outcome));
      if (held.kind !== 'none') return held;
      // Committed: the order could not take it (it expired meanwhile) and its release is queued.
      const status = 'orderStatus' in held ? held.orderStatus : 'not payable';
      throw new CheckoutError('ORDER_NOT_PAYABLE', `The order is ${status}; this authorisation is being released.`);
    }
    case 'declined':
      return key.atomicPhase(async (tx) => (await answerIfPaid(tx, order.id)) ?? recordDecline(tx, context, order, outcome));
    case 'awaiting_buyer':
      return key.atomicPhase(async (tx) => (await answerIfPaid(tx, order.id)) ?? recordAwaitingBuyer(tx, context, order, outcome));
    case 'retryable':
      throw new CheckoutError(
        'GATEWAY_UNAVAILABLE',
        `The payment gateway is unavailable (${outcome.code}); retry with the same Idempotency-Key.`,
      );
    case 'indeterminate':
      // Maybe charged, maybe not: the retry calls the gateway again with the same out_trade_no and
      // the gateway's own dedupe answers with the original outcome.
      throw new CheckoutError(
        'PAYMENT_OUTCOME_UNKNOWN',
        `The gateway did not confirm the outcome (${outcome.code}); retry with the same Idempotency-Key.`,
      );
    default:
      return assertNever(outcome);
  }
}

/**
 * The charge was recorded, but it does not pay the order (the order expired meanwhile): the excess
 * charge and its refund are committed, and the buyer is told the order can no longer be paid.
 */
type ChargeNotPaying = { kind: 'none'; orderStatus: string };

/** The charge went through: the payment row, the order paid, the outbox and the 201, together. */
async function recordSettled(
  tx: Transaction,
  context: PayContext,
  order: Order,
  charge: Extract<ChargeOutcome, { kind: 'succeeded' }>,
): Promise<PhaseResult<PayResponse> | ChargeNotPaying> {
  const settled = await settleSucceededCharge(tx, {
    gateway: context.input.gateway,
    outTradeNo: order.outTradeNo,
    gatewayTradeNo: charge.gatewayTradeNo,
    amountMinor: charge.amountMinor,
    currency: charge.currency,
    source: 'response',
  });
  // Paid by another charge meanwhile (a notification of a trade the buyer completed elsewhere): that
  // payment is the answer, and this charge is being refunded.
  if (settled.paid) return respond(201, settled.paid);
  return { kind: 'none', orderStatus: settled.kind === 'refunding' ? settled.orderStatus : 'not paid' };
}

/**
 * The gateway holds the money (capture_method manual): the payment row, the order authorised and
 * the 201, together. Paid or authorised by another trade meanwhile: that is the answer, and this
 * authorisation is released.
 */
async function recordAuthorized(
  tx: Transaction,
  context: PayContext,
  order: Order,
  held: Extract<ChargeOutcome, { kind: 'authorized' }>,
): Promise<PhaseResult<PayResponse> | ChargeNotPaying> {
  const settled = await settleAuthorizedCharge(tx, {
    gateway: context.input.gateway,
    outTradeNo: order.outTradeNo,
    gatewayTradeNo: held.gatewayTradeNo,
    amountMinor: held.amountMinor,
    currency: held.currency,
    source: 'response',
  });
  switch (settled.kind) {
    case 'authorized':
      return respond(201, settled.authorized);
    case 'paid':
      return respond(201, settled.paid);
    case 'releasing':
      if (!settled.answer) return { kind: 'none', orderStatus: settled.orderStatus };
      return settled.answer.status === 'paid' ? respond(201, settled.answer) : respond(201, settled.answer);
    case 'voided':
      return { kind: 'none', orderStatus: 'voided' };
    default:
      return assertNever(settled);
  }
}

/**
 * A terminal decline for this attempt, stored and replayed as 402. The order stays payable and so
 * does the gateway's trade (another buyer or card may still pay it): it stays on the order's list of
 * open trades, closed before any other attempt.
 */
async function recordDecline(
  tx: Transaction,
  context: PayContext,
  order: Order,
  decline: Extract<ChargeOutcome, { kind: 'declined' }>,
): Promise<PhaseResult<PayResponse>> {
  const { gateway } = context.input;
  const { outTradeNo, amountMinor, currency, paymentAttempt: attempt } = order;
  await tx.insert(payments).values({
    ...{ orderId: order.id, gateway, outTradeNo, attempt, amountMinor, currency, source: 'response' },
    ...{ status: 'declined', declineCode: decline.code, declineMessage: decline.message },
  });
  await applyOrderTransition(tx, order.id, 'charge_declined', { keyId: context.key.id });
  await journal(tx, {
    orderId: order.id,
    kind: 'payment.declined',
    data: { gateway, attempt, code: decline.code, message: decline.message },
  });
  return declinedAnswer(order.id, gateway, decline.code, `支付被拒绝：${decline.message}`);
}

/**
 * The trade is open and waits for the buyer's own step (202). It stays on the order's open trades
 * (phase 1 marked it): closed before any other attempt and at expiry, settled by the buyer's payment
 * whenever it comes.
 */
async function recordAwaitingBuyer(
  tx: Transaction,
  context: PayContext,
  order: Order,
  opened: Extract<ChargeOutcome, { kind: 'awaiting_buyer' }>,
): Promise<PhaseResult<PayResponse>> {
  const { gateway } = context.input;
  await requireOrderTransition(tx, order.id, 'buyer_step_opened', { keyId: context.key.id });
  await journal(tx, {
    orderId: order.id,
    kind: 'payment.awaiting_buyer',
    data: { gateway, attempt: order.paymentAttempt, step: opened.action.kind },
  });
  const { outTradeNo, amountMinor, currency } = order;
  const awaiting: AwaitingBuyer = {
    orderId: order.id,
    status: 'awaiting_buyer',
    gateway,
    outTradeNo,
    amountMinor,
    currency,
    action: opened.action,
  };
  return respond(202, awaiting);
}

// ── Answers and reads shared by the phases ───────────────────────────────────────────────────────

/** The paid order's payment as the 201 answer, under the order's lock; undefined while it is not paid. */
async function answerIfPaid(tx: Transaction, orderId: string): Promise<PhaseResult<PayResponse> | undefined> {
  const [current] = await tx.select({ status: orders.status }).from(orders).where(eq(orders.id, orderId)).for('update');
  // The buyer may have been quicker than this commit (a notification already settled the order).
  if (current?.status === 'authorized') return authorizedAnswer(tx, orderId);
  return current?.status === 'paid' ? paidAnswer(tx, orderId) : undefined;
}

async function authorizedAnswer(tx: Transaction, orderId: string): Promise<PhaseResult<PayResponse>> {
  const authorized = await authorizedOrderView(tx, orderId);
  if (!authorized) throw new Error(`order ${orderId} is authorized but holds no authorisation`);
  return respond(201, authorized);
}

async function paidAnswer(tx: Transaction, orderId: string): Promise<PhaseResult<PayResponse>> {
  const paid = await paidOrderView(tx, orderId);
  if (!paid) throw new Error(`order ${orderId} is paid but has no successful payment`);
  return respond(201, paid);
}

function declinedAnswer(orderId: string, gateway: GatewayId, declineCode: string, message: string): PhaseResult<PayResponse> {
  const declined: DeclinedPayment = { reason: 'PAYMENT_DECLINED', message, orderId, gateway, declineCode };
  return respond(402, declined);
}

type Order = typeof orders.$inferSelect;

/** The customer's order, read outside any transaction. */
async function loadOrder({ services, customerId, input }: PayContext): Promise<Order> {
  const [order] = await services.db
    .select()
    .from(orders)
    .where(and(eq(orders.id, input.orderId), eq(orders.customerId, customerId)));
  if (!order) throw orderNotFound();
  return order;
}

/** The customer's order, locked for the rest of the transaction. */
async function lockOrder(tx: Transaction, { customerId, input }: PayContext): Promise<Order> {
  const [order] = await tx
    .select()
    .from(orders)
    .where(and(eq(orders.id, input.orderId), eq(orders.customerId, customerId)))
    .for('update');
  if (!order) throw orderNotFound();
  return order;
}

/**
 * A test buyer only where the configuration has them (the sandbox): a real gateway would take the
 * sandbox's codes for a real buyer's. Without one the gateway must offer the buyer's own step asked for.
 * Refused before anything is claimed at the gateway or written to the order.
 */
function checkBuyer(gateway: PaymentGateway, input: PayInput): void {
  if (input.buyer) {
    if (input.buyerStep) {
      throw new CheckoutError('INVALID_INPUT', 'Send either a sandbox test buyer or a buyer step, not both.');
    }
    if (!gateway.hasTestBuyers) {
      throw new CheckoutError(
        'TEST_BUYER_NOT_AVAILABLE',
        `Test buyers exist only in the PSP sandbox; ${input.gateway} here is a real gateway: leave buyer out and the buyer pays on their own step.`,
      );
    }
    return;
  }
  const step = input.buyerStep ?? gateway.buyerSteps[0];
  if (!step || !gateway.buyerSteps.includes(step)) {
    const offered = gateway.buyerSteps.length > 0 ? gateway.buyerSteps.join(', ') : 'none (configure its buyer step)';
    throw new CheckoutError(
      'BUYER_STEP_NOT_AVAILABLE',
      step
        ? `${input.gateway} does not offer the buyer step "${step}" here; it offers: ${offered}.`
        : `${input.gateway} offers no buyer step here (${offered}); only a sandbox test buyer can pay it.`,
    );
  }
}
