/**
 * scripts/stripe-listen.ts registers the app's Stripe webhook endpoint at start, as `stripe listen`
 * would: Stripe delivers only to registered endpoints. On an account of its own, so that the endpoint
 * never takes other tests' events.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { registerStripeWebhookEndpoint } from '@/scripts/stripe-listen';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { waitFor } from '@/test/support/harness';

const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');

let sandbox: RunningSandbox;
let receiver: http.Server;
let appUrl: string;
const received: { signature: string; body: string }[] = [];

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001 });
  receiver = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
    req.on('end', () => {
      if (req.url === '/api/webhooks/stripe') received.push({ signature: String(req.headers['stripe-signature']), body });
      res.writeHead(200).end('{}');
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  appUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
});
after(async () => {
  await new Promise<void>((resolve) => receiver?.close(() => resolve()));
  await sandbox?.close();
});

describe('registering the app’s Stripe webhook endpoint at start', () => {
  it('registers one endpoint per URL, returns its secret, and events arrive at it signed with that secret', async () => {
    const account = (await (await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' })).json()) as { secretKey: string };
    const env = { STRIPE_SECRET_KEY: account.secretKey, STRIPE_API_BASE: sandbox.url };
    const first = await registerStripeWebhookEndpoint(env, appUrl);
    const second = await registerStripeWebhookEndpoint(env, appUrl); // a restart of the stack
    assert.match(second ?? '', /^whsec_/);
    assert.notEqual(first, second, 'a new endpoint, whose secret this run knows');

    const base = new URL(sandbox.url);
    const stripe = new Stripe(account.secretKey, { host: base.hostname, port: base.port, protocol: 'http' });
    const endpoints = (await stripe.webhookEndpoints.list()).data.filter((e) => e.url === `${appUrl}/api/webhooks/stripe`);
    assert.equal(endpoints.length, 1, 'the earlier run’s endpoint was deleted');

    const intent = await stripe.paymentIntents.create({
      amount: 1200,
      currency: 'cny',
      payment_method: 'pm_card_visa',
      confirm: true,
      automatic_payment_methods: { enabled: true, allow_redirects: 'never' },
      metadata: { out_trade_no: `PO${Date.now()}` },
    });
    assert.equal(intent.status, 'succeeded');
    const delivery = await waitFor('the succeeded event', async () =>
      received.find((r) => r.body.includes(intent.id) && r.body.includes('payment_intent.succeeded')),
    );
    const event = stripe.webhooks.constructEvent(delivery.body, delivery.signature, second!);
    assert.equal(event.type, 'payment_intent.succeeded');
    assert.throws(() => stripe.webhooks.constructEvent(delivery.body, delivery.signature, first!), /signature/i);
  });

  it('does nothing without Stripe credentials', async () => {
    assert.equal(await registerStripeWebhookEndpoint({}, appUrl), undefined);
  });
});
