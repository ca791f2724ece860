/**
 * The Stripe adapter's authorisations against the sandbox: capture (all or part) and release, each
 * exactly once whatever is sent again, by the same capture or by another one, and read truly when
 * the authorisation is gone. The ledger is the ground truth. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/stripe-capture.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import type { AuthorizationOperations, CaptureRequest } from '@/server/payments/gateway';
import { createStripeGateway, type StripeGatewayConfig } from '@/server/payments/stripe';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { stripeModule } from '@/sandbox/stripe';
import { readLedger, startServer } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;

let sandbox: RunningSandbox;
let config: StripeGatewayConfig;
let authorizations: AuthorizationOperations;
let stripe: Stripe;

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

async function taken(outTradeNo: string): Promise<number[]> {
  const ledger = await readLedger<Ledger>(sandbox.url, outTradeNo);
  return ledger.charges.filter((c) => c.status === 'succeeded').map((c) => Number(c.amountMinor));
}

/** A card authorised for 8800 fen, as the checkout's manual-capture attempt leaves it. */
async function authorised(): Promise<{ outTradeNo: string; intentId: string }> {
  const outTradeNo = newOutTradeNo();
  const intent = await stripe.paymentIntents.create({
    amount: 8800,
    currency: 'cny',
    capture_method: 'manual',
    payment_method: 'pm_card_visa',
    allowed_payment_method_types: ['card'],
    confirm: true,
    metadata: { out_trade_no: outTradeNo },
  });
  assert.equal(intent.status, 'requires_capture');
  return { outTradeNo, intentId: intent.id };
}

function captureOf(held: { outTradeNo: string; intentId: string }, amountMinor = 8800, captureId = randomUUID()): CaptureRequest {
  return { outTradeNo: held.outTradeNo, gatewayTradeNo: held.intentId, amountMinor, currency: 'CNY', captureId };
}

function releaseOf(held: { outTradeNo: string; intentId: string }) {
  return { outTradeNo: held.outTradeNo, gatewayTradeNo: held.intentId };
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  const creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { stripe: StripeGatewayConfig }).stripe;
  config = creds;
  const gateway = createStripeGateway(config);
  assert.ok(gateway.authorizations, 'the Stripe adapter offers authorisations');
  authorizations = gateway.authorizations;
  const { hostname, port } = new URL(sandbox.url);
  stripe = new Stripe(creds.secretKey, { host: hostname, port, protocol: 'http', maxNetworkRetries: 0 });
});

after(async () => {
  await sandbox.close();
});

describe('Stripe authorisations', () => {
  it('captures all once: a retry of the capture and a second capture both answer captured, with one charge', async () => {
    const held = await authorised();
    const request = captureOf(held);
    assert.deepEqual(await authorizations.capture(request), { kind: 'captured', amountMinor: 8800 });
    assert.deepEqual(await authorizations.capture(request), { kind: 'captured', amountMinor: 8800 }, 'a retry replays');
    assert.deepEqual(await authorizations.capture(captureOf(held)), { kind: 'captured', amountMinor: 8800 }, 'another operator');
    assert.deepEqual(await taken(held.outTradeNo), [8800]);
  });

  it('captures part once; a later capture of another amount learns what was taken', async () => {
    const held = await authorised();
    assert.deepEqual(await authorizations.capture(captureOf(held, 5000)), { kind: 'captured', amountMinor: 5000 });
    assert.deepEqual(await authorizations.capture(captureOf(held, 8800)), { kind: 'captured', amountMinor: 5000 });
    assert.deepEqual(await taken(held.outTradeNo), [5000]);
  });

  it('two captures at once take the money once, and both say how much', async () => {
    const held = await authorised();
    const results = await Promise.all([authorizations.capture(captureOf(held, 8800)), authorizations.capture(captureOf(held, 6000))]);
    const amounts = results.map((r) => (r.kind === 'captured' ? r.amountMinor : r.kind));
    assert.equal(amounts[0], amounts[1], JSON.stringify(results));
    assert.deepEqual(await taken(held.outTradeNo), [amounts[0]]);
  });

  it('refuses to take more than was authorised, changing nothing', async () => {
    const held = await authorised();
    const refused = await authorizations.capture(captureOf(held, 8801));
    assert.equal(refused.kind, 'refused');
    assert.deepEqual(await taken(held.outTradeNo), []);
    assert.equal((await stripe.paymentIntents.retrieve(held.intentId)).status, 'requires_capture');
  });

  it('releases the hold once; a capture after it is told the authorisation is gone', async () => {
    const held = await authorised();
    assert.deepEqual(await authorizations.release(releaseOf(held)), { kind: 'released' });
    assert.deepEqual(await authorizations.release(releaseOf(held)), { kind: 'released' }, 'a second release');
    const late = await authorizations.capture(captureOf(held));
    assert.equal(late.kind, 'released');
    assert.equal(late.kind === 'released' && late.code, 'AUTHORIZATION_CANCELED');
    assert.deepEqual(await taken(held.outTradeNo), []);
  });

  it('a release after a capture is told the money was taken; a lapsed authorisation reads as expired', async () => {
    const held = await authorised();
    await authorizations.capture(captureOf(held, 7000));
    assert.deepEqual(await authorizations.release(releaseOf(held)), { kind: 'captured', amountMinor: 7000 });

    const lapsed = await authorised();
    const lapse = await fetch(`${sandbox.url}/sandbox/stripe/lapse-authorization`, {
      method: 'POST',
      body: JSON.stringify({ paymentIntent: lapsed.intentId }),
    });
    assert.equal(lapse.status, 200);
    const late = await authorizations.capture(captureOf(lapsed));
    assert.equal(late.kind === 'released' && late.code, 'AUTHORIZATION_EXPIRED');
  });

  it('a capture whose connection drops is in doubt, one that finds nothing listening is retryable, and its retry captures once', async () => {
    const held = await authorised();
    const nothing = await startServer((req) => req.socket.destroy());
    const { hostname, port } = new URL(nothing.url);
    const cut = createStripeGateway({ ...config, host: hostname, port: Number(port), maxNetworkRetries: 0 }).authorizations!;
    const request = captureOf(held);
    const lost = await cut.capture(request);
    assert.equal(lost.kind, 'indeterminate', JSON.stringify(lost));
    await nothing.close();
    const refused = await cut.capture(request);
    assert.equal(refused.kind, 'retryable', JSON.stringify(refused));
    assert.deepEqual(await authorizations.capture(request), { kind: 'captured', amountMinor: 8800 });
    assert.deepEqual(await taken(held.outTradeNo), [8800]);
  });
});
