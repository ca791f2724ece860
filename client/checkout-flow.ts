/**
 * The customer's side of a payment, shared by the page and by simulated customers: an
 * Idempotency-Key per order creation and per payment attempt, kept in storage with the order so a
 * reload (or a crashed client) retries with the same key instead of paying again.
 *
 * A key lives until its request has a final answer: 201 (paid), 402 (declined) or 422 (the key was
 * used for a different request). After a decline the next attempt gets a new key.
 */
import type { CreatedOrder } from '../server/checkout/orders';
import type { DeclinedPayment } from '../server/checkout/pay';
import type { PaidOrder } from '../server/checkout/settle';
import type { GatewayId, TestBuyer } from '../server/payments/gateway';
import { callWithRetry, FinalFailureError, RetriesExhaustedError, type CallFailure, type RetryPolicy } from './retry';
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
  attempt?: { key: string; orderId: string };
}

export interface CheckoutStorage {
  load(): StoredCheckout;
  save(state: StoredCheckout): void;
}

export type PayResult =
  | { kind: 'paid'; order: CreatedOrder; paid: PaidOrder }
  | { kind: 'declined'; order: CreatedOrder; declined: DeclinedPayment; message: string }
  | { kind: 'failed'; failure: CallFailure; message: string }
  | { kind: 'gave_up'; failure: CallFailure; message: string };

export type PayProgress =
  | { phase: 'creating_order' }
  | { phase: 'paying' }
  | { phase: 'retrying'; retry: number; failure: CallFailure };

const cartSignature = (cart: CartLine[]) =>
  JSON.stringify([...cart].sort((a, b) => (a.sku < b.sku ? -1 : 1)).map((l) => [l.sku, l.quantity]));

export async function payForCart(params: {
  client: CheckoutClient;
  storage: CheckoutStorage;
  cart: CartLine[];
  gateway: GatewayId;
  buyer?: TestBuyer;
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
        () =>
          params.client.checkout.createOrder.mutate(
            { items: params.cart },
            { context: { idempotencyKey: creationKey } },
          ),
        retryOptions,
      );
      order = { ...created, cart };
      state = { order, attempt: undefined };
      params.storage.save(state);
    }

    // 2. The payment attempt: the stored key if an attempt is still open (a reload), else a new one.
    if (state.attempt?.orderId !== order.orderId) {
      state = { ...state, attempt: { key: newKey(), orderId: order.orderId } };
      params.storage.save(state);
    }
    const attemptKey = state.attempt!.key;
    progress({ phase: 'paying' });
    const paid = await callWithRetry(
      () =>
        params.client.checkout.pay.mutate(
          { orderId: order.orderId, gateway: params.gateway, ...(params.buyer ? { buyer: params.buyer } : {}) },
          { context: { idempotencyKey: attemptKey } },
        ),
      retryOptions,
    );
    params.storage.save({});
    return { kind: 'paid', order, paid };
  } catch (error) {
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
        return { kind: 'declined', order: current.order, declined, message: failure.message };
      }
      if (failure.status === 422) {
        // The stored key belonged to a different request (e.g. another gateway chosen after a
        // reload). Nothing was charged by this call; the next click starts a new attempt.
        params.storage.save({ ...current, attempt: undefined });
        return { kind: 'failed', failure, message: '此支付请求与之前使用同一幂等键的请求不一致，未扣款。请重新点击支付。' };
      }
      if (failure.status === 404 || failure.reason === 'ORDER_NOT_PAYABLE') params.storage.save({});
      return { kind: 'failed', failure, message: failure.message };
    }
    if (error instanceof RetriesExhaustedError) {
      // Keep the key: whenever the customer tries again, it resumes this very attempt.
      return { kind: 'gave_up', failure: error.lastFailure, message: '支付结果暂未确认，请稍后重试；不会重复扣款。' };
    }
    throw error;
  }
}
