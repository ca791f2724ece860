/**
 * The Stripe adapter's buyer step — a card the buyer types into Stripe.js, which confirms the
 * PaymentIntent from the browser with its client secret — against the PSP sandbox over HTTP (real
 * PostgreSQL behind it). The browser's confirm is sent here exactly as Stripe.js sends it; the lead's
 * browser test runs the real page in Chromium.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/stripe-card-step.test.ts
 */
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { createStripeGateway, type StripeGatewayConfig } from '@/server/payments/stripe';
import type { BuyerAction, ChargeOutcome, ChargeRequest, PaymentGateway } from '@/server/payments/gateway';
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
let gateway: PaymentGateway;
let stripe: Stripe;

function config(overrides: Partial<StripeGatewayConfig> = {}): StripeGatewayConfig {
  const { publishableKey, jsUrl, ...rest } = creds;
  return { ...rest, cardStep: { publishableKey, scriptUrl: jsUrl }, ...overrides };
}

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

/** What the checkout sends when the shopper has no sandbox test buyer: the buyer takes the card step. */
function chargeRequest(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo,
    amountMinor: 1230,
    currency: 'CNY',
    subject: 'PayOnce 订单 测试',
    attempt: 1,
    buyerStep: 'card',
    notifyUrl: 'http://127.0.0.1:9/unused',
    returnUrl: 'http://127.0.0.1:9/orders/x',
    ...overrides,
  };
}

function cardAction(outcome: ChargeOutcome): Extract<BuyerAction, { kind: 'card' }> {
  assert.ok(outcome.kind === 'awaiting_buyer', JSON.stringify(outcome));
  assert.ok(outcome.action.kind === 'card', JSON.stringify(outcome.action));
  return outcome.action;
}

/** The buyer's browser: Stripe.js's card Element POSTs the confirm with the publishable key. */
function confirmAsStripeJs(action: Extract<BuyerAction, { kind: 'card' }>, number: string): Promise<Response> {
  const id = action.clientSecret.split('_secret_')[0] ?? '';
  return fetch(`${sandbox.url}/v1/payment_intents/${id}/confirm`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      key: action.publishableKey,
      client_secret: action.clientSecret,
      'payment_method_data[type]': 'card',
      'payment_method_data[card][number]': number,
      'payment_method_data[card][exp_month]': '12',
      'payment_method_data[card][exp_year]': String(new Date().getUTCFullYear() + 3),
      'payment_method_data[card][cvc]': '123',
    }),
  });
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

/** The order's PaymentIntents as Stripe's strongly consistent list shows them. */
async function intentsOf(outTradeNo: string): Promise<Stripe.PaymentIntent[]> {
  const listed = await stripe.paymentIntents.list({ limit: 100, created: { gte: Math.floor(Date.now() / 1000) - 600 } });
  return listed.data.filter((intent) => intent.metadata.out_trade_no === outTradeNo);
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { stripe: Credentials }).stripe;
  gateway = createStripeGateway(config());
  stripe = new Stripe(creds.secretKey, { host: creds.host, port: creds.port, protocol: 'http', maxNetworkRetries: 0 });
});

after(async () => {
  await sandbox.close();
});

describe('the card step', () => {
  it('is offered only with a publishable key and Stripe.js; without them, or for another step, nothing is sent', async () => {
    assert.deepEqual(gateway.buyerSteps, ['card']);
    const { publishableKey: _pk, jsUrl: _js, ...rest } = creds;
    const testBuyersOnly = createStripeGateway(rest);
    assert.deepEqual(testBuyersOnly.buyerSteps, []);
    const outTradeNo = newOutTradeNo();
    const refused = await testBuyersOnly.charge(chargeRequest(outTradeNo, { buyerStep: undefined }));
    assert.ok(refused.kind === 'declined');
    assert.equal(refused.code, 'BUYER_STEP_UNSUPPORTED');
    const qr = await gateway.charge(chargeRequest(outTradeNo, { buyerStep: 'qr' }));
    assert.ok(qr.kind === 'declined');
    assert.equal(qr.code, 'BUYER_STEP_UNSUPPORTED');
    assert.deepEqual(await intentsOf(outTradeNo), []);
  });

  it('opens a PaymentIntent for the buyer’s card: awaiting_buyer with Stripe.js, the publishable key and the client secret; a retry is the same one', async () => {
    const outTradeNo = newOutTradeNo();
    // 1. No buyerStep: the gateway's first (and only) step.
    const action = cardAction(await gateway.charge(chargeRequest(outTradeNo, { buyerStep: undefined })));
    assert.equal(action.scriptUrl, creds.jsUrl);
    assert.equal(action.publishableKey, creds.publishableKey);
    const [intent] = await intentsOf(outTradeNo);
    assert.ok(intent);
    assert.equal(action.clientSecret, intent.client_secret);
    assert.equal(intent.status, 'requires_payment_method');
    assert.equal(intent.payment_method, null);
    assert.deepEqual(intent.metadata, { out_trade_no: outTradeNo, attempt: '1' }); // no notify URL: endpoints are account configuration

    // 2. The same attempt again (a lost answer, a double click): Stripe replays it by Idempotency-Key.
    assert.deepEqual(cardAction(await gateway.charge(chargeRequest(outTradeNo))), action);
    assert.equal((await intentsOf(outTradeNo)).length, 1);

    // 3. Waiting for the buyer is pending, not a decline, and nothing is charged.
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('settles by query once the buyer confirms as Stripe.js does; a retry of the attempt then answers succeeded', async () => {
    const outTradeNo = newOutTradeNo();
    const action = cardAction(await gateway.charge(chargeRequest(outTradeNo)));
    const paid = await confirmAsStripeJs(action, '4242424242424242');
    assert.equal(paid.status, 200, await paid.clone().text());
    const intentId = action.clientSecret.split('_secret_')[0];

    assert.deepEqual(await gateway.query(outTradeNo), {
      kind: 'answered',
      trade: { kind: 'succeeded', gatewayTradeNo: intentId, amountMinor: 1230, currency: 'CNY' },
    });
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo)), {
      kind: 'succeeded',
      gatewayTradeNo: intentId,
      amountMinor: 1230,
      currency: 'CNY',
    });
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['succeeded'],
    );
  });

  it('reads a replayed PaymentIntent again: when the “already paid” look-up is down, the retry after the buyer paid still says succeeded', async () => {
    // Stripe's idempotency layer replays the create as it first answered (requires_payment_method).
    // With search and list unavailable (503 from a proxy in front of the sandbox), only reading the
    // PaymentIntent again can tell that the buyer has paid it since.
    const proxy = await startServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        const path = (req.url ?? '/').split('?')[0];
        if (req.method === 'GET' && (path === '/v1/payment_intents' || path === '/v1/payment_intents/search')) {
          res.writeHead(503, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { type: 'api_error', message: 'list unavailable (test proxy)' } }));
          return;
        }
        const headers: Record<string, string> = {};
        for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string' && name !== 'host') headers[name] = value;
        void fetch(`${sandbox.url}${req.url ?? '/'}`, { method: req.method, headers, ...(req.method === 'GET' ? {} : { body }) }).then(
          async (answer) => {
            const out: Record<string, string> = {};
            answer.headers.forEach((value, name) => {
              if (name !== 'content-length' && name !== 'transfer-encoding' && name !== 'connection') out[name] = value;
            });
            res.writeHead(answer.status, out);
            res.end(await answer.text());
          },
        );
      });
    });
    try {
      const { hostname, port } = new URL(proxy.url);
      const behindProxy = createStripeGateway(config({ host: hostname, port: Number(port), maxNetworkRetries: 0 }));
      const outTradeNo = newOutTradeNo();
      const action = cardAction(await behindProxy.charge(chargeRequest(outTradeNo)));
      assert.equal((await confirmAsStripeJs(action, '4242424242424242')).status, 200);
      const retried = await behindProxy.charge(chargeRequest(outTradeNo));
      assert.deepEqual(retried, {
        kind: 'succeeded',
        gatewayTradeNo: action.clientSecret.split('_secret_')[0],
        amountMinor: 1230,
        currency: 'CNY',
      });
    } finally {
      await proxy.close();
    }
  });

  it('keeps the attempt waiting after a declined card (the buyer may try another), then the next card pays it once', async () => {
    const outTradeNo = newOutTradeNo();
    const action = cardAction(await gateway.charge(chargeRequest(outTradeNo)));
    const declined = await confirmAsStripeJs(action, '4000000000009995');
    assert.equal(declined.status, 402);

    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    assert.deepEqual(cardAction(await gateway.charge(chargeRequest(outTradeNo))), action);

    assert.equal((await confirmAsStripeJs(action, '4242424242424242')).status, 200);
    const trade = await gateway.query(outTradeNo);
    assert.ok(trade.kind === 'answered' && trade.trade.kind === 'succeeded');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'succeeded'],
    );
  });

  it('closes a PaymentIntent waiting for the buyer: canceled, so the buyer’s confirm is refused', async () => {
    const outTradeNo = newOutTradeNo();
    const openedAt = new Date();
    const action = cardAction(await gateway.charge(chargeRequest(outTradeNo)));
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY', openedAt }), { kind: 'closed' });
    const [intent] = await intentsOf(outTradeNo);
    assert.equal(intent?.status, 'canceled');
    assert.equal(intent?.cancellation_reason, 'abandoned');

    const late = await confirmAsStripeJs(action, '4242424242424242');
    assert.equal(late.status, 400);
    assert.equal(((await late.json()) as { error: { code: string } }).error.code, 'payment_intent_unexpected_state');
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'closed' } });
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
    // A retry of the closed attempt is no longer payable: a terminal answer, not a card form.
    const retried = await gateway.charge(chargeRequest(outTradeNo));
    assert.ok(retried.kind === 'declined', JSON.stringify(retried));
  });
});

describe('a registered webhook endpoint (what the stacks will set up at start)', () => {
  it('delivers the card step’s events signed with the endpoint’s secret: succeeded settles, canceled and payment_failed do not', async () => {
    const verdicts: Awaited<ReturnType<PaymentGateway['verifyNotification']>>[] = [];
    let endpointGateway: PaymentGateway | undefined;
    const receiver = await startServer((req, res) => {
      let rawBody = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (rawBody += chunk));
      req.on('end', () => {
        const headers = new Headers();
        for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(name, value);
        void endpointGateway!.verifyNotification({ headers, rawBody }).then((verdict) => {
          verdicts.push(verdict);
          const reply = endpointGateway!.notificationReply(verdict.kind !== 'rejected');
          res.writeHead(reply.status, reply.headers).end(reply.body);
        });
      });
    });
    try {
      // 1. A merchant account of its own, its endpoint registered through the API (the secret is in
      //    the create answer only), and that secret as the adapter's webhookSecret.
      const opened = (await (await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' })).json()) as {
        accountId: string;
        secretKey: string;
        publishableKey: string;
      };
      const merchant = new Stripe(opened.secretKey, { host: creds.host, port: creds.port, protocol: 'http' });
      const endpoint = await merchant.webhookEndpoints.create({
        url: `${receiver.url}/api/webhooks/stripe`,
        enabled_events: ['payment_intent.succeeded', 'payment_intent.payment_failed', 'payment_intent.canceled', 'refund.created'],
      });
      endpointGateway = createStripeGateway(
        config({
          secretKey: opened.secretKey,
          accountId: opened.accountId,
          webhookSecret: endpoint.secret ?? '',
          cardStep: { publishableKey: opened.publishableKey, scriptUrl: creds.jsUrl },
        }),
      );

      // 2. The card step: a declined card, then a good one.
      const outTradeNo = newOutTradeNo();
      const action = cardAction(await endpointGateway.charge(chargeRequest(outTradeNo)));
      assert.equal(action.publishableKey, opened.publishableKey);
      assert.equal((await confirmAsStripeJs(action, '4000000000000002')).status, 402);
      assert.equal((await confirmAsStripeJs(action, '4242424242424242')).status, 200);
      // 3. Another attempt left waiting, then closed.
      const other = newOutTradeNo();
      cardAction(await endpointGateway.charge(chargeRequest(other)));
      assert.deepEqual(await endpointGateway.close({ outTradeNo: other, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });

      const seen = await waitFor('three deliveries', async () => (verdicts.length >= 3 ? verdicts : undefined));
      const summary = seen.map((v) => (v.kind === 'verified' ? [v.notification.outTradeNo, v.notification.status] : [v.kind, '']));
      assert.deepEqual(
        summary.sort(),
        [
          // A cancel is told apart (it voids an authorisation the app holds); this one held nothing.
          [other, 'canceled'],
          [outTradeNo, 'other'],
          [outTradeNo, 'succeeded'],
        ].sort(),
      );
      const paid = seen.find((v) => v.kind === 'verified' && v.notification.status === 'succeeded');
      assert.ok(paid?.kind === 'verified');
      assert.equal(paid.notification.merchantId, opened.accountId);
      assert.equal(paid.notification.gatewayTradeNo, action.clientSecret.split('_secret_')[0]);
      assert.equal(paid.notification.amountMinor, 1230);
      // Every delivery verified with the endpoint's own secret.
      assert.equal(seen.filter((v) => v.kind === 'rejected').length, 0);
    } finally {
      await receiver.close();
    }
  });
});

describe('foreign PaymentIntents', () => {
  function signed(event: object, secret = creds.webhookSecret) {
    const body = JSON.stringify(event);
    const t = Math.floor(Date.now() / 1000);
    const v1 = createHmac('sha256', secret).update(`${t}.${body}`).digest('hex');
    return { headers: new Headers({ 'stripe-signature': `t=${t},v1=${v1}` }), rawBody: body };
  }

  it('acknowledges and ignores another account’s events, even one that names one of our orders', async () => {
    const outTradeNo = newOutTradeNo();
    for (const object of [
      {
        id: 'pi_foreign',
        object: 'payment_intent',
        status: 'succeeded',
        amount: 1230,
        amount_received: 1230,
        currency: 'cny',
        metadata: { out_trade_no: outTradeNo },
      },
      {
        id: 're_foreign',
        object: 'refund',
        status: 'succeeded',
        amount: 1230,
        currency: 'cny',
        metadata: { refund_id: 'R1', out_trade_no: outTradeNo },
      },
    ]) {
      const verdict = await gateway.verifyNotification(
        signed({
          id: `evt_${object.id}`,
          object: 'event',
          account: 'acct_1SomeoneElse00000',
          type: 'payment_intent.succeeded',
          data: { object },
        }),
      );
      assert.deepEqual(verdict, {
        kind: 'verified',
        notification: {
          gateway: 'stripe',
          eventId: `evt_${object.id}`,
          merchantId: creds.accountId,
          outTradeNo: '',
          status: 'other',
          gatewayTradeNo: '',
          amountMinor: 0,
          currency: '',
        },
      });
    }
  });

  it('acknowledges and ignores a real event of a PaymentIntent made without our metadata', async () => {
    const verdicts: Awaited<ReturnType<PaymentGateway['verifyNotification']>>[] = [];
    let merchantGateway: PaymentGateway | undefined;
    const receiver = await startServer((req, res) => {
      let rawBody = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (rawBody += chunk));
      req.on('end', () => {
        const headers = new Headers();
        for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(name, value);
        void merchantGateway!.verifyNotification({ headers, rawBody }).then((verdict) => {
          verdicts.push(verdict);
          const reply = merchantGateway!.notificationReply(verdict.kind !== 'rejected');
          res.writeHead(reply.status, reply.headers).end(reply.body);
        });
      });
    });
    try {
      // An account of its own whose endpoint is this receiver, and the adapter configured for it.
      const opened = (await (await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' })).json()) as {
        accountId: string;
        secretKey: string;
      };
      const merchant = new Stripe(opened.secretKey, { host: creds.host, port: creds.port, protocol: 'http' });
      const endpoint = await merchant.webhookEndpoints.create({
        url: `${receiver.url}/webhooks/stripe`,
        enabled_events: ['payment_intent.succeeded'],
      });
      merchantGateway = createStripeGateway(
        config({ secretKey: opened.secretKey, accountId: opened.accountId, webhookSecret: endpoint.secret ?? '' }),
      );
      // Someone else's integration on the same account: a PaymentIntent with no out_trade_no.
      const intent = await merchant.paymentIntents.create({
        amount: 990,
        currency: 'cny',
        confirm: true,
        payment_method: 'pm_card_visa',
        allowed_payment_method_types: ['card'],
      });
      const [verdict] = await waitFor('the delivery', async () => (verdicts.length > 0 ? verdicts : undefined));
      assert.ok(verdict?.kind === 'verified', JSON.stringify(verdict));
      assert.equal(verdict.notification.status, 'other');
      assert.equal(verdict.notification.outTradeNo, '');
      assert.equal(verdict.notification.merchantId, opened.accountId);
      assert.equal(verdict.notification.gatewayTradeNo, intent.id);
      // Acknowledged: the sandbox records no second delivery.
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(verdicts.length, 1);
    } finally {
      await receiver.close();
    }
  });
});
