/**
 * The sandbox's Stripe webhook endpoints (POST/GET/DELETE /v1/webhook_endpoints), driven with the
 * official SDK: per-endpoint secrets, enabled_events, delivery to every enabled endpoint of the
 * account and nowhere else (never to an address a PaymentIntent carries). Every test works in
 * an account of its own (POST /sandbox/stripe/accounts), so registering endpoints here never changes
 * where the other suites' events go. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/stripe-webhook-endpoints.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type http from 'node:http';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { stripeModule } from '@/sandbox/stripe';
import { startServer, waitFor } from '@/test/support/harness';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;

interface Account {
  accountId: string;
  secretKey: string;
  publishableKey: string;
  webhookSecret: string;
}

interface Delivery {
  path: string;
  signature: string;
  body: string;
}

let sandbox: RunningSandbox;
let receiver: { url: string; close(): Promise<void> };
const deliveries: Delivery[] = [];

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

async function openAccount(): Promise<{ account: Account; stripe: Stripe }> {
  const res = await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' });
  assert.equal(res.status, 201);
  const account = (await res.json()) as Account;
  const { hostname, port } = new URL(sandbox.url);
  return { account, stripe: new Stripe(account.secretKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 0 }) };
}

/** The deliveries to one receiver path, each verified with `secret` by the SDK, as event types. */
function eventsAt(path: string, secret: string, stripe: Stripe): Stripe.Event[] {
  return deliveries.filter((d) => d.path === path).map((d) => stripe.webhooks.constructEvent(d.body, d.signature, secret));
}

function pay(stripe: Stripe, outTradeNo: string, notifyUrl?: string) {
  return stripe.paymentIntents.create({
    amount: 1230,
    currency: 'cny',
    confirm: true,
    payment_method: 'pm_card_visa',
    allowed_payment_method_types: ['card'],
    metadata: { out_trade_no: outTradeNo, ...(notifyUrl ? { notify_url: notifyUrl } : {}) },
  });
}

/** Lets every delivery that is going to happen arrive (the schedule is scaled down 1000×). */
async function settle(): Promise<void> {
  let seen = -1;
  while (seen !== deliveries.length) {
    seen = deliveries.length;
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  receiver = await startServer((req: http.IncomingMessage, res: http.ServerResponse) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      deliveries.push({ path: req.url ?? '/', signature: String(req.headers['stripe-signature']), body });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"received":true}');
    });
  });
});

after(async () => {
  await receiver.close();
  await sandbox.close();
});

describe('webhook endpoints', () => {
  it('creates, lists, retrieves, updates and deletes endpoints; the secret is returned only by create', async () => {
    const { stripe } = await openAccount();
    const created = await stripe.webhookEndpoints.create({
      url: `${receiver.url}/crud`,
      enabled_events: ['payment_intent.succeeded', 'charge.refunded'],
      description: 'PayOnce',
    });
    assert.match(created.id, /^we_[A-Za-z0-9]{24}$/);
    assert.equal(created.object, 'webhook_endpoint');
    assert.match(created.secret ?? '', /^whsec_[A-Za-z0-9]{32}$/);
    assert.equal(created.status, 'enabled');
    assert.deepEqual(created.enabled_events, ['payment_intent.succeeded', 'charge.refunded']);

    const retrieved = await stripe.webhookEndpoints.retrieve(created.id);
    assert.equal(retrieved.url, `${receiver.url}/crud`);
    assert.equal(retrieved.secret, undefined);
    const listed = await stripe.webhookEndpoints.list();
    assert.deepEqual(
      listed.data.map((e) => [e.id, e.secret]),
      [[created.id, undefined]],
    );

    const updated = await stripe.webhookEndpoints.update(created.id, { disabled: true, enabled_events: ['*'] });
    assert.equal(updated.status, 'disabled');
    assert.deepEqual(updated.enabled_events, ['*']);
    assert.equal(updated.secret, undefined);

    const deleted = await stripe.webhookEndpoints.del(created.id);
    assert.deepEqual({ id: deleted.id, deleted: deleted.deleted }, { id: created.id, deleted: true });
    const gone = await stripe.webhookEndpoints.retrieve(created.id).catch((err: unknown) => err);
    assert.ok(gone instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(gone.statusCode, 404);
    assert.equal(gone.code, 'resource_missing');

    for (const bad of [
      { url: 'not a url', enabled_events: ['*'] },
      { url: `${receiver.url}/x`, enabled_events: ['not an event'] },
    ] as Stripe.WebhookEndpointCreateParams[]) {
      const refused = await stripe.webhookEndpoints.create(bad).catch((err: unknown) => err);
      assert.ok(refused instanceof Stripe.errors.StripeInvalidRequestError, JSON.stringify(bad));
    }
    const missing = await stripe.webhookEndpoints
      .create({ url: `${receiver.url}/x` } as Stripe.WebhookEndpointCreateParams)
      .catch((e: unknown) => e);
    assert.ok(missing instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(missing.param, 'enabled_events');
  });

  it('delivers every subscribed event to every enabled endpoint, each signed with its own secret, and no longer to metadata[notify_url]', async () => {
    const { stripe } = await openAccount();
    const all = await stripe.webhookEndpoints.create({ url: `${receiver.url}/all`, enabled_events: ['*'] });
    const paid = await stripe.webhookEndpoints.create({ url: `${receiver.url}/paid`, enabled_events: ['payment_intent.succeeded'] });
    const off = await stripe.webhookEndpoints.create({ url: `${receiver.url}/off`, enabled_events: ['*'] });
    await stripe.webhookEndpoints.update(off.id, { disabled: true });

    // 1. A payment, a refund of it, and a canceled PaymentIntent.
    const outTradeNo = newOutTradeNo();
    const intent = await pay(stripe, outTradeNo, `${receiver.url}/fallback`);
    await stripe.refunds.create({ payment_intent: intent.id, amount: 230 });
    const abandoned = await stripe.paymentIntents.create({
      amount: 500,
      currency: 'cny',
      allowed_payment_method_types: ['card'],
      metadata: { out_trade_no: newOutTradeNo() },
    });
    await stripe.paymentIntents.cancel(abandoned.id, { cancellation_reason: 'abandoned' });
    await waitFor('the deliveries to /all', async () => (deliveries.filter((d) => d.path === '/all').length >= 7 ? true : undefined));
    await settle();

    // 2. '*' gets every event of them, each verified with its own secret only.
    const atAll = eventsAt('/all', all.secret ?? '', stripe);
    assert.deepEqual(atAll.map((e) => e.type).sort(), [
      'charge.refunded',
      'charge.succeeded',
      'payment_intent.canceled',
      'payment_intent.created',
      'payment_intent.created',
      'payment_intent.succeeded',
      'refund.created',
    ]);
    assert.equal((atAll.find((e) => e.type === 'payment_intent.canceled')?.data.object as Stripe.PaymentIntent).id, abandoned.id);
    assert.throws(() => eventsAt('/all', paid.secret ?? '', stripe), Stripe.errors.StripeSignatureVerificationError);

    // 3. A list gets only its types; the same event (same id) as the '*' endpoint got.
    const atPaid = eventsAt('/paid', paid.secret ?? '', stripe);
    assert.deepEqual(
      atPaid.map((e) => e.type),
      ['payment_intent.succeeded'],
    );
    assert.equal(atPaid[0]?.id, atAll.find((e) => e.type === 'payment_intent.succeeded')?.id);
    assert.equal(atPaid[0]?.pending_webhooks, 2);

    // 4. A disabled endpoint and the old per-PaymentIntent stand-in get nothing.
    assert.equal(deliveries.filter((d) => d.path === '/off' || d.path === '/fallback').length, 0);

    // 5. A deleted endpoint gets nothing more.
    await stripe.webhookEndpoints.del(all.id);
    const before = deliveries.length;
    await pay(stripe, newOutTradeNo(), `${receiver.url}/fallback`);
    await waitFor('the delivery to /paid', async () => (eventsAt('/paid', paid.secret ?? '', stripe).length >= 2 ? true : undefined));
    await settle();
    assert.deepEqual(
      deliveries.slice(before).map((d) => d.path),
      ['/paid'],
    );
  });

  it('delivers nothing while the account has no endpoint, whatever metadata[notify_url] says; the event is still stored', async () => {
    const { account, stripe } = await openAccount();
    const outTradeNo = newOutTradeNo();
    const intent = await pay(stripe, outTradeNo, `${receiver.url}/fallback-${account.accountId}`);
    assert.equal(intent.metadata.notify_url, `${receiver.url}/fallback-${account.accountId}`, 'kept as plain metadata');
    await settle();
    assert.equal(deliveries.filter((d) => d.path === `/fallback-${account.accountId}`).length, 0);
    const notifications = ((await (await fetch(`${sandbox.url}/ledger?outTradeNo=${outTradeNo}`)).json()) as { notifications: unknown[] })
      .notifications;
    assert.deepEqual(notifications, []);
    const tool = await fetch(`${sandbox.url}/sandbox/stripe/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo }),
    });
    assert.equal(tool.status, 409);
    assert.equal(((await tool.json()) as { error: { code: string } }).error.code, 'NO_WEBHOOK_ENDPOINT');

    const endpoint = await stripe.webhookEndpoints.create({
      url: `${receiver.url}/registered-${account.accountId}`,
      enabled_events: ['payment_intent.succeeded'],
    });
    await pay(stripe, newOutTradeNo(), `${receiver.url}/fallback-${account.accountId}`);
    await waitFor('the registered delivery', async () =>
      deliveries.some((d) => d.path === `/registered-${account.accountId}`) ? true : undefined,
    );
    await settle();
    assert.equal(deliveries.filter((d) => d.path === `/fallback-${account.accountId}`).length, 0);
    assert.equal(eventsAt(`/registered-${account.accountId}`, endpoint.secret ?? '', stripe).length, 1);
  });

  it('lets the notification tool resend to each registered endpoint the event went to, signed with that endpoint’s secret', async () => {
    const { account, stripe } = await openAccount();
    const endpoint = await stripe.webhookEndpoints.create({ url: `${receiver.url}/tool-${account.accountId}`, enabled_events: ['*'] });
    const outTradeNo = newOutTradeNo();
    await pay(stripe, outTradeNo);
    await waitFor('the scheduled delivery', async () =>
      deliveries.some((d) => d.path === `/tool-${account.accountId}`) ? true : undefined,
    );
    const res = await fetch(`${sandbox.url}/sandbox/stripe/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo, copies: 2 }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    assert.deepEqual(
      ((await res.json()) as { deliveries: { status: number }[] }).deliveries.map((d) => d.status),
      [200, 200],
    );
    const events = eventsAt(`/tool-${account.accountId}`, endpoint.secret ?? '', stripe).filter(
      (e) => e.type === 'payment_intent.succeeded',
    );
    assert.equal(events.length, 3);
    assert.equal(new Set(events.map((e) => e.id)).size, 1, 'the copies are the same event');
  });

  it('keeps accounts apart: another account’s endpoints, PaymentIntents and events stay invisible', async () => {
    const mine = await openAccount();
    const theirs = await openAccount();
    await mine.stripe.webhookEndpoints.create({ url: `${receiver.url}/mine-${mine.account.accountId}`, enabled_events: ['*'] });
    const theirEndpoint = await theirs.stripe.webhookEndpoints.create({
      url: `${receiver.url}/theirs-${theirs.account.accountId}`,
      enabled_events: ['*'],
    });

    const theirPayment = await pay(theirs.stripe, newOutTradeNo());
    await waitFor('their delivery', async () =>
      deliveries.some((d) => d.path === `/theirs-${theirs.account.accountId}`) ? true : undefined,
    );
    await settle();
    assert.equal(deliveries.filter((d) => d.path === `/mine-${mine.account.accountId}`).length, 0);
    const [event] = eventsAt(`/theirs-${theirs.account.accountId}`, theirEndpoint.secret ?? '', theirs.stripe);
    assert.ok(event);
    assert.equal('account' in event, false, 'no `account`: Stripe sets it for Connect only');

    const unseen = await mine.stripe.paymentIntents.retrieve(theirPayment.id).catch((err: unknown) => err);
    assert.ok(unseen instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(unseen.statusCode, 404);
    assert.deepEqual(
      (await mine.stripe.webhookEndpoints.list()).data.map((e) => e.url),
      [`${receiver.url}/mine-${mine.account.accountId}`],
    );
    const notMine = await mine.stripe.webhookEndpoints.del(theirEndpoint.id).catch((err: unknown) => err);
    assert.ok(notMine instanceof Stripe.errors.StripeInvalidRequestError);
    assert.equal(notMine.statusCode, 404);
  });
});
