/**
 * The sandbox's Stripe limits a merchant meets before anything is charged: the minimum charge amount
 * per currency (400 amount_too_small) and how an invalid API key is shown back in the 401 (masked,
 * whatever its length). Driven with the official SDK. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/stripe-limits.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { stripeModule } from '@/sandbox/stripe';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');
const databaseUrl: string = DATABASE_URL;

let sandbox: RunningSandbox;
let stripe: Stripe;

function client(key: string): Stripe {
  const { hostname, port } = new URL(sandbox.url);
  return new Stripe(key, { host: hostname, port, protocol: 'http', maxNetworkRetries: 0 });
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  const res = await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' });
  stripe = client(((await res.json()) as { secretKey: string }).secretKey);
});
after(async () => {
  await sandbox.close();
});

async function failure(promise: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof Stripe.errors.StripeError, String(err));
    return err;
  }
  assert.fail('expected the request to fail');
}

const create = (amount: number, currency: string) =>
  stripe.paymentIntents.create({ amount, currency, allowed_payment_method_types: ['card'] });

describe('minimum charge amounts', () => {
  for (const [currency, minimum, message] of [
    ['usd', 50, 'Amount must be at least $0.50 usd'],
    ['eur', 50, 'Amount must be at least €0.50 eur'],
    ['gbp', 30, 'Amount must be at least £0.30 gbp'],
    ['jpy', 50, 'Amount must be at least ¥50 jpy'],
    ['hkd', 400, 'Amount must be at least $4.00 hkd'],
    ['sgd', 50, 'Amount must be at least $0.50 sgd'],
    ['thb', 1000, 'Amount must be at least ฿10.00 thb'],
  ] as const) {
    it(`refuses ${minimum - 1} ${currency} with amount_too_small and takes ${minimum}`, async () => {
      const refused = await failure(create(minimum - 1, currency));
      assert.equal(refused.statusCode, 400);
      assert.equal(refused.type, 'StripeInvalidRequestError');
      assert.equal(refused.code, 'amount_too_small');
      assert.equal(refused.param, 'amount');
      assert.equal(refused.message, message);
      assert.equal((await create(minimum, currency)).amount, minimum);
    });
  }

  it('holds an update to the minimum of the currency it ends in', async () => {
    const intent = await create(100, 'usd');
    assert.equal((await failure(stripe.paymentIntents.update(intent.id, { amount: 49 }))).code, 'amount_too_small');
    assert.equal((await failure(stripe.paymentIntents.update(intent.id, { currency: 'hkd' }))).code, 'amount_too_small');
    assert.equal((await stripe.paymentIntents.update(intent.id, { amount: 400, currency: 'hkd' })).amount, 400);
  });

  it("applies no minimum to a currency Stripe's table does not list (CNY): the shop's prices are far above any", async () => {
    assert.equal((await create(1, 'cny')).amount, 1);
  });
});

describe('an invalid API key in the 401', () => {
  const shown = async (key: string) => {
    const refused = await failure(client(key).paymentIntents.list());
    assert.equal(refused.statusCode, 401);
    return refused.message.replace(/^Invalid API Key provided: /, '');
  };

  it("shows a long key's kind and last four characters only", async () => {
    const key = `sk_test_51${'Q'.repeat(90)}wxyz`;
    assert.equal(await shown(key), `sk_test_${'*'.repeat(key.length - 12)}wxyz`);
    assert.equal(await shown('sk_live_abcdefghijklmnop'), `sk_live_${'*'.repeat(12)}mnop`);
  });

  for (const key of ['sk_test_abc', 'sk_test_1234567', 'abc', 'x', 'undefined', 'not-a-key']) {
    it(`never echoes the short key ${JSON.stringify(key)}`, async () => {
      const masked = await shown(key);
      assert.equal(masked.length, key.length);
      const secret = key.replace(/^sk_test_/, '');
      assert.ok(!masked.includes(secret.slice(-3)), `${masked} shows part of ${key}`);
    });
  }
});
