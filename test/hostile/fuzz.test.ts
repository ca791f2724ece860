/**
 * A fuzzer over what a stranger controls: the procedures' inputs, the Idempotency-Key and cookie
 * headers, and the bodies and signature headers of the four webhooks. Properties: never a 5xx, and a
 * refused request (any 4xx) changes nothing — not a row, not a unit of stock, not a charge.
 *
 * FUZZ_RUNS cases per property (default 60 in `npm test`); `npm run fuzz` runs 2,000 each and
 * prints the figures. A failure prints fast-check's seed and the shrunk case: replay it with
 * FUZZ_SEED=<seed>.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { GATEWAY_IDS } from '@/server/payments/gateway-ids';
import { startTestStack, type TestStack } from '@/test/support/stack';
import { footprint } from './support';

const RUNS = Number(process.env.FUZZ_RUNS ?? 60);
const SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined;

let stack: TestStack;
const figures: Record<string, { cases: number; statuses: Record<number, number> }> = {};

before(async () => {
  stack = await startTestStack();
});
after(async () => {
  if (process.env.FUZZ_REPORT === '1') {
    for (const [name, f] of Object.entries(figures)) {
      console.log(`fuzz ${name}: ${f.cases} cases; statuses ${JSON.stringify(f.statuses)}`);
    }
  }
  await stack?.close();
});

function tally(property: string, status: number) {
  const f = (figures[property] ??= { cases: 0, statuses: {} });
  f.cases++;
  f.statuses[status] = (f.statuses[status] ?? 0) + 1;
}

/** JSON that looks a little like what the procedures expect, and a lot like what they do not. */
const sku = fc.oneof(fc.constantFrom('MUG-CELADON', 'TEA-LONGJING', 'MOONCAKE-BOX'), fc.string({ maxLength: 80 }));
const quantity = fc.oneof(fc.integer({ min: -5, max: 120 }), fc.double(), fc.string({ maxLength: 5 }), fc.constant(null));
const line = fc.oneof(fc.record({ sku, quantity }), fc.anything());
const createOrderInput = fc.oneof(
  fc.record({ items: fc.array(line, { maxLength: 25 }) }),
  fc.record({ items: fc.anything() }),
  fc.anything(),
);
const payInput = fc.record(
  {
    orderId: fc.oneof(fc.uuid(), fc.string({ maxLength: 40 }), fc.anything()),
    gateway: fc.oneof(fc.constantFrom(...GATEWAY_IDS), fc.string({ maxLength: 12 })),
    buyer: fc.oneof(fc.constantFrom('ok', 'insufficient_funds', 'account_restricted'), fc.string({ maxLength: 12 })),
  },
  { requiredKeys: [] },
);
/**
 * Header values an HTTP client can send: tab, visible ASCII and the bytes 0x80–0xFF (Node's parser
 * refuses other control characters before the app sees them, and so does fetch before sending).
 */
const headerByte = fc.oneof(
  fc.constant('\t'),
  fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
  fc.integer({ min: 0x80, max: 0xff }).map((c) => String.fromCharCode(c)),
);
const headerValue = fc.string({ unit: headerByte, maxLength: 300 });

/** Cookie headers: name=value pairs with stray escapes and our own cookie's name among the others. */
const cookieHeader = fc.oneof(
  headerValue,
  fc
    .array(
      fc.tuple(
        fc.oneof(fc.constantFrom('payonce_session', '__Host-payonce_session', 'theme'), fc.stringMatching(/^[A-Za-z_]{1,10}$/)),
        fc.oneof(
          fc.stringMatching(/^[%0-9A-Fa-f.=-]{0,12}$/),
          headerValue.filter((v) => !v.includes(';')),
        ),
      ),
      { maxLength: 4 },
    )
    .map((pairs) => pairs.map(([name, value]) => `${name}=${value}`).join('; ')),
);

const params = (runs = RUNS) => ({ numRuns: runs, ...(SEED !== undefined ? { seed: SEED } : {}) });

describe('fuzzing the procedures', () => {
  it('checkout.createOrder: arbitrary input and Idempotency-Key → never 5xx; a 4xx changes nothing', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    await fc.assert(
      fc.asyncProperty(createOrderInput, fc.oneof(fc.uuid(), headerValue), async (input, key) => {
        const before = await footprint(stack);
        const response = await customer.send('POST', 'checkout.createOrder', { rawBody: JSON.stringify(input) ?? '', key });
        tally('createOrder', response.status);
        assert.ok(response.status < 500, `${response.status} ${response.text}`);
        if (response.status >= 400) assert.deepEqual(await footprint(stack), before);
      }),
      params(),
    );
  });

  it('checkout.pay: arbitrary input → never 5xx; a 4xx changes nothing', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    await fc.assert(
      fc.asyncProperty(payInput, async (input) => {
        // Only ever someone else's order or garbage: this customer's own order would really be paid.
        const body = { ...input, ...(input.orderId === order.orderId ? { orderId: randomUUID() } : {}) };
        const before = await footprint(stack);
        const response = await customer.send('POST', 'checkout.pay', { input: body, key: randomUUID() });
        tally('pay', response.status);
        assert.ok(response.status < 500, `${response.status} ${response.text}`);
        if (response.status >= 400) assert.deepEqual(await footprint(stack), before);
      }),
      params(),
    );
  });

  it('queries with arbitrary input and cookies → never 5xx, nothing changed', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('checkout.order', 'checkout.timeline', 'checkout.products', 'checkout.recentOrders', 'checkout.returnedOrder'),
        fc.anything(),
        cookieHeader,
        async (procedure, input, cookie) => {
          const before = await footprint(stack);
          const url = `${stack.appUrl}/api/trpc/${procedure}?input=${encodeURIComponent(JSON.stringify(input) ?? '')}`;
          const response = await fetch(url, { headers: { cookie } });
          tally('queries', response.status);
          assert.ok(response.status < 500, `${response.status} ${await response.text()}`);
          assert.deepEqual(await footprint(stack), before);
        },
      ),
      params(),
    );
  });
});

describe('fuzzing the webhooks', () => {
  const signatureHeaders = fc.record(
    {
      'stripe-signature': headerValue,
      'wechatpay-timestamp': headerValue,
      'wechatpay-nonce': headerValue,
      'wechatpay-signature': headerValue,
      'wechatpay-serial': headerValue,
      'content-type': fc.constantFrom('application/json', 'application/x-www-form-urlencoded', 'text/plain'),
    },
    { requiredKeys: [] },
  );
  const body = fc.oneof(
    fc.string({ maxLength: 2000 }),
    fc.anything().map((value) => JSON.stringify(value) ?? ''),
    fc
      .dictionary(
        fc.constantFrom('out_trade_no', 'trade_status', 'total_amount', 'sign', 'sign_type', 'notify_id', 'app_id'),
        fc.string({ maxLength: 40 }),
      )
      .map((fields) => new URLSearchParams(fields).toString()),
    fc.string({ maxLength: 300 }).map((payload) => JSON.stringify({ payload })),
  );

  it('the four webhooks: arbitrary bodies and signature headers → never 5xx, never acknowledged, nothing recorded', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...GATEWAY_IDS), body, signatureHeaders, async (gateway, raw, headers) => {
        const before = await footprint(stack);
        const response = await fetch(`${stack.appUrl}/api/webhooks/${gateway}`, { method: 'POST', headers, body: raw });
        const text = await response.text();
        tally(`webhook.${gateway}`, response.status);
        assert.ok(response.status < 500, `${response.status} ${text}`);
        // Forged or garbled: never the gateway's acknowledgement (Alipay's `success`, a 2xx).
        assert.ok(response.status >= 400, `acknowledged a forgery: ${response.status} ${text}`);
        assert.deepEqual(await footprint(stack), before);
      }),
      params(),
    );
  });
});
