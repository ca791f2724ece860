/**
 * The sandbox's Stripe Events API (GET /v1/events, GET /v1/events/{id}) and the event types a
 * PaymentIntent, its charges and its refunds emit, driven with the official SDK. Every test works in
 * an account of its own (POST /sandbox/stripe/accounts), so its event list is its own. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/stripe-events.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { stripeModule } from '@/sandbox/stripe';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');
const databaseUrl: string = DATABASE_URL;

let sandbox: RunningSandbox;

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
});
after(async () => {
  await sandbox.close();
});

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

async function merchant(): Promise<Stripe> {
  const res = await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' });
  assert.equal(res.status, 201);
  const { secretKey } = (await res.json()) as { secretKey: string };
  const { hostname, port } = new URL(sandbox.url);
  return new Stripe(secretKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 0 });
}

async function failure(promise: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof Stripe.errors.StripeError, String(err));
    return err;
  }
  assert.fail('expected the request to fail');
}

/** The account's events, oldest first, as [type, data.object.id]. */
async function timeline(stripe: Stripe): Promise<[string, string][]> {
  const all: Stripe.Event[] = [];
  for await (const event of stripe.events.list({ limit: 100 })) all.push(event);
  return all.reverse().map((e) => [e.type, (e.data.object as { id: string }).id]);
}

describe('the events a PaymentIntent, its charges and its refunds emit', () => {
  it('created; a decline (payment_failed + charge.failed); a payment (succeeded + charge.succeeded); a refund; a cancel', async () => {
    const stripe = await merchant();
    // 1. Opened without a card, declined, then paid with another card.
    const intent = await stripe.paymentIntents.create({
      amount: 1230,
      currency: 'cny',
      allowed_payment_method_types: ['card'],
      metadata: { out_trade_no: newOutTradeNo() },
    });
    const declined = await failure(stripe.paymentIntents.confirm(intent.id, { payment_method: 'pm_card_chargeDeclinedInsufficientFunds' }));
    const failedCharge = String(declined.payment_intent?.latest_charge);
    const paid = await stripe.paymentIntents.confirm(intent.id, { payment_method: 'pm_card_visa' });
    const charge = String(paid.latest_charge);
    // 2. A refund of part of it; another PaymentIntent canceled.
    const refund = await stripe.refunds.create({ payment_intent: paid.id, amount: 230 });
    const abandoned = await stripe.paymentIntents.create({ amount: 500, currency: 'cny', allowed_payment_method_types: ['card'] });
    await stripe.paymentIntents.cancel(abandoned.id);

    assert.deepEqual(await timeline(stripe), [
      ['payment_intent.created', intent.id],
      ['payment_intent.payment_failed', intent.id],
      ['charge.failed', failedCharge],
      ['payment_intent.succeeded', intent.id],
      ['charge.succeeded', charge],
      ['refund.created', refund.id],
      ['charge.refunded', charge],
      ['payment_intent.created', abandoned.id],
      ['payment_intent.canceled', abandoned.id],
    ]);
    const [failedEvent] = (await stripe.events.list({ type: 'charge.failed' })).data;
    const failedObject = failedEvent?.data.object as Stripe.Charge;
    assert.equal(failedObject.status, 'failed');
    assert.equal(failedObject.paid, false);
    assert.equal(failedObject.failure_code, 'card_declined');
    assert.equal(failedObject.outcome?.reason, 'insufficient_funds');
    assert.equal(failedObject.payment_intent, intent.id);
  });
});

describe('GET /v1/events', () => {
  it('pages newest first both ways, filters by type (with *), types[] and created, and retrieves one by id', async () => {
    const stripe = await merchant();
    for (let i = 0; i < 3; i += 1) {
      await stripe.paymentIntents.create({
        amount: 1000 + i,
        currency: 'cny',
        confirm: true,
        payment_method: 'pm_card_visa',
        allowed_payment_method_types: ['card'],
      });
    }
    // 9 events: created, succeeded and charge.succeeded for each of the three.
    const all = (await stripe.events.list({ limit: 100 })).data;
    assert.equal(all.length, 9);
    assert.ok(
      all.every((e, i) => i === 0 || e.created <= all[i - 1]!.created),
      'newest first',
    );

    // 1. Forwards with starting_after, back with ending_before: the same pages.
    const first = await stripe.events.list({ limit: 4 });
    assert.equal(first.has_more, true);
    const second = await stripe.events.list({ limit: 4, starting_after: first.data.at(-1)!.id });
    assert.deepEqual(
      [...first.data, ...second.data].map((e) => e.id),
      all.slice(0, 8).map((e) => e.id),
    );
    const back = await stripe.events.list({ limit: 4, ending_before: second.data[0]!.id });
    assert.deepEqual(
      back.data.map((e) => e.id),
      first.data.map((e) => e.id),
    );
    assert.equal(back.has_more, false, 'nothing newer than the first page');
    const backFromEnd = await stripe.events.list({ limit: 2, ending_before: all.at(-1)!.id });
    assert.deepEqual(
      backFromEnd.data.map((e) => e.id),
      all.slice(6, 8).map((e) => e.id),
    );
    assert.equal(backFromEnd.has_more, true);

    // 2. Filters.
    const succeeded = await stripe.events.list({ type: 'payment_intent.succeeded' });
    assert.deepEqual(
      succeeded.data.map((e) => e.type),
      ['payment_intent.succeeded', 'payment_intent.succeeded', 'payment_intent.succeeded'],
    );
    assert.equal((await stripe.events.list({ type: 'payment_intent.*', limit: 100 })).data.length, 6);
    assert.equal((await stripe.events.list({ types: ['charge.succeeded', 'payment_intent.created'], limit: 100 })).data.length, 6);
    assert.equal((await stripe.events.list({ created: { gt: all[0]!.created } })).data.length, 0);
    assert.equal((await stripe.events.list({ created: { lte: all[0]!.created }, limit: 100 })).data.length, 9);
    assert.equal((await stripe.events.list({ delivery_success: true, limit: 100 })).data.length, 9, 'no endpoint: nothing pending');

    // 3. Retrieve: the event as it was delivered, with pending_webhooks as it is now.
    const retrieved = await stripe.events.retrieve(all[0]!.id);
    assert.deepEqual(retrieved, all[0]);
    assert.equal(retrieved.pending_webhooks, 0);
    assert.equal('account' in retrieved, false);
  });

  it('refuses what Stripe refuses, and shows no other account’s events', async () => {
    const mine = await merchant();
    const theirs = await merchant();
    await theirs.paymentIntents.create({ amount: 1230, currency: 'cny', allowed_payment_method_types: ['card'] });
    const [theirEvent] = (await theirs.events.list()).data;
    assert.ok(theirEvent);

    const unseen = await failure(mine.events.retrieve(theirEvent.id));
    assert.equal(unseen.statusCode, 404);
    assert.equal(unseen.code, 'resource_missing');
    assert.equal(unseen.message, `No such event: '${theirEvent.id}'`);
    assert.equal((await mine.events.list()).data.length, 0);

    const both = await failure(mine.events.list({ type: 'charge.succeeded', types: ['charge.failed'] }));
    assert.equal(both.statusCode, 400);
    assert.equal(both.param, 'types');
    const tooMany = await failure(mine.events.list({ limit: 101 }));
    assert.equal(tooMany.param, 'limit');
    const unknownCursor = await failure(mine.events.list({ starting_after: theirEvent.id }));
    assert.equal(unknownCursor.param, 'starting_after');
    const unknownParam = await failure(mine.events.list({ object: 'x' } as Stripe.EventListParams));
    assert.equal(unknownParam.statusCode, 400);
  });
});

describe('enabled_events', () => {
  it('takes Stripe’s event types and * only: an unknown type is a 400 naming the entry, and nothing is created', async () => {
    const stripe = await merchant();
    const ok = await stripe.webhookEndpoints.create({
      url: 'https://example.com/hook',
      enabled_events: ['charge.succeeded', 'refund.updated', 'payment_intent.requires_action'],
    });
    assert.deepEqual(ok.enabled_events, ['charge.succeeded', 'refund.updated', 'payment_intent.requires_action']);
    const refused = await failure(
      stripe.webhookEndpoints.create({
        url: 'https://example.com/hook',
        enabled_events: ['payment_intent.succeeded', 'payment_intent.succeded' as Stripe.WebhookEndpointCreateParams.EnabledEvent],
      }),
    );
    assert.equal(refused.statusCode, 400);
    assert.equal(refused.param, 'enabled_events[1]');
    assert.match(refused.message, /^Invalid enabled_events\[1\]: must be one of \*, payment_intent\.amount_capturable_updated, /);
    const updated = await failure(
      stripe.webhookEndpoints.update(ok.id, { enabled_events: ['nope.nothing' as Stripe.WebhookEndpointUpdateParams.EnabledEvent] }),
    );
    assert.equal(updated.param, 'enabled_events[0]');
    assert.deepEqual(
      (await stripe.webhookEndpoints.list()).data.map((e) => e.enabled_events),
      [['charge.succeeded', 'refund.updated', 'payment_intent.requires_action']],
    );
  });
});
