/**
 * One simulated customer: the page's own retrying flow (`payForCart`) through the typed tRPC client,
 * from Node. The client's `fetch` is where the customer lives:
 *
 *   - a cookie jar: the first answer's session cookie goes with every later request;
 *   - a load balancer: requests go round robin over the app instances, starting at the plan's
 *     `home` instance — the k-th checkout.pay request to instance (home + k) mod n, so the first pay
 *     request lands where the order's app fault was armed;
 *   - a per-request timeout, and the customer's own abort (giving up mid-payment).
 */
import { payForCart, type CheckoutStorage, type PayProgress, type PayResult, type StoredCheckout } from '@/client/checkout-flow';
import { callWithRetry, FinalFailureError, RetriesExhaustedError } from '@/client/retry';
import { createCheckoutClient } from '@/client/trpc-client';
import type { OrderPlan } from './schedule';

export type Outcome = 'paid' | 'paid_after_decline' | 'declined' | 'gave_up' | 'gave_up_by_retries' | 'failed' | 'error';

export interface CustomerResult {
  outcome: Outcome;
  orderId?: string;
  outTradeNo?: string;
  /** For failed / gave_up_by_retries / error: the last failure's reason or message. */
  reason?: string;
  requests: number;
  retries: number;
  durationMs: number;
  /** When the customer gave up: whether the abort came while a request was still open. */
  abortedMidRequest?: boolean;
}

export class CustomerGaveUp extends Error {
  constructor() {
    super('the customer gave up');
    this.name = 'CustomerGaveUp';
  }
}

const PLACEHOLDER_ORIGIN = 'http://load-balancer.invalid';

export interface CustomerOptions {
  appUrls: string[];
  /** A request unanswered after this long is abandoned (and retried, as a network error). */
  requestTimeoutMs?: number;
  /** Aborting it makes the customer give up for good: open requests are cut, no further retries. */
  giveUp?: AbortSignal;
  /** Told once, when the customer starts paying (after the order exists). */
  onPaying?: () => void;
  /** Told of every answer: its status, and for a 4xx or 5xx the reason its body gives. */
  onAnswer?: (answer: { procedure: string; status: number; reason?: string; at: number }) => void;
}

function memoryStorage(): CheckoutStorage {
  let state: StoredCheckout = {};
  return {
    load: () => structuredClone(state),
    save: (next) => {
      state = structuredClone(next);
    },
  };
}

async function tellAnswer(response: Response, pathname: string, onAnswer: NonNullable<CustomerOptions['onAnswer']>): Promise<void> {
  const procedure = pathname.split('/').pop() ?? pathname;
  let reason: string | undefined;
  if (response.status >= 400) {
    type Body = { error?: { data?: { reason?: string } } } | undefined;
    const body = (await response
      .clone()
      .json()
      .catch(() => undefined)) as Body | Body[];
    // A batch of queries answers an array, one entry per query.
    reason = (Array.isArray(body) ? body.find((entry) => entry?.error) : body)?.error?.data?.reason;
  }
  onAnswer({ procedure, status: response.status, ...(reason ? { reason } : {}), at: Date.now() });
}

export async function runCustomer(plan: OrderPlan, options: CustomerOptions): Promise<CustomerResult> {
  const started = Date.now();
  const cookies = new Map<string, string>();
  const giveUp = options.giveUp;
  let payRequests = 0;
  let otherRequests = 0;
  let requests = 0;
  let openRequests = 0;
  let retries = 0;
  let abortedMidRequest = false;
  giveUp?.addEventListener('abort', () => {
    abortedMidRequest = openRequests > 0;
  });

  const customerFetch: typeof fetch = async (input, init) => {
    if (giveUp?.aborted) throw new CustomerGaveUp();
    const raw = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const url = new URL(raw);
    const isPay = url.pathname.endsWith('/checkout.pay');
    const k = isPay ? payRequests++ : otherRequests++;
    const base = options.appUrls[(plan.home + k) % options.appUrls.length]!;
    const target = `${base}${url.pathname}${url.search}`;
    const headers = new Headers(init?.headers);
    if (cookies.size > 0) headers.set('cookie', [...cookies].map(([name, value]) => `${name}=${value}`).join('; '));
    const signals = [AbortSignal.timeout(options.requestTimeoutMs ?? 15_000)];
    if (giveUp) signals.push(giveUp);
    if (init?.signal) signals.push(init.signal);
    requests++;
    openRequests++;
    try {
      const response = await fetch(target, { ...init, headers, signal: AbortSignal.any(signals) });
      if (options.onAnswer) await tellAnswer(response, url.pathname, options.onAnswer);
      for (const cookie of response.headers.getSetCookie()) {
        const pair = cookie.split(';')[0] ?? '';
        const eq = pair.indexOf('=');
        if (eq > 0) cookies.set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
      }
      return response;
    } finally {
      openRequests--;
    }
  };

  const client = createCheckoutClient({ url: `${PLACEHOLDER_ORIGIN}/api/trpc`, fetch: customerFetch });
  const storage = memoryStorage();
  // The backoff sleeps, cut short when the customer gives up: a customer who left does not retry.
  const sleep = (ms: number) =>
    new Promise<void>((resolve, reject) => {
      if (giveUp?.aborted) return reject(new CustomerGaveUp());
      const timer = setTimeout(() => {
        giveUp?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        clearTimeout(timer);
        reject(new CustomerGaveUp());
      };
      giveUp?.addEventListener('abort', onAbort, { once: true });
    });
  let toldPaying = false;
  const onProgress = (progress: PayProgress) => {
    if (progress.phase === 'retrying') retries++;
    if (progress.phase === 'paying' && !toldPaying) {
      toldPaying = true;
      options.onPaying?.();
    }
  };

  let orderId: string | undefined;
  let outTradeNo: string | undefined;
  const result = (outcome: Outcome, reason?: string): CustomerResult => ({
    outcome,
    ...(orderId ? { orderId } : {}),
    ...(outTradeNo ? { outTradeNo } : {}),
    ...(reason ? { reason } : {}),
    requests,
    retries,
    durationMs: Date.now() - started,
    ...(outcome === 'gave_up' ? { abortedMidRequest } : {}),
  });
  const pay = (buyer: OrderPlan['buyer'], gateway = plan.gateway): Promise<PayResult> =>
    payForCart({ client, storage, cart: plan.cart, gateway, buyer, sleep, onProgress });

  try {
    // As the page does: the catalogue first. Its answer carries the session cookie, so the first
    // mutation already belongs to a known customer (keys are scoped to the customer).
    await callWithRetry(() => client.checkout.products.query(), {
      sleep,
      onRetry: () => {
        retries++;
      },
    });
    let paid = await pay(plan.buyer);
    const order = storage.load().order;
    if (order) ({ orderId, outTradeNo } = order);
    let afterDecline = false;
    if (paid.kind === 'declined') {
      ({ orderId, outTradeNo } = paid.order);
      if (!plan.retryAfterDecline) return result('declined');
      afterDecline = true;
      paid = await pay('ok', plan.retryGateway);
    }
    switch (paid.kind) {
      case 'paid':
        ({ orderId, outTradeNo } = paid.order);
        return result(afterDecline ? 'paid_after_decline' : 'paid');
      case 'declined':
        return result('declined', 'declined again with buyer ok');
      case 'gave_up':
        return result('gave_up_by_retries', paid.failure.reason ?? paid.failure.message);
      case 'failed':
        return result('failed', paid.failure.reason ?? `${paid.failure.status ?? 'network'}: ${paid.failure.message}`);
      case 'awaiting_buyer':
        // The soak's customers always bring a test buyer, so a buyer step is an error of the run.
        return result('error', `unexpected buyer step ${paid.awaiting.action.kind}`);
    }
  } catch (error) {
    const order = storage.load().order;
    if (order) ({ orderId, outTradeNo } = order);
    if (error instanceof CustomerGaveUp || giveUp?.aborted) return result('gave_up');
    if (error instanceof RetriesExhaustedError) return result('gave_up_by_retries', `catalogue: ${error.lastFailure.message}`);
    if (error instanceof FinalFailureError) return result('failed', `catalogue: ${error.failure.message}`);
    return result('error', error instanceof Error ? error.message : String(error));
  }
}
