/**
 * What the page keeps in the browser's localStorage, and the one conversion of an older shape of it.
 *
 * `payonce.checkout.v1` holds the open order and the open payment attempt (StoredCheckout); reading
 * it brings it to the current shape once (migrateStoredCheckout) and writes that back, so nothing
 * else reads an older shape. `payonce.lastPaid.v1` holds the last paid cart, for the
 * duplicate-purchase question; it has had one shape since the page first wrote it.
 */
import type { CreatedOrder } from '@/server/checkout/orders';
import type { BuyerStep, GatewayId, TestBuyer } from '@/server/payments/gateway';

export interface CartLine {
  sku: string;
  quantity: number;
}

/** The order for a cart, with the cart's signature (cartSignature). */
export type StoredOrder = CreatedOrder & { cart: string };

export interface StoredCheckout {
  /** The order for `cart`, once created. */
  order?: StoredOrder;
  /** The key for creating the order of `cart`, until the order exists. */
  orderCreation?: { key: string; cart: string };
  /** The payment attempt without a final answer yet. */
  attempt?: StoredAttempt | KeyOnlyAttempt;
}

/** A payment attempt without a final answer yet: its key, and the request the key was sent with. */
export interface StoredAttempt {
  key: string;
  orderId: string;
  gateway: GatewayId;
  buyer?: TestBuyer;
  buyerStep?: BuyerStep;
  /** The cart the order was made of, so a reloaded page shows what is being paid for. */
  lines: CartLine[];
}

/**
 * An attempt stored by its key alone, as the page kept it before it kept the request too: brought to
 * the current shape by migrateStoredCheckout before anything reads it.
 */
export interface KeyOnlyAttempt {
  key: string;
  orderId: string;
  gateway?: undefined;
}

/** Stored state in the current shape: what payForCart and the page work with. */
export interface CurrentCheckout extends StoredCheckout {
  attempt?: StoredAttempt;
}

export interface CheckoutStorage {
  load(): StoredCheckout;
  save(state: StoredCheckout): void;
}

/** Where the open order and the open payment attempt (its key and request) survive a reload. */
export const STORAGE_KEY = 'payonce.checkout.v1';

/** The last paid cart and when, for the duplicate-purchase question. */
export const LAST_PAID_KEY = 'payonce.lastPaid.v1';

/** The request an attempt stored without one is resumed with. */
export type AttemptRequest = Pick<StoredAttempt, 'gateway' | 'buyer' | 'buyerStep'>;

/**
 * Stored state in the current shape. The one older shape is an attempt kept by its key and order
 * alone, without the request it was sent with or the cart (`{ key, orderId }`). It is converted, not
 * dropped: its key is what makes a reload resume that payment instead of starting a second one.
 * - The request was never stored: the attempt gets `request` (the page's default choice, or the
 *   caller's). If the key was sent with another request, the server answers 422 and the order
 *   itself says what happened to the money (payForCart).
 * - The cart comes from the order's cart signature, which has always been stored with the order.
 * An attempt whose order is not stored with it is dropped: no one could resume it (payForCart starts
 * a new attempt for an order that has none).
 */
export function migrateStoredCheckout(stored: StoredCheckout, request: AttemptRequest): CurrentCheckout {
  const { attempt, order } = stored;
  if (!attempt || attempt.gateway !== undefined) return { ...stored, attempt };
  if (!order || order.orderId !== attempt.orderId) return { ...stored, attempt: undefined };
  const { gateway, buyer, buyerStep } = request;
  const sent = { gateway, ...(buyer ? { buyer } : buyerStep ? { buyerStep } : {}) };
  return { ...stored, attempt: { key: attempt.key, orderId: attempt.orderId, ...sent, lines: linesOf(order.cart) } };
}

/** The cart lines a cart signature (cartSignature) records. */
function linesOf(signature: string): CartLine[] {
  return (JSON.parse(signature) as [string, number][]).map(([sku, quantity]) => ({ sku, quantity }));
}

/** The page's storage: read (and converted once) from localStorage; unreadable state is none. */
export function browserCheckoutStorage(request: AttemptRequest): { load(): CurrentCheckout; save(state: StoredCheckout): void } {
  const save = (state: StoredCheckout) => window.localStorage.setItem(STORAGE_KEY, JSON.stringify(state));
  return {
    load() {
      let stored: StoredCheckout;
      let current: CurrentCheckout;
      try {
        stored = JSON.parse(window.localStorage.getItem(STORAGE_KEY) ?? '{}') as StoredCheckout;
        current = migrateStoredCheckout(stored, request);
      } catch {
        return {};
      }
      if (current.attempt !== stored.attempt) save(current);
      return current;
    },
    save,
  };
}

/** The last paid cart (its cartSignature), when, and the order that paid it. */
export interface LastPaid {
  cart: string;
  paidAt: number;
  orderId: string;
}

/** Anything but a LastPaid (unset, or not written by this page) is no last payment. */
export function parseLastPaid(raw: string | null): LastPaid | undefined {
  try {
    const value = JSON.parse(raw ?? 'null') as LastPaid | null;
    return value && typeof value.cart === 'string' && typeof value.paidAt === 'number' ? value : undefined;
  } catch {
    return undefined;
  }
}

export function loadLastPaid(): LastPaid | undefined {
  return parseLastPaid(window.localStorage.getItem(LAST_PAID_KEY));
}

export function saveLastPaid(lastPaid: LastPaid): void {
  window.localStorage.setItem(LAST_PAID_KEY, JSON.stringify(lastPaid));
}
