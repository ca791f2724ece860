/**
 * The customer's side of a payment, shared by the page and by simulated customers: an
 * Idempotency-Key per order creation and per payment attempt, kept in storage with the order so a
 * reload (or a crashed client) retries with the same key instead of paying again.
 *
 * A key lives until its request has a final answer: 201 (paid), 402 (declined) or 422 (the key was
 * used for a different request). After a decline the next attempt gets a new key.
 *
 * The stored attempt keeps the request it was sent with (gateway, buyer, cart), so a reload resumes
 * that very request: the same key with another gateway would be a different request (422) while the
 * first one may still charge. When an answer does not say what happened to the money — a 422, or
 * retries that ran out — the order itself is asked (checkout.order), and only its state decides
 * between paid, declined, still confirming and "nothing was charged".
 */
import type { CreatedOrder, OrderView } from '../server/checkout/orders';
import type { AwaitingBuyer, DeclinedPayment } from '../server/checkout/pay';
import type { PaidOrder } from '../server/checkout/settle';
import type { BuyerStep, GatewayId, TestBuyer } from '../server/payments/gateway';
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
import type { CheckoutClient } from './trpc-client';

export interface CartLine {
  sku: string;
  quantity: number;
}

export interface StoredCheckout {
  /** The order for `cart`, once created. */
  order?: CreatedOrder & { cart: string };
  /** The key for creating the order of `cart`, until the order exists. */
  orderCreation?: { key: string; cart: string };
  /** The payment attempt without a final answer yet. */
  attempt?: StoredAttempt;
}

export interface StoredAttempt {
  key: string;
  orderId: string;
  /**
   * The request the key was sent with. Absent in attempts saved by earlier versions of the page,
   * which kept only the key: such an attempt is resumed with the caller's choice, and a mismatch
   * is settled by asking the order (see confirmOrder).
   */
  gateway?: GatewayId;
  buyer?: TestBuyer;
  buyerStep?: BuyerStep;
  /** The cart the order was made of, so a reloaded page shows what is being paid for. */
  lines?: CartLine[];
}

export interface CheckoutStorage {
  load(): StoredCheckout;
  save(state: StoredCheckout): void;
}

/**
 * `key` is the payment attempt's Idempotency-Key when there was one; `confirmedByOrder` says the
 * result was read from the order's state rather than from the pay call's own answer.
 */
export type PayResult =
  | { kind: 'paid'; order: CreatedOrder; paid: PaidOrder; key?: string; confirmedByOrder?: boolean }
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
  | { kind: 'paid'; paid: PaidOrder }
  /** A payment is in flight (the order is `paying`): its result is not known yet. */
  | { kind: 'paying' }
  /** The order's latest attempt was declined and nothing is in flight. */
  | { kind: 'declined'; declined: DeclinedPayment }
  /** Still payable and no payment succeeded: nothing was charged. */
  | { kind: 'not_charged' }
  /** Expired or failed: no longer payable. `charged`: a charge succeeded on it (refunded, as it cannot stay). */
  | { kind: 'closed'; status: string; charged: boolean }
  | { kind: 'unknown'; failure: CallFailure };

/** Reads one order's state and says what it means for the money; never guesses. */
export function orderTruth(view: OrderView): OrderTruth {
  const payment = view.payments.find((p) => p.status === 'succeeded' && p.role === 'payment');
  if (view.status === 'paid' && payment) {
    return {
      kind: 'paid',
      paid: {
        orderId: view.orderId,
        status: 'paid',
        payment: {
          gateway: payment.gateway as GatewayId,
          outTradeNo: view.outTradeNo,
          amountMinor: payment.amountMinor,
          currency: payment.currency,
          gatewayTradeNo: payment.gatewayTradeNo ?? '',
        },
      },
    };
  }
  if (view.status === 'paying' || view.status === 'paid') return { kind: 'paying' };
  if (view.status === 'failed' || view.status === 'expired') {
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

export async function payForCart(params: {
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
}): Promise<PayResult> {
  const newKey = params.newKey ?? (() => crypto.randomUUID());
  const progress = params.onProgress ?? (() => {});
  const retryOptions = {
    policy: params.policy,
    sleep: params.sleep,
    onRetry: (retry: number, failure: CallFailure) => progress({ phase: 'retrying', retry, failure }),
  };
  const cart = cartSignature(params.cart);
  let state = params.storage.load();
  let attemptKey: string | undefined;

  try {
    // 1. The order for this cart: created once, whatever the retries.
    let order = state.order?.cart === cart ? state.order : undefined;
    if (!order) {
      if (state.orderCreation?.cart !== cart) {
        state = { ...state, orderCreation: { key: newKey(), cart }, attempt: undefined };
        params.storage.save(state);
      }
      const creationKey = state.orderCreation!.key;
      progress({ phase: 'creating_order' });
      const created = await callWithRetry(
        () => params.client.checkout.createOrder.mutate({ items: params.cart }, { context: { idempotencyKey: creationKey } }),
        retryOptions,
      );
      order = { ...created, cart };
      state = { order, attempt: undefined };
      params.storage.save(state);
    }

    // 2. The payment attempt: the stored one if it is still open (a reload) — with the request it
    //    was sent with, whatever the caller chose since — else a new one.
    if (state.attempt?.orderId !== order.orderId) {
      state = {
        ...state,
        attempt: {
          key: newKey(),
          orderId: order.orderId,
          gateway: params.gateway,
          ...(params.buyer ? { buyer: params.buyer } : {}),
          ...(!params.buyer && params.buyerStep ? { buyerStep: params.buyerStep } : {}),
          lines: params.cart,
        },
      };
      params.storage.save(state);
      progress({ phase: 'paying', resumed: false });
    } else {
      progress({ phase: 'paying', resumed: true });
    }
    const attempt = state.attempt!;
    attemptKey = attempt.key;
    const gateway = attempt.gateway ?? params.gateway;
    const buyer = attempt.gateway ? attempt.buyer : params.buyer;
    const buyerStep = attempt.gateway ? attempt.buyerStep : params.buyer ? undefined : params.buyerStep;
    // A 409 REQUEST_IN_PROGRESS on a retry means the request that owns this key has not answered —
    // perhaps its process died, and its lease must run out before a retry can take over. The gateway's
    // notification may settle the order long before that: the order is asked before each such retry,
    // and a paid order is the answer at once.
    let lastFailure: CallFailure | undefined;
    let settledByOrder = false;
    const pay = () =>
      params.client.checkout.pay.mutate(
        { orderId: order.orderId, gateway, ...(buyer ? { buyer } : {}), ...(buyerStep ? { buyerStep } : {}) },
        { context: { idempotencyKey: attempt.key } },
      );
    const answer = await callWithRetry(
      async () => {
        if (lastFailure?.reason === 'REQUEST_IN_PROGRESS') {
          const paid = await paidMeanwhile(params.client, order.orderId);
          if (paid) {
            settledByOrder = true;
            return paid;
          }
        }
        return pay();
      },
      {
        ...retryOptions,
        onRetry: (retry: number, failure: CallFailure) => {
          lastFailure = failure;
          retryOptions.onRetry(retry, failure);
        },
      },
    );
    if (answer.status === 'awaiting_buyer') return { kind: 'awaiting_buyer', order, awaiting: answer, key: attempt.key };
    params.storage.save({});
    if (settledByOrder) {
      // The shopper has their answer; the key has not. Keep retrying it quietly until a retry takes
      // the dead request's key over (it finds the order paid and completes the key with that answer),
      // so no key is left in flight behind a paid order.
      void callWithRetry(pay, { policy: KEY_SETTLING_POLICY, sleep: params.sleep }).catch(() => {});
      return { kind: 'paid', order, paid: answer, key: attempt.key, confirmedByOrder: true };
    }
    return { kind: 'paid', order, paid: answer, key: attempt.key };
  } catch (error) {
    const key = attemptKey;
    if (error instanceof FinalFailureError) {
      const failure = error.failure;
      const current = params.storage.load();
      if (failure.status === 402 && current.order) {
        // Declined: this attempt is over; the order stays open for another buyer or card.
        params.storage.save({ ...current, attempt: undefined });
        const declined = {
          reason: 'PAYMENT_DECLINED',
          message: failure.message,
          ...(failure.details ?? {}),
        } as DeclinedPayment;
        return { kind: 'declined', order: current.order, declined, message: failure.message, key };
      }
      if (failure.status === 422 && current.order) {
        // The stored key belongs to a different request (one saved before the page kept the
        // request with its key). That first request may have charged, or may still be charging:
        // only the order knows, so it is asked before anything is said about the money. The attempt
        // stays saved until the order has answered, so a reload meanwhile asks again.
        const truth = await confirmOrder({
          client: params.client,
          orderId: current.order.orderId,
          policy: params.policy,
          sleep: params.sleep,
          onProgress: progress,
        });
        return settleByOrder(params.storage, current.order, truth, failure, key);
      }
      if (failure.status === 404 || failure.reason === 'ORDER_NOT_PAYABLE') params.storage.save({});
      return { kind: 'failed', failure, message: failure.message, key };
    }
    if (error instanceof RetriesExhaustedError) {
      // Keep the key: whenever the customer tries again, it resumes this very attempt. But first ask
      // the order: the answers may have been lost while the payment itself went through.
      const current = params.storage.load();
      if (current.order && key) {
        const truth = await confirmOrder({
          client: params.client,
          orderId: current.order.orderId,
          policy: { ...(params.policy ?? DEFAULT_RETRY_POLICY), maxRetries: 0 },
          sleep: params.sleep,
          onProgress: progress,
        });
        if (truth.kind === 'paid') {
          params.storage.save({});
          return { kind: 'paid', order: current.order, paid: truth.paid, key, confirmedByOrder: true };
        }
      }
      return { kind: 'gave_up', failure: error.lastFailure, message: '支付结果暂未确认，请稍后重试；不会重复扣款。', key };
    }
    throw error;
  }
}

/** Patient enough to outlast a dead request's lease (30 s) several times over, then gives up quietly. */
const KEY_SETTLING_POLICY: RetryPolicy = { maxRetries: 20, baseDelayMs: 1000, maxDelayMs: 8000 };

/** The order's payment, if the order is paid by now; anything else (or no answer) is undefined. */
async function paidMeanwhile(client: CheckoutClient, orderId: string) {
  try {
    const truth = orderTruth(await client.checkout.order.query({ orderId }));
    return truth.kind === 'paid' ? truth.paid : undefined;
  } catch {
    return undefined;
  }
}

/** The result a 422 ends with, once the order has said what happened. */
function settleByOrder(
  storage: CheckoutStorage,
  order: CreatedOrder & { cart: string },
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
        message: `订单已${truth.status === 'expired' ? '过期' : '关闭'}，请重新下单。`,
        key,
        orderState: 'closed',
        charged: truth.charged,
      };
    case 'paying':
    case 'unknown':
      return { kind: 'gave_up', failure, message: '支付结果暂未确认，请稍后重试；不会重复扣款。', key };
  }
}
