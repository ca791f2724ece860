/**
 * The sandbox's Stripe, driven the way a browser drives the real one during the buyer's card step:
 * the merchant creates a PaymentIntent with the secret key (stripe-node), and the buyer's browser —
 * Stripe.js — confirms it over HTTP with the publishable key and the client secret. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/stripe-card-step.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import vm from 'node:vm';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { stripeModule } from '@/sandbox/stripe';
import { readLedger, startServer, waitFor } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  secretKey: string;
  publishableKey: string;
  webhookSecret: string;
  accountId: string;
  jsUrl: string;
}

interface StripeErrorJson {
  error: { type: string; code?: string; decline_code?: string; message: string; param?: string; payment_intent?: Record<string, unknown> };
}

let sandbox: RunningSandbox;
let creds: Credentials;
let stripe: Stripe;

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

/** What the merchant's server does for the card step: a PaymentIntent for the buyer to confirm. */
function openForCard(outTradeNo: string, metadata: Record<string, string> = {}) {
  return stripe.paymentIntents.create({
    amount: 1230,
    currency: 'cny',
    allowed_payment_method_types: ['card'],
    metadata: { out_trade_no: outTradeNo, ...metadata },
  });
}

const FUTURE_YEAR = String(new Date().getUTCFullYear() + 3);

/** The confirm Stripe.js's card Element sends: publishable key and client secret in the form body. */
function confirmAsStripeJs(
  clientSecret: string,
  number: string,
  options: { key?: string; bearer?: boolean; id?: string } = {},
): Promise<Response> {
  const key = options.key ?? creds.publishableKey;
  const id = options.id ?? clientSecret.split('_secret_')[0];
  const body = new URLSearchParams({
    ...(options.bearer ? {} : { key }),
    client_secret: clientSecret,
    expected_payment_method_type: 'card',
    use_stripe_sdk: 'true',
    'payment_method_data[type]': 'card',
    'payment_method_data[card][number]': number,
    'payment_method_data[card][exp_month]': '12',
    'payment_method_data[card][exp_year]': FUTURE_YEAR,
    'payment_method_data[card][cvc]': '123',
  });
  return fetch(`${sandbox.url}/v1/payment_intents/${id}/confirm`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(options.bearer ? { authorization: `Bearer ${key}` } : {}) },
    body,
  });
}

async function errorOf(response: Response): Promise<StripeErrorJson['error']> {
  return ((await response.json()) as StripeErrorJson).error;
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { stripe: Credentials }).stripe;
  const { hostname, port } = new URL(sandbox.url);
  stripe = new Stripe(creds.secretKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 0, timeout: 10_000 });
});

after(async () => {
  await sandbox.close();
});

describe('the publishable key (what Stripe.js holds)', () => {
  it('may only confirm a PaymentIntent and read it back, with its client secret; anything else is Stripe’s 401', async () => {
    const intent = await openForCard(newOutTradeNo());
    assert.equal(intent.status, 'requires_payment_method');
    assert.match(intent.client_secret ?? '', new RegExp(`^${intent.id}_secret_[A-Za-z0-9]+$`));

    // 1. Reading it back with the client secret shows the client-side subset: no metadata.
    const read = await fetch(
      `${sandbox.url}/v1/payment_intents/${intent.id}?key=${creds.publishableKey}&client_secret=${intent.client_secret}`,
    );
    assert.equal(read.status, 200);
    const seen = (await read.json()) as Record<string, unknown>;
    assert.equal(seen.id, intent.id);
    assert.equal(seen.status, 'requires_payment_method');
    assert.equal(seen.client_secret, intent.client_secret);
    assert.equal('metadata' in seen, false);
    assert.equal(read.headers.get('access-control-allow-origin'), '*');

    // 2. Without the client secret, or with another one: refused.
    const bare = await fetch(`${sandbox.url}/v1/payment_intents/${intent.id}?key=${creds.publishableKey}`);
    assert.equal(bare.status, 400);
    assert.equal((await errorOf(bare)).param, 'client_secret');
    const other = await openForCard(newOutTradeNo());
    const wrong = await fetch(
      `${sandbox.url}/v1/payment_intents/${intent.id}?key=${creds.publishableKey}&client_secret=${other.client_secret}`,
    );
    assert.equal(wrong.status, 400);
    assert.equal((await errorOf(wrong)).code, 'payment_intent_invalid_parameter');

    // 3. Everything else, through the SDK or by hand, form key or Bearer: 401 like Stripe's.
    const { hostname, port } = new URL(sandbox.url);
    const withPk = new Stripe(creds.publishableKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 0 });
    for (const attempt of [
      () => withPk.paymentIntents.create({ amount: 1230, currency: 'cny' }),
      () => withPk.paymentIntents.list(),
      () => withPk.paymentIntents.cancel(intent.id),
      () => withPk.refunds.create({ payment_intent: intent.id }),
      () => withPk.webhookEndpoints.list(),
      // The secret-key confirm path: a publishable key is refused even with the right PaymentIntent.
      () => withPk.paymentIntents.retrieve(intent.id),
    ]) {
      const err = await attempt().then(
        () => assert.fail('a publishable key got through'),
        (e: unknown) => e,
      );
      if (err instanceof Stripe.errors.StripeAuthenticationError) {
        assert.equal(err.statusCode, 401);
        assert.match(err.message, /^This API call cannot be made with a publishable API key/);
      } else {
        // retrieve without client_secret is allowed as a route, and refused for the missing secret.
        assert.ok(err instanceof Stripe.errors.StripeInvalidRequestError, String(err));
        assert.equal(err.param, 'client_secret');
      }
    }
    const cancelByForm = await fetch(`${sandbox.url}/v1/payment_intents/${intent.id}/cancel`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ key: creds.publishableKey, client_secret: intent.client_secret ?? '' }),
    });
    assert.equal(cancelByForm.status, 401);
    assert.equal((await stripe.paymentIntents.retrieve(intent.id)).status, 'requires_payment_method');

    // 4. A key no account owns.
    const unknown = await confirmAsStripeJs(intent.client_secret ?? '', '4242424242424242', { key: `pk_test_${'x'.repeat(30)}` });
    assert.equal(unknown.status, 401);
    assert.match((await errorOf(unknown)).message, /^Invalid API Key provided: pk_test_/);
  });

  it('refuses a confirm with a wrong client secret and charges nothing; another account’s key does not see the PaymentIntent', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await openForCard(outTradeNo);
    const other = await openForCard(newOutTradeNo());

    const wrong = await confirmAsStripeJs(other.client_secret ?? '', '4242424242424242', { id: intent.id });
    assert.equal(wrong.status, 400);
    const error = await errorOf(wrong);
    assert.equal(error.type, 'invalid_request_error');
    assert.equal(error.code, 'payment_intent_invalid_parameter');
    assert.equal(error.message, 'The client_secret provided does not match the client_secret associated with the PaymentIntent.');

    const opened = await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' });
    assert.equal(opened.status, 201);
    const elsewhere = (await opened.json()) as { publishableKey: string };
    const foreign = await confirmAsStripeJs(intent.client_secret ?? '', '4242424242424242', { key: elsewhere.publishableKey });
    assert.equal(foreign.status, 404);
    assert.equal((await errorOf(foreign)).code, 'resource_missing');

    assert.deepEqual((await ledger(outTradeNo)).charges, []);
    assert.equal((await stripe.paymentIntents.retrieve(intent.id)).status, 'requires_payment_method');
  });
});

describe('test cards, confirmed from the browser', () => {
  it('declines 9995, 0002 and 9987 as Stripe documents (402 card_error) and leaves the PaymentIntent payable; 4242 then pays it once', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await openForCard(outTradeNo);
    const secret = intent.client_secret ?? '';

    const declines: [string, string, string][] = [
      ['4000000000009995', 'card_declined', 'insufficient_funds'],
      ['4000 0000 0000 0002', 'card_declined', 'generic_decline'],
      ['4000000000009987', 'card_declined', 'lost_card'],
    ];
    for (const [number, code, declineCode] of declines) {
      const declined = await confirmAsStripeJs(secret, number, { bearer: declineCode === 'generic_decline' });
      assert.equal(declined.status, 402, number);
      const error = await errorOf(declined);
      assert.equal(error.type, 'card_error');
      assert.equal(error.code, code);
      assert.equal(error.decline_code, declineCode);
      // The error carries the PaymentIntent as the browser may see it: payable again, without metadata.
      assert.equal(error.payment_intent?.status, 'requires_payment_method');
      assert.equal((error.payment_intent?.last_payment_error as { decline_code?: string } | undefined)?.decline_code, declineCode);
      assert.equal(error.payment_intent && 'metadata' in error.payment_intent, false);
    }
    const afterDeclines = await stripe.paymentIntents.retrieve(intent.id);
    assert.equal(afterDeclines.status, 'requires_payment_method');
    assert.equal(afterDeclines.last_payment_error?.decline_code, 'lost_card');

    const paid = await confirmAsStripeJs(secret, '4242 4242 4242 4242');
    assert.equal(paid.status, 200);
    const body = (await paid.json()) as { id: string; status: string; amount_received?: unknown };
    assert.equal(body.id, intent.id);
    assert.equal(body.status, 'succeeded');

    const again = await confirmAsStripeJs(secret, '4242424242424242');
    assert.equal(again.status, 400);
    assert.equal((await errorOf(again)).code, 'payment_intent_unexpected_state');

    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.amountMinor, c.gatewayTradeNo]),
      [
        ['declined', 1230, intent.id],
        ['declined', 1230, intent.id],
        ['declined', 1230, intent.id],
        ['succeeded', 1230, intent.id],
      ],
    );
    const settled = await stripe.paymentIntents.retrieve(intent.id);
    assert.equal(settled.status, 'succeeded');
    assert.equal(settled.amount_received, 1230);
    assert.equal(settled.metadata.out_trade_no, outTradeNo);
  });

  it('refuses a number that is not a test card without charging (402 incorrect_number)', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await openForCard(outTradeNo);
    const refused = await confirmAsStripeJs(intent.client_secret ?? '', '4111111111111111');
    assert.equal(refused.status, 402);
    assert.equal((await errorOf(refused)).code, 'incorrect_number');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('sends payment_intent.succeeded after the browser’s confirm to the registered endpoint, signed like every event', async () => {
    const received: { signature: string; body: string }[] = [];
    const receiver = await startServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        received.push({ signature: String(req.headers['stripe-signature']), body });
        res.writeHead(200).end('{}');
      });
    });
    try {
      // A merchant of its own, so that its endpoint takes no other test's events.
      const account = (await (await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' })).json()) as {
        secretKey: string;
        publishableKey: string;
      };
      const { hostname, port } = new URL(sandbox.url);
      const merchant = new Stripe(account.secretKey, { host: hostname, port, protocol: 'http' });
      const endpoint = await merchant.webhookEndpoints.create({
        url: `${receiver.url}/webhooks/stripe`,
        enabled_events: ['payment_intent.succeeded', 'payment_intent.payment_failed'],
      });
      const outTradeNo = newOutTradeNo();
      const intent = await merchant.paymentIntents.create({
        amount: 1230,
        currency: 'cny',
        allowed_payment_method_types: ['card'],
        metadata: { out_trade_no: outTradeNo },
      });
      const key = account.publishableKey;
      assert.equal((await confirmAsStripeJs(intent.client_secret ?? '', '4000000000009995', { key })).status, 402);
      assert.equal((await confirmAsStripeJs(intent.client_secret ?? '', '4242424242424242', { key })).status, 200);
      const events = await waitFor('both events', async () => (received.length >= 2 ? received : undefined));
      const types = events.map((e) => stripe.webhooks.constructEvent(e.body, e.signature, endpoint.secret ?? ''));
      assert.deepEqual(types.map((e) => e.type).sort(), ['payment_intent.payment_failed', 'payment_intent.succeeded']);
      const succeeded = types.find((e) => e.type === 'payment_intent.succeeded');
      const object = succeeded?.data.object as Stripe.PaymentIntent;
      assert.equal(object.id, intent.id);
      assert.equal(object.status, 'succeeded');
      assert.equal(object.metadata.out_trade_no, outTradeNo);
    } finally {
      await receiver.close();
    }
  });
});

describe('the sandbox’s Stripe.js', () => {
  it('serves JavaScript at jsUrl that defines window.Stripe with elements().create(card) and confirmCardPayment', async () => {
    assert.equal(creds.jsUrl, `${sandbox.url}/stripe-js/v3/`);
    const res = await fetch(creds.jsUrl);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/javascript/);
    const code = await res.text();
    const window: Record<string, unknown> & { addEventListener(): void } = { addEventListener: () => {} };
    vm.runInNewContext(code, { window, document: {}, location: { href: sandbox.url } });
    const StripeJs = window.Stripe as (key: string) => {
      elements(): { create(type: string): Record<string, unknown> };
      confirmCardPayment: unknown;
      retrievePaymentIntent: unknown;
    };
    assert.equal(typeof StripeJs, 'function');
    const instance = StripeJs(creds.publishableKey);
    assert.equal(typeof instance.confirmCardPayment, 'function');
    assert.equal(typeof instance.retrievePaymentIntent, 'function');
    const card = instance.elements().create('card');
    for (const method of ['mount', 'unmount', 'on', 'destroy']) assert.equal(typeof card[method], 'function', method);
    assert.throws(() => StripeJs(creds.secretKey), /publishable key/);
    // The script talks to the sandbox it came from.
    assert.ok(code.includes(JSON.stringify(new URL(sandbox.url).origin)));
  });

  it('serves the card iframe: labelled inputs, the test cards as buttons, nothing from elsewhere', async () => {
    const res = await fetch(`${sandbox.url}/stripe-js/v3/elements/card?key=${creds.publishableKey}`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
    const html = await res.text();
    assert.match(html, /<label for="number">卡号 \(Card number\)<\/label>/);
    assert.match(html, /<label for="exp">有效期 \(MM \/ YY\)<\/label>/);
    assert.match(html, /<label for="cvc">CVC<\/label>/);
    for (const number of ['4242 4242 4242 4242', '4000 0000 0000 9995', '4000 0000 0000 0002', '4000 0000 0000 9987']) {
      assert.ok(html.includes(`>${number}</button>`), number);
    }
    assert.doesNotMatch(html, /(src|href)="https?:/);
  });
});
