/**
 * One merchant's day at the sandbox's Stripe, written with nothing but stripe-node (and fetch, for the
 * buyer's browser on a 3-D Secure page) — what a team lifting this checkout would write against the
 * real API, step by step: events (both directions, a types filter, retrieve), charges, expand, update,
 * a refund's update, the minimum amount, a rate limit, 3-D Secure completed / failed / abandoned by
 * redirect, and manual capture in full, in part and canceled. If the sandbox drifts from Stripe where
 * the SDK notices, a step here breaks. Real PostgreSQL; an account of its own.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/stripe-merchant-script.test.ts
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
const RETURN_URL = 'https://shop.example/return';

let sandbox: RunningSandbox;
let stripe: Stripe;

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  // Signing up: an account of its own, so its lists hold only what this script made.
  const res = await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' });
  const { secretKey } = (await res.json()) as { secretKey: string };
  const { hostname, port } = new URL(sandbox.url);
  stripe = new Stripe(secretKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 0 });
});
after(async () => {
  await sandbox.close();
});

const order = () => ({ out_trade_no: `PO${randomBytes(9).toString('hex').toUpperCase()}` });

async function refused(promise: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof Stripe.errors.StripeError, String(err));
    return err;
  }
  assert.fail('expected Stripe to refuse');
}

/** The buyer's browser on the challenge page: the page, then the button (a form POST). */
async function buyerAnswers(intent: Stripe.PaymentIntent, outcome: 'complete' | 'fail' | 'cancel'): Promise<URL> {
  assert.equal(intent.status, 'requires_action');
  assert.equal(intent.next_action?.type, 'redirect_to_url');
  const url = intent.next_action?.redirect_to_url?.url ?? '';
  assert.equal((await fetch(url)).status, 200);
  const answer = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ outcome }),
    redirect: 'manual',
  });
  assert.equal(answer.status, 303);
  return new URL(answer.headers.get('location') ?? '');
}

describe('a merchant integration, with stripe-node only', () => {
  const made: { paid?: Stripe.PaymentIntent; declinedCharge?: string } = {};

  it('1. pays, is declined, pays again; reads the charges and expands them', async () => {
    const intent = await stripe.paymentIntents.create({
      amount: 2500,
      currency: 'usd',
      allowed_payment_method_types: ['card'],
      metadata: order(),
    });
    const declined = await refused(stripe.paymentIntents.confirm(intent.id, { payment_method: 'pm_card_chargeDeclinedInsufficientFunds' }));
    assert.equal(declined.type, 'StripeCardError');
    made.declinedCharge = String(declined.payment_intent?.latest_charge);
    made.paid = await stripe.paymentIntents.confirm(intent.id, {
      payment_method: 'pm_card_visa',
      expand: ['latest_charge', 'payment_method'],
    });
    const charge = made.paid.latest_charge as Stripe.Charge;
    assert.equal(charge.status, 'succeeded');
    assert.equal((made.paid.payment_method as Stripe.PaymentMethod).card?.last4, '4242');
    const listed = await stripe.charges.list({ payment_intent: intent.id });
    assert.deepEqual(
      listed.data.map((c) => [c.id, c.status]),
      [
        [charge.id, 'succeeded'],
        [made.declinedCharge, 'failed'],
      ],
    );
    const again = await stripe.charges.retrieve(charge.id, { expand: ['payment_intent'] });
    assert.equal((again.payment_intent as Stripe.PaymentIntent).amount_received, 2500);
  });

  it('2. updates a PaymentIntent before paying it, and only its notes after', async () => {
    const intent = await stripe.paymentIntents.create({
      amount: 900,
      currency: 'eur',
      allowed_payment_method_types: ['card'],
      metadata: order(),
    });
    const bigger = await stripe.paymentIntents.update(intent.id, { amount: 1900, description: 'upgraded', metadata: { tier: 'gold' } });
    assert.equal(bigger.amount, 1900);
    assert.equal(bigger.metadata.tier, 'gold');
    const paid = await stripe.paymentIntents.confirm(intent.id, { payment_method: 'pm_card_visa', return_url: RETURN_URL });
    assert.equal(paid.amount_received, 1900);
    assert.equal((await refused(stripe.paymentIntents.update(intent.id, { amount: 1 }))).code, 'payment_intent_unexpected_state');
    assert.equal((await stripe.paymentIntents.update(intent.id, { metadata: { tier: '' } })).metadata.tier, undefined);
  });

  it('3. refunds in part and notes the refund (refund.updated)', async () => {
    const paid = made.paid!;
    const refund = await stripe.refunds.create({ payment_intent: paid.id, amount: 500, expand: ['charge'] });
    assert.equal((refund.charge as Stripe.Charge).amount_refunded, 500);
    const noted = await stripe.refunds.update(refund.id, { metadata: { ticket: 'T-1' } });
    assert.equal(noted.metadata?.ticket, 'T-1');
    assert.equal((await stripe.charges.retrieve((paid.latest_charge as Stripe.Charge).id)).amount_refunded, 500);
  });

  it('4. is held to the minimum charge and shown its key masked', async () => {
    const small = await refused(stripe.paymentIntents.create({ amount: 29, currency: 'gbp', allowed_payment_method_types: ['card'] }));
    assert.deepEqual(
      [small.statusCode, small.code, small.param, small.message],
      [400, 'amount_too_small', 'amount', 'Amount must be at least £0.30 gbp'],
    );
    const { hostname, port } = new URL(sandbox.url);
    const typo = new Stripe('sk_test_oops', { host: hostname, port, protocol: 'http', maxNetworkRetries: 0 });
    const auth = await refused(typo.paymentIntents.list());
    assert.equal(auth.type, 'StripeAuthenticationError');
    assert.equal(auth.message, 'Invalid API Key provided: sk_test_****');
  });

  it('5. meets a rate limit: StripeRateLimitError, nothing done, and the next call goes through', async () => {
    const before = (await stripe.paymentIntents.list({ limit: 100 })).data.length;
    await fetch(`${sandbox.url}/sandbox/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ gateway: 'stripe', action: 'rate_limit', times: 1 }),
    });
    const limited = await refused(stripe.paymentIntents.create({ amount: 700, currency: 'usd', allowed_payment_method_types: ['card'] }));
    assert.equal(limited.type, 'StripeRateLimitError');
    assert.equal(limited.statusCode, 429);
    assert.equal(limited.code, 'rate_limit');
    assert.equal(limited.headers?.['stripe-rate-limited-reason'], 'global-rate');
    assert.equal((await stripe.paymentIntents.list({ limit: 100 })).data.length, before, 'nothing was created');
  });

  it('6. 3-D Secure by redirect: completed, failed, abandoned', async () => {
    const challenge = () =>
      stripe.paymentIntents.create({
        amount: 4200,
        currency: 'eur',
        payment_method: 'pm_card_threeDSecure2Required',
        allowed_payment_method_types: ['card'],
        confirm: true,
        return_url: RETURN_URL,
        metadata: order(),
      });
    const completed = await challenge();
    assert.equal((await buyerAnswers(completed, 'complete')).searchParams.get('redirect_status'), 'succeeded');
    assert.equal((await stripe.paymentIntents.retrieve(completed.id)).status, 'succeeded');
    for (const outcome of ['fail', 'cancel'] as const) {
      const intent = await challenge();
      assert.equal((await buyerAnswers(intent, outcome)).searchParams.get('redirect_status'), 'failed');
      const after = await stripe.paymentIntents.retrieve(intent.id);
      assert.equal(after.status, 'requires_payment_method');
      assert.equal(after.last_payment_error?.code, 'payment_intent_authentication_failure');
    }
  });

  it('7. manual capture: in full, in part, canceled', async () => {
    const hold = () =>
      stripe.paymentIntents.create({
        amount: 8000,
        currency: 'usd',
        capture_method: 'manual',
        payment_method: 'pm_card_visa',
        allowed_payment_method_types: ['card'],
        confirm: true,
        metadata: order(),
      });
    const full = await hold();
    assert.equal(full.status, 'requires_capture');
    assert.equal((await stripe.paymentIntents.capture(full.id)).amount_received, 8000);
    const part = await stripe.paymentIntents.capture((await hold()).id, { amount_to_capture: 3000, expand: ['latest_charge'] });
    assert.equal(part.amount_received, 3000);
    assert.equal((part.latest_charge as Stripe.Charge).amount_captured, 3000);
    const released = await stripe.paymentIntents.cancel((await hold()).id);
    assert.equal(released.status, 'canceled');
    assert.equal(released.amount_capturable, 0);
  });

  it('8. reads its events newest first and back again, by type, and one by id', async () => {
    const newest = await stripe.events.list({ limit: 3 });
    assert.equal(newest.data.length, 3);
    const older = await stripe.events.list({ limit: 3, starting_after: newest.data[2]?.id });
    const back = await stripe.events.list({ limit: 3, ending_before: older.data[0]?.id });
    assert.deepEqual(
      back.data.map((e) => e.id),
      newest.data.map((e) => e.id),
    );
    const captures = await stripe.events.list({ types: ['charge.captured', 'refund.updated'] });
    assert.deepEqual([...new Set(captures.data.map((e) => e.type))].sort(), ['charge.captured', 'refund.updated']);
    assert.equal(captures.data.filter((e) => e.type === 'charge.captured').length, 2);
    const one = await stripe.events.retrieve(captures.data[0]!.id);
    assert.deepEqual(one.data.object, captures.data[0]!.data.object);
    assert.equal((await refused(stripe.events.retrieve('evt_unknown'))).statusCode, 404);
  });
});
