/**
 * The Stripe adapter (PaymentIntents through the official stripe-node SDK): each operation builds its
 * request (./requests), calls (./call), and hands the answer to ./classify — a failed call to
 * ./failure — for the outcome. How this adapter speaks Stripe's protocol (idempotency keys, search
 * and list, what each answer means) is in docs/gateways.md, "Stripe: the protocol as this adapter
 * speaks it".
 */
import type Stripe from 'stripe';
import type * as Gateway from '@/server/payments/gateway';
import { gatewayOf } from '@/server/payments/gateway';
import { confirmPaidByQuery } from '@/server/payments/transport';
import { call, createStripeClient } from './call';
import { capture, release } from './capture';
import {
  classifyCancel,
  classifyCardStep,
  classifyClose,
  classifyEarlierIntents,
  classifyEarlierRefund,
  classifyPay,
  classifyRefund,
  classifyTrade,
  closeVerdict,
  inCurrency,
  oldestFirst,
  type Settled,
} from './classify';
import type { CardStepConfig, StripeContext, StripeGatewayConfig } from './config';
import { classifyChargeFailure, classifyRefundFailure, classifyUnreadReplay, refusalMayBeThisRefund, type Failure } from './failure';
import { findIntents, findRefund, MAX_RECENT_PAGES } from './lookup';
import { notificationReply, verifyNotification } from './notifications';
import { guardOptions, planCharge, planRefund } from './requests';
import { statement } from './statement';

export function createStripeGateway(config: StripeGatewayConfig): Gateway.PaymentGateway {
  const buyerSteps: readonly Gateway.BuyerStep[] = config.cardStep ? ['card'] : [];
  const ctx: StripeContext = { stripe: createStripeClient(config), config, buyerSteps };
  const traits: Gateway.GatewayTraits = {
    id: 'stripe',
    merchantId: config.accountId,
    // Every attempt is a PaymentIntent of its own: the previous one is closed before a new one opens.
    oneTradePerOrder: false,
    buyerSteps,
    hasTestBuyers: Object.values(config.testBuyers).some(Boolean),
  };
  const queryRefund = (on: StripeContext, request: Gateway.RefundQuery) => findRefund(on.stripe, request);
  const gateway = gatewayOf(traits, ctx, { charge, query, close, refund, queryRefund, verifyNotification, notificationReply });
  return {
    ...gateway,
    authorizations: { capture: (request) => capture(ctx, request), release: (request) => release(ctx, request) },
    statement: (date) => statement(ctx, date),
  };
}

async function charge(ctx: StripeContext, request: Gateway.ChargeRequest): Promise<Gateway.ChargeOutcome> {
  const plan = planCharge(request, ctx.config, ctx.buyerSteps);
  if (plan.kind === 'refused') return plan.outcome;
  // "Already paid": a PaymentIntent of this order that succeeded (a lost answer, an expired key, an
  // attempt started by mistake). One page of the recent list; a look-up that fails leaves it to the key.
  const earlier = await findIntents(ctx.stripe, request.outTradeNo, 1, guardOptions(ctx.config));
  const known = earlier.ok ? classifyEarlierIntents(earlier.value.intents, request) : undefined;
  if (known) return known;
  const created = await call(() => ctx.stripe.paymentIntents.create(plan.params, { idempotencyKey: plan.idempotencyKey }));
  if (!created.ok) return chargeFailed(ctx, request, created.failure);
  return plan.cardStep ? cardStepOutcome(ctx, created.value, request, plan.cardStep) : classifyPay(created.value, request);
}

/**
 * A retry of the same attempt is answered from Stripe's idempotency layer with the PaymentIntent as
 * it was when it was created, so a replay is read again for its current state: the buyer may have
 * paid (or tried a card and been declined) in between.
 */
async function cardStepOutcome(
  ctx: StripeContext,
  created: Stripe.Response<Stripe.PaymentIntent>,
  request: Gateway.ChargeRequest,
  cardStep: CardStepConfig,
): Promise<Gateway.ChargeOutcome> {
  if (created.lastResponse?.headers?.['idempotent-replayed'] !== 'true') return classifyCardStep(created, request, cardStep);
  const current = await call(() => ctx.stripe.paymentIntents.retrieve(created.id));
  if (!current.ok) return classifyUnreadReplay(created.id, current.failure);
  return classifyCardStep(current.value, request, cardStep);
}

async function chargeFailed(ctx: StripeContext, request: Gateway.ChargeRequest, failure: Failure): Promise<Gateway.ChargeOutcome> {
  if (failure.kind !== 'idempotency_conflict') return classifyChargeFailure(failure);
  // This attempt's key already ran with other parameters (another buyer or amount): what
  // it did is only known from the order's PaymentIntents — a payment of this amount, in this currency.
  const currency = request.currency.toUpperCase();
  const found = async () => inCurrency(await query(ctx, request.outTradeNo), currency);
  return confirmPaidByQuery(found, { amountMinor: request.amountMinor, currency }, failure.code);
}

async function query(ctx: StripeContext, outTradeNo: string): Promise<Gateway.QueryOutcome> {
  const found = await findIntents(ctx.stripe, outTradeNo, MAX_RECENT_PAGES);
  if (!found.ok) return { kind: 'unavailable', code: found.failure.code, message: found.failure.message };
  return classifyTrade(found.value.intents, found.value.complete);
}

/**
 * Cancels every PaymentIntent of the order that could still take money, oldest first, one at a
 * time; succeeded ones are reported, never canceled. The look-up is query()'s: search plus the
 * strongly consistent list of the recent window.
 */
async function close(ctx: StripeContext, request: Gateway.CloseRequest): Promise<Gateway.CloseOutcome> {
  const found = await findIntents(ctx.stripe, request.outTradeNo, MAX_RECENT_PAGES, {}, request.openedAt);
  if (!found.ok) return { kind: 'indeterminate', code: found.failure.code, message: found.failure.message };
  const settled: Settled[] = [];
  for (const intent of oldestFirst(found.value.intents)) {
    const verdict = closeVerdict(intent);
    settled.push(verdict.kind === 'cancel' ? await cancelIntent(ctx, intent.id) : verdict);
  }
  return classifyClose(settled, found.value.complete);
}

/**
 * Cancels one PaymentIntent. No Idempotency-Key of ours: a cancel is idempotent by the PaymentIntent's
 * own state (a second one is refused with the status `canceled`), and a stable key would pin a stored
 * 500 for 24 h; the SDK's own key still covers its retries within this call.
 */
async function cancelIntent(ctx: StripeContext, intentId: string): Promise<Settled> {
  const canceled = await call(() => ctx.stripe.paymentIntents.cancel(intentId, { cancellation_reason: 'abandoned' }));
  return classifyCancel(intentId, canceled);
}

async function refund(ctx: StripeContext, request: Gateway.RefundRequest): Promise<Gateway.RefundOutcome> {
  const plan = planRefund(request);
  if (plan.kind === 'refused') return plan.outcome;
  const lookUp = () =>
    findRefund(ctx.stripe, { outTradeNo: request.outTradeNo, gatewayTradeNo: request.gatewayTradeNo, refundId: request.refundId });
  // Stripe's only refund deduplication is the Idempotency-Key, and it is pruned after 24 h: past that
  // the same refundId would refund again while money is left. So look for it first (metadata.refund_id);
  // a look-up that fails leaves it to the key, which covers every repeat within the day.
  const earlier = classifyEarlierRefund(await lookUp());
  if (earlier) return earlier;
  const created = await call(() => ctx.stripe.refunds.create(plan.params, { idempotencyKey: plan.idempotencyKey }));
  if (created.ok) return classifyRefund(created.value, request);
  return classifyRefundFailure(created.failure, refusalMayBeThisRefund(created.failure) ? await lookUp() : undefined);
}
