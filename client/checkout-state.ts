/**
 * The checkout page's state machine, pure: what the page shows and the one task it has under way,
 * as a function of what happened — the shopper's choices and clicks, the stored state read on load,
 * the answers of the tasks it ran. The hook (app/_components/use-checkout.ts) runs each task and
 * reports its outcome back as an action; nothing here reads a clock, storage or the network.
 *
 * The tasks, one at a time: `pay` (payForCart: so a click while a payment is under way sends
 * nothing), `follow_up` (after an uncertain answer, wait and look at the stored attempt again),
 * `ask_order` (the follow-up's question to the order). Watching an order that awaits the buyer's
 * own step, and reading the order a return link names, follow the status instead.
 */
import type { OrderView } from '@/server/checkout/orders';
import type { BuyerStep, TestBuyer } from '@/server/payments/gateway';
import type { GatewayId } from '@/server/payments/gateway-ids';
import {
  cartSignature,
  orderTruth,
  type CartLine,
  type CompletedPayment,
  type CurrentCheckout,
  type OrderTruth,
  type PayProgress,
  type PayResult,
} from './checkout-flow';
import {
  awaitingStatus,
  busyStatus,
  closedStatus,
  completedStatus,
  declinedStatus,
  failedStatus,
  IDLE,
  isFrozen,
  orderStateFailure,
  pendingStatus,
  progressStatus,
  type Status,
} from './checkout-status';
import type { AttemptRequest, LastPaid } from './checkout-storage';

/** Paying the same cart again within this long of a payment asks first, as large shops do. */
export const DUPLICATE_WINDOW_MS = 10 * 60_000;

/** Who pays, as the page offers it: a sandbox test buyer, or the buyer's own step at the gateway. */
export type Payer = TestBuyer | 'self';

/** What one payment is sent with. */
export interface Choice {
  cart: CartLine[];
  gateway: GatewayId;
  /** A sandbox test buyer; undefined: the buyer takes their own step (`buyerStep`). */
  buyer: TestBuyer | undefined;
  buyerStep?: BuyerStep;
}

/** The shopper's choices on the form, as made (what a gateway offers narrows them: formView). */
export interface FormState {
  quantities: Record<string, number>;
  gateway: GatewayId;
  payer: Payer;
  step: BuyerStep | undefined;
}

export const INITIAL_FORM: FormState = { quantities: { 'TEA-LONGJING': 1 }, gateway: 'alipay', payer: 'ok', step: undefined };

/** The request the form makes before the shopper touches it. */
export const DEFAULT_REQUEST: AttemptRequest = { gateway: INITIAL_FORM.gateway, buyer: 'ok' };

export type Task =
  | { kind: 'pay'; id: number; choice: Choice; resuming: boolean }
  | { kind: 'follow_up'; id: number; choice: Choice }
  | { kind: 'ask_order'; id: number; choice: Choice; orderId: string };

export interface CheckoutState {
  form: FormState;
  status: Status;
  task?: Task;
  /** The id the next task gets: an outcome names its task, and one no longer under way is ignored. */
  nextTaskId: number;
  /** The duplicate-purchase question, open. */
  duplicate?: { minutes: number; choice: Choice };
  /** Back from a gateway's page with no attempt stored here: the order its return link names; `round`: asked so far. */
  returning?: { orderId: string; token: string; round: number };
  /** The stored state has been read (and the page is interactive): once, on load. */
  loaded: boolean;
  /** The last payment this page saw (paid or authorised), for the duplicate-purchase question (the hook stores it). */
  lastPaid?: LastPaid;
}

export const INITIAL_STATE: CheckoutState = { form: INITIAL_FORM, status: IDLE, nextTaskId: 1, loaded: false };

export type CheckoutAction =
  | { type: 'loaded'; stored: CurrentCheckout; returned?: { orderId: string; token: string } }
  | { type: 'quantity'; sku: string; value: string }
  | { type: 'gateway'; gateway: GatewayId }
  | { type: 'payer'; payer: Payer }
  | { type: 'step'; step: BuyerStep }
  /** 立即支付: `lastPaid` and `openOrderCart` as storage has them now, `at` the time. */
  | { type: 'pay'; choice: Choice; at: number; lastPaid?: LastPaid; openOrderCart?: string }
  | { type: 'duplicate_continue' }
  | { type: 'duplicate_cancel' }
  | { type: 'progress'; taskId: number; progress: PayProgress }
  | { type: 'pay_result'; taskId: number; result: PayResult; at: number }
  /** The follow-up's wait is over: the stored state as it is now. */
  | { type: 'follow_up_due'; taskId: number; stored: CurrentCheckout }
  | { type: 'order_answer'; taskId: number; truth: OrderTruth; at: number }
  /** A look at the order awaiting the buyer; `stored` as it was before the look. */
  | { type: 'watched'; orderId: string; truth: OrderTruth; stored: CurrentCheckout; at: number }
  | { type: 'returned'; view: OrderView }
  /** The return link names no order (a wrong token answers like a missing order). */
  | { type: 'returned_unknown' }
  /** The return link's order could not be read (the network): ask again. */
  | { type: 'returned_retry' }
  | { type: 'switch_method' }
  | { type: 'new_order' };

export function reduce(state: CheckoutState, action: CheckoutAction): CheckoutState {
  switch (action.type) {
    case 'loaded':
      return loaded(state, action.stored, action.returned);
    case 'quantity':
      return withForm(state, { quantities: { ...state.form.quantities, [action.sku]: quantityOf(action.value) } });
    case 'gateway':
      return withForm(state, { gateway: action.gateway });
    case 'payer':
      return withForm(state, { payer: action.payer });
    case 'step':
      return withForm(state, { step: action.step });
    case 'pay':
      return pay(state, action);
    case 'duplicate_continue':
      return state.duplicate ? startPay({ ...state, duplicate: undefined }, state.duplicate.choice, false) : state;
    case 'duplicate_cancel':
      return { ...state, duplicate: undefined };
    case 'progress':
      return progressed(state, action.taskId, action.progress);
    case 'pay_result':
      return payResult(state, action.taskId, action.result, action.at);
    case 'follow_up_due':
      return followUpDue(state, action.taskId, action.stored);
    case 'order_answer':
      return orderAnswer(state, action.taskId, action.truth, action.at);
    case 'watched':
      return watched(state, action);
    case 'returned':
      return returned(state, action.view);
    case 'returned_unknown':
      return {
        ...state,
        returning: undefined,
        status: { tone: 'bad', title: 'status.failed', lines: [{ key: 'status.returnedUnknown' }] },
      };
    case 'returned_retry':
      return state.returning ? { ...state, returning: { ...state.returning, round: state.returning.round + 1 } } : state;
    case 'switch_method':
      return { ...state, status: IDLE };
    case 'new_order':
      // 再来一单: no follow-up is owed any more; a payment under way (there is none after 支付成功 or 已授权) would go on.
      return { ...state, status: IDLE, returning: undefined, task: state.task?.kind === 'pay' ? state.task : undefined };
    default:
      return unreachable(action);
  }
}

function unreachable(action: never): never {
  throw new Error(`unknown checkout action ${JSON.stringify(action)}`);
}

function withForm(state: CheckoutState, change: Partial<FormState>): CheckoutState {
  return { ...state, form: { ...state.form, ...change } };
}

/** What a quantity box holds, as a quantity: a whole number from 0 to 99. */
function quantityOf(value: string): number {
  return Math.max(0, Math.min(99, Math.trunc(Number(value) || 0)));
}

/** The cart on the form: every line with a quantity. */
export function cartOf(quantities: Record<string, number>): CartLine[] {
  return Object.entries(quantities)
    .filter(([, quantity]) => quantity > 0)
    .map(([sku, quantity]) => ({ sku, quantity }));
}

/** What a gateway offers the buyer (checkout.gateways). */
export interface GatewayOffer {
  testBuyers: boolean;
  buyerSteps: readonly BuyerStep[];
}

/** The form's choices as the chosen gateway allows them. */
export function formView(form: FormState, offer: GatewayOffer | undefined) {
  // A real gateway has no test buyers: its buyer always takes their own step.
  const payer: Payer = offer && !offer.testBuyers ? 'self' : form.payer;
  const steps = offer?.buyerSteps ?? [];
  const buyerStep = form.step && steps.includes(form.step) ? form.step : steps[0];
  const buyer = payer === 'self' ? undefined : payer;
  const cart = cartOf(form.quantities);
  const choice: Choice = { cart, gateway: form.gateway, buyer, ...(buyer ? {} : { buyerStep }) };
  return { payer, steps, buyerStep, cart, choice };
}

/** The request of the attempt left open by a reload or a closed tab, if there is one. */
export function openAttempt({ attempt, order }: CurrentCheckout): Choice | undefined {
  if (!attempt || !order || order.orderId !== attempt.orderId) return undefined;
  return { cart: attempt.lines, gateway: attempt.gateway, buyer: attempt.buyer, buyerStep: attempt.buyerStep };
}

/**
 * A reload (or a tab opened later) finds the attempt it left open: show what it was, and finish it.
 * A buyer back from a gateway's page whose attempt is not stored here — another browser, cleared
 * storage — is shown that order by the return link's token instead: never a blank cart that invites
 * a second purchase.
 */
function loaded(state: CheckoutState, stored: CurrentCheckout, returned?: { orderId: string; token: string }): CheckoutState {
  if (state.loaded) return state;
  const next = { ...state, loaded: true };
  if (returned && stored.attempt?.orderId !== returned.orderId) {
    return { ...next, returning: { ...returned, round: 0 }, status: busyStatus('status.returned', 'status.returnedDetail') };
  }
  const open = openAttempt(stored);
  if (!open) return next;
  const form: FormState = {
    quantities: quantitiesOf(open.cart),
    gateway: open.gateway,
    payer: open.buyer ?? 'self',
    step: open.buyerStep ?? state.form.step,
  };
  return startPay({ ...next, form }, open, true);
}

function quantitiesOf(lines: CartLine[]): Record<string, number> {
  return Object.fromEntries(lines.map((line) => [line.sku, line.quantity]));
}

/** 立即支付: asked first when the same cart was paid a moment ago, else paid. */
function pay(state: CheckoutState, { choice, at, lastPaid, openOrderCart }: Extract<CheckoutAction, { type: 'pay' }>): CheckoutState {
  if (isFrozen(state.status) || state.task?.kind === 'pay' || choice.cart.length === 0) return state;
  const minutes = duplicateMinutes(choice.cart, at, lastPaid, openOrderCart);
  if (minutes !== undefined) return { ...state, duplicate: { minutes, choice } };
  return startPay(state, choice, false);
}

/**
 * Whole minutes since the same cart was paid, rounded down ("1 分钟前" for ten seconds would not be
 * true), if that was within the window; an order already open for this cart (say, declined a
 * moment ago) was confirmed when it began.
 */
export function duplicateMinutes(cart: CartLine[], at: number, lastPaid: LastPaid | undefined, openOrderCart: string | undefined) {
  const signature = cartSignature(cart);
  if (!lastPaid || lastPaid.cart !== signature || openOrderCart === signature) return undefined;
  const ago = at - lastPaid.paidAt;
  return ago >= 0 && ago < DUPLICATE_WINDOW_MS ? Math.floor(ago / 60_000) : undefined;
}

/** One payment at a time: while one is under way, another start changes nothing. */
function startPay(state: CheckoutState, choice: Choice, resuming: boolean): CheckoutState {
  if (state.task?.kind === 'pay') return state;
  const task: Task = { kind: 'pay', id: state.nextTaskId, choice, resuming };
  return { ...state, task, nextTaskId: task.id + 1, status: busyStatus(payTitle(task)) };
}

const payTitle = (task: { resuming: boolean }) => (task.resuming ? 'status.resuming' : 'status.processing');

/** The task under way, if it is the one `taskId` names and of `kind`. */
function current<K extends Task['kind']>(state: CheckoutState, taskId: number, kind: K) {
  const task = state.task;
  return task?.id === taskId && task.kind === kind ? (task as Extract<Task, { kind: K }>) : undefined;
}

function progressed(state: CheckoutState, taskId: number, progress: PayProgress): CheckoutState {
  const task = current(state, taskId, 'pay');
  const status = task && progressStatus(payTitle(task), progress);
  return status ? { ...state, status } : state;
}

function payResult(state: CheckoutState, taskId: number, result: PayResult, at: number): CheckoutState {
  const task = current(state, taskId, 'pay');
  if (!task) return state;
  const done = { ...state, task: undefined };
  switch (result.kind) {
    case 'awaiting_buyer':
      return { ...withForm(done, { gateway: result.awaiting.gateway }), status: awaitingStatus(result) };
    case 'paid':
      return completed(done, result.paid, task.choice.cart, at);
    case 'declined':
      return { ...done, status: declinedStatus(result, task.choice.gateway) };
    case 'failed':
      return { ...done, status: failedStatus(result) };
    case 'gave_up':
      return followUp({ ...done, status: pendingStatus(result) }, task.choice);
    default:
      return unreachable(result);
  }
}

/**
 * Paid, or the money held (authorised): shown on the gateway that took or holds the money, whatever
 * the form said before a reload. A hold counts as a purchase for the duplicate-purchase question: the
 * money is taken when the order ships.
 */
function completed(state: CheckoutState, payment: CompletedPayment, cart: CartLine[], at: number): CheckoutState {
  return {
    ...withForm(state, { gateway: payment.payment.gateway }),
    status: completedStatus(payment),
    lastPaid: { cart: cartSignature(cart), paidAt: at, orderId: payment.orderId },
  };
}

/** An unconfirmed payment: resume its attempt, or ask its order, until the result is known. */
function followUp(state: CheckoutState, choice: Choice): CheckoutState {
  return { ...state, task: { kind: 'follow_up', id: state.nextTaskId, choice }, nextTaskId: state.nextTaskId + 1 };
}

function followUpDue(state: CheckoutState, taskId: number, stored: CurrentCheckout): CheckoutState {
  const task = current(state, taskId, 'follow_up');
  if (!task) return state;
  const done = { ...state, task: undefined };
  const open = openAttempt(stored);
  if (open) return startPay(done, open, true);
  if (!stored.order) return done;
  return {
    ...done,
    task: { kind: 'ask_order', id: state.nextTaskId, choice: task.choice, orderId: stored.order.orderId },
    nextTaskId: state.nextTaskId + 1,
  };
}

function orderAnswer(state: CheckoutState, taskId: number, truth: OrderTruth, at: number): CheckoutState {
  const task = current(state, taskId, 'ask_order');
  if (!task) return state;
  const done = { ...state, task: undefined };
  switch (truth.kind) {
    case 'paid':
      return completed(done, truth.paid, task.choice.cart, at);
    case 'declined':
      return { ...done, status: declinedStatus({ declined: truth.declined, key: undefined }, task.choice.gateway) };
    case 'not_charged':
    case 'closed': {
      const closed = truth.kind === 'closed' ? { charged: truth.charged, closedAs: truth.status } : {};
      const failure = orderStateFailure(truth.kind);
      return { ...done, status: failedStatus({ kind: 'failed', failure, message: truth.kind, orderState: truth.kind, ...closed }) };
    }
    case 'paying':
    case 'unknown':
      return followUp(done, task.choice);
    default:
      return unreachable(truth);
  }
}

/**
 * While the buyer takes their own step, the order is what tells: the gateway's notification (or the
 * reconciler's query) settles it, and the page shows it as soon as it has.
 */
function watched(state: CheckoutState, { orderId, truth, stored, at }: Extract<CheckoutAction, { type: 'watched' }>): CheckoutState {
  if (state.status.tone !== 'wait' || state.status.awaiting.orderId !== orderId) return state;
  if (truth.kind === 'paid') return completed(state, truth.paid, (openAttempt(stored) ?? { cart: cartOf(state.form.quantities) }).cart, at);
  if (truth.kind !== 'closed') return state;
  const failure = orderStateFailure(truth.status, 'ORDER_NOT_PAYABLE');
  const closed = { orderState: 'closed', charged: truth.charged, closedAs: truth.status } as const;
  return { ...state, status: failedStatus({ kind: 'failed', failure, message: truth.status, ...closed }) };
}

/** The order a return link names: shown with its cart, and asked again until it is paid (or authorised) or closed. */
function returned(state: CheckoutState, view: OrderView): CheckoutState {
  const { returning } = state;
  if (!returning) return state;
  const next = withForm(state, { quantities: quantitiesOf(view.items) });
  const truth = orderTruth(view);
  if (truth.kind === 'paid') {
    return {
      ...withForm(next, { gateway: truth.paid.payment.gateway }),
      returning: undefined,
      status: completedStatus(truth.paid, returning.token),
    };
  }
  if (truth.kind === 'closed') return { ...next, returning: undefined, status: closedStatus(truth) };
  return { ...next, returning: { ...returning, round: returning.round + 1 } };
}
