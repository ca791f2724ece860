/**
 * The sandbox's Stripe objects beyond the PaymentIntent itself, driven with the official SDK:
 * expand[] (latest_charge, payment_method, a refund's charge and payment_intent, inside lists), the
 * Charge resource (GET /v1/charges[/{id}]), PaymentIntent and refund updates with what each status
 * allows, and ending_before on every list. Every test works in an account of its own
 * (POST /sandbox/stripe/accounts). Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/stripe-objects.test.ts
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

function pay(stripe: Stripe, params: Partial<Stripe.PaymentIntentCreateParams> = {}) {
  return stripe.paymentIntents.create({
    amount: 1500,
    currency: 'usd',
    allowed_payment_method_types: ['card'],
    payment_method: 'pm_card_visa',
    confirm: true,
    metadata: { out_trade_no: newOutTradeNo() },
    ...params,
  });
}

describe('expand[]', () => {
  it('expands latest_charge, its balance transaction and payment_method on create, retrieve and capture', async () => {
    const stripe = await merchant();
    const paid = await pay(stripe, { expand: ['latest_charge', 'payment_method', 'latest_charge.balance_transaction'] });
    const charge = paid.latest_charge as Stripe.Charge;
    assert.equal(charge.object, 'charge');
    assert.equal(charge.payment_intent, paid.id);
    assert.equal(charge.amount_captured, 1500);
    assert.equal((charge.balance_transaction as Stripe.BalanceTransaction).object, 'balance_transaction');
    assert.equal((charge.balance_transaction as Stripe.BalanceTransaction).amount, 1500);
    const method = paid.payment_method as Stripe.PaymentMethod;
    assert.equal(method.object, 'payment_method');
    assert.equal(method.card?.last4, '4242');

    const again = await stripe.paymentIntents.retrieve(paid.id, { expand: ['latest_charge.payment_intent'] });
    assert.equal(((again.latest_charge as Stripe.Charge).payment_intent as Stripe.PaymentIntent).id, paid.id);
    // Without expand the fields are ids, as before.
    assert.equal((await stripe.paymentIntents.retrieve(paid.id)).latest_charge, charge.id);

    const held = await pay(stripe, { capture_method: 'manual', expand: ['latest_charge'] });
    assert.equal((held.latest_charge as Stripe.Charge).captured, false);
    const captured = await stripe.paymentIntents.capture(held.id, { amount_to_capture: 1000, expand: ['latest_charge'] });
    assert.equal((captured.latest_charge as Stripe.Charge).amount_captured, 1000);

    const open = await stripe.paymentIntents.create({ amount: 900, currency: 'usd', allowed_payment_method_types: ['card'] });
    const canceled = await stripe.paymentIntents.cancel(open.id, { expand: ['latest_charge'] });
    assert.equal(canceled.latest_charge, null);
  });

  it("expands a refund's charge and payment_intent, and data.… in lists; refuses a path that is not expandable", async () => {
    const stripe = await merchant();
    const paid = await pay(stripe);
    const refund = await stripe.refunds.create({ payment_intent: paid.id, amount: 500, expand: ['charge', 'payment_intent'] });
    assert.equal((refund.charge as Stripe.Charge).amount_refunded, 500);
    assert.equal((refund.payment_intent as Stripe.PaymentIntent).id, paid.id);
    const listed = await stripe.paymentIntents.list({ limit: 1, expand: ['data.latest_charge'] });
    assert.equal((listed.data[0]?.latest_charge as Stripe.Charge).id, paid.latest_charge);

    const refused = await failure(stripe.paymentIntents.retrieve(paid.id, { expand: ['customer_balance'] }));
    assert.equal(refused.statusCode, 400);
    assert.equal(refused.param, 'expand');
    assert.match(refused.message, /cannot be expanded \(customer_balance\)/);
    assert.equal((await failure(stripe.paymentIntents.list({ expand: ['latest_charge'] }))).statusCode, 400);
  });
});

describe('the Charge resource', () => {
  it("retrieves a PaymentIntent's charges, failed and succeeded, and lists them both ways", async () => {
    const stripe = await merchant();
    const intent = await stripe.paymentIntents.create({
      amount: 2000,
      currency: 'usd',
      allowed_payment_method_types: ['card'],
      metadata: { out_trade_no: newOutTradeNo() },
    });
    const declined = await failure(stripe.paymentIntents.confirm(intent.id, { payment_method: 'pm_card_chargeDeclinedInsufficientFunds' }));
    const failedId = String(declined.payment_intent?.latest_charge);
    const paid = await stripe.paymentIntents.confirm(intent.id, { payment_method: 'pm_card_visa' });
    const other = await pay(stripe);

    const failed = await stripe.charges.retrieve(failedId);
    assert.equal(failed.status, 'failed');
    assert.equal(failed.failure_code, 'card_declined');
    assert.equal(failed.outcome?.reason, 'insufficient_funds');
    assert.equal(failed.paid, false);
    const succeeded = await stripe.charges.retrieve(String(paid.latest_charge), { expand: ['payment_intent'] });
    assert.equal(succeeded.status, 'succeeded');
    assert.equal(succeeded.captured, true);
    assert.equal((succeeded.payment_intent as Stripe.PaymentIntent).id, intent.id);

    const ofIntent = await stripe.charges.list({ payment_intent: intent.id });
    assert.deepEqual(
      ofIntent.data.map((c) => c.id),
      [succeeded.id, failedId],
    );
    const all = await stripe.charges.list({ limit: 3 });
    assert.deepEqual(
      all.data.map((c) => c.id),
      [other.latest_charge, succeeded.id, failedId],
    );
    const older = await stripe.charges.list({ limit: 1, starting_after: succeeded.id });
    assert.deepEqual(
      older.data.map((c) => c.id),
      [failedId],
    );
    const newer = await stripe.charges.list({ limit: 1, ending_before: succeeded.id });
    assert.deepEqual(
      newer.data.map((c) => c.id),
      [other.latest_charge],
    );
    assert.equal(newer.has_more, false);
    assert.equal((await failure(stripe.charges.retrieve('ch_unknown'))).statusCode, 404);
  });
});

describe('updates', () => {
  it('changes amount and metadata before the charge; afterwards metadata only, amount refused', async () => {
    const stripe = await merchant();
    const intent = await stripe.paymentIntents.create({
      amount: 1000,
      currency: 'usd',
      allowed_payment_method_types: ['card'],
      metadata: { out_trade_no: newOutTradeNo(), note: 'first' },
    });
    const updated = await stripe.paymentIntents.update(intent.id, {
      amount: 1200,
      description: 'two tickets',
      metadata: { note: '', gift: 'yes' },
    });
    assert.equal(updated.amount, 1200);
    assert.equal(updated.description, 'two tickets');
    assert.deepEqual(updated.metadata, { out_trade_no: intent.metadata.out_trade_no, gift: 'yes' });
    const paid = await stripe.paymentIntents.confirm(intent.id, { payment_method: 'pm_card_visa' });
    assert.equal(paid.amount_received, 1200);

    const refused = await failure(stripe.paymentIntents.update(intent.id, { amount: 1300 }));
    assert.equal(refused.statusCode, 400);
    assert.equal(refused.code, 'payment_intent_unexpected_state');
    assert.equal(refused.param, 'amount');
    assert.match(refused.message, /amount could not be updated because it has a status of succeeded/);
    const noted = await stripe.paymentIntents.update(intent.id, { metadata: { shipped: 'yes' } });
    assert.equal(noted.metadata.shipped, 'yes');
    assert.equal(noted.amount, 1200);

    const held = await pay(stripe, { capture_method: 'manual' });
    assert.equal((await failure(stripe.paymentIntents.update(held.id, { amount: 100 }))).param, 'amount');
    const canceled = await stripe.paymentIntents.cancel((await stripe.paymentIntents.create({ amount: 700, currency: 'usd' })).id);
    assert.equal((await failure(stripe.paymentIntents.update(canceled.id, { currency: 'eur' }))).param, 'currency');
  });

  it("updates a refund's metadata and sends refund.updated", async () => {
    const stripe = await merchant();
    const paid = await pay(stripe);
    const refund = await stripe.refunds.create({ payment_intent: paid.id, metadata: { refund_id: 'RF1' } });
    const updated = await stripe.refunds.update(refund.id, { metadata: { reason_note: 'damaged' } });
    assert.deepEqual(updated.metadata, { refund_id: 'RF1', reason_note: 'damaged' });
    assert.deepEqual((await stripe.refunds.retrieve(refund.id)).metadata, updated.metadata);
    const events = await stripe.events.list({ type: 'refund.updated' });
    assert.equal(events.data.length, 1);
    assert.deepEqual((events.data[0]?.data.object as Stripe.Refund).metadata, updated.metadata);
    assert.equal((await failure(stripe.refunds.update('re_unknown', { metadata: { a: 'b' } }))).statusCode, 404);
  });
});

describe('ending_before', () => {
  it('pages towards newer PaymentIntents, refunds and webhook endpoints, newest first', async () => {
    const stripe = await merchant();
    const intents = [];
    for (let i = 0; i < 3; i += 1) intents.push(await pay(stripe));
    const [a, b, c] = intents.map((p) => p.id);
    const newer = await stripe.paymentIntents.list({ ending_before: a, limit: 1 });
    assert.deepEqual(
      newer.data.map((p) => p.id),
      [b],
    );
    assert.equal(newer.has_more, true);
    assert.deepEqual(
      (await stripe.paymentIntents.list({ ending_before: a })).data.map((p) => p.id),
      [c, b],
    );

    const refunds = [];
    for (const intent of intents) refunds.push(await stripe.refunds.create({ payment_intent: intent.id }));
    assert.deepEqual(
      (await stripe.refunds.list({ ending_before: refunds[0]?.id })).data.map((r) => r.id),
      [refunds[2]?.id, refunds[1]?.id],
    );

    const endpoints = [];
    for (let i = 0; i < 2; i += 1) {
      endpoints.push(await stripe.webhookEndpoints.create({ url: `https://shop.example/hook/${i}`, enabled_events: ['*'] }));
    }
    assert.deepEqual(
      (await stripe.webhookEndpoints.list({ ending_before: endpoints[0]?.id })).data.map((e) => e.id),
      [endpoints[1]?.id],
    );
    assert.equal((await failure(stripe.paymentIntents.list({ ending_before: a, starting_after: c }))).statusCode, 400);
  });
});
