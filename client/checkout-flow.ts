/**
 * The customer's side of a payment, shared by the page and by simulated customers: an
 * Idempotency-Key per order creation and per payment attempt, kept in storage with the order so a
 * reload (or a crashed client) retries with the same key instead of paying again.
 *
 * A key lives until its request has a final answer: 201 (paid, or authorised: the money held until
 * the order ships), 402 (declined) or 422 (the key was used for a different request). After a decline
 * the next attempt gets a new key.
 *
 * The stored attempt keeps the request it was sent with (gateway, buyer, cart), so a reload resumes
 * that very request: the same key with another gateway would be a different request (422) while the
 * first one may still charge. When an answer does not say what happened to the money — a 422, or
 * retries that ran out — the order itself is asked (checkout.order), and only its state decides
 * between paid, declined, still confirming and "nothing was charged".
 */
import type { AuthorizedOrder } from '@/server/checkout/authorizations';
import type { CreatedOrder, OrderView } from '@/server/checkout/orders';
import type { AwaitingBuyer, DeclinedPayment } from '@/server/checkout/pay';
import type { PaidOrder } from '@/server/checkout/settle';
import type { BuyerStep, GatewayId, TestBuyer } from '@/server/payments/gateway';
import {
  backoffDelay,
  callWithRetry,
  DEFAULT_RETRY_POLICY,
  describeFailure,
  FinalFailureError,
  RetriesExhaustedError,
  type CallFailure,
  type RetryPolicy,
} from './retry';
import {
  migrateStoredCheckout,
  type CartLine,
  type CheckoutStorage,
  type CurrentCheckout,
  type StoredAttempt,
  type StoredOrder,
} from './checkout-storage';
import type { CheckoutClient } from './trpc-client';

export type {
  CartLine,
  CheckoutStorage,
  CurrentCheckout,
  KeyOnlyAttempt,
  StoredAttempt,
  StoredCheckout,
  StoredOrder,
} from './checkout-storage';

/**
 * The buyer's payment is done, whichever way the checkout takes money: taken (`paid`), or held on the
 * card for the merchant to take when the order ships (`authorized`). Either way the shopper has
 * nothing left to do, and paying the same cart again would be a second purchase.
 */
export type CompletedPayment = PaidOrder | AuthorizedOrder;

/**
 * `key` is the payment attempt's Idempotency-Key when there was one; `confirmedByOrder` says the
 * result was read from the order's state rather than from the pay call's own answer.
 */
export type PayResult =
  | { kind: 'paid'; order: CreatedOrder; paid: CompletedPayment; key?: string; confirmedByOrder?: boolean }
  /**
   * The trade is open and waits for the buyer's own step (`awaiting.action`). The attempt stays saved:
   * a reload sends the same key again and gets the same step back (a stored, replayed answer).
   */
  | { kind: 'awaiting_buyer'; order: CreatedOrder; awaiting: AwaitingBuyer; key: string }
  | { kind: 'declined'; order: CreatedOrder; declined: DeclinedPayment; message: string; key?: string; confirmedByOrder?: boolean }
  | {
      kind: 'failed';
      failure: CallFailure;
      message: string;
      key?: string;
      /** What the order said when it was asked: e.g. `not_charged` after a 422. */
      orderState?: OrderTruth['kind'];
      /** With orderState `declined`: the decline that ended the order's latest attempt. */
      declined?: DeclinedPayment;
      /** With orderState `closed`: whether any charge succeeded on the order (it is refunded). */
      charged?: boolean;
      /** With orderState `closed`: how it closed, as the order's status (`expired`, `voided`). */
      closedAs?: string;
    }
  | { kind: 'gave_up'; failure: CallFailure; message: string; key?: string };

export type PayProgress =
  | { phase: 'creating_order' }
  | { phase: 'paying'; resumed: boolean }
  | { phase: 'retrying'; retry: number; failure: CallFailure }
  /** Asking the order what happened, because an answer did not say (422, retries ran out). */
  | { phase: 'confirming'; round: number };

/** What the order's own state says about the money. */
export type OrderTruth =
  /** Paid, or authorised (the money held): the buyer is done. */
  | { kind: 'paid'; paid: CompletedPayment }
  /** A payment is in flight (the order is `paying`): its result is not known yet. */
  | { kind: 'paying' }
  /** The order's latest attempt was declined and nothing is in flight. */
  | { kind: 'declined'; declined: DeclinedPayment }
  /** Still payable and no payment succeeded: nothing was charged. */
  | { kind: 'not_charged' }
  /**
   * Expired, or voided (its hold released or lapsed): no longer payable. `charged`: a charge succeeded
   * on it (refunded, as it cannot stay).
   */
  | { kind: 'closed'; status: string; charged: boolean }
  | { kind: 'unknown'; failure: CallFailure };

/** Reads one order's state and says what it means for the money; never guesses. */
export function orderTruth(view: OrderView): OrderTruth {
  const completed = completedPayment(view);
  if (completed) return { kind: 'paid', paid: completed };
  // Paid or authorised without the payment that says so: read between two writes; ask again.
  if (view.status === 'paying' || view.status === 'paid' || view.status === 'authorized') return { kind: 'paying' };
  if (view.status === 'expired' || view.status === 'voided') {
    return { kind: 'closed', status: view.status, charged: view.payments.some((p) => p.status === 'succeeded') };
  }
  const latest = view.payments.filter((p) => p.role === 'payment').at(-1);
  if (latest?.status === 'declined' && latest.attempt === view.paymentAttempts) {
    return {
      kind: 'declined',
      declined: {
        reason: 'PAYMENT_DECLINED',
        message: latest.declineMessage ?? '',
        orderId: view.orderId,
        gateway: latest.gateway as GatewayId,
        declineCode: latest.declineCode ?? '',
      },
    };
  }
  return { kind: 'not_charged' };
}

/** The order's own payment, when the order is paid or authorised and has it. */
function completedPayment(view: OrderView): CompletedPayment | undefined {
  if (view.status !== 'paid' && view.status !== 'authorized') return undefined;
  // A paid order's payment has succeeded (captured, if it was an authorisation); an authorised one's holds.
  const held = view.status === 'paid' ? 'succeeded' : 'authorized';
  const payment = view.payments.find((p) => p.status === held && p.role === 'payment');
  if (!payment) return undefined;
  return {
    orderId: view.orderId,
    status: view.status,
    payment: {
      gateway: payment.gateway as GatewayId,
      outTradeNo: view.outTradeNo,
      amountMinor: payment.amountMinor,
      currency: payment.currency,
      gatewayTradeNo: payment.gatewayTradeNo ?? '',
    },
  };
}

/**
 * Asks the order until it is no longer `paying` (a payment in flight settles within the server's
 * lease and gateway timeouts), or until the retry policy's patience runs out.
 */
export async function confirmOrder(params: {
  client: CheckoutClient;
  orderId: string;
  policy?: RetryPolicy;
  sleep?: (ms: number) => Promise<void>;
  onProgress?: (progress: PayProgress) => void;
}): Promise<OrderTruth> {
  const policy = params.policy ?? DEFAULT_RETRY_POLICY;
  const sleep = params.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  for (let round = 1; ; round++) {
    params.onProgress?.({ phase: 'confirming', round });
    let truth: OrderTruth;
    try {
      truth = orderTruth(await params.client.checkout.order.query({ orderId: params.orderId }));
    } catch (error) {
      truth = { kind: 'unknown', failure: describeFailure(error) };
    }
    if (truth.kind !== 'paying' && truth.kind !== 'unknown') return truth;
    if (truth.kind === 'unknown' && !truth.failure.retryable) return truth;
    if (round > policy.maxRetries) return truth;
    await sleep(backoffDelay(round, policy));
  }
}

/** One cart, whatever the order of its lines: the order (and the duplicate-purchase check) match carts by it. */
export const cartSignature = (cart: CartLine[]) =>
  JSON.stringify([...cart].sort((a, b) => (a.sku < b.sku ? -1 : 1)).map((l) => [l.sku, l.quantity]));

export interface PayParams {
  client: CheckoutClient;
  storage: CheckoutStorage;
  cart: CartLine[];
  gateway: GatewayId;
  buyer?: TestBuyer;
  /** Without a test buyer: the buyer's own step (default: the gateway's first). */
  buyerStep?: BuyerStep;
  newKey?: () => string;
  policy?: RetryPolicy;
  onProgress?: (progress: PayProgress) => void;
  sleep?: (ms: number) => Promise<void>;
}

/** One payForCart call: its parameters with their defaults, and the cart's signature. */
interface PayRun extends PayParams {
  newKey: () => string;
  progress: (progress: PayProgress) => void;
  signature: string;
  retryOptions: { policy?: RetryPolicy; sleep?: (ms: number) => Promise<void>; onRetry: (retry: number, failure: CallFailure) => void };
}

/** What the page says while a payment's result is not known. */
const NOT_CONFIRMED = '支付结果暂未确认，请稍后重试；不会重复扣款。';

export async function payForCart(params: PayParams): Promise<PayResult> {
  const run = payRun(params);
  let key: string | undefined;
  try {
    const { state, order } = await orderForCart(run, storedState(run));
    const attempt = attemptFor(run, state, order);
    key = attempt.key;
    return answerResult(run, order, attempt, await sendAttempt(run, order, attempt));
  } catch (error) {
    return failureResult(run, error, key);
  }
}

function payRun(params: PayParams): PayRun {
  const progress = params.onProgress ?? (() => {});
  return {
    ...params,
    newKey: params.newKey ?? (() => crypto.randomUUID()),
    progress,
    signature: cartSignature(params.cart),
    retryOptions: {
      policy: params.policy,
      sleep: params.sleep,
      onRetry: (retry, failure) => progress({ phase: 'retrying', retry, failure }),
    },
  };
}

/** The stored state in its current shape: an attempt stored by its key alone is sent with the caller's request. */
function storedState(run: PayRun): CurrentCheckout {
  const stored = run.storage.load();
  const state = migrateStoredCheckout(stored, { gateway: run.gateway, buyer: run.buyer, buyerStep: run.buyerStep });
  if (state.attempt !== stored.attempt) run.storage.save(state);
  return state;
}

/** 1. The order for this cart: created once, whatever the retries. */
async function orderForCart(run: PayRun, stored: CurrentCheckout): Promise<{ state: CurrentCheckout; order: StoredOrder }> {
  if (stored.order?.cart === run.signature) return { state: stored, order: stored.order };
  let creation = stored.orderCreation;
  if (creation?.cart !== run.signature) {
    creation = { key: run.newKey(), cart: run.signature };
    run.storage.save({ ...stored, orderCreation: creation, attempt: undefined });
  }
  const creationKey = creation.key;
  run.progress({ phase: 'creating_order' });
  const created = await callWithRetry(
    () => run.client.checkout.createOrder.mutate({ items: run.cart }, { context: { idempotencyKey: creationKey } }),
    run.retryOptions,
  );
  const order = { ...created, cart: run.signature };
  const state = { order, attempt: undefined };
  run.storage.save(state);
  return { state, order };
}

/**
 * 2. The payment attempt: the stored one if it is still open (a reload) — with the request it was
 *    sent with, whatever the caller chose since — else a new one.
 */
function attemptFor(run: PayRun, state: CurrentCheckout, order: StoredOrder): StoredAttempt {
  if (state.attempt?.orderId === order.orderId) {
    run.progress({ phase: 'paying', resumed: true });
    return state.attempt;
  }
  const attempt: StoredAttempt = {
    key: run.newKey(),
    orderId: order.orderId,
    gateway: run.gateway,
    ...(run.buyer ? { buyer: run.buyer } : {}),
    ...(!run.buyer && run.buyerStep ? { buyerStep: run.buyerStep } : {}),
    lines: run.cart,
  };
  run.storage.save({ ...state, attempt });
  run.progress({ phase: 'paying', resumed: false });
  return attempt;
}

/** The attempt's request, under its key. */
function payRequest(run: PayRun, order: StoredOrder, attempt: StoredAttempt) {
  const { gateway, buyer, buyerStep } = attempt;
  return () =>
    run.client.checkout.pay.mutate(
      { orderId: order.orderId, gateway, ...(buyer ? { buyer } : {}), ...(buyerStep ? { buyerStep } : {}) },
      { context: { idempotencyKey: attempt.key } },
    );
}

/**
 * 3. The attempt, sent until it has an answer. A 409 REQUEST_IN_PROGRESS on a retry means the request
 *    that owns this key has not answered — perhaps its process died, and its lease must run out
 *    before a retry can take over. The gateway's notification may settle the order long before that:
 *    the order is asked before each such retry, and a paid order is the answer at once
 *    (`settledByOrder`).
 */
async function sendAttempt(run: PayRun, order: StoredOrder, attempt: StoredAttempt) {
  const pay = payRequest(run, order, attempt);
  let lastFailure: CallFailure | undefined;
  let settledByOrder = false;
  const answer = await callWithRetry(
    async () => {
      const paid = lastFailure?.reason === 'REQUEST_IN_PROGRESS' ? await paidMeanwhile(run.client, order.orderId) : undefined;
      if (!paid) return pay();
      settledByOrder = true;
      return paid;
    },
    {
      ...run.retryOptions,
      onRetry: (retry: number, failure: CallFailure) => {
        lastFailure = failure;
        run.retryOptions.onRetry(retry, failure);
      },
    },
  );
  return { answer, settledByOrder };
}

/** 4. The answer: the buyer's own step to take (the attempt stays saved), or the paid (or authorised) order. */
function answerResult(
  run: PayRun,
  order: StoredOrder,
  attempt: StoredAttempt,
  { answer, settledByOrder }: Awaited<ReturnType<typeof sendAttempt>>,
): PayResult {
  if (answer.status === 'awaiting_buyer') return { kind: 'awaiting_buyer', order, awaiting: answer, key: attempt.key };
  run.storage.save({});
  if (!settledByOrder) return { kind: 'paid', order, paid: answer, key: attempt.key };
  // The shopper has their answer; the key has not. Keep retrying it quietly until a retry takes
  // the dead request's key over (it finds the order paid or authorised and completes the key with
  // that answer), so no key is left in flight behind a finished order.
  void callWithRetry(payRequest(run, order, attempt), { policy: KEY_SETTLING_POLICY, sleep: run.sleep }).catch(() => {});
  return { kind: 'paid', order, paid: answer, key: attempt.key, confirmedByOrder: true };
}

/** 5. A call that failed for good, or whose retries ran out; anything else is not the shopper's. */
async function failureResult(run: PayRun, error: unknown, key: string | undefined): Promise<PayResult> {
  if (error instanceof FinalFailureError) return finalFailure(run, error.failure, key);
  if (error instanceof RetriesExhaustedError) return retriesExhausted(run, error.lastFailure, key);
  throw error;
}

async function finalFailure(run: PayRun, failure: CallFailure, key: string | undefined): Promise<PayResult> {
  const current = run.storage.load();
  const order = current.order;
  if (failure.status === 402 && order) {
    // Declined: this attempt is over; the order stays open for another buyer or card.
    run.storage.save({ ...current, attempt: undefined });
    const declined = { reason: 'PAYMENT_DECLINED', message: failure.message, ...(failure.details ?? {}) } as DeclinedPayment;
    return { kind: 'declined', order, declined, message: failure.message, key };
  }
  if (failure.status === 422 && order) {
    // The stored key was sent with a different request (an attempt stored without its request is
    // resumed with one that may not be it: migrateStoredCheckout). That first request may have
    // charged, or may still be charging: only the order knows, so it is asked before anything is
    // said about the money. The attempt stays saved until the order has answered, so a reload
    // meanwhile asks again.
    const truth = await confirmOrder({
      client: run.client,
      orderId: order.orderId,
      policy: run.policy,
      sleep: run.sleep,
      onProgress: run.progress,
    });
    return settleByOrder(run.storage, order, truth, failure, key);
  }
  if (failure.status === 404 || failure.reason === 'ORDER_NOT_PAYABLE') run.storage.save({});
  return { kind: 'failed', failure, message: failure.message, key };
}

/**
 * Keeps the key: whenever the customer tries again, it resumes this very attempt. But first asks the
 * order: the answers may have been lost while the payment itself went through.
 */
async function retriesExhausted(run: PayRun, failure: CallFailure, key: string | undefined): Promise<PayResult> {
  const order = run.storage.load().order;
  const truth =
    order && key
      ? await confirmOrder({
          client: run.client,
          orderId: order.orderId,
          policy: { ...(run.policy ?? DEFAULT_RETRY_POLICY), maxRetries: 0 },
          sleep: run.sleep,
          onProgress: run.progress,
        })
      : undefined;
  if (order && truth?.kind === 'paid') {
    run.storage.save({});
    return { kind: 'paid', order, paid: truth.paid, key, confirmedByOrder: true };
  }
  return { kind: 'gave_up', failure, message: NOT_CONFIRMED, key };
}

/** Patient enough to outlast a dead request's lease (30 s) several times over, then gives up quietly. */
const KEY_SETTLING_POLICY: RetryPolicy = { maxRetries: 20, baseDelayMs: 1000, maxDelayMs: 8000 };

/** The order's payment, if the order is paid or authorised by now; anything else (or no answer) is undefined. */
async function paidMeanwhile(client: CheckoutClient, orderId: string) {
  try {
    const truth = orderTruth(await client.checkout.order.query({ orderId }));
    return truth.kind === 'paid' ? truth.paid : undefined;
  } catch {
    return undefined;
  }
}

/** How a closed order ended, in the words of the technical detail a 422 ends with. */
const CLOSED_AS: Record<string, string> = { expired: '过期', voided: '取消（授权已释放）' };

/** The result a 422 ends with, once the order has said what happened. */
function settleByOrder(
  storage: CheckoutStorage,
  order: StoredOrder,
  truth: OrderTruth,
  failure: CallFailure,
  key: string | undefined,
): PayResult {
  switch (truth.kind) {
    case 'paid':
      storage.save({});
      return { kind: 'paid', order, paid: truth.paid, key, confirmedByOrder: true };
    case 'declined':
      // The key's own request was declined: still a failed resume, and nothing was charged.
      storage.save({ ...storage.load(), attempt: undefined });
      return {
        kind: 'failed',
        failure,
        message: `此支付请求与之前使用同一幂等键的请求不一致；之前的请求已被拒绝，未扣款。`,
        key,
        orderState: 'declined',
        declined: truth.declined,
      };
    case 'not_charged':
      storage.save({ ...storage.load(), attempt: undefined });
      return {
        kind: 'failed',
        failure,
        message: '此支付请求与之前使用同一幂等键的请求不一致，未扣款。请重新点击支付。',
        key,
        orderState: 'not_charged',
      };
    case 'closed':
      storage.save({});
      return {
        kind: 'failed',
        failure,
        message: `订单已${CLOSED_AS[truth.status] ?? '关闭'}，请重新下单。`,
        key,
        orderState: 'closed',
        charged: truth.charged,
        closedAs: truth.status,
      };
    case 'paying':
    case 'unknown':
      return { kind: 'gave_up', failure, message: NOT_CONFIRMED, key };
  }
}
