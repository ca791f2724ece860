/**
 * Authorise, then capture, at the sandbox's Stripe, walked with stripe-node as a merchant who charges
 * at shipment does: capture_method manual leaves the PaymentIntent in requires_capture; the capture
 * (in full or in part) moves the money once, whatever is sent twice or by two operators at once; a
 * cancel releases the hold; an authorisation not captured in time lapses. The shared ledger shows
 * money only for what was captured. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/stripe-capture.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { createStripeModule } from '@/sandbox/stripe';
import { readLedger } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;
/** Long enough for every capture below, short enough to watch one lapse by itself. */
const WINDOW_MS = 4000;

let sandbox: RunningSandbox;
let stripe: Stripe;

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

async function captured(outTradeNo: string): Promise<number[]> {
  const ledger = await readLedger<Ledger>(sandbox.url, outTradeNo);
  return ledger.charges.filter((c) => c.status === 'succeeded').map((c) => Number(c.amountMinor));
}

function authorize(outTradeNo: string, paymentMethod = 'pm_card_visa') {
  return stripe.paymentIntents.create({
    amount: 5000,
    currency: 'usd',
    capture_method: 'manual',
    payment_method: paymentMethod,
    allowed_payment_method_types: ['card'],
    confirm: true,
    return_url: 'https://shop.example/return',
    metadata: { out_trade_no: outTradeNo },
  });
}

async function refusal(promise: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof Stripe.errors.StripeError) return err;
    throw err;
  }
  assert.fail('expected Stripe to refuse');
}

before(async () => {
  sandbox = await startSandbox({
    port: 0,
    databaseUrl,
    timeScale: 0.001,
    modules: [createStripeModule({ authorizationWindowMs: WINDOW_MS })],
  });
  const creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { stripe: { secretKey: string } }).stripe;
  const { hostname, port } = new URL(sandbox.url);
  stripe = new Stripe(creds.secretKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 0, timeout: 10_000 });
});

after(async () => {
  await sandbox.close();
});

describe('capture_method manual', () => {
  it('authorises without taking money, captures in full once, and refuses a second capture', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await authorize(outTradeNo);
    assert.equal(intent.status, 'requires_capture');
    assert.equal(intent.capture_method, 'manual');
    assert.equal(intent.amount_capturable, 5000);
    assert.equal(intent.amount_received, 0);
    assert.deepEqual(await captured(outTradeNo), [], 'an authorisation is not money taken');

    const done = await stripe.paymentIntents.capture(intent.id);
    assert.equal(done.status, 'succeeded');
    assert.equal(done.amount_received, 5000);
    assert.equal(done.amount_capturable, 0);
    assert.deepEqual(await captured(outTradeNo), [5000]);

    const events = (await stripe.events.list({ limit: 100 })).data.filter((e) => {
      const object = e.data.object as { id?: string; payment_intent?: string };
      return object.id === intent.id || object.payment_intent === intent.id;
    });
    const byType = new Map(events.map((e) => [e.type, e.data.object as unknown as Record<string, unknown>]));
    assert.equal(byType.get('payment_intent.amount_capturable_updated')?.amount_capturable, 5000);
    assert.equal(byType.get('charge.succeeded')?.captured, false, 'the authorisation’s charge');
    assert.equal(byType.get('charge.captured')?.amount_captured, 5000);
    assert.equal(byType.get('payment_intent.succeeded')?.amount_received, 5000);

    const again = await refusal(stripe.paymentIntents.capture(intent.id));
    assert.equal(again.statusCode, 400);
    assert.equal(again.code, 'payment_intent_unexpected_state');
    assert.match(again.message, /could not be captured because it has a status of succeeded/);
    assert.deepEqual(await captured(outTradeNo), [5000]);
  });

  it('captures part: the rest is released, and refunds are bounded by what was captured', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await authorize(outTradeNo);
    const done = await stripe.paymentIntents.capture(intent.id, { amount_to_capture: 3000 });
    assert.equal(done.amount_received, 3000);
    assert.equal(done.amount_capturable, 0);
    assert.deepEqual(await captured(outTradeNo), [3000]);

    const tooMuch = await refusal(stripe.refunds.create({ payment_intent: intent.id, amount: 3001 }));
    assert.equal(tooMuch.statusCode, 400);
    const refund = await stripe.refunds.create({ payment_intent: intent.id });
    assert.equal(refund.amount, 3000);
  });

  it('refuses to capture more than was authorised, changing nothing', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await authorize(outTradeNo);
    const refused = await refusal(stripe.paymentIntents.capture(intent.id, { amount_to_capture: 5001 }));
    assert.equal(refused.statusCode, 400);
    assert.equal(refused.code, 'amount_too_large');
    assert.equal(refused.param, 'amount_to_capture');
    assert.equal((await stripe.paymentIntents.retrieve(intent.id)).status, 'requires_capture');
    assert.deepEqual(await captured(outTradeNo), []);
  });

  it('two operators capturing at once, and a retry of one capture, take the money once', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await authorize(outTradeNo);
    const results = await Promise.allSettled([
      stripe.paymentIntents.capture(intent.id, {}, { idempotencyKey: `capture-${intent.id}-a` }),
      stripe.paymentIntents.capture(intent.id, { amount_to_capture: 4000 }, { idempotencyKey: `capture-${intent.id}-b` }),
    ]);
    assert.deepEqual(results.map((r) => r.status).sort(), ['fulfilled', 'rejected']);
    const winner = results.find((r) => r.status === 'fulfilled') as PromiseFulfilledResult<Stripe.PaymentIntent>;
    assert.equal((await captured(outTradeNo)).length, 1);
    assert.deepEqual(await captured(outTradeNo), [winner.value.amount_received]);

    // The winner's retry (its answer lost) replays the stored answer.
    const key = winner.value.amount_received === 5000 ? `capture-${intent.id}-a` : `capture-${intent.id}-b`;
    const params = winner.value.amount_received === 5000 ? {} : { amount_to_capture: 4000 };
    const replay = await stripe.paymentIntents.capture(intent.id, params, { idempotencyKey: key });
    assert.equal(replay.lastResponse.headers['idempotent-replayed'], 'true');
    assert.equal(replay.status, 'succeeded');
    assert.equal((await captured(outTradeNo)).length, 1);
  });

  it('a cancel releases the authorisation: nothing captured, and a capture after is refused', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await authorize(outTradeNo);
    const canceled = await stripe.paymentIntents.cancel(intent.id);
    assert.equal(canceled.status, 'canceled');
    assert.equal(canceled.amount_capturable, 0);
    const refused = await refusal(stripe.paymentIntents.capture(intent.id));
    assert.equal(refused.code, 'payment_intent_unexpected_state');
    assert.deepEqual(await captured(outTradeNo), []);
  });

  it('an authorisation not captured within its window lapses: canceled, reason automatic, nothing taken', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await authorize(outTradeNo);
    await new Promise((resolve) => setTimeout(resolve, WINDOW_MS + 500));
    const read = await stripe.paymentIntents.retrieve(intent.id);
    assert.equal(read.status, 'canceled');
    assert.equal(read.cancellation_reason, 'automatic');
    assert.equal(read.amount_capturable, 0);
    assert.equal((await refusal(stripe.paymentIntents.capture(intent.id))).code, 'payment_intent_unexpected_state');
    assert.deepEqual(await captured(outTradeNo), []);
  });

  it('the sandbox’s lapse tool ends one authorisation’s window now; 409 for one not awaiting capture', async () => {
    const outTradeNo = newOutTradeNo();
    const intent = await authorize(outTradeNo);
    const lapse = (id: string) =>
      fetch(`${sandbox.url}/sandbox/stripe/lapse-authorization`, { method: 'POST', body: JSON.stringify({ paymentIntent: id }) });
    assert.equal((await lapse(intent.id)).status, 200);
    assert.equal((await stripe.paymentIntents.retrieve(intent.id)).cancellation_reason, 'automatic');
    assert.equal((await lapse(intent.id)).status, 409);
    assert.equal((await lapse('not-an-id')).status, 400);
  });

  it('a declined card is not authorised; a 3-D Secure card is authorised once authenticated', async () => {
    const declined = await refusal(authorize(newOutTradeNo(), 'pm_card_chargeDeclinedInsufficientFunds'));
    assert.equal(declined.statusCode, 402);

    const outTradeNo = newOutTradeNo();
    const intent = await authorize(outTradeNo, 'pm_card_threeDSecure2Required');
    assert.equal(intent.status, 'requires_action');
    const url = intent.next_action?.redirect_to_url?.url ?? '';
    const answer = await fetch(url, { method: 'POST', body: new URLSearchParams({ outcome: 'complete' }), redirect: 'manual' });
    assert.equal(answer.status, 303);
    const held = await stripe.paymentIntents.retrieve(intent.id);
    assert.equal(held.status, 'requires_capture');
    assert.deepEqual(await captured(outTradeNo), []);
    await stripe.paymentIntents.capture(intent.id);
    assert.deepEqual(await captured(outTradeNo), [5000]);
  });

  it('refuses an unknown capture_method', async () => {
    const refused = await refusal(
      stripe.paymentIntents.create({
        amount: 5000,
        currency: 'usd',
        capture_method: 'later' as 'manual',
        allowed_payment_method_types: ['card'],
      }),
    );
    assert.equal(refused.param, 'capture_method');
  });
});
