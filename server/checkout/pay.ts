/**
 * checkout.pay in three atomic phases, each its own transaction, with the gateway call between them
 * and never inside one:
 *
 *   1. start the attempt   — order guard; order → paying; recovery point `attempt_started`
 *   2. charge              — the gateway, by the order's out_trade_no (deduplicated by the gateway)
 *   3. settle or decline   — payment row, order state, outbox and the stored response, together
 *
 * A crash anywhere leaves the key at its last recovery point; the retry that takes the key over
 * resumes there, so phase 1's effects are never repeated and phase 2 is repeated only as a call the
 * gateway recognises as the same one.
 *
 * Before phase 1 opens a trade, every other trade the order still holds open is closed at its gateway
 * (./trades): a trade abandoned after a decline, or on another gateway, can otherwise still be paid by
 * the buyer later. A close is idempotent, so it needs no recovery point of its own.
 */
import { and, eq } from 'drizzle-orm';
import type { Transaction } from '../../db/client';
import { orders, payments } from '../../db/schema';
import { recoveryPoint, respond, STARTED, type OwnedKey, type PhaseResult, type StoredResponse } from '@payonce/idempotency';
import type { BuyerAction, BuyerStep, ChargeOutcome, GatewayId, PaymentGateway, TestBuyer } from '../payments/gateway';
import { CheckoutError } from './errors';
import type { ReturnAddress } from './return-address';
import { notifyUrlFor, type CheckoutServices } from './services';
import { journal, journaledCall } from './journal';
import { applyOrderTransition, orderNotFound, orderNotPayable, orderPaymentInProgress, requireOrderTransition } from './order-state';
import { paidOrderView, settleSucceededCharge, type PaidOrder } from './settle';
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

/** checkout.pay's answers: the paid order, the buyer's step, or a terminal decline — each stored and replayed per key. */
export type PayResponse = StoredResponse<PaidOrder, 201> | StoredResponse<AwaitingBuyer, 202> | StoredResponse<DeclinedPayment, 402>;

/**
 * checkout.pay for the guard: refused before anything is claimed when the gateway or the buyer does
 * not fit; then the phases, with the key this request owns. `returnTo` is where a gateway's own page
 * sends this buyer back to: the origin they are paying from (./return-address).
 */
export function payOrder(
  services: CheckoutServices,
  customerId: string,
  input: PayInput,
  returnTo: ReturnAddress,
): (key: OwnedKey<Transaction>) => Promise<PayResponse> {
  const gateway = services.gateways[input.gateway];
  if (!gateway) {
    throw new CheckoutError(400, 'GATEWAY_NOT_CONFIGURED', `The gateway ${input.gateway} is not configured.`);
  }
  checkBuyer(gateway, input);
  const keep = keptTrade(gateway, input);
  return async (key) => {
    // Phase 1 at once when the order holds no other open trade (the usual case), so that its answers
    // (already paid, this gateway's trade closed) come before any other trade is touched; otherwise
    // the rest closes those trades first.
    if (key.recoveryPoint === STARTED) {
      const first = await key.atomicPhase(async (tx) => {
        try {
          return await attemptPhase(tx, key, customerId, input, keep);
        } catch (error) {
          if (error instanceof OpenTradesRemain) return { kind: 'none' } as const;
          throw error;
        }
      });
      if (first.kind === 'response') return first.response;
    }
    return payWithKey(services, key, customerId, input, gateway, returnTo);
  };
}

/**
 * Alipay, WeChat Pay and 2C2P: another attempt on the same gateway reopens the same trade (one
 * out_trade_no), so that trade is kept. Stripe: every attempt is a new PaymentIntent, so the old one
 * is cancelled first.
 */
function keptTrade(gateway: PaymentGateway, input: PayInput): GatewayId | null {
  return gateway.oneTradePerOrder ? input.gateway : null;
}

async function payWithKey(
  services: CheckoutServices,
  key: OwnedKey<Transaction>,
  customerId: string,
  input: PayInput,
  gateway: PaymentGateway,
  returnTo: ReturnAddress,
): Promise<PayResponse> {
  // Phase 1 — start the attempt, unless this request's first phase or a previous owner already did.
  if (key.recoveryPoint === STARTED) {
    const phase = await openAttempt(services, key, customerId, input, gateway);
    if (phase.kind === 'response') return phase.response;
  }

  // Phase 2 — the charge, outside any transaction.
  let order = await loadOrder(services, customerId, input.orderId);
  if (order.status === 'awaiting_payment') {
    // This key's attempt was closed while nobody worked on it (the reconciler found no charge at the
    // gateway): the retry starts a new attempt instead of failing.
    const phase = await openAttempt(services, key, customerId, input, gateway);
    if (phase.kind === 'response') return phase.response;
    order = await loadOrder(services, customerId, input.orderId);
  }
  if (order.status === 'paid') {
    // Settled meanwhile, e.g. by the gateway's notification racing this request.
    return (
      await key.atomicPhase(async (tx) => {
        const paid = await paidOrderView(tx, order.id);
        if (!paid) throw new Error(`order ${order.id} is paid but has no successful payment`);
        return respond(201, paid);
      })
    ).response;
  }
  if (order.status === 'paying' && order.attemptKeyId !== key.id) throw orderPaymentInProgress();
  if (order.status !== 'paying') throw orderNotPayable(order.status);

  await services.faults?.hit('before_gateway_call', {
    procedure: 'checkout.pay',
    gateway: input.gateway,
    customerId,
    orderId: order.id,
    outTradeNo: order.outTradeNo,
  });
  const outcome: ChargeOutcome = await journaledCall(
    services.db,
    {
      orderId: order.id,
      gateway: input.gateway,
      operation: 'charge',
      request: { outTradeNo: order.outTradeNo, attempt: order.paymentAttempt, amountMinor: order.amountMinor, currency: order.currency },
    },
    () =>
      gateway.charge({
        outTradeNo: order.outTradeNo,
        amountMinor: order.amountMinor,
        currency: order.currency,
        subject: `PayOnce 订单 ${order.outTradeNo}`,
        attempt: order.paymentAttempt,
        ...(input.buyer ? { buyer: input.buyer } : { buyerStep: input.buyerStep ?? gateway.buyerSteps[0] }),
        notifyUrl: notifyUrlFor(services, input.gateway),
        returnUrl: returnTo.urlFor(order.id),
      }),
  );

  // The gateway has answered (money may have moved) and nothing is committed: the drills crash here.
  await services.faults?.hit('after_gateway_call', { procedure: 'checkout.pay', gateway: input.gateway, customerId, orderId: order.id });

  // Phase 3 — record what the gateway said.
  switch (outcome.kind) {
    case 'succeeded': {
      const phase = await key.atomicPhase(async (tx) => {
        const settled = await settleSucceededCharge(tx, {
          gateway: input.gateway,
          outTradeNo: order.outTradeNo,
          gatewayTradeNo: outcome.gatewayTradeNo,
          amountMinor: outcome.amountMinor,
          currency: outcome.currency,
          source: 'response',
        });
        // The order was paid by another charge meanwhile (a notification of a trade the buyer
        // completed elsewhere): that payment is the answer, and this charge is being refunded.
        if (!settled.paid) {
          const status = settled.kind === 'refunding' ? settled.orderStatus : 'not paid';
          throw new CheckoutError(409, 'ORDER_NOT_PAYABLE', `The order is ${status}; this charge is being refunded.`);
        }
        return respond(201, settled.paid);
      });
      return phase.response;
    }
    case 'declined': {
      const phase = await key.atomicPhase(async (tx) => {
        const [current] = await tx.select().from(orders).where(eq(orders.id, order.id)).for('update');
        if (current?.status === 'paid') {
          const paid = await paidOrderView(tx, order.id);
          if (paid) return respond(201, paid);
        }
        await tx.insert(payments).values({
          orderId: order.id,
          gateway: input.gateway,
          outTradeNo: order.outTradeNo,
          attempt: order.paymentAttempt,
          amountMinor: order.amountMinor,
          currency: order.currency,
          status: 'declined',
          declineCode: outcome.code,
          declineMessage: outcome.message,
          source: 'response',
        });
        // The order stays payable and so does the gateway's trade (another buyer or card may still
        // pay it): it stays on the order's list of open trades, closed before any other attempt.
        await applyOrderTransition(tx, order.id, 'charge_declined', { keyId: key.id });
        await journal(tx, {
          orderId: order.id,
          kind: 'payment.declined',
          data: { gateway: input.gateway, attempt: order.paymentAttempt, code: outcome.code, message: outcome.message },
        });
        const declined: DeclinedPayment = {
          reason: 'PAYMENT_DECLINED',
          message: `支付被拒绝：${outcome.message}`,
          orderId: order.id,
          gateway: input.gateway,
          declineCode: outcome.code,
        };
        return respond(402, declined);
      });
      return phase.response;
    }
    case 'awaiting_buyer': {
      const phase = await key.atomicPhase(async (tx) => {
        const [current] = await tx.select().from(orders).where(eq(orders.id, order.id)).for('update');
        if (current?.status === 'paid') {
          // The buyer was quicker than this commit (a notification already settled the order).
          const paid = await paidOrderView(tx, order.id);
          if (paid) return respond(201, paid);
        }
        // The trade stays on the order's open trades (phase 1 marked it): closed before any other
        // attempt and at expiry, settled by the buyer's payment whenever it comes.
        await requireOrderTransition(tx, order.id, 'buyer_step_opened', { keyId: key.id });
        await journal(tx, {
          orderId: order.id,
          kind: 'payment.awaiting_buyer',
          data: { gateway: input.gateway, attempt: order.paymentAttempt, step: outcome.action.kind },
        });
        const awaiting: AwaitingBuyer = {
          orderId: order.id,
          status: 'awaiting_buyer',
          gateway: input.gateway,
          outTradeNo: order.outTradeNo,
          amountMinor: order.amountMinor,
          currency: order.currency,
          action: outcome.action,
        };
        return respond(202, awaiting);
      });
      return phase.response;
    }
    case 'retryable':
      throw new CheckoutError(
        503,
        'GATEWAY_UNAVAILABLE',
        `The payment gateway is unavailable (${outcome.code}); retry with the same Idempotency-Key.`,
        1,
      );
    case 'indeterminate':
      // Maybe charged, maybe not: the retry calls the gateway again with the same out_trade_no and
      // the gateway's own dedupe answers with the original outcome.
      throw new CheckoutError(
        503,
        'PAYMENT_OUTCOME_UNKNOWN',
        `The gateway did not confirm the outcome (${outcome.code}); retry with the same Idempotency-Key.`,
        1,
      );
    default: {
      const unreachable: never = outcome;
      throw new Error(`unknown charge outcome ${JSON.stringify(unreachable)}`);
    }
  }
}

/**
 * A test buyer only where the configuration has them (the sandbox): a real gateway would take the
 * sandbox's codes for a real buyer's. Without one the gateway must offer the buyer's own step asked for.
 * Refused before anything is claimed at the gateway or written to the order.
 */
function checkBuyer(gateway: PaymentGateway, input: PayInput): void {
  if (input.buyer) {
    if (input.buyerStep) {
      throw new CheckoutError(400, 'INVALID_INPUT', 'Send either a sandbox test buyer or a buyer step, not both.');
    }
    if (!gateway.hasTestBuyers) {
      throw new CheckoutError(
        400,
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
      400,
      'BUYER_STEP_NOT_AVAILABLE',
      step
        ? `${input.gateway} does not offer the buyer step "${step}" here; it offers: ${offered}.`
        : `${input.gateway} offers no buyer step here (${offered}); only a sandbox test buyer can pay it.`,
    );
  }
}

async function loadOrder(services: CheckoutServices, customerId: string, orderId: string) {
  const [order] = await services.db
    .select()
    .from(orders)
    .where(and(eq(orders.id, orderId), eq(orders.customerId, customerId)));
  if (!order) throw orderNotFound();
  return order;
}

/** A trade opened by another request appeared between the close and the attempt's transaction. */
class OpenTradesRemain extends Error {}

/** How often the close-then-start loop goes round before it gives the race to the other request. */
const OPEN_ATTEMPT_ROUNDS = 3;

/**
 * Closes the order's other open trades, then starts the attempt (phase 1). The attempt re-checks the
 * trades under the order's lock, so a trade another tab opened in between is closed on the next round.
 */
async function openAttempt(
  services: CheckoutServices,
  key: OwnedKey<Transaction>,
  customerId: string,
  input: PayInput,
  gateway: PaymentGateway,
): Promise<PhaseResult<PayResponse>> {
  const keep = keptTrade(gateway, input);
  for (let round = 1; ; round++) {
    const order = await loadOrder(services, customerId, input.orderId);
    if (order.status === 'awaiting_payment') {
      const closed = await closeOpenTrades(services, order, { keep });
      if (closed.kind === 'in_doubt') {
        throw new CheckoutError(
          409,
          'ORDER_PAYMENT_IN_PROGRESS',
          `An earlier payment attempt of this order (${closed.gateway}) is still being confirmed with the gateway; nothing was charged. Try again shortly.`,
          5,
        );
      }
      // 'settled': the closed trade had been paid; the attempt below finds the order paid.
    }
    try {
      return await startAttempt(key, customerId, input, keep);
    } catch (error) {
      if (!(error instanceof OpenTradesRemain)) throw error;
      if (round >= OPEN_ATTEMPT_ROUNDS) {
        throw orderPaymentInProgress();
      }
    }
  }
}

/**
 * Phase 1: the order-level guard. At most one attempt in flight per order, owned by one key, and no
 * other trade open; a paid order answers with its payment and calls no gateway.
 */
function startAttempt(
  key: OwnedKey<Transaction>,
  customerId: string,
  input: PayInput,
  keep: GatewayId | null,
): Promise<PhaseResult<PayResponse>> {
  return key.atomicPhase((tx) => attemptPhase(tx, key, customerId, input, keep));
}

async function attemptPhase(
  tx: Transaction,
  key: OwnedKey<Transaction>,
  customerId: string,
  input: PayInput,
  keep: GatewayId | null,
): Promise<PhaseResult<PayResponse>> {
  const [order] = await tx
    .select()
    .from(orders)
    .where(and(eq(orders.id, input.orderId), eq(orders.customerId, customerId)))
    .for('update');
  if (!order) throw orderNotFound();
  switch (order.status) {
    case 'paid': {
      // Already paid (by another tab, another gateway, a notification): answer with that
      // payment and call no gateway at all.
      const paid = await paidOrderView(tx, order.id);
      if (!paid) throw new Error(`order ${order.id} is paid but has no successful payment`);
      return respond(201, paid);
    }
    case 'paying':
      // Only the order sees two tabs or two gateways: they hold different keys.
      if (order.attemptKeyId !== key.id) throw orderPaymentInProgress();
      return recoveryPoint(ATTEMPT_STARTED); // our own attempt, found again after expiry
    case 'failed':
    case 'expired':
      throw orderNotPayable(order.status);
    case 'awaiting_payment': {
      if (keep && (await tradeState(tx, order.id, keep)) === 'closed') {
        // This order's trade at this gateway was closed when it moved elsewhere, and the gateway
        // never reopens a closed out_trade_no: a terminal answer for this gateway, stored as a
        // decline, with no call that could only be refused — and no other trade closed for nothing.
        await journal(tx, {
          orderId: order.id,
          kind: 'payment.declined',
          data: { gateway: input.gateway, code: 'TRADE_CLOSED', message: 'trade closed earlier; no gateway call' },
        });
        const declined: DeclinedPayment = {
          reason: 'PAYMENT_DECLINED',
          message: '此订单在该支付方式的交易已关闭，请换一种支付方式。',
          orderId: order.id,
          gateway: input.gateway,
          declineCode: 'TRADE_CLOSED',
        };
        return respond(402, declined);
      }
      if ((await otherOpenTrades(tx, order.id, keep)).length > 0) throw new OpenTradesRemain();
      await markTradeOpen(tx, order.id, input.gateway, order.paymentAttempt + 1);
      await requireOrderTransition(tx, order.id, 'attempt_started', { keyId: key.id, gateway: input.gateway });
      await journal(tx, {
        orderId: order.id,
        kind: 'attempt.started',
        data: { attempt: order.paymentAttempt + 1, gateway: input.gateway, ...(input.buyer ? { buyer: input.buyer } : {}) },
      });
      return recoveryPoint(ATTEMPT_STARTED);
    }
    default: {
      const unreachable: never = order.status;
      throw new Error(`unknown order status ${String(unreachable)}`);
    }
  }
}
