/**
 * Hostile pass, holes H2–H4: answers a shared cache could hand to another customer, and control
 * routes another site could drive through a visitor's browser. Each attack is replayed as the
 * browser would send it and must be refused with nothing changed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { returnToken } from '@/server/checkout/return-address';
import { controlRequestRefusal } from '@/server/http/control-requests';
import { startTestStack, type TestStack } from '@/test/support/stack';
import { leavesNoTrace } from './support';

let stack: TestStack;

before(async () => {
  stack = await startTestStack();
});
after(async () => {
  await stack?.close();
});

function assertPrivate(response: Response, what: string) {
  const cacheControl = response.headers.get('cache-control') ?? '';
  assert.match(cacheControl, /\bprivate\b/, `${what}: Cache-Control ${cacheControl}`);
  assert.match(cacheControl, /\bno-store\b/, `${what}: Cache-Control ${cacheControl}`);
  assert.ok(
    (response.headers.get('vary') ?? '').split(',').some((v) => v.trim().toLowerCase() === 'cookie'),
    `${what}: Vary ${response.headers.get('vary')}`,
  );
}

describe('H2: no shared cache may keep a customer’s answer', () => {
  it('marks the cookie-setting first answer, every customer-scoped query, mutations and refusals private, no-store, Vary: Cookie', async () => {
    const first = await fetch(`${stack.appUrl}/api/trpc/checkout.products`);
    assert.ok(first.headers.get('set-cookie'), 'the first answer opens the session');
    assertPrivate(first, 'checkout.products (sets the session)');

    const customer = stack.customer();
    const order = await customer.createOrder();
    const cookie = { cookie: customer.cookie! };
    const get = (procedure: string, input?: unknown) =>
      fetch(`${stack.appUrl}/api/trpc/${procedure}${input === undefined ? '' : `?input=${encodeURIComponent(JSON.stringify(input))}`}`, {
        headers: cookie,
      });
    assertPrivate(await get('checkout.order', { orderId: order.orderId }), 'checkout.order');
    assertPrivate(await get('checkout.timeline', { orderId: order.orderId }), 'checkout.timeline');
    assertPrivate(await get('checkout.recentOrders'), 'checkout.recentOrders');
    assertPrivate(
      await get('checkout.returnedOrder', { orderId: order.orderId, token: returnToken('test-session-secret', order.orderId) }),
      'checkout.returnedOrder',
    );
    const created = await fetch(`${stack.appUrl}/api/trpc/checkout.createOrder`, {
      method: 'POST',
      headers: { ...cookie, 'content-type': 'application/json', 'idempotency-key': 'h2-order' },
      body: JSON.stringify({ items: [{ sku: 'MUG-CELADON', quantity: 1 }] }),
    });
    assert.equal(created.status, 201);
    assertPrivate(created, 'checkout.createOrder');
    const batch = await fetch(`${stack.appUrl}/api/trpc/checkout.createOrder,checkout.pay?batch=1`, {
      method: 'POST',
      headers: cookie,
      body: '{}',
    });
    assert.equal(batch.status, 400);
    assertPrivate(batch, 'a refused batch');
  });
});

describe('H3: the app’s control routes refuse what another site can make a browser send', () => {
  const control = (headers: Record<string, string>, body = '{"point":"after_claim","action":{"kind":"crash"}}') =>
    new Request('http://localhost:3000/api/faults', { method: 'POST', headers: { host: 'localhost:3000', ...headers }, body });

  it('refuses a text/plain form post (no preflight needed) with 415', async () => {
    const refused = controlRequestRefusal(control({ 'content-type': 'text/plain' }));
    assert.equal(refused?.status, 415);
    assert.equal(((await refused!.json()) as { reason: string }).reason, 'UNSUPPORTED_MEDIA_TYPE');
    assert.equal(controlRequestRefusal(control({}))?.status, 415, 'no content type at all');
  });
  it('refuses a request the browser marks cross-site or same-site, or whose Origin is another host, with 403', async () => {
    const attempts: Record<string, string>[] = [
      { 'content-type': 'application/json', 'sec-fetch-site': 'cross-site' },
      { 'content-type': 'application/json', 'sec-fetch-site': 'same-site' },
      { 'content-type': 'application/json', origin: 'https://evil.example' },
      { 'content-type': 'application/json', origin: 'http://localhost:4010' },
      { 'content-type': 'application/json', origin: 'null' },
    ];
    for (const headers of attempts) {
      const refused = controlRequestRefusal(control(headers));
      assert.equal(refused?.status, 403, JSON.stringify(headers));
      assert.equal(((await refused!.json()) as { reason: string }).reason, 'CROSS_SITE_REFUSED');
    }
  });
  it('lets the page itself and tools through', () => {
    assert.equal(
      controlRequestRefusal(
        control({ 'content-type': 'application/json', 'sec-fetch-site': 'same-origin', origin: 'http://localhost:3000' }),
      ),
      undefined,
    );
    assert.equal(controlRequestRefusal(control({ 'content-type': 'application/json; charset=utf-8' })), undefined, 'curl');
  });
});

describe('H4: the sandbox’s control plane refuses other sites', () => {
  const faults = async () => ((await (await fetch(`${stack.sandboxUrl}/sandbox/faults`)).json()) as { faults: unknown[] }).faults;
  const arm = (headers: Record<string, string>) =>
    fetch(`${stack.sandboxUrl}/sandbox/faults`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ gateway: 'alipay', action: 'drop_after_charge' }),
    });

  it('a text/plain form post arms nothing (415)', async () => {
    await leavesNoTrace(stack, async () => {
      const response = await arm({ 'content-type': 'text/plain' });
      assert.equal(response.status, 415, await response.text());
    });
    assert.deepEqual(await faults(), []);
  });
  it('a cross-site request or a foreign Origin arms nothing and pays nothing (403)', async () => {
    await leavesNoTrace(stack, async () => {
      const attempts: Record<string, string>[] = [
        { 'sec-fetch-site': 'cross-site' },
        { origin: 'https://evil.example' },
        { 'sec-fetch-site': 'same-site' },
      ];
      for (const headers of attempts) {
        const response = await arm({ 'content-type': 'application/json', ...headers });
        assert.equal(response.status, 403, `${JSON.stringify(headers)}: ${await response.text()}`);
      }
      const pays = await fetch(`${stack.sandboxUrl}/sandbox/alipay/buyer-pays`, {
        method: 'POST',
        headers: { 'content-type': 'text/plain', origin: 'https://evil.example' },
        body: JSON.stringify({ outTradeNo: 'PO0000000000000000AA', buyer: 'ok' }),
      });
      assert.equal(pays.status, 403, await pays.text());
    });
    assert.deepEqual(await faults(), []);
  });
  it('a tool on this machine still arms a fault (the refusals above are not everything refused)', async () => {
    const response = await arm({ 'content-type': 'application/json' });
    assert.equal(response.status, 201, await response.text());
    assert.equal((await faults()).length, 1);
    await fetch(`${stack.sandboxUrl}/sandbox/faults`, { method: 'DELETE' });
  });
});
