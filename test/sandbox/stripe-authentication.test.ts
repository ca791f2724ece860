/**
 * 3-D Secure at the sandbox's Stripe, walked as a merchant's integration does with stripe-node: a card
 * that asks for authentication leaves the PaymentIntent in requires_action with a next_action; the
 * buyer completes, fails or abandons the challenge; the ledger shows a charge only for a completed
 * one, and exactly one whatever windows are left open. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/stripe-authentication.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { stripeModule } from '@/sandbox/stripe';
import { readLedger } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;
const RETURN_URL = 'https://shop.example/checkout/return?order=42';

let sandbox: RunningSandbox;
let creds: { secretKey: string; publishableKey: string };
let stripe: Stripe;

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

async function charges(outTradeNo: string): Promise<{ succeeded: number; declined: number }> {
  const ledger = await readLedger<Ledger>(sandbox.url, outTradeNo);
  return {
    succeeded: ledger.charges.filter((c) => c.status === 'succeeded').length,
    declined: ledger.charges.filter((c) => c.status !== 'succeeded').length,
  };
}

/** The merchant's server confirms with a 3-D Secure card and a return_url: the buyer is redirected. */
async function confirmForRedirect(outTradeNo: string, paymentMethod = 'pm_card_threeDSecure2Required') {
  return stripe.paymentIntents.create({
    amount: 5600,
    currency: 'eur',
    payment_method: paymentMethod,
    allowed_payment_method_types: ['card'],
    confirm: true,
    return_url: RETURN_URL,
    metadata: { out_trade_no: outTradeNo },
  });
}

function redirectUrl(intent: Stripe.PaymentIntent): string {
  assert.equal(intent.status, 'requires_action');
  assert.equal(intent.next_action?.type, 'redirect_to_url');
  const url = intent.next_action?.redirect_to_url?.url;
  assert.ok(url, 'next_action.redirect_to_url.url');
  assert.equal(intent.next_action?.redirect_to_url?.return_url, RETURN_URL);
  return url;
}

/** The buyer's browser answering the challenge page (a form POST); redirects are not followed. */
function answer(url: string, outcome: string): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ outcome }),
    redirect: 'manual',
  });
}

function backAt(response: Response): URL {
  assert.equal(response.status, 303, 'the buyer is sent back to the merchant');
  return new URL(response.headers.get('location') ?? '');
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { stripe: typeof creds }).stripe;
  const { hostname, port } = new URL(sandbox.url);
  stripe = new Stripe(creds.secretKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 0, timeout: 10_000 });
});

after(async () => {
  await sandbox.close();
});

describe('3-D Secure by redirect (next_action.redirect_to_url)', () => {
  it('charges nothing until the buyer completes the challenge, then exactly once, and sends them back with Stripe’s parameters', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await confirmForRedirect(outTradeNo);
    const url = redirectUrl(intent);
    assert.ok(url.startsWith(`${sandbox.url}/stripe/3ds/`), url);
    assert.equal(intent.amount_received, 0);
    assert.deepEqual(await charges(outTradeNo), { succeeded: 0, declined: 0 });

    const page = await fetch(url);
    assert.equal(page.status, 200);
    const text = await page.text();
    assert.match(text, /完成验证/);
    assert.match(text, /EUR 56\.00/);
    assert.match(text, /•••• 3220/);

    const back = backAt(await answer(url, 'complete'));
    assert.equal(`${back.origin}${back.pathname}`, 'https://shop.example/checkout/return');
    assert.equal(back.searchParams.get('order'), '42');
    assert.equal(back.searchParams.get('payment_intent'), intent.id);
    assert.equal(back.searchParams.get('payment_intent_client_secret'), intent.client_secret);
    assert.equal(back.searchParams.get('redirect_status'), 'succeeded');

    const paid = await stripe.paymentIntents.retrieve(intent.id);
    assert.equal(paid.status, 'succeeded');
    assert.equal(paid.amount_received, 5600);
    assert.equal(paid.next_action, null);
    assert.deepEqual(await charges(outTradeNo), { succeeded: 1, declined: 0 });
    const events = await stripe.events.list({ limit: 100 });
    const types = events.data
      .filter((e) => (e.data.object as { id?: string; payment_intent?: string }).id === intent.id)
      .map((e) => e.type);
    assert.ok(types.includes('payment_intent.requires_action'), types.join(', '));
    assert.ok(types.includes('payment_intent.succeeded'), types.join(', '));

    // The same window submitted again (a reload, a double click) is over: 409, nothing charged.
    const again = await answer(url, 'complete');
    assert.equal(again.status, 409);
    assert.match(await again.text(), /验证已经结束/);
    assert.deepEqual(await charges(outTradeNo), { succeeded: 1, declined: 0 });
  });

  it('a failed challenge leaves the PaymentIntent payable with payment_intent_authentication_failure; paying again charges once', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await confirmForRedirect(outTradeNo, 'pm_card_authenticationRequired');
    const back = backAt(await answer(redirectUrl(intent), 'fail'));
    assert.equal(back.searchParams.get('redirect_status'), 'failed');

    const failed = await stripe.paymentIntents.retrieve(intent.id);
    assert.equal(failed.status, 'requires_payment_method');
    assert.equal(failed.last_payment_error?.code, 'payment_intent_authentication_failure');
    assert.equal(failed.last_payment_error?.type, 'invalid_request_error');
    assert.equal(failed.payment_method, null);
    assert.deepEqual(await charges(outTradeNo), { succeeded: 0, declined: 0 });

    const paid = await stripe.paymentIntents.confirm(intent.id, { payment_method: 'pm_card_visa' });
    assert.equal(paid.status, 'succeeded');
    assert.deepEqual(await charges(outTradeNo), { succeeded: 1, declined: 0 });
  });

  it('a buyer who cancels on the challenge page goes back with redirect_status=failed and is charged nothing', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await confirmForRedirect(outTradeNo, 'pm_card_threeDSecureRequired');
    const back = backAt(await answer(redirectUrl(intent), 'cancel'));
    assert.equal(back.searchParams.get('redirect_status'), 'failed');
    const read = await stripe.paymentIntents.retrieve(intent.id);
    assert.equal(read.status, 'requires_payment_method');
    assert.equal(read.last_payment_error?.code, 'payment_intent_authentication_failure');
    assert.deepEqual(await charges(outTradeNo), { succeeded: 0, declined: 0 });
  });

  it('an abandoned challenge completed after the merchant canceled the PaymentIntent charges nothing', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await confirmForRedirect(outTradeNo);
    const url = redirectUrl(intent);
    const canceled = await stripe.paymentIntents.cancel(intent.id, { cancellation_reason: 'abandoned' });
    assert.equal(canceled.status, 'canceled');
    assert.equal(canceled.next_action, null);

    const page = await fetch(url);
    assert.equal(page.status, 409, 'the page says the challenge is over');
    assert.equal((await answer(url, 'complete')).status, 409);
    assert.equal((await stripe.paymentIntents.retrieve(intent.id)).status, 'canceled');
    assert.deepEqual(await charges(outTradeNo), { succeeded: 0, declined: 0 });
  });

  it('a card declined after a successful authentication is a decline: requires_payment_method, one declined charge', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await confirmForRedirect(outTradeNo, 'pm_card_authenticationRequiredChargeDeclinedInsufficientFunds');
    const back = backAt(await answer(redirectUrl(intent), 'complete'));
    assert.equal(back.searchParams.get('redirect_status'), 'failed');
    const read = await stripe.paymentIntents.retrieve(intent.id);
    assert.equal(read.status, 'requires_payment_method');
    assert.equal(read.last_payment_error?.decline_code, 'insufficient_funds');
    assert.deepEqual(await charges(outTradeNo), { succeeded: 0, declined: 1 });
  });
});

describe('two windows on one PaymentIntent', () => {
  it('a confirm supersedes the earlier challenge: only the newest settles it, and it charges once', async () => {
    const outTradeNo = newOutTradeNo();
    const first = redirectUrl(await confirmForRedirect(outTradeNo));
    const intentId = (await stripe.paymentIntents.list({ limit: 1 })).data[0]!.id;
    const second = redirectUrl(await stripe.paymentIntents.confirm(intentId, { return_url: RETURN_URL }));
    assert.notEqual(first, second);

    assert.equal((await answer(first, 'complete')).status, 409, 'the older window is stale');
    assert.deepEqual(await charges(outTradeNo), { succeeded: 0, declined: 0 });
    assert.equal((await stripe.paymentIntents.retrieve(intentId)).status, 'requires_action');

    // Both tabs of the newest challenge answer at once: one settles it, the other is told it is over.
    const [a, b] = await Promise.all([answer(second, 'complete'), answer(second, 'complete')]);
    assert.deepEqual([a.status, b.status].sort(), [303, 409]);
    assert.equal((await stripe.paymentIntents.retrieve(intentId)).status, 'succeeded');
    assert.deepEqual(await charges(outTradeNo), { succeeded: 1, declined: 0 });
  });
});

describe('3-D Secure in Stripe.js (next_action.use_stripe_sdk)', () => {
  it('a confirm without a return_url, or with use_stripe_sdk, names the challenge for the SDK to open', async () => {
    const outTradeNo = newOutTradeNo();
    const created = await stripe.paymentIntents.create({
      amount: 1230,
      currency: 'cny',
      allowed_payment_method_types: ['card'],
      metadata: { out_trade_no: outTradeNo },
    });
    // What Stripe.js's card Element sends: publishable key, client secret, use_stripe_sdk.
    const response = await fetch(`${sandbox.url}/v1/payment_intents/${created.id}/confirm`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        key: creds.publishableKey,
        client_secret: created.client_secret ?? '',
        use_stripe_sdk: 'true',
        return_url: RETURN_URL,
        'payment_method_data[type]': 'card',
        'payment_method_data[card][number]': '4000002760003184',
        'payment_method_data[card][exp_month]': '12',
        'payment_method_data[card][exp_year]': String(new Date().getUTCFullYear() + 2),
        'payment_method_data[card][cvc]': '123',
      }),
    });
    assert.equal(response.status, 200);
    const intent = (await response.json()) as Stripe.PaymentIntent;
    assert.equal(intent.status, 'requires_action');
    assert.equal(intent.next_action?.type, 'use_stripe_sdk');
    const sdk = intent.next_action?.use_stripe_sdk as { type: string; stripe_js: string; source: string };
    assert.equal(sdk.type, 'three_d_secure_redirect');
    assert.match(sdk.source, /^src_/);
    assert.match(sdk.stripe_js, /\/stripe\/3ds\/payatt_[A-Za-z0-9]{24}\?embedded=1$/);

    // In the modal, the answer tells Stripe.js it is done instead of redirecting.
    const done = await answer(sdk.stripe_js, 'complete');
    assert.equal(done.status, 200);
    assert.match(await done.text(), /challenge-done/);
    assert.equal((await stripe.paymentIntents.retrieve(intent.id)).status, 'succeeded');
    assert.deepEqual(await charges(outTradeNo), { succeeded: 1, declined: 0 });

    // A server-side confirm without a return_url has nowhere to redirect: use_stripe_sdk as well.
    const serverSide = await stripe.paymentIntents.create({
      amount: 1230,
      currency: 'cny',
      payment_method: 'pm_card_threeDSecure2Required',
      allowed_payment_method_types: ['card'],
      confirm: true,
      metadata: { out_trade_no: newOutTradeNo() },
    });
    assert.equal(serverSide.next_action?.type, 'use_stripe_sdk');
  });

  it('refuses an unknown challenge (404) and an unknown outcome (400), changing nothing', async () => {
    const outTradeNo = newOutTradeNo();
    const url = redirectUrl(await confirmForRedirect(outTradeNo));
    assert.equal((await fetch(`${sandbox.url}/stripe/3ds/payatt_${'x'.repeat(24)}`)).status, 404);
    assert.equal((await fetch(`${sandbox.url}/stripe/3ds/not-an-id`)).status, 404);
    assert.equal((await answer(url, 'approve')).status, 400);
    assert.equal((await answer(url, '')).status, 400);
    assert.equal((await fetch(url)).status, 200, 'still pending');
    assert.deepEqual(await charges(outTradeNo), { succeeded: 0, declined: 0 });
  });
});
