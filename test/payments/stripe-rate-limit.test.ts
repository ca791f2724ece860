/**
 * A rate-limited Stripe, as the adapter's calls meet it: the sandbox's rate_limit fault answers the
 * next N API requests with Stripe's 429 (type invalid_request_error, code rate_limit,
 * Stripe-Rate-Limited-Reason), which stripe-node does not retry by itself; the adapter's call()
 * backs off and tries again, and a call still limited after that is `not_sent` — certainly not
 * executed, so the checkout may answer it as retryable. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/stripe-rate-limit.test.ts
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { stripeModule } from '@/sandbox/stripe';
import { call, createStripeClient } from '@/server/payments/stripe/call';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');
const databaseUrl: string = DATABASE_URL;

let sandbox: RunningSandbox;
let secretKey: string;

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  const res = await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' });
  secretKey = ((await res.json()) as { secretKey: string }).secretKey;
});
afterEach(async () => {
  await fetch(`${sandbox.url}/sandbox/faults`, { method: 'DELETE' });
});
after(async () => {
  await sandbox.close();
});

async function rateLimit(times: number): Promise<void> {
  const res = await fetch(`${sandbox.url}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ gateway: 'stripe', action: 'rate_limit', times }),
  });
  assert.equal(res.status, 201);
}

/** How many rate-limited answers are still armed. */
async function remaining(): Promise<number> {
  const { faults } = (await (await fetch(`${sandbox.url}/sandbox/faults`)).json()) as { faults: { times: number; fired: number }[] };
  return faults.reduce((sum, f) => sum + f.times - f.fired, 0);
}

function adapterClient(): Stripe {
  const { hostname, port } = new URL(sandbox.url);
  return createStripeClient({
    secretKey,
    webhookSecret: 'whsec_unused',
    accountId: 'acct_unused',
    host: hostname,
    port,
    protocol: 'http',
    testBuyers: { ok: 'pm_card_visa', insufficient_funds: 'pm_card_visa', account_restricted: 'pm_card_visa' },
  });
}

describe("Stripe's 429", () => {
  it('is a rate_limit invalid_request_error with Stripe-Rate-Limited-Reason, on any API request, GETs included', async () => {
    await rateLimit(1);
    const res = await fetch(`${sandbox.url}/v1/payment_intents`, { headers: { authorization: `Bearer ${secretKey}` } });
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('stripe-rate-limited-reason'), 'global-rate');
    assert.equal(res.headers.get('stripe-should-retry'), null);
    assert.match(res.headers.get('request-id') ?? '', /^req_/);
    const { error } = (await res.json()) as { error: { type: string; code: string; message: string } };
    assert.equal(error.type, 'invalid_request_error');
    assert.equal(error.code, 'rate_limit');
    assert.match(error.message, /^Request rate limit exceeded/);
    assert.equal((await fetch(`${sandbox.url}/v1/payment_intents`, { headers: { authorization: `Bearer ${secretKey}` } })).status, 200);
  });

  it('is not retried by stripe-node itself (no Stripe-Should-Retry: true), even with maxNetworkRetries', async () => {
    await rateLimit(5);
    const { hostname, port } = new URL(sandbox.url);
    const sdk = new Stripe(secretKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 2 });
    await assert.rejects(sdk.paymentIntents.list(), (err) => err instanceof Stripe.errors.StripeRateLimitError);
    assert.equal(await remaining(), 4, 'one try only');
  });
});

describe("the adapter's call()", () => {
  it('backs off and gets through when the limit lifts within its tries', async () => {
    await rateLimit(2);
    const stripe = adapterClient();
    const started = Date.now();
    const called = await call(() =>
      stripe.paymentIntents.create({ amount: 1000, currency: 'cny', allowed_payment_method_types: ['card'] }, { idempotencyKey: 'rl-1' }),
    );
    assert.ok(called.ok, JSON.stringify(called));
    assert.equal(await remaining(), 0);
    assert.ok(Date.now() - started >= 125 + 250, 'it waited between tries');
  });

  it('gives up after its tries: not_sent rate_limit, a transient failure, with nothing executed', async () => {
    await rateLimit(10);
    const stripe = adapterClient();
    const called = await call(() =>
      stripe.paymentIntents.create({ amount: 1000, currency: 'cny', allowed_payment_method_types: ['card'] }, { idempotencyKey: 'rl-2' }),
    );
    assert.deepEqual(called.ok ? undefined : { kind: called.failure.kind, code: called.failure.code }, {
      kind: 'not_sent',
      code: 'rate_limit',
    });
    assert.equal(await remaining(), 7, 'three tries');
    await fetch(`${sandbox.url}/sandbox/faults`, { method: 'DELETE' });
    const listed = await stripe.paymentIntents.list({ limit: 100 });
    assert.equal(listed.data.filter((p) => p.amount === 1000 && p.currency === 'cny').length, 1, 'only rl-1 was ever created');
  });
});
