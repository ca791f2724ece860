/**
 * The sandbox's pages for people: its front page says what it is and links its pages, and the ledger
 * reads as a table per order — a charge, a refund-free order's money kept — while /ledger stays JSON.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startTestStack, type TestStack } from '@/test/support/stack';

let stack: TestStack;

before(async () => {
  stack = await startTestStack();
});
after(async () => {
  await stack?.close();
});

describe('the sandbox’s pages', () => {
  it('answers its root with a page that links the ledger, the phone and the credentials, not a JSON 404', async () => {
    const response = await fetch(`${stack.sandboxUrl}/`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/html/);
    const html = await response.text();
    for (const link of ['/sandbox/ledger', '/sandbox/scan', '/sandbox/credentials', '/ledger'])
      assert.ok(html.includes(`href="${link}"`), link);
  });

  it('shows an order’s charge and the money kept in the HTML ledger, and keeps /ledger as JSON', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder([{ sku: 'TEA-LONGJING', quantity: 2 }]);
    assert.equal((await customer.pay(order.orderId, { gateway: 'wechatpay', buyer: 'ok' })).status, 201);

    const page = await fetch(`${stack.sandboxUrl}/sandbox/ledger?outTradeNo=${order.outTradeNo}`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    const html = await page.text();
    assert.ok(html.includes(order.outTradeNo));
    assert.ok(html.includes('wechatpay'));
    assert.match(html, /<strong>336\.00 CNY<\/strong>/, 'kept: one charge of 2 × 168.00, nothing refunded');
    assert.match(html, /扣款 charge<\/td><td>succeeded/);

    const json = await fetch(`${stack.sandboxUrl}/ledger?outTradeNo=${order.outTradeNo}`);
    assert.match(json.headers.get('content-type') ?? '', /^application\/json/);
    assert.equal(((await json.json()) as { charges: unknown[] }).charges.length, 1);
  });

  it('escapes what it shows: a filter is text, never markup', async () => {
    const html = await (await fetch(`${stack.sandboxUrl}/sandbox/ledger?outTradeNo=${encodeURIComponent('<script>x</script>')}`)).text();
    assert.ok(!html.includes('<script>x</script>'));
    assert.ok(html.includes('&lt;script&gt;'));
  });
});
