/**
 * Hostile session cookies over real HTTP: malformed, forged, swapped, expired, old-format and
 * duplicated cookies, and the `__Host-` cookie over https. Each refused session is treated as no
 * session at all — a new customer, whose mutations answer 401 SESSION_REQUIRED — and changes
 * nothing in the database; none may cost the real customer their session.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHmac, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { DEFAULT_SESSION_MAX_AGE_SECONDS, sessionCookieValue } from '@/server/http/session';
import { startTestStack, type TestStack } from '@/test/support/stack';
import { footprint } from './support';

/** The secret test/support/stack.ts signs with: what an attacker does not have, but the test needs. */
const SECRET = 'test-session-secret';
const MUG = [{ sku: 'MUG-CELADON', quantity: 1 }];

let stack: TestStack;

before(async () => {
  stack = await startTestStack();
});
after(async () => {
  await stack?.close();
});

interface Answer {
  status: number;
  json: any;
  /** The Set-Cookie headers of the answer: a new session was issued when there is one. */
  setCookies: string[];
}

/** One raw tRPC call with exactly the Cookie header given; `https` stands for a TLS-terminating proxy. */
async function call(
  procedure: string,
  options: { cookie?: string; input?: unknown; key?: string; https?: boolean; mutation?: boolean } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (options.cookie !== undefined) headers.cookie = options.cookie;
  if (options.https) headers['x-forwarded-proto'] = 'https';
  let url = `${stack.appUrl}/api/trpc/${procedure}`;
  let body: string | undefined;
  if (options.mutation) {
    headers['content-type'] = 'application/json';
    headers['idempotency-key'] = options.key ?? randomUUID();
    body = JSON.stringify(options.input);
  } else if (options.input !== undefined) {
    url += `?input=${encodeURIComponent(JSON.stringify(options.input))}`;
  }
  const response = await fetch(url, { method: options.mutation ? 'POST' : 'GET', headers, body });
  return { status: response.status, json: await response.json(), setCookies: response.headers.getSetCookie() };
}

const createOrder = (cookie: string, options: { key?: string; https?: boolean } = {}) =>
  call('checkout.createOrder', { cookie, input: { items: MUG }, mutation: true, ...options });
const readOrder = (cookie: string, orderId: string, https = false) => call('checkout.order', { cookie, input: { orderId }, https });

/** A customer with a session and one order, as the page leaves them. */
async function customerWithOrder(https = false) {
  const first = await call('checkout.products', { https });
  assert.equal(first.status, 200);
  const cookie = first.setCookies[0]!.split(';')[0]!;
  const order = await createOrder(cookie, { https });
  assert.equal(order.status, 201, JSON.stringify(order.json));
  const value = cookie.slice(cookie.indexOf('=') + 1);
  const [customerId, issuedAt, signature] = value.split('.') as [string, string, string];
  return { cookie, customerId, issuedAt: Number(issuedAt), signature, orderId: order.json.result.data.orderId as string };
}

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** The customer's session held: the order reads back and no new session was issued. */
async function assertSessionKept(cookie: string, orderId: string, https = false) {
  const read = await readOrder(cookie, orderId, https);
  assert.equal(read.status, 200, JSON.stringify(read.json));
  assert.equal(read.json.result.data.orderId, orderId);
  assert.deepEqual(read.setCookies, [], 'no new session was issued');
}

/** The cookie was treated as absent: a stranger, who cannot read the order nor mutate, and nothing changed. */
async function assertRefused(cookie: string, orderId: string, https = false) {
  const before = await footprint(stack);
  const read = await readOrder(cookie, orderId, https);
  assert.equal(read.status, 404, JSON.stringify(read.json));
  assert.equal(read.setCookies.length, 1, 'a new session is issued in its place');
  const mutation = await createOrder(cookie, { https });
  assert.equal(mutation.status, 401, JSON.stringify(mutation.json));
  assert.equal(mutation.json.error.data.reason, 'SESSION_REQUIRED');
  assert.deepEqual(await footprint(stack), before, 'no order, key, payment or customer row; stock untouched');
}

describe('hostile session cookies', () => {
  it('1. ignores cookies it cannot decode: the customer keeps their session and can still order', async () => {
    const alice = await customerWithOrder();
    for (const junk of ['other=%E0%A4%A', 'x=%', 'payonce_session=%']) {
      for (const header of [`${junk}; ${alice.cookie}`, `${alice.cookie}; ${junk}`]) {
        const products = await call('checkout.products', { cookie: header });
        assert.equal(products.status, 200, `${header}: ${JSON.stringify(products.json)}`);
        assert.deepEqual(products.setCookies, []);
        await assertSessionKept(header, alice.orderId);
      }
    }
    const second = await createOrder(`x=%; ${alice.cookie}`);
    assert.equal(second.status, 201, JSON.stringify(second.json));
    await assertSessionKept(alice.cookie, second.json.result.data.orderId);
  });

  it('1b. a malformed cookie alone is no session: 401 SESSION_REQUIRED for a mutation, not 500, and nothing changes', async () => {
    const before = await footprint(stack);
    const mutation = await createOrder('other=%E0%A4%A; x=%');
    assert.equal(mutation.status, 401, JSON.stringify(mutation.json));
    assert.equal(mutation.json.error.data.reason, 'SESSION_REQUIRED');
    assert.equal(mutation.setCookies.length, 1);
    assert.deepEqual(await footprint(stack), before);
  });

  it('2. refuses a forged signature', async () => {
    const alice = await customerWithOrder();
    const forged = createHmac('sha256', 'guessed-secret').update(`${alice.customerId}.${alice.issuedAt}`).digest('base64url');
    await assertRefused(`payonce_session=${alice.customerId}.${alice.issuedAt}.${forged}`, alice.orderId);
    await assertSessionKept(alice.cookie, alice.orderId);
  });

  it("3. refuses a customer id swapped into another customer's signed cookie", async () => {
    const alice = await customerWithOrder();
    const mallory = await customerWithOrder();
    await assertRefused(`payonce_session=${alice.customerId}.${mallory.issuedAt}.${mallory.signature}`, alice.orderId);
    // Nor can the issue time be moved to keep a cookie alive: it is under the signature.
    await assertRefused(`payonce_session=${alice.customerId}.${alice.issuedAt + 1}.${alice.signature}`, alice.orderId);
  });

  it('4. refuses a session older than its maximum age; the retry with the new cookie is served', async () => {
    const alice = await customerWithOrder();
    const issuedAt = (age: number) => nowSeconds() - age;
    const young = `payonce_session=${sessionCookieValue(SECRET, alice.customerId, issuedAt(DEFAULT_SESSION_MAX_AGE_SECONDS - 3600))}`;
    await assertSessionKept(young, alice.orderId);
    const expired = `payonce_session=${sessionCookieValue(SECRET, alice.customerId, issuedAt(DEFAULT_SESSION_MAX_AGE_SECONDS + 1))}`;
    await assertRefused(expired, alice.orderId);

    // As the page's client does after 401 SESSION_REQUIRED: the same key, with the cookie just set.
    const key = randomUUID();
    const first = await createOrder(expired, { key });
    assert.equal(first.status, 401);
    const retry = await createOrder(first.setCookies[0]!.split(';')[0]!, { key });
    assert.equal(retry.status, 201, JSON.stringify(retry.json));
  });

  it('5. refuses an old-format cookie (no issue time), even correctly signed', async () => {
    const alice = await customerWithOrder();
    const oldSignature = createHmac('sha256', SECRET).update(alice.customerId).digest('base64url');
    await assertRefused(`payonce_session=${alice.customerId}.${oldSignature}`, alice.orderId);
  });

  it('6. with two session cookies in either order, a valid one wins: an invalid one cannot lock the customer out', async () => {
    const alice = await customerWithOrder();
    const forged = `payonce_session=${alice.customerId}.${alice.issuedAt}.${'A'.repeat(43)}`;
    const expired = `payonce_session=${sessionCookieValue(SECRET, randomUUID(), nowSeconds() - DEFAULT_SESSION_MAX_AGE_SECONDS - 1)}`;
    for (const stale of [forged, expired]) {
      await assertSessionKept(`${stale}; ${alice.cookie}`, alice.orderId);
      await assertSessionKept(`${alice.cookie}; ${stale}`, alice.orderId);
    }
    const order = await createOrder(`${forged}; ${alice.cookie}`);
    assert.equal(order.status, 201, JSON.stringify(order.json));
    await assertSessionKept(alice.cookie, order.json.result.data.orderId);

    // Two valid ones: the one issued last, whatever the order (deterministic, not "the first").
    const older = `payonce_session=${sessionCookieValue(SECRET, randomUUID(), alice.issuedAt - 60)}`;
    await assertSessionKept(`${older}; ${alice.cookie}`, alice.orderId);
    await assertSessionKept(`${alice.cookie}; ${older}`, alice.orderId);
  });

  it('7. over https the cookie is __Host-payonce_session (Secure, Path=/, no Domain) and only it is read', async () => {
    const first = await call('checkout.products', { https: true });
    const setCookie = first.setCookies[0]!;
    assert.match(setCookie, /^__Host-payonce_session=[0-9a-f-]{36}\.\d+\.[\w-]{43};/);
    const attributes = setCookie
      .split(';')
      .slice(1)
      .map((a) => a.trim());
    assert.ok(attributes.includes('Secure') && attributes.includes('Path=/') && attributes.includes('HttpOnly'), setCookie);
    assert.ok(attributes.includes(`Max-Age=${DEFAULT_SESSION_MAX_AGE_SECONDS}`), setCookie);
    assert.ok(!attributes.some((a) => /^domain=/i.test(a)), setCookie);

    const alice = await customerWithOrder(true);
    assert.match(alice.cookie, /^__Host-payonce_session=/);
    await assertSessionKept(alice.cookie, alice.orderId, true);
    // A plain payonce_session over https may come from a sibling subdomain: not read, even if valid.
    const plain = alice.cookie.replace(/^__Host-/, '');
    await assertRefused(plain, alice.orderId, true);
    // A __Host- cookie beside it does not make a plain one count, nor the reverse.
    await assertSessionKept(`${plain}; ${alice.cookie}`, alice.orderId, true);
  });

  it('7b. over http the cookie is the plain payonce_session, without Secure, and a __Host- one is not read', async () => {
    const alice = await customerWithOrder();
    assert.match(alice.cookie, /^payonce_session=/);
    const first = await call('checkout.products');
    assert.doesNotMatch(first.setCookies[0]!, /Secure/);
    await assertRefused(`__Host-${alice.cookie}`, alice.orderId);
  });
});

describe('production start without SESSION_SECRET', () => {
  /** Runs instrumentation.ts's register() as `next start` would, in a process of its own. */
  function register(env: Record<string, string | undefined>) {
    const childEnv: NodeJS.ProcessEnv = { ...process.env, NEXT_RUNTIME: 'nodejs', NEXT_PHASE: '', ...env };
    delete childEnv.DATABASE_URL; // the check must come before anything else starts
    for (const [name, value] of Object.entries(env)) if (value === undefined) delete childEnv[name];
    return spawnSync(process.execPath, ['--import', 'tsx', '-e', "await (await import('./instrumentation.ts')).register()"], {
      env: childEnv,
      encoding: 'utf8',
      timeout: 60_000,
    });
  }

  it('8. refuses to start, with one line saying what to set, and exits non-zero', () => {
    for (const secret of [undefined, 'too-short']) {
      const result = register({ NODE_ENV: 'production', SESSION_SECRET: secret });
      assert.equal(result.status, 1, result.stderr);
      const lines = result.stderr.trim().split('\n');
      assert.equal(lines.length, 1, result.stderr);
      assert.match(lines[0]!, /^PayOnce cannot start: SESSION_SECRET .*openssl rand -base64 32/);
    }
  });

  it('8b. starts with a 32-character secret, and in development without one', () => {
    const ok = register({ NODE_ENV: 'production', SESSION_SECRET: 'k'.repeat(32) });
    assert.equal(ok.status, 0, ok.stderr);
    const dev = register({ NODE_ENV: 'development', SESSION_SECRET: undefined });
    assert.equal(dev.status, 0, dev.stderr);
  });
});
