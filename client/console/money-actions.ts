/**
 * What an operator may do with an order's money, and how one decision reaches the server exactly
 * once: capture or release an authorised order, refund a paid one.
 *
 * Each click-intent (this action, this order, these amounts) has one Idempotency-Key. When no answer
 * comes back — the network dropped, or the server said it is busy or failed — the same request goes
 * again under the same key, so a capture that did land is answered from its stored decision instead
 * of being decided twice. After a definite answer the key is retired and the next click gets a new one.
 */
import { backoffDelay, type RetryPolicy } from '@/client/retry';
import type { AuthorizationDecision } from '@/server/checkout/authorizations';
import type { MerchantRefund } from '@/server/checkout/merchant-refunds';
import type { Answer, OperatorApi, OperatorRole, OrderView, Refusal } from './operator-api';

export type MoneyAction =
  | { kind: 'capture'; orderId: string; amountMinor: number }
  | { kind: 'release'; orderId: string }
  | { kind: 'refund'; orderId: string; amountMinor: number; reason: string };

/** merchant.capture / merchant.release's 202: the decision, carried out at the gateway afterwards. */
export type DecisionAnswer = AuthorizationDecision;
/** merchant.refund's 202: the refund recorded, with what is refunded and still refundable counted. */
export type RefundAnswer = MerchantRefund;

export type ActionOutcome =
  | { kind: 'decided'; action: MoneyAction; answer: DecisionAnswer }
  | { kind: 'refund_accepted'; action: MoneyAction; answer: RefundAnswer }
  | { kind: 'refused'; action: MoneyAction; refusal: Refusal }
  /** No answer after every try: it may or may not have happened. The key is kept for the next click. */
  | { kind: 'unconfirmed'; action: MoneyAction; tries: number; message: string };

/** Tries in all for one click: enough to ride out a dropped connection, short enough to watch. */
export const MONEY_ACTION_TRIES = 3;
const RETRY_POLICY: RetryPolicy = { maxRetries: MONEY_ACTION_TRIES - 1, baseDelayMs: 1000, maxDelayMs: 4000 };

/** The roles that move money (server/operators/sessions.ts ranks viewer < refunder < admin). */
export function canMoveMoney(role: OperatorRole): boolean {
  return role === 'refunder' || role === 'admin';
}

function request(action: MoneyAction): { procedure: string; input: Record<string, unknown> } {
  switch (action.kind) {
    case 'capture':
      return { procedure: 'merchant.capture', input: { orderId: action.orderId, amountMinor: action.amountMinor } };
    case 'release':
      return { procedure: 'merchant.release', input: { orderId: action.orderId } };
    case 'refund':
      return {
        procedure: 'merchant.refund',
        input: { orderId: action.orderId, amountMinor: action.amountMinor, reason: action.reason },
      };
    default: {
      const unknown: never = action;
      throw new Error(`unknown money action ${JSON.stringify(unknown)}`);
    }
  }
}

/** One key per click-intent: the same intent asked again after no answer is sent under the same key. */
export class IntentKeys {
  private readonly keys = new Map<string, string>();

  constructor(private readonly newKey: () => string = () => crypto.randomUUID()) {}

  keyFor(action: MoneyAction): string {
    const intent = JSON.stringify(request(action));
    const key = this.keys.get(intent) ?? this.newKey();
    this.keys.set(intent, key);
    return key;
  }

  /** The intent was answered: a click after this one is a new intent. */
  retire(action: MoneyAction): void {
    this.keys.delete(JSON.stringify(request(action)));
  }
}

/**
 * A refusal that is no definite answer: the server failed (5xx), is still working on this key (409
 * REQUEST_IN_PROGRESS) or asked to wait (429). Whether it happened is unknown, so the key is asked again.
 */
function notYetAnswered(refusal: Refusal): boolean {
  return refusal.status >= 500 || refusal.status === 429 || (refusal.status === 409 && refusal.reason === 'REQUEST_IN_PROGRESS');
}

function outcomeOf(action: MoneyAction, answer: Exclude<Answer<unknown>, { kind: 'lost' }>): ActionOutcome {
  if (answer.kind === 'refused') {
    const { kind: _kind, ...refusal } = answer;
    return { kind: 'refused', action, refusal };
  }
  return action.kind === 'refund'
    ? { kind: 'refund_accepted', action, answer: answer.data as RefundAnswer }
    : { kind: 'decided', action, answer: answer.data as DecisionAnswer };
}

export interface SubmitOptions {
  keys: IntentKeys;
  csrfToken: string;
  /** Told before each retry (1, 2, …), so the console can say it is trying again. */
  onRetry?: (retry: number) => void;
  sleep?: (ms: number) => Promise<void>;
}

/** Sends one decision, retrying under its key while no definite answer comes back. Never throws. */
export async function submitMoneyAction(api: OperatorApi, action: MoneyAction, options: SubmitOptions): Promise<ActionOutcome> {
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const { procedure, input } = request(action);
  const headers = { 'Idempotency-Key': options.keys.keyFor(action), 'X-CSRF-Token': options.csrfToken };
  for (let tries = 1; ; tries++) {
    const answer = await api.mutate(procedure, input, headers);
    // Nothing came back at all ('lost'), or a refusal that is not yet an answer: the same key again.
    if (answer.kind === 'ok' || (answer.kind === 'refused' && !notYetAnswered(answer))) {
      options.keys.retire(action);
      return outcomeOf(action, answer);
    }
    if (tries >= MONEY_ACTION_TRIES) return { kind: 'unconfirmed', action, tries, message: answer.message };
    options.onRetry?.(tries);
    const floor = answer.kind === 'refused' ? (answer.retryAfterSeconds ?? 0) * 1000 : 0;
    await sleep(Math.max(backoffDelay(tries, RETRY_POLICY), Math.min(floor, RETRY_POLICY.maxDelayMs)));
  }
}

// ── What an order offers ─────────────────────────────────────────────────────────────────────────

/** What can be done with an order's money now, whoever is looking. */
export type Offer = { kind: 'capture_or_release'; heldMinor: number } | { kind: 'refund'; refundableMinor: number } | { kind: 'none' };

/** The payment that pays the order (never an excess charge, which is refunded by itself). */
const orderPayment = (order: OrderView) => order.payments.find((p) => p.role === 'payment' && p.status !== 'declined');

/** What an authorised order holds: all of it is captured unless the operator asks for less. */
export function heldMinor(order: OrderView): number {
  const payment = orderPayment(order);
  return payment?.status === 'authorized' ? (payment.authorizedMinor ?? payment.amountMinor) : 0;
}

/** What is left to give back: the order's charge minus its refunds that have not failed. */
export function refundableMinor(order: OrderView): number {
  const payment = orderPayment(order);
  if (payment?.status !== 'succeeded') return 0;
  const refunded = order.refunds
    .filter((r) => r.gateway === payment.gateway && r.gatewayTradeNo === payment.gatewayTradeNo && r.status !== 'failed')
    .reduce((sum, r) => sum + r.amountMinor, 0);
  return Math.max(0, payment.amountMinor - refunded);
}

export function offerFor(order: OrderView): Offer {
  if (order.status === 'authorized' && heldMinor(order) > 0) return { kind: 'capture_or_release', heldMinor: heldMinor(order) };
  if (order.status === 'paid' && refundableMinor(order) > 0) return { kind: 'refund', refundableMinor: refundableMinor(order) };
  return { kind: 'none' };
}

/**
 * Whether what an accepted action asked for shows in the order: an authorisation no longer held (paid
 * or voided), a refund that succeeded or failed. Until then the console keeps reading the order.
 */
export function settledIn(order: OrderView, outcome: ActionOutcome): boolean {
  switch (outcome.kind) {
    case 'decided':
      return order.status !== 'authorized';
    case 'refund_accepted': {
      const status = order.refunds.find((r) => r.refundId === outcome.answer.refundId)?.status;
      return status === 'succeeded' || status === 'failed';
    }
    default:
      return true;
  }
}

// ── Amounts as typed ─────────────────────────────────────────────────────────────────────────────

/** "168", "168.5", "¥168.00", "1,680.00" → minor units; undefined for anything else or nothing. */
export function parseAmount(text: string): number | undefined {
  const match = /^(\d+)(?:\.(\d{1,2}))?$/.exec(
    text
      .trim()
      .replace(/^[¥￥]\s*/, '')
      .replaceAll(',', ''),
  );
  if (!match) return undefined;
  const minor = Number(match[1]) * 100 + Number((match[2] ?? '').padEnd(2, '0'));
  return Number.isSafeInteger(minor) && minor > 0 ? minor : undefined;
}

/** Minor units as the amount field shows them: "168.00". */
export function amountText(minor: number): string {
  return `${Math.floor(minor / 100)}.${String(minor % 100).padStart(2, '0')}`;
}
