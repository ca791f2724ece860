/**
 * The PSP sandbox's Stripe, driven the way a merchant drives the real one: with the official stripe
 * SDK (only host, port and protocol pointed at the sandbox) and plain HTTP. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/stripe-sandbox.test.ts
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import Stripe from 'stripe';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { createStripeModule, stripeModule } from '@/sandbox/stripe';
import { waitFor, readLedger } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  secretKey: string;
  webhookSecret: string;
  accountId: string;
  host: string;
  port: number;
  protocol: 'http';
  testBuyers: { ok: string; insufficient_funds: string; account_restricted: string };
  publishableKey: string;
  jsUrl: string;
}

let sandbox: RunningSandbox;
let creds: Credentials;
let stripe: Stripe;
let sql: postgres.Sql;

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

function client(secretKey = creds.secretKey, url = sandbox.url): Stripe {
  const { hostname, port } = new URL(url);
  return new Stripe(secretKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 2, timeout: 10_000 });
}

/** A create+confirm of one card, as a server-side integration sends it. */
function pay(
  outTradeNo: string,
  paymentMethod: string,
  extra: Partial<Stripe.PaymentIntentCreateParams> = {},
  options: Stripe.RequestOptions = {},
  via: Stripe = stripe,
) {
  return via.paymentIntents.create(
    {
      amount: 1230,
      currency: 'cny',
      confirm: true,
      payment_method: paymentMethod,
      allowed_payment_method_types: ['card'],
      metadata: { out_trade_no: outTradeNo },
      ...extra,
    },
    options,
  );
}

/** The error a promise rejects with (assert.rejects only checks it). */
async function failure(promise: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof Stripe.errors.StripeError, `not a StripeError: ${String(err)}`);
    return err;
  }
  assert.fail('expected the request to fail');
}

/** Another merchant's test account, with keys of its own (POST /sandbox/stripe/accounts). */
async function openAccount(): Promise<{ accountId: string; secretKey: string; publishableKey: string; webhookSecret: string }> {
  const res = await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' });
  assert.equal(res.status, 201);
  return (await res.json()) as { accountId: string; secretKey: string; publishableKey: string; webhookSecret: string };
}

/** The events a merchant's endpoint subscribes to here: what a payment and a refund send. */
const PAYMENT_EVENTS: Stripe.WebhookEndpointCreateParams.EnabledEvent[] = [
  'payment_intent.succeeded',
  'payment_intent.payment_failed',
  'refund.created',
  'charge.refunded',
];

/**
 * A merchant of its own (so no other test's events reach its endpoint) whose registered webhook
 * endpoint is `url`: its client and that endpoint's signing secret.
 */
async function merchantWithEndpoint(
  url: string,
  events = PAYMENT_EVENTS,
): Promise<{ merchant: Stripe; secret: string; accountId: string }> {
  const account = await openAccount();
  const merchant = client(account.secretKey);
  const endpoint = await merchant.webhookEndpoints.create({ url, enabled_events: events });
  assert.ok(endpoint.secret);
  return { merchant, secret: endpoint.secret, accountId: account.accountId };
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

/** Raw form POST with the secret key, for what the SDK would never send. */
function rawPost(path: string, body: string, headers: Record<string, string> = {}) {
  return fetch(`${sandbox.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${creds.secretKey}`, 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body,
  });
}

/** The merchant's webhook endpoint: records every delivery, answers statuses from a per-path script. */
interface Receiver {
  url: string;
  received: Map<string, { headers: http.IncomingHttpHeaders; body: string }[]>;
  script(path: string, statuses: number[]): void;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const received = new Map<string, { headers: http.IncomingHttpHeaders; body: string }[]>();
  const scripts = new Map<string, number[]>();
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const path = req.url ?? '/';
      received.set(path, [...(received.get(path) ?? []), { headers: req.headers, body }]);
      const script = scripts.get(path) ?? [];
      const status = script.length > 1 ? (script.shift() ?? 200) : (script[0] ?? 200);
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ received: status < 300 }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    script: (path, statuses) => scripts.set(path, [...statuses]),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { stripe: Credentials }).stripe;
  stripe = client();
  sql = postgres(databaseUrl, { max: 2, onnotice: () => {} });
});

after(async () => {
  await sandbox.close();
  await sql.end();
});

describe('credentials, authentication and routing', () => {
  it('hands out exactly what the adapter needs', () => {
    const { port } = new URL(sandbox.url);
    assert.deepEqual(Object.keys(creds).sort(), [
      'accountId',
      'feeContract',
      'host',
      'jsUrl',
      'port',
      'protocol',
      'publishableKey',
      'secretKey',
      'testBuyers',
      'webhookSecret',
    ]);
    assert.match(creds.secretKey, /^sk_test_[A-Za-z0-9]{90,}$/);
    assert.match(creds.publishableKey, /^pk_test_[A-Za-z0-9]{90,}$/);
    assert.equal(creds.jsUrl, `${sandbox.url}/stripe-js/v3/`);
    assert.match(creds.webhookSecret, /^whsec_[A-Za-z0-9]{32}$/);
    assert.match(creds.accountId, /^acct_1[A-Za-z0-9]{15}$/);
    assert.equal(creds.host, '127.0.0.1');
    assert.equal(creds.port, Number(port));
    assert.equal(creds.protocol, 'http');
    assert.deepEqual(creds.testBuyers, {
      ok: 'pm_card_visa',
      insufficient_funds: 'pm_card_chargeDeclinedInsufficientFunds',
      account_restricted: 'pm_card_chargeDeclinedLostCard',
    });
  });

  it('accepts only keys an account owns: an unknown sk_test_ key is Stripe’s 401 invalid_request_error “Invalid API Key provided”', async () => {
    assert.equal((await stripe.paymentIntents.list({ limit: 1 })).object, 'list');
    const unknownKey = `sk_test_${randomBytes(12).toString('hex')}`;
    const unknown = await fetch(`${sandbox.url}/v1/payment_intents`, { headers: { authorization: `Bearer ${unknownKey}` } });
    assert.equal(unknown.status, 401);
    assert.deepEqual(await unknown.json(), {
      error: {
        type: 'invalid_request_error',
        message: `Invalid API Key provided: sk_test_${'*'.repeat(unknownKey.length - 12)}${unknownKey.slice(-4)}`,
      },
    });
    // stripe-node names every 401 StripeAuthenticationError, whatever the body's type says.
    const viaSdk = await failure(client(unknownKey).paymentIntents.create({ amount: 1230, currency: 'cny' }));
    assert.ok(viaSdk instanceof Stripe.errors.StripeAuthenticationError);
    assert.equal(viaSdk.rawType, 'invalid_request_error');

    const live = await failure(client('sk_live_abcdefghijklmnop').paymentIntents.list());
    assert.ok(live instanceof Stripe.errors.StripeAuthenticationError);
    assert.equal(live.statusCode, 401);
    assert.match(live.message, /^Invalid API Key provided: sk_live_\*+mnop$/);

    const none = await fetch(`${sandbox.url}/v1/payment_intents`);
    assert.equal(none.status, 401);
    const body = (await none.json()) as { error: { type: string; message: string } };
    assert.equal(body.error.type, 'invalid_request_error');
    assert.match(body.error.message, /^You did not provide an API key/);
    assert.match(none.headers.get('request-id') ?? '', /^req_[A-Za-z0-9]{14}$/);
  });

  it('answers unknown /v1 paths with Stripe’s 404 and the tool’s bad requests with JSON 4xx', async () => {
    const res = await fetch(`${sandbox.url}/v1/customers`, { headers: { authorization: `Bearer ${creds.secretKey}` } });
    assert.equal(res.status, 404);
    assert.match(
      ((await res.json()) as { error: { message: string } }).error.message,
      /^Unrecognized request URL \(GET: \/v1\/customers\)/,
    );
    assert.equal((await fetch(`${sandbox.url}/elsewhere`)).status, 404);

    const tool = (body: string, type = 'application/json') =>
      fetch(`${sandbox.url}/sandbox/stripe/notify`, { method: 'POST', headers: { 'content-type': type }, body });
    assert.equal((await tool('{')).status, 400);
    assert.equal((await tool(JSON.stringify({ outTradeNo: 'X', copies: 101 }))).status, 400);
    assert.equal((await tool('x', 'text/plain')).status, 415);
    const unknown = await tool(JSON.stringify({ outTradeNo: newOutTradeNo() }));
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { error: { code: string } }).error.code, 'TRADE_NOT_FOUND');
  });
});

describe('PaymentIntents', () => {
  it('charges pm_card_visa at once and records the charge in the ledger, in fen', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await pay(outTradeNo, creds.testBuyers.ok, { amount: 199_999, description: 'PayOnce 订单' });
    assert.match(intent.id, /^pi_[A-Za-z0-9]{24}$/);
    assert.equal(intent.object, 'payment_intent');
    assert.equal(intent.status, 'succeeded');
    assert.equal(intent.amount, 199_999);
    assert.equal(intent.amount_received, 199_999);
    assert.equal(intent.currency, 'cny');
    assert.equal(intent.livemode, false);
    assert.equal(intent.description, 'PayOnce 订单');
    assert.deepEqual(intent.metadata, { out_trade_no: outTradeNo });
    assert.match(String(intent.latest_charge), /^ch_/);
    assert.match(String(intent.payment_method), /^pm_[A-Za-z0-9]{24}$/); // a fresh PaymentMethod, as on Stripe
    assert.deepEqual(intent.allowed_payment_method_types, ['card']);
    assert.equal(intent.last_payment_error, null);

    const { charges, notifications } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map(({ createdAt, ...rest }) => (assert.ok(!Number.isNaN(Date.parse(createdAt))), rest)),
      [{ gateway: 'stripe', outTradeNo, amountMinor: 199_999, currency: 'CNY', status: 'succeeded', gatewayTradeNo: intent.id }],
    );
    assert.deepEqual(notifications, []); // no endpoint takes this account's events: no webhook
    assert.deepEqual(await stripe.paymentIntents.retrieve(intent.id), JSON.parse(JSON.stringify(intent)));
  });

  it('declines with card_error, keeps the PaymentIntent open for another card, then succeeds once', async () => {
    const outTradeNo = newOutTradeNo();
    const poor = await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds));
    assert.ok(poor instanceof Stripe.errors.StripeCardError);
    assert.equal(poor.statusCode, 402);
    assert.equal(poor.code, 'card_declined');
    assert.equal(poor.decline_code, 'insufficient_funds');
    assert.equal(poor.message, 'Your card has insufficient funds.');
    const intent = poor.payment_intent;
    assert.ok(intent);
    assert.equal(intent.status, 'requires_payment_method');
    assert.equal(intent.payment_method, null);
    assert.equal(intent.last_payment_error?.decline_code, 'insufficient_funds');
    assert.equal(intent.last_payment_error?.charge, intent.latest_charge);

    const restricted = await failure(stripe.paymentIntents.confirm(intent.id, { payment_method: creds.testBuyers.account_restricted }));
    assert.ok(restricted instanceof Stripe.errors.StripeCardError);
    assert.equal(restricted.decline_code, 'lost_card');
    assert.equal(restricted.payment_intent?.id, intent.id);

    const paid = await stripe.paymentIntents.confirm(intent.id, { payment_method: creds.testBuyers.ok });
    assert.equal(paid.id, intent.id);
    assert.equal(paid.status, 'succeeded');
    assert.equal(paid.last_payment_error, null);

    const again = await failure(stripe.paymentIntents.confirm(intent.id, { payment_method: creds.testBuyers.ok }));
    assert.ok(again instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(again.code, 'payment_intent_unexpected_state');
    assert.equal(again.payment_intent?.status, 'succeeded');
    const cancel = await failure(stripe.paymentIntents.cancel(intent.id));
    assert.equal(cancel.code, 'payment_intent_unexpected_state');

    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.gatewayTradeNo]),
      [
        ['declined', intent.id],
        ['declined', intent.id],
        ['succeeded', intent.id],
      ],
    );
  });

  it('takes raw test card numbers as payment_method_data and refuses other numbers without charging', async () => {
    const outTradeNo = newOutTradeNo();
    const card = (number: string) => ({ type: 'card' as const, card: { number, exp_month: 12, exp_year: 2040, cvc: '123' } });
    const declined = await failure(
      stripe.paymentIntents.create({
        amount: 500,
        currency: 'cny',
        confirm: true,
        allowed_payment_method_types: ['card'],
        metadata: { out_trade_no: outTradeNo },
        payment_method_data: card('4000000000009995'),
      } as Stripe.PaymentIntentCreateParams),
    );
    assert.equal(declined.decline_code, 'insufficient_funds');
    const wrong = await failure(
      stripe.paymentIntents.create({
        amount: 500,
        currency: 'cny',
        confirm: true,
        allowed_payment_method_types: ['card'],
        metadata: { out_trade_no: outTradeNo },
        payment_method_data: card('4242424242424241'),
      } as Stripe.PaymentIntentCreateParams),
    );
    assert.ok(wrong instanceof Stripe.errors.StripeCardError);
    assert.equal(wrong.code, 'incorrect_number');
    const ok = await stripe.paymentIntents.create({
      amount: 500,
      currency: 'cny',
      confirm: true,
      allowed_payment_method_types: ['card'],
      metadata: { out_trade_no: outTradeNo },
      payment_method_data: card('4242 4242 4242 4242'),
    } as Stripe.PaymentIntentCreateParams);
    assert.equal(ok.status, 'succeeded');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'succeeded'],
    );
  });

  it('refuses invalid requests with invalid_request_error before creating or charging anything', async () => {
    const outTradeNo = newOutTradeNo();
    const expect = async (
      params: Record<string, unknown>,
      code: string | undefined,
      param: string | undefined,
      options: Stripe.RequestOptions = {},
    ) => {
      const err = await failure(
        stripe.paymentIntents.create(
          {
            amount: 1230,
            currency: 'cny',
            confirm: true,
            payment_method: 'pm_card_visa',
            allowed_payment_method_types: ['card'],
            metadata: { out_trade_no: outTradeNo },
            ...params,
          } as Stripe.PaymentIntentCreateParams,
          options,
        ),
      );
      assert.ok(err instanceof Stripe.errors.StripeInvalidRequestError, `${JSON.stringify(params)}: ${err.type}`);
      assert.equal(err.code, code, JSON.stringify(params));
      assert.equal(err.param, param, JSON.stringify(params));
      return err;
    };
    await expect({ amount: undefined }, 'parameter_missing', 'amount');
    await expect({ amount: 0 }, 'parameter_invalid_integer', 'amount');
    await expect({ amount: 100_000_000 }, 'amount_too_large', 'amount');
    await expect({ currency: 'xyz' }, undefined, 'currency');
    await expect({ capture_method: 'later' }, undefined, 'capture_method');
    await expect({ payment_method: 'pm_card_unknown' }, 'resource_missing', 'payment_method');
    await expect({ metadata: { ['k'.repeat(41)]: 'v' } }, undefined, `metadata[${'k'.repeat(41)}]`);
    // Removed as a parameter in API version 2026-09-30.endive; still accepted by older versions.
    await expect(
      { allowed_payment_method_types: undefined, payment_method_types: ['card'] },
      'payment_method_types_no_longer_supported',
      'payment_method_types',
    );
    const old = await stripe.paymentIntents.create(
      {
        amount: 1230,
        currency: 'cny',
        confirm: true,
        payment_method: 'pm_card_visa',
        payment_method_types: ['card'],
        metadata: { out_trade_no: outTradeNo },
      } as Stripe.PaymentIntentCreateParams,
      { apiVersion: '2024-06-20' },
    );
    assert.equal(old.status, 'succeeded');
    assert.equal(old.lastResponse.headers['stripe-version'], '2024-06-20');
    await expect({ automatic_payment_methods: { enabled: true } }, 'parameters_exclusive', 'automatic_payment_methods');
    // Dynamic payment methods may redirect: confirming needs a return_url, unless redirects are off.
    const redirect = await expect({ allowed_payment_method_types: undefined }, undefined, 'return_url');
    assert.match(redirect.message, /return_url/);
    const noRedirects = await stripe.paymentIntents.create({
      amount: 1230,
      currency: 'cny',
      confirm: true,
      payment_method: 'pm_card_visa',
      automatic_payment_methods: { enabled: true, allow_redirects: 'never' },
      metadata: { out_trade_no: newOutTradeNo() },
    });
    assert.equal(noRedirects.status, 'succeeded');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.gatewayTradeNo),
      [old.id],
    );

    const json = await fetch(`${sandbox.url}/v1/payment_intents`, {
      method: 'POST',
      headers: { authorization: `Bearer ${creds.secretKey}`, 'content-type': 'application/json' },
      body: '{"amount":1}',
    });
    assert.equal(json.status, 400);
    assert.equal(((await json.json()) as { error: { type: string } }).error.type, 'invalid_request_error');
  });

  it('charges a second PaymentIntent for a paid out_trade_no, as Stripe does, and keeps the double charge on record', async () => {
    const outTradeNo = newOutTradeNo();
    const first = await pay(outTradeNo, creds.testBuyers.ok);
    const second = await pay(outTradeNo, creds.testBuyers.ok);
    assert.equal(second.status, 'succeeded');
    assert.notEqual(second.id, first.id);
    const rows = await sql<{ payment_intent: string; status: string; in_shared_ledger: boolean }[]>`
      SELECT payment_intent, status, in_shared_ledger FROM psp_sandbox.stripe_charges
       WHERE out_trade_no = ${outTradeNo} ORDER BY created_at`;
    assert.deepEqual(
      rows.map((r) => ({ ...r })),
      [
        { payment_intent: first.id, status: 'succeeded', in_shared_ledger: true },
        { payment_intent: second.id, status: 'succeeded', in_shared_ledger: true },
      ],
    );
    // The ground truth the drills count shows the double charge.
    const succeeded = (await ledger(outTradeNo)).charges.filter((c) => c.status === 'succeeded');
    assert.deepEqual(
      succeeded.map((c) => c.gatewayTradeNo),
      [first.id, second.id],
    );
    const found = await stripe.paymentIntents.search({ query: `metadata['out_trade_no']:'${outTradeNo}' AND status:'succeeded'` });
    assert.equal(found.data.length, 2);
  });

  it('serializes 50 concurrent confirms of one PaymentIntent into exactly one charge', async () => {
    const outTradeNo = newOutTradeNo();
    const declined = await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds));
    const id = declined.payment_intent?.id;
    assert.ok(id);
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, () => stripe.paymentIntents.confirm(id, { payment_method: creds.testBuyers.ok })),
    );
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
    for (const r of results) {
      if (r.status === 'rejected') assert.equal((r.reason as Stripe.errors.StripeError).code, 'payment_intent_unexpected_state');
    }
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'succeeded'],
    );
  });
});

describe('idempotency', () => {
  it('replays the stored answer, a decline included, with Idempotent-Replayed: true', async () => {
    const outTradeNo = newOutTradeNo();
    const key = `payonce-${outTradeNo}-attempt-1`;
    const body = `amount=1230&currency=cny&confirm=true&payment_method=pm_card_chargeDeclinedInsufficientFunds&allowed_payment_method_types[0]=card&metadata[out_trade_no]=${outTradeNo}`;
    const first = await rawPost('/v1/payment_intents', body, { 'idempotency-key': key });
    assert.equal(first.status, 402);
    const firstText = await first.text();
    assert.equal(first.headers.get('idempotent-replayed'), null);
    assert.equal(first.headers.get('idempotency-key'), key);

    // Parameter order does not matter: the parameters, not the bytes, are compared.
    const reordered = body.split('&').reverse().join('&');
    const replay = await rawPost('/v1/payment_intents', reordered, { 'idempotency-key': key });
    assert.equal(replay.status, 402);
    assert.equal(await replay.text(), firstText);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal(replay.headers.get('original-request'), first.headers.get('request-id'));
    assert.notEqual(replay.headers.get('request-id'), first.headers.get('request-id'));
    assert.equal((await ledger(outTradeNo)).charges.length, 1);

    // The SDK sees the same decline again.
    const viaSdk = await failure(pay(outTradeNo, 'pm_card_chargeDeclinedInsufficientFunds', {}, { idempotencyKey: key }));
    assert.equal(viaSdk.decline_code, 'insufficient_funds');
    assert.equal(viaSdk.headers?.['idempotent-replayed'], 'true');
    assert.equal((await ledger(outTradeNo)).charges.length, 1);
  });

  it('refuses the key with other parameters or on another endpoint, and stores neither refusal', async () => {
    const outTradeNo = newOutTradeNo();
    const key = `payonce-${outTradeNo}-attempt-1`;
    const paid = await pay(outTradeNo, creds.testBuyers.ok, {}, { idempotencyKey: key });

    const otherAmount = await failure(pay(outTradeNo, creds.testBuyers.ok, { amount: 1231 }, { idempotencyKey: key }));
    assert.ok(otherAmount instanceof Stripe.errors.StripeIdempotencyError);
    assert.equal(otherAmount.statusCode, 400);
    assert.match(otherAmount.message, /^Keys for idempotent requests can only be used with the same parameters they were first used with/);

    const otherEndpoint = await failure(
      stripe.paymentIntents.confirm(paid.id, { payment_method: 'pm_card_visa' }, { idempotencyKey: key }),
    );
    assert.ok(otherEndpoint instanceof Stripe.errors.StripeIdempotencyError);
    assert.match(otherEndpoint.message, /same endpoint/);

    const replay = await pay(outTradeNo, creds.testBuyers.ok, {}, { idempotencyKey: key });
    assert.equal(replay.id, paid.id);
    assert.equal(replay.lastResponse.headers['idempotent-replayed'], 'true');
    assert.equal((await ledger(outTradeNo)).charges.length, 1);
  });

  it('does not store validation failures, and scopes keys to the secret key (another account’s)', async () => {
    const outTradeNo = newOutTradeNo();
    const key = `payonce-${outTradeNo}-attempt-1`;
    const invalid = await failure(pay(outTradeNo, creds.testBuyers.ok, { amount: 0 }, { idempotencyKey: key }));
    assert.equal(invalid.code, 'parameter_invalid_integer');
    const valid = await pay(outTradeNo, creds.testBuyers.ok, {}, { idempotencyKey: key });
    assert.equal(valid.status, 'succeeded');
    assert.equal(valid.lastResponse.headers['idempotent-replayed'], undefined);

    const otherKey = client((await openAccount()).secretKey);
    const elsewhere = await otherKey.paymentIntents
      .create(
        {
          amount: 1230,
          currency: 'cny',
          confirm: true,
          payment_method: 'pm_card_chargeDeclined',
          allowed_payment_method_types: ['card'],
          metadata: { out_trade_no: newOutTradeNo() },
        },
        { idempotencyKey: key },
      )
      .catch((err: Stripe.errors.StripeError) => err);
    assert.ok(elsewhere instanceof Stripe.errors.StripeCardError, 'another secret key runs the same Idempotency-Key anew');

    const tooLong = await rawPost('/v1/payment_intents', 'amount=1&currency=cny', { 'idempotency-key': 'k'.repeat(256) });
    assert.equal(tooLong.status, 400);
    assert.match(((await tooLong.json()) as { error: { message: string } }).error.message, /at most 255/);
  });

  it('answers a duplicate while the first is executing with 409 idempotency_key_in_use, and stores nothing for it', async () => {
    const outTradeNo = newOutTradeNo();
    const key = `payonce-${outTradeNo}-attempt-1`;
    const scope = createHash('sha256').update(creds.secretKey).digest('hex');
    const body = `amount=1230&currency=cny&confirm=true&payment_method=pm_card_visa&allowed_payment_method_types[0]=card&metadata[out_trade_no]=${outTradeNo}`;
    // Stand in for the first request, mid-execution: hold the key's execution lock.
    const holder = await sql.reserve();
    try {
      await holder`SELECT pg_advisory_lock(hashtextextended(${`stripe-idem:${scope}:${key}`}, 0))`;
      const busy = await rawPost('/v1/payment_intents', body, { 'idempotency-key': key });
      assert.equal(busy.status, 409);
      assert.equal(busy.headers.get('stripe-should-retry'), 'true');
      const error = ((await busy.json()) as { error: { code: string; type: string } }).error;
      assert.equal(error.code, 'idempotency_key_in_use');
      assert.equal(error.type, 'invalid_request_error');
      assert.deepEqual((await ledger(outTradeNo)).charges, []);
    } finally {
      await holder`SELECT pg_advisory_unlock_all()`;
      holder.release();
    }
    const ran = await rawPost('/v1/payment_intents', body, { 'idempotency-key': key });
    assert.equal(ran.status, 200);
    assert.equal(ran.headers.get('idempotent-replayed'), null);
  });

  it('turns 50 concurrent identical requests into one execution (the SDK retries the 409s)', async () => {
    const outTradeNo = newOutTradeNo();
    const key = `payonce-${outTradeNo}-attempt-1`;
    const results = await Promise.all(Array.from({ length: 50 }, () => pay(outTradeNo, creds.testBuyers.ok, {}, { idempotencyKey: key })));
    assert.equal(new Set(results.map((r) => r.id)).size, 1);
    assert.equal(results.filter((r) => r.lastResponse.headers['idempotent-replayed'] !== 'true').length, 1);
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['succeeded'],
    );
  });

  it('forgets a key after 24 hours: the same key then runs anew', async () => {
    const outTradeNo = newOutTradeNo();
    const key = `payonce-${outTradeNo}-attempt-1`;
    const first = await pay(outTradeNo, creds.testBuyers.insufficient_funds, {}, { idempotencyKey: key }).catch(
      (e: Stripe.errors.StripeError) => e,
    );
    assert.ok(first instanceof Stripe.errors.StripeCardError);
    await sql`UPDATE psp_sandbox.stripe_idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = ${key}`;
    const later = await pay(outTradeNo, creds.testBuyers.ok, {}, { idempotencyKey: key });
    assert.equal(later.status, 'succeeded');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'succeeded'],
    );
  });
});

describe('search and list', () => {
  it('finds PaymentIntents by metadata, status and amount, newest first, page by page', async () => {
    const outTradeNo = newOutTradeNo();
    const declined = await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds));
    const paid = await pay(outTradeNo, creds.testBuyers.ok);
    const byDouble = await stripe.paymentIntents.search({ query: `metadata["out_trade_no"]:"${outTradeNo}"` });
    assert.equal(byDouble.object, 'search_result');
    assert.deepEqual(
      byDouble.data.map((p) => p.id),
      [paid.id, declined.payment_intent?.id],
    );
    const succeeded = await stripe.paymentIntents.search({ query: `metadata['out_trade_no']:'${outTradeNo}' AND status:'succeeded'` });
    assert.deepEqual(
      succeeded.data.map((p) => p.id),
      [paid.id],
    );
    const notSucceeded = await stripe.paymentIntents.search({ query: `metadata['out_trade_no']:'${outTradeNo}' AND -status:'succeeded'` });
    assert.deepEqual(
      notSucceeded.data.map((p) => p.id),
      [declined.payment_intent?.id],
    );
    const amount = await stripe.paymentIntents.search({
      query: `metadata['out_trade_no']:'${outTradeNo}' AND amount>=1230 AND amount<1231`,
    });
    assert.equal(amount.data.length, 2);

    const page1 = await stripe.paymentIntents.search({ query: `metadata['out_trade_no']:'${outTradeNo}'`, limit: 1 });
    assert.equal(page1.has_more, true);
    assert.ok(page1.next_page);
    const page2 = await stripe.paymentIntents.search({
      query: `metadata['out_trade_no']:'${outTradeNo}'`,
      limit: 1,
      page: page1.next_page,
    });
    assert.deepEqual(
      [...page1.data, ...page2.data].map((p) => p.id),
      byDouble.data.map((p) => p.id),
    );
    assert.equal(page2.has_more, false);

    for (const query of [`metadata['out_trade_no']:'x' AND status:'y' OR status:'z'`, `customer:'cus_1'`, `metadata['x']`, '']) {
      const err = await failure(stripe.paymentIntents.search({ query }));
      assert.ok(err instanceof Stripe.errors.StripeInvalidRequestError, query);
      assert.equal(err.param, 'query', query);
    }

    const recent = await stripe.paymentIntents.list({ limit: 1, created: { gte: paid.created } });
    assert.equal(recent.object, 'list');
    assert.equal(recent.data[0]?.id, paid.id);
    const older = await stripe.paymentIntents.list({ limit: 1, starting_after: paid.id });
    assert.equal(older.data[0]?.id, declined.payment_intent?.id);
  });

  it('can keep new PaymentIntents out of search for a while, as Stripe’s eventually consistent index does, but not out of list', async () => {
    const lagging = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [createStripeModule({ searchLagMs: 400 })] });
    try {
      const laggingCreds = ((await (await fetch(`${lagging.url}/sandbox/credentials`)).json()) as { stripe: Credentials }).stripe;
      assert.equal(laggingCreds.secretKey, creds.secretKey); // the account survives restarts and is shared
      const lag = client(creds.secretKey, lagging.url);
      const outTradeNo = newOutTradeNo();
      const paid = await lag.paymentIntents.create({
        amount: 700,
        currency: 'cny',
        confirm: true,
        payment_method: 'pm_card_visa',
        allowed_payment_method_types: ['card'],
        metadata: { out_trade_no: outTradeNo },
      });
      const query = `metadata['out_trade_no']:'${outTradeNo}'`;
      assert.deepEqual((await lag.paymentIntents.search({ query })).data, []);
      assert.equal(
        (await lag.paymentIntents.list({ limit: 5 })).data.some((p) => p.id === paid.id),
        true,
      );
      await new Promise((resolve) => setTimeout(resolve, 450));
      assert.deepEqual(
        (await lag.paymentIntents.search({ query })).data.map((p) => p.id),
        [paid.id],
      );
    } finally {
      await lagging.close();
    }
  });
});

describe('webhooks', () => {
  let receiver: Receiver;
  before(async () => {
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
  });

  it('POSTs payment_intent.succeeded signed for constructEvent to the registered endpoint, retried until a 2xx', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/webhooks/${outTradeNo}`;
    receiver.script(path, [500, 404, 204]);
    const { merchant, secret } = await merchantWithEndpoint(`${receiver.url}${path}`);
    const paid = await pay(outTradeNo, creds.testBuyers.ok, { amount: 2000 }, {}, merchant);

    const deliveries = await waitFor('three deliveries', async () => {
      const list = receiver.received.get(path) ?? [];
      return list.length >= 3 ? list : undefined;
    });
    const events = deliveries.map((d) => {
      assert.equal(d.headers['content-type'], 'application/json; charset=utf-8');
      const header = String(d.headers['stripe-signature']);
      assert.match(header, /^t=\d+,v1=[0-9a-f]{64},v0=[0-9a-f]{64}$/);
      return stripe.webhooks.constructEvent(d.body, header, secret, 300);
    });
    const [first] = events;
    assert.ok(first);
    assert.match(first.id, /^evt_[A-Za-z0-9]{24}$/);
    assert.equal(first.type, 'payment_intent.succeeded');
    assert.equal(first.object, 'event');
    assert.equal(first.livemode, false);
    assert.equal('account' in first, false, 'Stripe sets `account` for Connect only');
    const object = first.data.object as Stripe.PaymentIntent;
    assert.equal(object.id, paid.id);
    assert.equal(object.status, 'succeeded');
    assert.equal(object.amount_received, 2000);
    assert.equal(object.metadata.out_trade_no, outTradeNo);
    for (const event of events) assert.equal(event.id, first.id); // one event, delivered again
    // The signature covers the exact bytes: a forged copy does not verify.
    const forged = deliveries[0]!.body.replace('2000', '1');
    assert.throws(
      () => stripe.webhooks.constructEvent(forged, String(deliveries[0]!.headers['stripe-signature']), secret),
      Stripe.errors.StripeSignatureVerificationError,
    );

    const { notifications } = await waitFor('the ack in the ledger', async () => {
      const l = await ledger(outTradeNo);
      return l.notifications.some((n) => n.acknowledged) ? l : undefined;
    });
    assert.deepEqual(
      notifications.map((n) => [n.attempt, n.acknowledged]),
      [
        [1, false],
        [2, false],
        [3, true],
      ],
    );
    await new Promise((resolve) => setTimeout(resolve, 400)); // past the next retry: none comes
    assert.equal((receiver.received.get(path) ?? []).length, 3);
  });

  it('POSTs payment_intent.payment_failed after a decline', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/webhooks/${outTradeNo}`;
    const { merchant, secret } = await merchantWithEndpoint(`${receiver.url}${path}`);
    await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds, {}, {}, merchant));
    const [delivery] = await waitFor('the delivery', async () => {
      const list = receiver.received.get(path) ?? [];
      return list.length >= 1 ? list : undefined;
    });
    assert.ok(delivery);
    const event = stripe.webhooks.constructEvent(delivery.body, String(delivery.headers['stripe-signature']), secret);
    assert.equal(event.type, 'payment_intent.payment_failed');
    const object = event.data.object as Stripe.PaymentIntent;
    assert.equal(object.status, 'requires_payment_method');
    assert.equal(object.last_payment_error?.decline_code, 'insufficient_funds');
  });

  it('resends the succeeded event from the tool: concurrent copies, overrides applied before signing', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/webhooks/${outTradeNo}`;
    const tool = (body: unknown) =>
      fetch(`${sandbox.url}/sandbox/stripe/notify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });

    const { merchant, secret } = await merchantWithEndpoint(`${receiver.url}${path}`);
    await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds, {}, {}, merchant));
    const notPaid = await tool({ outTradeNo });
    assert.equal(notPaid.status, 409);
    assert.equal(((await notPaid.json()) as { error: { code: string } }).error.code, 'NOT_PAID');

    const paid = await pay(outTradeNo, creds.testBuyers.ok, {}, {}, merchant);
    await waitFor('the scheduled deliveries', async () => ((receiver.received.get(path) ?? []).length >= 2 ? true : undefined));
    const scheduled = receiver.received.get(path)!.at(-1)!;
    const scheduledEvent = stripe.webhooks.constructEvent(scheduled.body, String(scheduled.headers['stripe-signature']), secret);

    const victim = newOutTradeNo();
    const res = await tool({ outTradeNo, copies: 4, overrides: { amount: '1', out_trade_no: victim } });
    assert.equal(res.status, 200);
    const { deliveries } = (await res.json()) as { deliveries: { status: number; body: string }[] };
    assert.deepEqual(
      deliveries.map((d) => d.status),
      [200, 200, 200, 200],
    );
    const copies = receiver.received.get(path)!.slice(-4);
    for (const copy of copies) {
      const event = stripe.webhooks.constructEvent(copy.body, String(copy.headers['stripe-signature']), secret);
      assert.equal(event.id, scheduledEvent.id);
      const object = event.data.object as Stripe.PaymentIntent;
      assert.equal(object.id, paid.id);
      assert.equal(object.amount, 1);
      assert.equal(object.amount_received, 1);
      assert.equal(object.metadata.out_trade_no, victim);
    }
    const { notifications } = await ledger(outTradeNo);
    assert.equal(notifications.length, 6); // failed event, succeeded event, four copies

    const stale = await tool({ outTradeNo, overrides: { timestamp: String(Math.floor(Date.now() / 1000) - 301) } });
    assert.equal(stale.status, 200);
    const old = receiver.received.get(path)!.at(-1)!;
    assert.throws(() => stripe.webhooks.constructEvent(old.body, String(old.headers['stripe-signature']), secret, 300), /tolerance/);
    await tool({ outTradeNo, overrides: { signature: '' } });
    const unsigned = receiver.received.get(path)!.at(-1)!;
    assert.throws(
      () => stripe.webhooks.constructEvent(unsigned.body, String(unsigned.headers['stripe-signature']), secret),
      /No signatures found/,
    );

    const typo = await tool({ outTradeNo, overrides: { total_amount: '1' } });
    assert.equal(typo.status, 400);
    assert.match(((await typo.json()) as { error: { message: string } }).error.message, /unknown override total_amount/);
    const noEndpoint = newOutTradeNo();
    await pay(noEndpoint, creds.testBuyers.ok, {}, {}, client((await openAccount()).secretKey));
    assert.equal((await tool({ outTradeNo: noEndpoint })).status, 409);
  });
});

/** POST /sandbox/stripe/buyer-pays: the buyer completing the order's open PaymentIntent. */
async function buyerPays(body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${sandbox.url}/sandbox/stripe/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** A refund as PayOnce's adapter sends it: its refund id in metadata and in the Idempotency-Key. */
function refund(paymentIntent: string, amount: number | undefined, refundId: string, outTradeNo: string, via: Stripe = stripe) {
  return via.refunds.create(
    {
      payment_intent: paymentIntent,
      ...(amount !== undefined ? { amount } : {}),
      reason: 'requested_by_customer',
      metadata: { refund_id: refundId, out_trade_no: outTradeNo },
    },
    { idempotencyKey: `payonce-refund-${refundId}` },
  );
}

function newRefundId(): string {
  return `RF${randomBytes(8).toString('hex').toUpperCase()}`;
}

describe('cancel (closing an abandoned attempt)', () => {
  it('cancels a declined PaymentIntent, which then refuses a second cancel, a confirm and the buyer', async () => {
    const outTradeNo = newOutTradeNo();
    const declined = await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds));
    const id = declined.payment_intent?.id;
    assert.ok(id);
    // 1. Still payable after the decline, as on Stripe.
    assert.equal((await stripe.paymentIntents.retrieve(id)).status, 'requires_payment_method');

    // 2. Canceled.
    const canceled = await stripe.paymentIntents.cancel(id, { cancellation_reason: 'abandoned' });
    assert.equal(canceled.status, 'canceled');
    assert.equal(canceled.cancellation_reason, 'abandoned');
    assert.ok(typeof canceled.canceled_at === 'number');

    // 3. A second cancel is refused with the status it found, so a caller can tell "already closed".
    const again = await failure(stripe.paymentIntents.cancel(id, { cancellation_reason: 'abandoned' }));
    assert.ok(again instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(again.statusCode, 400);
    assert.equal(again.code, 'payment_intent_unexpected_state');
    assert.equal(again.payment_intent?.status, 'canceled');

    // 4. Nothing can pay it any more: not a confirm, not the buyer.
    const confirm = await failure(stripe.paymentIntents.confirm(id, { payment_method: creds.testBuyers.ok }));
    assert.equal(confirm.code, 'payment_intent_unexpected_state');
    assert.match(confirm.message, /status of canceled/);
    const buyer = await buyerPays({ outTradeNo, buyer: 'ok' });
    assert.equal(buyer.status, 409);
    assert.equal(buyer.body.code, 'TRADE_NOT_PAYABLE');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('refuses to cancel a succeeded or processing PaymentIntent with Stripe’s error, and replays a cancel by its key', async () => {
    const outTradeNo = newOutTradeNo();
    const paid = await pay(outTradeNo, creds.testBuyers.ok);
    const refused = await failure(stripe.paymentIntents.cancel(paid.id, { cancellation_reason: 'abandoned' }));
    assert.ok(refused instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(refused.code, 'payment_intent_unexpected_state');
    assert.match(refused.message, /^You cannot cancel this PaymentIntent because it has a status of succeeded\./);
    assert.equal((await stripe.paymentIntents.retrieve(paid.id)).status, 'succeeded');

    const declined = await failure(pay(newOutTradeNo(), creds.testBuyers.insufficient_funds));
    const id = declined.payment_intent?.id;
    assert.ok(id);
    // A card payment being processed (which no test card produces) cannot be canceled either.
    await sql`UPDATE psp_sandbox.stripe_payment_intents
                 SET status = 'processing', object = jsonb_set(object, '{status}', '"processing"') WHERE id = ${id}`;
    const processing = await failure(stripe.paymentIntents.cancel(id));
    assert.equal(processing.code, 'payment_intent_unexpected_state');
    assert.match(processing.message, /status of processing/);
    await sql`UPDATE psp_sandbox.stripe_payment_intents
                 SET status = 'requires_payment_method', object = jsonb_set(object, '{status}', '"requires_payment_method"') WHERE id = ${id}`;

    const key = `payonce-close-${id}`;
    const first = await rawPost(`/v1/payment_intents/${id}/cancel`, 'cancellation_reason=abandoned', { 'idempotency-key': key });
    assert.equal(first.status, 200);
    const firstBody = await first.text();
    const replay = await rawPost(`/v1/payment_intents/${id}/cancel`, 'cancellation_reason=abandoned', { 'idempotency-key': key });
    assert.equal(replay.status, 200);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal(await replay.text(), firstBody);
    const other = await rawPost(`/v1/payment_intents/${id}/cancel`, 'cancellation_reason=duplicate', { 'idempotency-key': key });
    assert.equal(other.status, 400);
    assert.equal(((await other.json()) as { error: { type: string } }).error.type, 'idempotency_error');
    const badReason = await failure(stripe.paymentIntents.cancel(id, { cancellation_reason: 'because' as 'abandoned' }));
    assert.equal(badReason.param, 'cancellation_reason');
  });
});

describe('buyer-pays', () => {
  let receiver: Receiver;
  before(async () => {
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
  });

  it('lets the buyer pay the PaymentIntent a decline left open: a ledger row and the usual webhook', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/webhooks/${outTradeNo}`;
    const { merchant, secret } = await merchantWithEndpoint(`${receiver.url}${path}`);
    const declined = await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds, {}, {}, merchant));
    const id = declined.payment_intent?.id;
    assert.ok(id);

    // 1. Another decline keeps it payable.
    assert.deepEqual(await buyerPays({ outTradeNo, buyer: 'account_restricted' }), {
      status: 200,
      body: { gateway: 'stripe', outTradeNo, status: 'declined', gatewayTradeNo: id },
    });
    // 2. The buyer pays (buyer defaults to ok).
    assert.deepEqual(await buyerPays({ outTradeNo }), {
      status: 200,
      body: { gateway: 'stripe', outTradeNo, status: 'succeeded', gatewayTradeNo: id },
    });
    const intent = await merchant.paymentIntents.retrieve(id);
    assert.equal(intent.status, 'succeeded');
    assert.equal(intent.amount_received, 1230);
    // 3. Paid: nothing left to pay.
    const paidTwice = await buyerPays({ outTradeNo });
    assert.equal(paidTwice.status, 409);
    assert.equal(paidTwice.body.code, 'TRADE_NOT_PAYABLE');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => [c.status, c.gatewayTradeNo]),
      [
        ['declined', id],
        ['declined', id],
        ['succeeded', id],
      ],
    );
    // 4. The webhooks a confirm sends: payment_failed ×2, then succeeded.
    const deliveries = await waitFor('three events', async () => {
      const list = receiver.received.get(path) ?? [];
      return list.length >= 3 ? list : undefined;
    });
    const types = deliveries.map((d) => stripe.webhooks.constructEvent(d.body, String(d.headers['stripe-signature']), secret).type);
    assert.deepEqual(types.sort(), ['payment_intent.payment_failed', 'payment_intent.payment_failed', 'payment_intent.succeeded']);
  });

  it('confirms the newest open PaymentIntent of the order, and answers 409 for an unknown order and 400 for bad input', async () => {
    const outTradeNo = newOutTradeNo();
    const older = (await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds))).payment_intent?.id;
    const newer = (await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds))).payment_intent?.id;
    assert.ok(older && newer);
    const paid = await buyerPays({ outTradeNo, buyer: 'ok' });
    assert.equal(paid.body.gatewayTradeNo, newer);
    assert.equal((await stripe.paymentIntents.retrieve(older)).status, 'requires_payment_method'); // still open: the close's job

    const unknown = await buyerPays({ outTradeNo: newOutTradeNo() });
    assert.equal(unknown.status, 409);
    assert.equal(unknown.body.code, 'TRADE_NOT_PAYABLE');
    for (const bad of ['{', { buyer: 'ok' }, { outTradeNo, buyer: 'rich' }, { outTradeNo: '' }]) {
      const res = await buyerPays(bad);
      assert.equal(res.status, 400, JSON.stringify(bad));
      assert.equal(res.body.code, 'BAD_REQUEST');
    }
  });
});

describe('refunds', () => {
  let receiver: Receiver;
  before(async () => {
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
  });

  it('refunds in parts up to what was received, replays by key, and refuses more with amount_too_large / charge_already_refunded', async () => {
    const outTradeNo = newOutTradeNo();
    const paid = await pay(outTradeNo, creds.testBuyers.ok);
    const firstId = newRefundId();

    // 1. A partial refund.
    const first = await refund(paid.id, 1000, firstId, outTradeNo);
    assert.match(first.id, /^re_[A-Za-z0-9]{24}$/);
    assert.equal(first.object, 'refund');
    assert.equal(first.amount, 1000);
    assert.equal(first.currency, 'cny');
    assert.equal(first.payment_intent, paid.id);
    assert.equal(first.charge, paid.latest_charge);
    assert.equal(first.status, 'succeeded');
    assert.equal(first.reason, 'requested_by_customer');
    assert.deepEqual(first.metadata, { refund_id: firstId, out_trade_no: outTradeNo });
    assert.ok(typeof first.created === 'number');

    // 2. The same key again: the first answer, no second refund.
    const replay = await refund(paid.id, 1000, firstId, outTradeNo);
    assert.equal(replay.id, first.id);
    assert.equal(replay.lastResponse.headers['idempotent-replayed'], 'true');
    const otherAmount = await failure(refund(paid.id, 999, firstId, outTradeNo));
    assert.ok(otherAmount instanceof Stripe.errors.StripeIdempotencyError);

    // 3. More than what is left (230) is refused, and the refusal is stored under its key too.
    const tooMuchId = newRefundId();
    const tooMuch = await failure(refund(paid.id, 231, tooMuchId, outTradeNo));
    assert.ok(tooMuch instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(tooMuch.statusCode, 400);
    assert.equal(tooMuch.code, 'amount_too_large');
    assert.equal(tooMuch.param, 'amount');
    assert.match(tooMuch.message, /^Refund amount \(CNY 2\.31\) is greater than unrefunded amount on charge \(CNY 2\.30\)/);
    const tooMuchAgain = await failure(refund(paid.id, 231, tooMuchId, outTradeNo));
    assert.equal(tooMuchAgain.headers?.['idempotent-replayed'], 'true');

    // 4. The rest (no amount: all that is left), then nothing more.
    const rest = await refund(paid.id, undefined, newRefundId(), outTradeNo);
    assert.equal(rest.amount, 230);
    const done = await failure(refund(paid.id, 1, newRefundId(), outTradeNo));
    assert.equal(done.code, 'charge_already_refunded');
    assert.equal(done.message, `Charge ${String(paid.latest_charge)} has already been refunded.`);

    // 5. The ledger nets the charge out; the PaymentIntent stays succeeded, as on Stripe.
    const { charges, refunds } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.amountMinor]),
      [['succeeded', 1230]],
    );
    assert.deepEqual(
      refunds.map((r) => [r.gateway, r.refundId, r.gatewayRefundId, r.gatewayTradeNo, r.amountMinor, r.currency, r.status]),
      [
        ['stripe', firstId, first.id, paid.id, 1000, 'CNY', 'succeeded'],
        ['stripe', rest.metadata?.refund_id, rest.id, paid.id, 230, 'CNY', 'succeeded'],
      ],
    );
    assert.equal((await stripe.paymentIntents.retrieve(paid.id)).status, 'succeeded');

    // 6. List (newest first, strongly consistent) and retrieve.
    const listed = await stripe.refunds.list({ payment_intent: paid.id, limit: 100 });
    assert.deepEqual(
      listed.data.map((r) => r.id),
      [rest.id, first.id],
    );
    assert.equal(listed.has_more, false);
    const page = await stripe.refunds.list({ payment_intent: paid.id, limit: 1, starting_after: rest.id });
    assert.deepEqual(
      page.data.map((r) => r.id),
      [first.id],
    );
    assert.deepEqual(
      (await stripe.refunds.list({ charge: String(paid.latest_charge) })).data.map((r) => r.id),
      [rest.id, first.id],
    );
    assert.deepEqual(await stripe.refunds.retrieve(first.id), JSON.parse(JSON.stringify(first)));
    const missing = await failure(stripe.refunds.retrieve('re_missing'));
    assert.equal(missing.statusCode, 404);
    assert.equal(missing.code, 'resource_missing');
  });

  it('refuses a refund of an unpaid, a canceled or an unknown PaymentIntent, and a request without one', async () => {
    const outTradeNo = newOutTradeNo();
    const declined = (await failure(pay(outTradeNo, creds.testBuyers.insufficient_funds))).payment_intent?.id;
    assert.ok(declined);
    const unpaid = await failure(refund(declined, 100, newRefundId(), outTradeNo));
    assert.ok(unpaid instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(unpaid.statusCode, 400);
    assert.match(unpaid.message, /does not have a successful charge to refund/);
    await stripe.paymentIntents.cancel(declined);
    assert.equal((await failure(refund(declined, 100, newRefundId(), outTradeNo))).statusCode, 400);

    const unknown = await failure(refund('pi_doesnotexist', 100, newRefundId(), outTradeNo));
    assert.ok(unknown instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(unknown.statusCode, 404);
    assert.equal(unknown.code, 'resource_missing');
    assert.equal(unknown.param, 'payment_intent');
    const unknownList = await failure(stripe.refunds.list({ payment_intent: 'pi_doesnotexist' }));
    assert.equal(unknownList.statusCode, 404);

    const none = await failure(stripe.refunds.create({ amount: 100 }));
    assert.equal(none.code, 'parameter_missing');
    const reason = await failure(stripe.refunds.create({ payment_intent: declined, reason: 'changed_mind' as 'duplicate' }));
    assert.equal(reason.param, 'reason');
    assert.deepEqual((await ledger(outTradeNo)).refunds, []);
  });

  it('lets exactly as many concurrent refunds through as the charge can pay back', async () => {
    const outTradeNo = newOutTradeNo();
    const paid = await pay(outTradeNo, creds.testBuyers.ok);
    const results = await Promise.allSettled(Array.from({ length: 10 }, () => refund(paid.id, 500, newRefundId(), outTradeNo)));
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 2);
    for (const r of results) if (r.status === 'rejected') assert.equal((r.reason as Stripe.errors.StripeError).code, 'amount_too_large');
    assert.deepEqual(
      (await ledger(outTradeNo)).refunds.map((r) => r.amountMinor),
      [500, 500],
    );
  });

  it('refunds a second charge of one order (Stripe does not dedupe on out_trade_no) and the ledger nets it out', async () => {
    const outTradeNo = newOutTradeNo();
    const first = await pay(outTradeNo, creds.testBuyers.ok);
    const second = await pay(outTradeNo, creds.testBuyers.ok);
    await stripe.refunds.create(
      {
        payment_intent: second.id,
        reason: 'duplicate',
        metadata: { refund_id: 'DUP1' + outTradeNo.slice(2, 20), out_trade_no: outTradeNo },
      },
      { idempotencyKey: `payonce-refund-DUP1${outTradeNo}` },
    );
    const { charges, refunds } = await ledger(outTradeNo);
    const kept =
      charges.filter((c) => c.status === 'succeeded').reduce((sum, c) => sum + c.amountMinor, 0) -
      refunds.reduce((sum, r) => sum + r.amountMinor, 0);
    assert.equal(kept, 1230);
    assert.deepEqual(
      refunds.map((r) => r.gatewayTradeNo),
      [second.id],
    );
    assert.notEqual(first.id, second.id);
  });

  it('sends refund.created and charge.refunded, signed like every event, to the registered endpoint', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/webhooks/${outTradeNo}`;
    const { merchant, secret } = await merchantWithEndpoint(`${receiver.url}${path}`);
    const paid = await pay(outTradeNo, creds.testBuyers.ok, {}, {}, merchant);
    const refundId = newRefundId();
    const created = await refund(paid.id, 1230, refundId, outTradeNo, merchant);
    const deliveries = await waitFor('three events', async () => {
      const list = receiver.received.get(path) ?? [];
      return list.length >= 3 ? list : undefined;
    });
    const events = deliveries.map((d) => stripe.webhooks.constructEvent(d.body, String(d.headers['stripe-signature']), secret));
    const byType = new Map(events.map((e) => [e.type, e]));
    const refundEvent = byType.get('refund.created');
    assert.ok(refundEvent);
    const object = refundEvent.data.object as Stripe.Refund;
    assert.equal(object.id, created.id);
    assert.equal(object.status, 'succeeded');
    assert.deepEqual(object.metadata, { refund_id: refundId, out_trade_no: outTradeNo });
    assert.equal('account' in refundEvent, false);
    const chargeEvent = byType.get('charge.refunded');
    assert.ok(chargeEvent);
    const charge = chargeEvent.data.object as Stripe.Charge;
    assert.equal(charge.id, paid.latest_charge);
    assert.equal(charge.amount_refunded, 1230);
    assert.equal(charge.refunded, true);
    assert.equal(charge.payment_intent, paid.id);
    const { notifications } = await waitFor('acks', async () => {
      const l = await ledger(outTradeNo);
      return l.notifications.filter((n) => n.acknowledged).length >= 3 ? l : undefined;
    });
    assert.equal(notifications.length, 3);
  });

  it('keeps a refund whose answer was lost, and replays it to the retry with the same key', async () => {
    const outTradeNo = newOutTradeNo();
    const paid = await pay(outTradeNo, creds.testBuyers.ok);
    const refundId = newRefundId();
    const armed = await fetch(`${sandbox.url}/sandbox/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ gateway: 'stripe', operation: 'refund', action: 'drop_after_charge' }),
    });
    assert.equal(armed.status, 201);
    const body = `payment_intent=${paid.id}&amount=1230&reason=requested_by_customer&metadata[refund_id]=${refundId}&metadata[out_trade_no]=${outTradeNo}`;
    await assert.rejects(rawPost('/v1/refunds', body, { 'idempotency-key': `payonce-refund-${refundId}` }));
    assert.deepEqual(
      (await ledger(outTradeNo)).refunds.map((r) => [r.refundId, r.amountMinor]),
      [[refundId, 1230]],
    );
    const retry = await rawPost('/v1/refunds', body, { 'idempotency-key': `payonce-refund-${refundId}` });
    assert.equal(retry.status, 200);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.equal((await ledger(outTradeNo)).refunds.length, 1);
  });
});
