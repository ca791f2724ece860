/**
 * The 2C2P buyer step end to end through the app's own handlers (test/support/stack.ts: real
 * PostgreSQL, the PSP sandbox, tRPC and the webhook route on a real socket): checkout.pay without a
 * test buyer answers 202 with a redirect to the hosted payment page; the buyer pays there like a
 * browser; the backend notification completes the order.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/twoc2p-checkout.test.ts
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { TWOC2P_TEST_CARDS } from '@/sandbox/twoc2p';
import { returnToken } from '@/server/checkout/return-address';
import { waitFor } from '@/test/support/harness';
import { startTestStack, type TestStack } from '@/test/support/stack';
import { frontendReturnOf, payOnHostedPage } from '@/test/sandbox/twoc2p-hosted-page';

let stack: TestStack;

before(async () => {
  stack = await startTestStack();
});

after(async () => {
  await stack.close();
});

async function orderStatus(orderId: string): Promise<string> {
  return (await stack.sql<{ status: string }[]>`select status from orders where id = ${orderId}`)[0]!.status;
}

describe('checkout.pay with 2C2P’s hosted payment page', () => {
  it('answers 202 with the page, replays it for the same key, and the order is paid by the notification after the buyer pays there', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    const key = randomUUID();

    // 1. No test buyer: the buyer's own step.
    const first = await customer.pay(order.orderId, { gateway: '2c2p', buyer: null, key });
    assert.equal(first.status, 202, first.text);
    const data = first.json.result.data as { status: string; action: { kind: string; url: string } };
    assert.equal(data.status, 'awaiting_buyer');
    assert.equal(data.action.kind, 'redirect');
    assert.ok(data.action.url.startsWith(`${stack.sandboxUrl}/payment/4.3/hosted/`), data.action.url);
    const replay = await customer.pay(order.orderId, { gateway: '2c2p', buyer: null, key });
    assert.equal(replay.headers.get('idempotency-replayed'), 'true');
    assert.equal(replay.text, first.text);
    assert.deepEqual((await stack.ledger(order.outTradeNo)).charges, []);

    // 2. A decline on the page leaves the order waiting; the ok card pays.
    assert.equal((await payOnHostedPage(data.action.url, TWOC2P_TEST_CARDS.insufficient_funds)).status, 402);
    assert.notEqual(await orderStatus(order.orderId), 'paid');
    const paid = await payOnHostedPage(data.action.url, TWOC2P_TEST_CARDS.ok);
    assert.equal(paid.status, 200, paid.html);

    // 3. The notification completes the order; the browser is sent back to the app's return URL.
    await waitFor('the order to be paid', async () => ((await orderStatus(order.orderId)) === 'paid' ? true : undefined));
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    const { form, response } = frontendReturnOf(paid.html, paid.url);
    const token = returnToken('test-session-secret', order.orderId);
    assert.equal(form.action, `${stack.appUrl}/api/return?orderId=${encodeURIComponent(order.orderId)}&t=${token}`);
    assert.equal(response.invoiceNo, order.outTradeNo);

    // 3b. The return link's token shows the order to a browser without the session; a wrong one shows nothing.
    const stranger = stack.customer();
    const returned = await stranger.query('checkout.returnedOrder', { orderId: order.orderId, token });
    assert.equal(returned.status, 200, returned.text);
    assert.equal(returned.json.result.data.status, 'paid');
    assert.equal(returned.json.result.data.outTradeNo, order.outTradeNo);
    const forged = await stranger.query('checkout.returnedOrder', {
      orderId: order.orderId,
      token: `${token.slice(0, -1)}A` === token ? `${token.slice(0, -1)}B` : `${token.slice(0, -1)}A`,
    });
    assert.equal(forged.status, 404, forged.text);
    const otherOrder = await stranger.query('checkout.returnedOrder', { orderId: randomUUID(), token });
    assert.equal(otherOrder.status, 404, otherOrder.text);

    // 4. Paying again answers the paid order, with no call to any gateway.
    const again = await customer.pay(order.orderId, { gateway: '2c2p', buyer: null });
    assert.equal(again.status, 201, again.text);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });
});
