/**
 * The customer's side (client/checkout-flow.ts) through the typed tRPC client, exactly as the page
 * runs it: a key per attempt kept in storage, retries for network errors, none for 402 and 422.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { payForCart, type CheckoutStorage, type PayProgress, type StoredCheckout } from '@/client/checkout-flow';
import { createCheckoutClient } from '@/client/trpc-client';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

let stack: TestStack;
before(async () => {
  stack = await startTestStack();
});
after(async () => {
  await stack?.close();
});

function memoryStorage(initial: StoredCheckout = {}): CheckoutStorage & { state: StoredCheckout } {
  const holder = {
    state: initial,
    load: () => structuredClone(holder.state),
    save: (next: StoredCheckout) => {
      holder.state = structuredClone(next);
    },
  };
  return holder;
}

/** A browser-like client: keeps its session cookie; `failFirst` drops that many requests before they leave. */
function browserClient(options: { failFirst?: number } = {}) {
  let cookie: string | undefined;
  let toFail = options.failFirst ?? 0;
  const sent: string[] = [];
  const sentKeys: string[] = [];
  const client = createCheckoutClient({
    url: `${stack.appUrl}/api/trpc`,
    fetch: async (input, init) => {
      const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
      if (toFail > 0 && url.includes('checkout.pay')) {
        toFail--;
        throw new TypeError('fetch failed'); // the request never reached the server
      }
      sent.push(url);
      const headers = new Headers(init?.headers);
      const key = headers.get('idempotency-key');
      if (key) sentKeys.push(key);
      if (cookie) headers.set('cookie', cookie);
      const response = await fetch(input, { ...init, headers });
      const setCookie = response.headers.getSetCookie()[0];
      if (setCookie) cookie = setCookie.split(';')[0];
      return response;
    },
  });
  return { client, sent, sentKeys };
}

const noWait = async () => {};
const cart = [{ sku: 'MUG-CELADON', quantity: 1 }];

describe('checkout flow (page and simulated customers)', () => {
  it('1. pays a cart: one order, one charge, and clears the stored attempt', async () => {
    const { client } = browserClient();
    const storage = memoryStorage();
    const result = await payForCart({ client, storage, cart, gateway: 'alipay', buyer: 'ok', sleep: noWait });
    assert.equal(result.kind, 'paid');
    if (result.kind !== 'paid') return;
    assert.equal((await stack.succeededCharges(result.order.outTradeNo)).length, 1);
    assert.deepEqual(storage.state, {});
  });

  it('2. retries a request that never left the browser and still charges once', async () => {
    const { client } = browserClient({ failFirst: 2 });
    const storage = memoryStorage();
    const progress: PayProgress[] = [];
    const result = await payForCart({
      client,
      storage,
      cart,
      gateway: 'alipay',
      buyer: 'ok',
      sleep: noWait,
      onProgress: (p) => progress.push(p),
    });
    assert.equal(result.kind, 'paid');
    if (result.kind !== 'paid') return;
    const paying = progress.slice(progress.findIndex((p) => p.phase === 'paying'));
    assert.deepEqual(
      paying.filter((p) => p.phase === 'retrying').map((p) => (p.phase === 'retrying' ? p.retry : 0)),
      [1, 2],
    );
    assert.equal((await stack.succeededCharges(result.order.outTradeNo)).length, 1);
  });

  it('3. after a reload reuses the stored key: the answer is the stored one, no second charge', async () => {
    const { client, sentKeys } = browserClient();
    // The tab closes right after the answer arrives and before the page records it: every save but
    // the final "all done" one sticks.
    const storage = memoryStorage();
    const closingTab: CheckoutStorage = {
      load: storage.load,
      save: (next) => (Object.keys(next).length > 0 ? storage.save(next) : undefined),
    };
    const first = await payForCart({ client, storage: closingTab, cart, gateway: 'alipay', buyer: 'ok', sleep: noWait });
    assert.equal(first.kind, 'paid');
    if (first.kind !== 'paid') return;
    const attemptKey = storage.state.attempt?.key;
    assert.ok(attemptKey, 'the attempt key survived the reload');

    const again = await payForCart({ client, storage, cart, gateway: 'alipay', buyer: 'ok', sleep: noWait });
    assert.equal(again.kind, 'paid', JSON.stringify(again));
    if (again.kind !== 'paid') return;
    assert.deepEqual(again.paid, first.paid);
    assert.equal(sentKeys.filter((k) => k === attemptKey).length, 2, 'the same key was sent again');
    assert.equal((await stack.ledger(first.order.outTradeNo)).charges.length, 1, 'the gateway was not called again');
  });

  it('4. stops at a decline with a clear message, keeps the order, and the next attempt gets a new key', async () => {
    const { client } = browserClient();
    const storage = memoryStorage();
    const keys: string[] = [];
    const newKey = () => {
      const key = randomUUID();
      keys.push(key);
      return key;
    };
    const declined = await payForCart({ client, storage, cart, gateway: 'alipay', buyer: 'insufficient_funds', sleep: noWait, newKey });
    assert.equal(declined.kind, 'declined');
    if (declined.kind !== 'declined') return;
    assert.match(declined.message, /余额不足/);
    assert.equal(storage.state.order?.orderId, declined.order.orderId, 'the order stays');
    assert.equal(storage.state.attempt, undefined, 'the attempt is over');

    const paid = await payForCart({ client, storage, cart, gateway: 'alipay', buyer: 'ok', sleep: noWait, newKey });
    assert.equal(paid.kind, 'paid');
    assert.equal(keys.length, 3, 'order key, first attempt key, second attempt key');
    assert.equal((await stack.succeededCharges(declined.order.outTradeNo)).length, 1);
  });

  it('5. shows 422 clearly when a stored key meets a changed request, and charges nothing with it', async () => {
    const { client } = browserClient();
    const storage = memoryStorage();
    const decline = await payForCart({ client, storage, cart, gateway: 'alipay', buyer: 'insufficient_funds', sleep: noWait });
    assert.equal(decline.kind, 'declined');
    if (decline.kind !== 'declined') return;
    // The attempt's key is still stored (say the tab reloaded mid-request) when the buyer changes.
    const stored = storage.load();
    const reused = memoryStorage({ ...stored, attempt: { key: 'reused-key', orderId: decline.order.orderId } });
    const first = await payForCart({ client, storage: reused, cart, gateway: 'alipay', buyer: 'account_restricted', sleep: noWait });
    assert.equal(first.kind, 'declined');
    reused.save({ ...reused.load(), attempt: { key: 'reused-key', orderId: decline.order.orderId } });
    const changed = await payForCart({ client, storage: reused, cart, gateway: 'alipay', buyer: 'ok', sleep: noWait });
    assert.equal(changed.kind, 'failed');
    if (changed.kind !== 'failed') return;
    assert.equal(changed.failure.status, 422);
    assert.match(changed.message, /未扣款/);
    assert.equal((await stack.succeededCharges(decline.order.outTradeNo)).length, 0);
  });

  it('6. while the key’s owner holds it (409 REQUEST_IN_PROGRESS), asks the order, and a paid order is the answer at once', async () => {
    // The first pay really reaches the server and pays; its answer is replaced by what a retry sees
    // while a dead request's lease runs out. The page must not wait out the lease: the order knows.
    let payCalls = 0;
    let orderQueries = 0;
    let cookie: string | undefined;
    const client = createCheckoutClient({
      url: `${stack.appUrl}/api/trpc`,
      fetch: async (input, init) => {
        const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
        const headers = new Headers(init?.headers);
        if (cookie) headers.set('cookie', cookie);
        const response = await fetch(input, { ...init, headers });
        const setCookie = response.headers.getSetCookie()[0];
        if (setCookie) cookie = setCookie.split(';')[0];
        if (url.includes('checkout.order')) orderQueries++;
        if (url.includes('checkout.pay') && ++payCalls === 1) {
          await response.arrayBuffer();
          const body = {
            error: { message: 'in progress', code: -32603, data: { code: 'CONFLICT', httpStatus: 409, reason: 'REQUEST_IN_PROGRESS' } },
          };
          return new Response(JSON.stringify(body), { status: 409, headers: { 'content-type': 'application/json', 'retry-after': '1' } });
        }
        return response;
      },
    });
    const storage = memoryStorage();
    const result = await payForCart({ client, storage, cart, gateway: 'alipay', buyer: 'ok', sleep: noWait });
    assert.equal(result.kind, 'paid');
    assert.ok(orderQueries >= 1);
    assert.equal(result.kind === 'paid' && result.confirmedByOrder, true, 'the order answered, not a retry of the key');
    if (result.kind === 'paid') assert.equal((await stack.succeededCharges(result.order.outTradeNo)).length, 1);
    // Behind the answer, the key is still retried until it answers (here at once: it had completed).
    await eventually(async () => (payCalls >= 2 ? true : undefined), 5000, 'the key retried in the background');
  });
});
