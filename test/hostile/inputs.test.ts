/**
 * Hostile input to the procedures: bad quantities, SKUs, keys, JSON and content types, another
 * customer's orders. Each gets a 4xx with a machine-readable reason, and changes nothing — not a row,
 * not a unit of stock, not a charge at the gateway.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { eventually, startTestStack, type ApiCustomer, type TestStack } from '@/test/support/stack';
import { leavesNoTrace } from './support';

let stack: TestStack;
let victim: ApiCustomer;
let victimOrder: { orderId: string; outTradeNo: string };

before(async () => {
  stack = await startTestStack();
  victim = stack.customer();
  victimOrder = await victim.createOrder();
});
after(async () => {
  await stack?.close();
});

const reasonOf = (response: { json: any }) => response.json?.error?.data?.reason as string | undefined;

describe('hostile input to checkout.createOrder', () => {
  const cases: [string, unknown, string][] = [
    ['quantity 0', { items: [{ sku: 'MUG-CELADON', quantity: 0 }] }, 'INVALID_INPUT'],
    ['a negative quantity', { items: [{ sku: 'MUG-CELADON', quantity: -5 }] }, 'INVALID_INPUT'],
    ['a fractional quantity', { items: [{ sku: 'MUG-CELADON', quantity: 1.5 }] }, 'INVALID_INPUT'],
    ['a quantity over 99', { items: [{ sku: 'MUG-CELADON', quantity: 100 }] }, 'INVALID_INPUT'],
    ['a quantity as a string', { items: [{ sku: 'MUG-CELADON', quantity: '1' }] }, 'INVALID_INPUT'],
    ['an unknown SKU', { items: [{ sku: 'NO-SUCH-THING', quantity: 1 }] }, 'UNKNOWN_SKU'],
    ['a 1,000-character SKU', { items: [{ sku: 'X'.repeat(1000), quantity: 1 }] }, 'INVALID_INPUT'],
    ['a SQL-looking SKU', { items: [{ sku: "MUG'; drop table orders; --", quantity: 1 }] }, 'UNKNOWN_SKU'],
    [
      'one SKU twice',
      {
        items: [
          { sku: 'MUG-CELADON', quantity: 1 },
          { sku: 'MUG-CELADON', quantity: 1 },
        ],
      },
      'DUPLICATE_SKU',
    ],
    ['21 lines', { items: Array.from({ length: 21 }, (_, i) => ({ sku: `S${i}`, quantity: 1 })) }, 'INVALID_INPUT'],
    ['no lines', { items: [] }, 'INVALID_INPUT'],
    ['items not an array', { items: { sku: 'MUG-CELADON', quantity: 1 } }, 'INVALID_INPUT'],
    ['null', null, 'INVALID_INPUT'],
    ['a prototype-polluting key', JSON.parse('{"items":[{"sku":"MUG-CELADON","quantity":1}],"__proto__":{"admin":true}}'), 'none'],
  ];
  for (const [name, input, reason] of cases) {
    it(`${name} → 4xx ${reason === 'none' ? '(or accepted as plain data)' : reason}, nothing changed`, async () => {
      const customer = stack.customer();
      await customer.query('checkout.products');
      if (reason === 'none') {
        // Extra keys are stripped by validation: the order is made, and nothing is polluted.
        const response = await customer.mutate('checkout.createOrder', input);
        assert.equal(response.status, 201);
        assert.equal(({} as { admin?: boolean }).admin, undefined);
        return;
      }
      const response = await leavesNoTrace(stack, () => customer.mutate('checkout.createOrder', input));
      assert.ok(response.status >= 400 && response.status < 500, `${response.status} ${response.text}`);
      assert.equal(reasonOf(response), reason);
    });
  }

  it('a body that is not JSON → 400, nothing changed', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const response = await leavesNoTrace(stack, () =>
      customer.send('POST', 'checkout.createOrder', { rawBody: '{"items": [', key: randomUUID() }),
    );
    assert.equal(response.status, 400);
    assert.ok(reasonOf(response));
  });

  it('a text/plain body → 4xx, nothing changed', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products');
    const response = await leavesNoTrace(stack, () =>
      customer.send('POST', 'checkout.createOrder', {
        rawBody: 'items=MUG-CELADON',
        key: randomUUID(),
        headers: { 'content-type': 'text/plain' },
      }),
    );
    assert.ok(response.status >= 400 && response.status < 500, `${response.status}`);
  });

  for (const [name, key] of [
    ['no key', null],
    ['an empty key', ''],
    ['a 256-character key', 'k'.repeat(256)],
    ['a key with non-ASCII', '幂等-key'],
  ] as const) {
    it(`${name} → 400, nothing changed`, async () => {
      const customer = stack.customer();
      await customer.query('checkout.products');
      const response = await leavesNoTrace(stack, async () => {
        if (key === '幂等-key') {
          // fetch refuses a non-ByteString header; send it percent-encoded as a client would have to.
          return customer.send('POST', 'checkout.createOrder', {
            input: { items: [{ sku: 'MUG-CELADON', quantity: 1 }] },
            key: `${encodeURIComponent(key)}\u00a0x`,
          });
        }
        return customer.send('POST', 'checkout.createOrder', { input: { items: [{ sku: 'MUG-CELADON', quantity: 1 }] }, key });
      });
      assert.equal(response.status, 400, response.text);
      assert.match(String(reasonOf(response)), /^IDEMPOTENCY_KEY_/);
    });
  }
});

describe('hostile input to checkout.pay and the order views', () => {
  it("another customer's order: pay, order and timeline all 404, and nothing is charged", async () => {
    const attacker = stack.customer();
    await attacker.query('checkout.products');
    await leavesNoTrace(stack, async () => {
      assert.equal((await attacker.pay(victimOrder.orderId, { buyer: 'ok' })).status, 404);
      assert.equal((await attacker.query('checkout.order', { orderId: victimOrder.orderId })).status, 404);
      assert.equal((await attacker.query('checkout.timeline', { orderId: victimOrder.orderId })).status, 404);
    });
  });

  for (const [name, input] of [
    ['an unknown gateway', { gateway: 'paypal' }],
    ['an unknown test buyer', { gateway: 'alipay', buyer: 'rich' }],
    ['an orderId that is not a UUID', { gateway: 'alipay', orderId: "1' or '1'='1" }],
    ['an order that does not exist', { gateway: 'alipay', orderId: randomUUID() }],
  ] as const) {
    it(`pay with ${name} → 4xx, nothing changed`, async () => {
      const response = await leavesNoTrace(stack, () => victim.mutate('checkout.pay', { orderId: victimOrder.orderId, ...input }));
      assert.ok(response.status === 400 || response.status === 404, `${response.status} ${response.text}`);
      assert.ok(reasonOf(response));
    });
  }

  it('after all of it, the victim pays their order once', async () => {
    const paid = await victim.pay(victimOrder.orderId, { buyer: 'ok' });
    assert.equal(paid.status, 201);
    await eventually(async () => ((await stack.succeededCharges(victimOrder.outTradeNo)).length === 1 ? true : undefined));
  });
});
