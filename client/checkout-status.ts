/**
 * What the checkout page says about a payment, as catalogue keys (app/_components/checkout-messages.ts)
 * so switching language re-renders what is on screen. Pure: the page's state machine
 * (checkout-state.ts) builds these from the answers it is given.
 */
import type { AwaitingBuyer, DeclinedPayment } from '@/server/checkout/pay';
import type { CompletedPayment, OrderTruth, PayProgress, PayResult } from './checkout-flow';
import { formatMoney } from './money';
import type { CallFailure } from './retry';

type Vars = Record<string, string | number>;

/** One sentence of the status: a catalogue message, or a gateway's decline in the shopper's words. */
export type StatusLine = { key: string; vars?: Vars } | { decline: { gateway: string; code?: string; message?: string } };

/** What an engineer needs to find the request again; shown only inside the 详情 disclosure. */
export interface TechnicalDetail {
  status?: number;
  reason?: string;
  message?: string;
  key?: string;
  gateway?: string;
  declineCode?: string;
}

/** Titles and lines are catalogue keys, so switching language re-renders what is on screen. */
export type Status =
  | { tone: 'idle' }
  | { tone: 'busy' | 'warn' | 'bad'; title: string; lines: StatusLine[]; tech?: TechnicalDetail }
  /** `returnToken`: the order is read by a return link's token, not the session (a buyer back from a gateway's page). */
  | { tone: 'ok'; title: string; lines: StatusLine[]; orderId: string; returnToken?: string; tech?: TechnicalDetail }
  /** The gateway's trade is open and waits for the buyer's own step; the page watches the order. */
  | { tone: 'wait'; title: string; lines: StatusLine[]; awaiting: AwaitingBuyer; tech?: TechnicalDetail };

type Result<K extends PayResult['kind']> = Extract<PayResult, { kind: K }>;

export const IDLE: Status = { tone: 'idle' };

/** Reasons the order itself was refused (nothing created, nothing charged), and how to say them. */
const CART_REFUSALS: Record<string, string> = {
  OUT_OF_STOCK: 'status.outOfStock',
  SOLD_OUT: 'status.soldOut',
  PRICE_CHANGED: 'status.priceChanged',
  TOO_MANY_OPEN_ORDERS: 'status.tooManyOpenOrders',
  STOCK_HOLD_LIMIT: 'status.stockHoldLimit',
  ADDRESS_HOLD_LIMIT: 'status.addressHoldLimit',
  RATE_LIMITED: 'status.rateLimited',
};

function isCartRefusal(reason: string | undefined): reason is string {
  return reason !== undefined && Object.hasOwn(CART_REFUSALS, reason);
}

/**
 * Paid or authorised: the order is done and its cart is locked until 再来一单. Busy or unconfirmed: a
 * payment is under way, and nothing the shopper changes could apply to it.
 */
export const isFrozen = (status: Status) =>
  status.tone === 'ok' || status.tone === 'busy' || status.tone === 'warn' || status.tone === 'wait';

export function busyStatus(title: string, detail = 'status.keepOpen'): Status {
  return { tone: 'busy', title, lines: [{ key: detail }] };
}

/**
 * A retry under way, never as an HTTP status: 409 ORDER_PAYMENT_IN_PROGRESS is another key on this
 * order (another tab, or another browser of this shopper's, is paying it); 409 otherwise is this
 * payment still being processed (another tab, or before a reload); the rest is the network or a
 * server that did not answer. None of it is the shopper's business.
 */
export function progressStatus(title: string, progress: PayProgress): Status | undefined {
  if (progress.phase === 'confirming') return busyStatus('status.confirming');
  if (progress.phase !== 'retrying') return undefined;
  const { failure, retry } = progress;
  const key =
    failure.reason === 'ORDER_PAYMENT_IN_PROGRESS'
      ? 'status.retryOtherTab'
      : failure.status === 409
        ? 'status.retryInProgress'
        : 'status.retryNetwork';
  return { tone: 'busy', title, lines: [{ key, vars: { n: retry } }, { key: 'status.keepOpen' }] };
}

export function awaitingStatus({ awaiting, key }: Result<'awaiting_buyer'>): Status {
  return {
    tone: 'wait',
    title: 'status.awaitingBuyer',
    lines: [{ key: 'status.awaitingBuyerDetail' }],
    awaiting,
    tech: { status: 202, key, gateway: awaiting.gateway },
  };
}

export function paidStatus(orderId: string, returnToken?: string): Status {
  return { tone: 'ok', title: 'status.paid', lines: [{ key: 'status.paidDetail' }], orderId, ...(returnToken ? { returnToken } : {}) };
}

/**
 * Authorised: as final for the shopper as paid (the money is held and nothing more is asked of them),
 * so it is an `ok` status too; the line says what is held and that it is taken only when the order ships.
 */
export function authorizedStatus({ orderId, payment }: Extract<CompletedPayment, { status: 'authorized' }>, returnToken?: string): Status {
  return {
    tone: 'ok',
    title: 'status.authorized',
    lines: [{ key: 'status.authorizedDetail', vars: { amount: formatMoney(payment.amountMinor, payment.currency) } }],
    orderId,
    ...(returnToken ? { returnToken } : {}),
  };
}

/** The buyer is done: paid, or the money held. */
export function completedStatus(completed: CompletedPayment, returnToken?: string): Status {
  switch (completed.status) {
    case 'paid':
      return paidStatus(completed.orderId, returnToken);
    case 'authorized':
      return authorizedStatus(completed, returnToken);
    default: {
      const unknown: never = completed;
      throw new Error(`unknown completed payment ${JSON.stringify(unknown)}`);
    }
  }
}

/** A decline on `gateway`, in the shopper's words: nothing was charged, and another way may pay. */
function declineStatus(declined: DeclinedPayment, gateway: string, tech: TechnicalDetail): Status {
  return {
    tone: 'bad',
    title: 'status.failed',
    lines: [
      { decline: { gateway, code: declined.declineCode, message: declined.message } },
      { key: 'status.notCharged' },
      { key: 'status.tryAgain' },
    ],
    tech: { ...tech, gateway, declineCode: declined.declineCode },
  };
}

/** `gateway`: the one the payment was sent to, when the decline does not name its own. */
export function declinedStatus({ declined, key }: Pick<Result<'declined'>, 'declined' | 'key'>, gateway: string): Status {
  return declineStatus(declined, declined.gateway ?? gateway, { status: 402, reason: declined.reason, message: declined.message, key });
}

export function failedStatus(result: Result<'failed'>): Status {
  const { failure } = result;
  const tech = { status: failure.status, reason: failure.reason, message: result.message, key: result.key };
  if (result.orderState === 'declined' && result.declined) return declineStatus(result.declined, result.declined.gateway, tech);
  // A cart refused before any order existed is not a failed payment: nothing was ordered or charged.
  const title = isCartRefusal(failure.reason) ? 'status.notOrdered' : closedTitle(result.closedAs);
  return { tone: 'bad', title, lines: failedLines(result), tech };
}

function failedLines({ failure, orderState, charged, closedAs }: Result<'failed'>): StatusLine[] {
  if (orderState === 'not_charged') return [{ key: 'status.mismatchNotCharged' }];
  // Refused before any order or charge existed: what to change, in the shopper's words.
  const refusal = isCartRefusal(failure.reason) ? CART_REFUSALS[failure.reason] : undefined;
  if (refusal) return [{ key: refusal }];
  // What happened to the money, when the order said: an expired order never took any, or what it
  // took is being given back.
  if (orderState === 'closed' || failure.reason === 'ORDER_NOT_PAYABLE' || failure.status === 404) return closedLines(charged, closedAs);
  return [{ key: 'status.failedGeneric' }];
}

/**
 * A closed order as the order itself says it closed. A voided one did not fail: the merchant released
 * its hold (or the hold lapsed), so it is called cancelled and the money it held released.
 */
export function closedStatus({ status, charged }: Extract<OrderTruth, { kind: 'closed' }>): Status {
  return { tone: 'bad', title: closedTitle(status), lines: closedLines(charged, status) };
}

const closedTitle = (closedAs: string | undefined) => (closedAs === 'voided' ? 'status.voided' : 'status.failed');

/** A closed order (`closedAs`: its status, when known); with `charged` known, what happened to the money. */
export function closedLines(charged: boolean | undefined, closedAs?: string): StatusLine[] {
  const money = charged === undefined ? [] : [{ key: charged ? 'status.closedRefunded' : 'status.closedNotCharged' }];
  return [{ key: closedAs === 'voided' ? 'status.voidedDetail' : 'status.orderClosed' }, ...money];
}

export function pendingStatus({ failure, key }: Result<'gave_up'>): Status {
  return {
    tone: 'warn',
    title: 'status.pending',
    lines: [{ key: 'status.pendingDetail' }],
    tech: { status: failure.status, reason: failure.reason, message: failure.message, key },
  };
}

/** The failure the order's own state stands for, when no call failed: it was read, not answered. */
export function orderStateFailure(message: string, reason?: string): CallFailure {
  return { status: undefined, reason, message, retryAfterMs: undefined, retryable: false, details: undefined };
}
