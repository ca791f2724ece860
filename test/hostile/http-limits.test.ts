/**
 * Hostile input at the HTTP layer (issue 11, items 2, 3, 4 and 7): oversized bodies, batches,
 * duplicated or malformed Idempotency-Key headers, and what a 500 or a failing health check says.
 * Each refusal is asserted with its status and reason AND with the database unchanged.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { openDatabase } from '@/db/client';
import { GET as healthRoute } from '@/app/api/health/route';
import { MAX_BODY_BYTES } from '@payonce/idempotency/fetch';
import { GATEWAY_IDS } from '@/server/payments/gateway-ids';
import { INTERNAL_ERROR_MESSAGE } from '@/server/trpc/errors';
import { MAX_QUERY_BATCH_SIZE } from '@/server/trpc/limits';
import { startTestStack, type TestStack, requireDatabaseUrl } from '@/test/support/stack';
import { footprint } from './support';

let stack: TestStack;

before(async () => {
  stack = await startTestStack();
});
after(async () => {
  await stack?.close();
});

/** A createOrder body just over the limit: valid JSON, a real SKU, padded with an unknown field. */
function oversizedOrderBody(bytes = MAX_BODY_BYTES + 1024): string {
  const base = { items: [{ sku: 'MUG-CELADON', quantity: 1 }], padding: '' };
  return JSON.stringify({ ...base, padding: 'x'.repeat(bytes - JSON.stringify(base).length) });
}

/**
 * Sends a POST whose body is never finished: the server must answer from what it has (the declared
 * length, or the first chunks past the limit). A server that waits for the whole body never answers.
 */
function postWithoutFinishing(
  url: string,
  headers: Record<string, string>,
  chunks: string[],
): Promise<{ status: number; body: string; ms: number }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method: 'POST', headers });
    const timer = setTimeout(() => {
      request.destroy();
      reject(new Error('no answer within 5 s: the server is waiting for the whole body'));
    }, 5000);
    request.on('response', (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => {
        clearTimeout(timer);
        request.destroy();
        resolve({ status: response.statusCode ?? 0, body, ms: performance.now() - started });
      });
    });
    // The server may close the connection once it has answered; the answer is what is asserted.
    request.on('error', () => {});
    for (const chunk of chunks) request.write(chunk);
  });
}

async function postJson(path: string, body: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${stack.appUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  return { status: response.status, text: await response.text() };
}

describe('body size limit (64 KiB) on procedures', () => {
  it('1. refuses a createOrder body just over 64 KiB with 413 PAYLOAD_TOO_LARGE and creates nothing', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products'); // the session, so only the size can be refused
    const before = await footprint(stack);
    const response = await customer.send('POST', 'checkout.createOrder', { rawBody: oversizedOrderBody(), key: randomUUID() });
    assert.equal(response.status, 413, response.text);
    assert.equal(response.json.error.data.httpStatus, 413);
    assert.equal(response.json.error.data.reason, 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(await footprint(stack), before);
  });

  it('2. answers a declared 50 MB body with 413 at once, without waiting for the body', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const before = await footprint(stack);
    const answer = await postWithoutFinishing(
      `${stack.appUrl}/api/trpc/checkout.createOrder`,
      {
        'content-type': 'application/json',
        'content-length': String(50 * 1024 * 1024),
        cookie: customer.cookie!,
        'idempotency-key': randomUUID(),
      },
      ['{"items":[{"sku":"MUG-CELADON","quantity":1}],"padding":"', 'x'.repeat(1024)],
    );
    assert.equal(answer.status, 413, answer.body);
    assert.equal(JSON.parse(answer.body).error.data.reason, 'PAYLOAD_TOO_LARGE');
    assert.ok(answer.ms < 2000, `answered in ${Math.round(answer.ms)} ms`);
    assert.deepEqual(await footprint(stack), before);
  });

  it('3. stops reading a chunked body (no Content-Length) as soon as it passes 64 KiB', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const before = await footprint(stack);
    const chunk = 'x'.repeat(16 * 1024);
    const answer = await postWithoutFinishing(
      `${stack.appUrl}/api/trpc/checkout.createOrder`,
      { 'content-type': 'application/json', cookie: customer.cookie!, 'idempotency-key': randomUUID() },
      // 80 KiB sent of a body that never ends: the answer must come from these alone.
      ['{"items":[{"sku":"MUG-CELADON","quantity":1}],"padding":"', chunk, chunk, chunk, chunk, chunk],
    );
    assert.equal(answer.status, 413, answer.body);
    assert.equal(JSON.parse(answer.body).error.data.reason, 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(await footprint(stack), before);
  });

  it('4. still serves a body just under the limit (the limit is on size, not on padding)', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const response = await customer.send('POST', 'checkout.createOrder', {
      rawBody: oversizedOrderBody(MAX_BODY_BYTES - 100),
      key: randomUUID(),
    });
    assert.equal(response.status, 201, response.text);
  });
});

describe('body size limit (64 KiB) on the four webhooks', () => {
  for (const gateway of GATEWAY_IDS) {
    it(`refuses an oversized ${gateway} notification with a plain 413 and records nothing`, async () => {
      const before = await footprint(stack);
      const ledgerBefore = (await stack.ledger()).notifications.length;
      const response = await postJson(`/api/webhooks/${gateway}`, 'x'.repeat(MAX_BODY_BYTES + 1), {
        'content-type': gateway === 'alipay' ? 'application/x-www-form-urlencoded' : 'application/json',
      });
      assert.equal(response.status, 413, response.text);
      assert.equal(response.text, 'PAYLOAD_TOO_LARGE');
      assert.deepEqual(await footprint(stack), before);
      assert.equal((await stack.ledger()).notifications.length, ledgerBefore);
    });
  }

  it('refuses a correctly signed but oversized Stripe event before verifying it: nothing recorded', async () => {
    const credentials = (await (await fetch(`${stack.sandboxUrl}/sandbox/credentials`)).json()) as {
      stripe: { webhookSecret: string };
    };
    const outTradeNo = `P${Date.now()}`;
    // Without the limit this signed event for an unknown trade would be recorded as an exception.
    const payload = JSON.stringify({
      id: `evt_${randomUUID().replaceAll('-', '')}`,
      object: 'event',
      type: 'payment_intent.succeeded',
      data: {
        object: {
          id: `pi_${randomUUID().replaceAll('-', '')}`,
          object: 'payment_intent',
          amount: 100,
          amount_received: 100,
          currency: 'cny',
          status: 'succeeded',
          metadata: { out_trade_no: outTradeNo, padding: 'x'.repeat(MAX_BODY_BYTES) },
        },
      },
    });
    const signature = Stripe.webhooks.generateTestHeaderString({ payload, secret: credentials.stripe.webhookSecret });
    const before = await footprint(stack);
    const response = await postJson('/api/webhooks/stripe', payload, { 'stripe-signature': signature });
    assert.equal(response.status, 413, response.text);
    assert.deepEqual(await footprint(stack), before);
  });
});

describe('batching: none for mutations, bounded for queries', () => {
  it('refuses a batch of two createOrder calls with 400 BATCH_NOT_ALLOWED and runs neither', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const before = await footprint(stack);
    const input = { items: [{ sku: 'MUG-CELADON', quantity: 1 }] };
    const response = await postJson('/api/trpc/checkout.createOrder,checkout.createOrder?batch=1', JSON.stringify({ 0: input, 1: input }), {
      cookie: customer.cookie!,
      'idempotency-key': randomUUID(),
    });
    assert.equal(response.status, 400, response.text);
    const body = JSON.parse(response.text);
    assert.equal(body.error.data.httpStatus, 400);
    assert.equal(body.error.data.reason, 'BATCH_NOT_ALLOWED');
    assert.match(body.error.message, /Idempotency-Key/);
    assert.deepEqual(await footprint(stack), before);
  });

  it('refuses a batch of one mutation too: a mutation is always a plain call', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const before = await footprint(stack);
    const response = await postJson(
      '/api/trpc/checkout.createOrder?batch=1',
      JSON.stringify({ 0: { items: [{ sku: 'MUG-CELADON', quantity: 1 }] } }),
      { cookie: customer.cookie!, 'idempotency-key': randomUUID() },
    );
    assert.equal(response.status, 400, response.text);
    assert.equal(JSON.parse(response.text).error.data.reason, 'BATCH_NOT_ALLOWED');
    assert.deepEqual(await footprint(stack), before);
  });

  it(`answers a batch of ${MAX_QUERY_BATCH_SIZE} queries and refuses ${MAX_QUERY_BATCH_SIZE + 1} with 400 BATCH_TOO_LARGE`, async () => {
    const batch = (n: number) =>
      `${stack.appUrl}/api/trpc/${Array(n).fill('checkout.products').join(',')}?batch=1&input=${encodeURIComponent('{}')}`;
    const allowed = await fetch(batch(MAX_QUERY_BATCH_SIZE));
    assert.equal(allowed.status, 200);
    assert.equal(((await allowed.json()) as unknown[]).length, MAX_QUERY_BATCH_SIZE);

    const refused = await fetch(batch(200));
    assert.equal(refused.status, 400);
    const body = (await refused.json()) as { error: { data: { reason: string; httpStatus: number } } };
    assert.equal(body.error.data.httpStatus, 400);
    assert.equal(body.error.data.reason, 'BATCH_TOO_LARGE');
    assert.equal((await fetch(batch(MAX_QUERY_BATCH_SIZE + 1))).status, 400);
  });
});

describe('Idempotency-Key headers', () => {
  it('refuses two Idempotency-Key headers (joined as "k1, k2") with 400 IDEMPOTENCY_KEY_INVALID and claims no key', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const before = await footprint(stack);
    // Sent as two real header lines; Node joins them with ", " before any handler sees them.
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const body = JSON.stringify({ items: [{ sku: 'MUG-CELADON', quantity: 1 }] });
      const request = http.request(`${stack.appUrl}/api/trpc/checkout.createOrder`, {
        method: 'POST',
        // An array value goes out as two header lines.
        headers: { 'content-type': 'application/json', cookie: customer.cookie!, 'idempotency-key': ['k1', 'k2'] },
      });
      request.on('response', (response) => {
        let text = '';
        response.on('data', (chunk) => (text += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
      });
      request.on('error', reject);
      request.end(body);
    });
    assert.equal(answer.status, 400, answer.body);
    assert.equal(JSON.parse(answer.body).error.data.reason, 'IDEMPOTENCY_KEY_INVALID');
    assert.deepEqual(await footprint(stack), before);
  });

  it('refuses a literal "k1, k2" key the same way', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const before = await footprint(stack);
    const response = await customer.mutate('checkout.createOrder', { items: [{ sku: 'MUG-CELADON', quantity: 1 }] }, 'k1, k2');
    assert.equal(response.status, 400, response.text);
    assert.equal(response.json.error.data.reason, 'IDEMPOTENCY_KEY_INVALID');
    assert.deepEqual(await footprint(stack), before);
  });

  it('refuses a key with a tab (legal in a header value, so it reaches the app) with 400 IDEMPOTENCY_KEY_INVALID', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const before = await footprint(stack);
    const response = await customer.mutate('checkout.createOrder', { items: [{ sku: 'MUG-CELADON', quantity: 1 }] }, 'key\twith-tab');
    assert.equal(response.status, 400, response.text);
    assert.equal(response.json.error.data.reason, 'IDEMPOTENCY_KEY_INVALID');
    assert.deepEqual(await footprint(stack), before);
  });
});

describe('what a failure says', () => {
  it('a 500 carries a generic message and reason INTERNAL_ERROR, not the error text; its key is not stored', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();
    // A real failure with internal details in its text: the database the checkout reads from does not
    // exist (an unreachable one is a 503, DATABASE_UNAVAILABLE: test/integration/database-outage.test.ts)
    // while the idempotency store still works, so the key is claimed, the pay phase fails and the key
    // is released.
    const missing = new URL(requireDatabaseUrl());
    missing.pathname = '/payonce_internal_missing';
    const broken = openDatabase(missing.toString(), { max: 1 });
    const working = stack.services.db;
    const logged: unknown[] = [];
    const consoleError = console.error;
    console.error = (...args: unknown[]) => void logged.push(args);
    let response;
    try {
      stack.services.db = broken.db;
      response = await customer.pay(order.orderId, { buyer: 'ok', key });
    } finally {
      stack.services.db = working;
      console.error = consoleError;
      await broken.sql.end({ timeout: 1 });
    }
    assert.equal(response.status, 500, response.text);
    assert.equal(response.json.error.message, INTERNAL_ERROR_MESSAGE);
    assert.equal(response.json.error.data.reason, 'INTERNAL_ERROR');
    assert.doesNotMatch(response.text, /does not exist|127\.0\.0\.1|payonce_internal|Failed query/);
    assert.ok(
      logged.some((args) => /payonce_internal_missing/.test(String((args as unknown[]).map((a) => (a as Error)?.cause ?? a).join(' ')))),
      'the real error is logged on the server',
    );

    // Never stored: the key holds no response, and the same key runs again once the database is back.
    const [row] = await stack.sql<{ response_status: number | null }[]>`
      select response_status from idempotency_keys where key = ${key}`;
    assert.equal(row?.response_status ?? null, null);
    const retry = await customer.pay(order.orderId, { buyer: 'ok', key });
    assert.equal(retry.status, 201, retry.text);
    assert.equal(retry.headers.get('idempotency-replayed'), null);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });

  it('/api/health answers 503 {status:"unavailable"} without the database error text', async () => {
    // The route handler itself, with the app's services (cached on globalThis, as Next keeps them)
    // pointing at a database that is down.
    const broken = openDatabase('postgres://payonce:secret@127.0.0.1:1/payonce_internal', { max: 1 });
    const global = globalThis as unknown as { __payonceServices?: unknown };
    const consoleError = console.error;
    console.error = () => {};
    try {
      global.__payonceServices = { ...stack.services, db: broken.db };
      const down = await healthRoute();
      assert.equal(down.status, 503);
      const text = await down.text();
      assert.deepEqual(JSON.parse(text), { status: 'unavailable' });
      assert.doesNotMatch(text, /ECONNREFUSED|127\.0\.0\.1|payonce_internal/);

      global.__payonceServices = stack.services;
      const up = await healthRoute();
      assert.equal(up.status, 200);
    } finally {
      delete global.__payonceServices;
      console.error = consoleError;
      await broken.sql.end({ timeout: 1 });
    }
  });
});
