/**
 * The merchant's operators: accounts made by the CLI's functions, sign-in over HTTP with the
 * operator cookie, roles on the console's procedures, CSRF on its mutations, and every way a session
 * ends (sign-out, idle, lifetime, disabled, new password). Real PostgreSQL, the app's own handlers.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { addOperator, setDisabled, setPassword } from '@/server/operators/accounts';
import { startTestStack, type TestStack } from '@/test/support/stack';

const PASSWORD = 'a long enough passphrase';
let stack: TestStack;
before(async () => {
  stack = await startTestStack({ stripeCaptureMethod: 'manual' });
});
after(async () => {
  await stack?.close();
});

const unique = (role: string) => `${role}-${randomUUID().slice(0, 8)}`;

async function operator(role: 'viewer' | 'refunder' | 'admin') {
  const username = unique(role);
  await addOperator(stack.db, { username, role, password: PASSWORD }, 'test');
  return username;
}

/** A browser of the console: the operator cookie and the CSRF token `me` gives it. */
class Console {
  cookie: string | undefined;
  csrf: string | undefined;

  async signIn(username: string, password = PASSWORD) {
    const response = await fetch(`${stack.appUrl}/api/operator/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username, password }),
    });
    const set = response.headers.get('set-cookie');
    if (set) this.cookie = set.split(';')[0];
    if (response.status === 204) this.csrf = ((await this.me()).json as { csrfToken: string }).csrfToken;
    return { status: response.status, setCookie: set, json: response.status === 204 ? undefined : await response.json() };
  }

  async me() {
    const response = await fetch(`${stack.appUrl}/api/operator/session`, { headers: this.headers() });
    return { status: response.status, json: await response.json() };
  }

  async signOut() {
    return (await fetch(`${stack.appUrl}/api/operator/session`, { method: 'DELETE', headers: this.headers() })).status;
  }

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { ...(this.cookie ? { cookie: this.cookie } : {}), ...extra };
  }

  async query(procedure: string, input?: unknown) {
    const url = `${stack.appUrl}/api/trpc/${procedure}${input === undefined ? '' : `?input=${encodeURIComponent(JSON.stringify(input))}`}`;
    const response = await fetch(url, { headers: this.headers() });
    return { status: response.status, json: (await response.json()) as any };
  }

  async mutate(procedure: string, input: unknown, headers: Record<string, string> = {}) {
    const response = await fetch(`${stack.appUrl}/api/trpc/${procedure}`, {
      method: 'POST',
      headers: this.headers({
        'content-type': 'application/json',
        'idempotency-key': randomUUID(),
        ...(this.csrf ? { 'x-csrf-token': this.csrf } : {}),
        ...headers,
      }),
      body: JSON.stringify(input),
    });
    return { status: response.status, json: (await response.json()) as any };
  }
}

async function authorizedOrderId(): Promise<string> {
  const customer = stack.customer();
  const order = await customer.createOrder();
  const paid = await customer.pay(order.orderId, { gateway: 'stripe' });
  assert.equal(paid.json.result.data.status, 'authorized', paid.text);
  return order.orderId;
}

describe('operators', () => {
  it('1. signs in with the right password only; a wrong password and an unknown name get the same answer', async () => {
    const name = await operator('viewer');
    const browser = new Console();
    const wrong = await browser.signIn(name, 'not the passphrase at all');
    const unknown = await browser.signIn(unique('nobody'));
    assert.equal(wrong.status, 401);
    assert.deepEqual(unknown, wrong);
    const signedIn = await browser.signIn(name.toUpperCase());
    assert.equal(signedIn.status, 204);
    assert.match(signedIn.setCookie ?? '', /^payonce_operator=[A-Za-z0-9_-]{43}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=43200$/);
    assert.deepEqual({ ...(await browser.me()).json, csrfToken: 'x' }, { username: name, role: 'viewer', csrfToken: 'x' });
    const [stored] = await stack.sql<{ password_hash: string }[]>`select password_hash from operators where username = ${name}`;
    assert.match(stored!.password_hash, /^scrypt\$131072\$8\$1\$/);
    const refused = await stack.sql<{ n: number }[]>`
      select count(*)::int as n from payment_events where stream = 'operators' and kind = 'operator.sign_in_refused' and data->>'username' = ${name}`;
    assert.equal(refused[0]!.n, 1, 'the refused try is journaled');
  });

  it('2. the console’s reads need a session; a shopper’s cookie is not one', async () => {
    const shopper = stack.customer();
    await shopper.query('checkout.products');
    assert.equal((await shopper.query('operator.orders')).status, 401);
    const browser = new Console();
    await browser.signIn(await operator('viewer'));
    const orders = await browser.query('operator.orders', { limit: 5 });
    assert.equal(orders.status, 200);
    assert.ok(Array.isArray(orders.json.result.data));
  });

  it('3. moving money needs the refunder role, the CSRF token and this origin; then it is journaled with who did it', async () => {
    const orderId = await authorizedOrderId();
    const viewer = new Console();
    await viewer.signIn(await operator('viewer'));
    assert.equal((await viewer.mutate('merchant.capture', { orderId })).json.error.data.reason, 'OPERATOR_ROLE_INSUFFICIENT');

    const name = await operator('refunder');
    const refunder = new Console();
    await refunder.signIn(name);
    assert.equal((await refunder.mutate('merchant.capture', { orderId }, { 'x-csrf-token': 'forged' })).status, 403);
    const crossSite = await refunder.mutate(
      'merchant.capture',
      { orderId },
      { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
    );
    assert.equal(crossSite.json.error.data.reason, 'CSRF_TOKEN_INVALID');
    const decided = await refunder.mutate('merchant.capture', { orderId });
    assert.equal(decided.status, 202, JSON.stringify(decided.json));
    assert.equal(decided.json.result.data.decidedBy, `operator:${name}`);
    const [request] = await stack.sql<{ by: string }[]>`
      select data->>'by' as by from payment_events where order_id = ${orderId} and kind = 'request' and data->>'procedure' = 'merchant.capture'`;
    assert.equal(request?.by, `operator:${name}`);
  });

  it('4. a session ends at sign-out, when idle or past its lifetime, when its operator is disabled or changes password', async () => {
    const ends: [string, (name: string, browser: Console) => Promise<unknown>][] = [
      ['sign-out', async (_name, browser) => assert.equal(await browser.signOut(), 204)],
      ['idle', () => stack.sql`update operator_sessions set last_seen_at = now() - interval '31 minutes' where ended_at is null`],
      ['lifetime', () => stack.sql`update operator_sessions set expires_at = now() - interval '1 second' where ended_at is null`],
      ['disabled', (name) => setDisabled(stack.db, name, true, 'test')],
      ['new password', (name) => setPassword(stack.db, name, 'another long passphrase', 'test')],
    ];
    for (const [how, end] of ends) {
      const name = await operator('admin');
      const browser = new Console();
      await browser.signIn(name);
      assert.equal((await browser.me()).status, 200, how);
      await end(name, browser);
      assert.equal((await browser.me()).status, 401, `ended by ${how}`);
      assert.equal((await browser.query('operator.orders')).status, 401, `ended by ${how}`);
    }
  });

  it('5. a disabled operator cannot sign in; too many tries on one name are refused with Retry-After', async () => {
    const disabled = await operator('viewer');
    await setDisabled(stack.db, disabled, true, 'test');
    assert.equal((await new Console().signIn(disabled)).status, 401);

    const name = await operator('viewer');
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) statuses.push((await new Console().signIn(name, 'wrong but long enough')).status);
    assert.deepEqual(statuses, [...Array(10).fill(401), 429]);
    assert.equal((await new Console().signIn(name)).status, 429, 'even the right password waits out the window');
  });

  it('6. sign-in and sign-out from another site are refused', async () => {
    const name = await operator('viewer');
    const response = await fetch(`${stack.appUrl}/api/operator/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
      body: JSON.stringify({ username: name, password: PASSWORD }),
    });
    assert.equal(response.status, 403);
    assert.equal(response.headers.get('set-cookie'), null);
  });
});
