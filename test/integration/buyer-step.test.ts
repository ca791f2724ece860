/**
 * checkout.pay without a sandbox test buyer: the gateway's trade waits for the buyer's own step (a QR
 * code, a hosted page, a card), the answer is 202 awaiting_buyer (stored and replayed like any other),
 * and the order completes by the gateway's notification — or, when every notification is lost, by the
 * reconciler asking the gateway. Every gateway, through the app's HTTP API, the sandbox and real
 * PostgreSQL; the buyer is played by the sandbox's buyer tool (the browser tests use the real pages).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { closeOpenTrades } from '@/server/checkout/trades';
import { reconcilePayments } from '@/server/jobs/reconciler';
import type { BuyerStep, GatewayId } from '@/server/payments/gateway';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

let stack: TestStack;
before(async () => {
  stack = await startTestStack();
});
after(async () => {
  await stack?.close();
});

/** Each gateway's buyer steps, the default first, as the adapters declare them. */
const STEPS: Record<GatewayId, BuyerStep[]> = {
  alipay: ['qr', 'redirect'],
  wechatpay: ['qr'],
  stripe: ['card'],
  '2c2p': ['redirect'],
};

async function buyerPays(gateway: GatewayId, outTradeNo: string, buyer = 'ok') {
  return fetch(`${stack.sandboxUrl}/sandbox/${gateway}/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ outTradeNo, buyer }),
  });
}

async function orderStatus(orderId: string) {
  return (await stack.sql<{ status: string }[]>`select status from orders where id = ${orderId}`)[0]!.status;
}

async function openTrades(orderId: string) {
  return (await stack.sql<{ gateway: string }[]>`select gateway from order_trades where order_id = ${orderId} and status = 'open'`).map(
    (t) => t.gateway,
  );
}

for (const [gateway, steps] of Object.entries(STEPS) as [GatewayId, BuyerStep[]][]) {
  describe(`the buyer's own step: ${gateway}`, () => {
    it(`offers ${steps.join(' and ')} (${steps[0]} by default)`, () => {
      assert.deepEqual([...stack.services.gateways[gateway]!.buyerSteps], steps);
      assert.equal(stack.services.gateways[gateway]!.hasTestBuyers, true, 'the sandbox names test buyers');
    });

    for (const step of steps) {
      it(`${step}: 1. answers 202 awaiting_buyer with the ${step} action, replays it, and charges nothing yet`, async () => {
        const customer = stack.customer();
        const order = await customer.createOrder();
        const key = randomUUID();
        const first = await customer.pay(order.orderId, { gateway, buyer: null, buyerStep: step, key });
        assert.equal(first.status, 202, first.text);
        const body = first.json.result.data;
        assert.equal(body.status, 'awaiting_buyer');
        assert.equal(body.orderId, order.orderId);
        assert.equal(body.gateway, gateway);
        assert.equal(body.amountMinor, order.amountMinor);
        assert.equal(body.action.kind, step);
        if (step === 'qr') assert.match(body.action.qrCode, gateway === 'wechatpay' ? /^weixin:\/\/wxpay\/bizpayurl\?pr=/ : /^https?:\/\//);
        if (step === 'redirect') assert.match(body.action.url, /^https?:\/\//);
        if (step === 'card') {
          assert.match(body.action.clientSecret, /^pi_.+_secret_.+/);
          assert.match(body.action.publishableKey, /^pk_test_/);
          assert.match(body.action.scriptUrl, /^https?:\/\/.+\/v3\/$/);
        }

        const replay = await customer.pay(order.orderId, { gateway, buyer: null, buyerStep: step, key });
        assert.equal(replay.status, 202);
        assert.equal(replay.headers.get('idempotency-replayed'), 'true');
        assert.equal(replay.text, first.text);

        // Nothing is in flight on our side: the order is payable, its trade open for the buyer.
        assert.equal(await orderStatus(order.orderId), 'awaiting_payment');
        assert.deepEqual(await openTrades(order.orderId), [gateway]);
        assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 0);
      });

      it(`${step}: 2. the buyer pays on their step; the notification settles the order once`, async () => {
        const customer = stack.customer();
        const order = await customer.createOrder();
        const answer = await customer.pay(order.orderId, { gateway, buyer: null, buyerStep: step });
        assert.equal(answer.status, 202, answer.text);
        // A gateway's page exists once the buyer's browser opens it (Alipay's cashier creates the trade).
        if (step === 'redirect') assert.equal((await fetch(answer.json.result.data.action.url)).status, 200);

        const paid = await buyerPays(gateway, order.outTradeNo);
        assert.equal(paid.status, 200, await paid.text());
        await eventually(async () => ((await orderStatus(order.orderId)) === 'paid' ? true : undefined), 15_000, 'the order paid');
        const view = await customer.query('checkout.order', { orderId: order.orderId });
        assert.equal(view.json.result.data.status, 'paid');
        assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);

        // A new pay request finds the order paid and answers with its payment, calling no gateway.
        const again = await customer.pay(order.orderId, { gateway, buyer: null, buyerStep: step });
        assert.equal(again.status, 201, again.text);
        assert.equal(again.json.result.data.payment.gateway, gateway);
        assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'still one charge');
      });
    }

    it('3. a decline on the buyer step leaves the trade payable; the next try pays once', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      assert.equal((await customer.pay(order.orderId, { gateway, buyer: null })).status, 202);
      const declined = await buyerPays(gateway, order.outTradeNo, 'insufficient_funds');
      assert.ok(declined.status === 200 || declined.status === 402, `${declined.status} ${await declined.text()}`);
      assert.equal(await orderStatus(order.orderId), 'awaiting_payment');
      assert.equal((await buyerPays(gateway, order.outTradeNo)).status, 200);
      await eventually(async () => ((await orderStatus(order.orderId)) === 'paid' ? true : undefined), 15_000, 'the order paid');
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    it('4. switching to another gateway closes the waiting trade first: the buyer can no longer pay it', async () => {
      const other: GatewayId = gateway === 'alipay' ? 'wechatpay' : 'alipay';
      const customer = stack.customer();
      const order = await customer.createOrder();
      assert.equal((await customer.pay(order.orderId, { gateway, buyer: null })).status, 202);
      const elsewhere = await customer.pay(order.orderId, { gateway: other, buyer: 'ok' });
      assert.equal(elsewhere.status, 201, elsewhere.text);
      assert.equal(elsewhere.json.result.data.payment.gateway, other);

      const late = await buyerPays(gateway, order.outTradeNo);
      assert.equal(late.status, 409, `the abandoned trade took money: ${await late.text()}`);
      const charges = await stack.succeededCharges(order.outTradeNo);
      assert.deepEqual(
        charges.map((c) => c.gateway),
        [other],
      );
    });

    it('5. every notification lost: the reconciler asks the gateway and settles the order', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      assert.equal((await customer.pay(order.orderId, { gateway, buyer: null })).status, 202);
      await stack.sandboxFault({ gateway, action: 'lose_notifications', times: 1000 });
      try {
        assert.equal((await buyerPays(gateway, order.outTradeNo)).status, 200);
        await new Promise((resolve) => setTimeout(resolve, 300));
        assert.equal(await orderStatus(order.orderId), 'awaiting_payment', 'no notification got through');
        const summary = await reconcilePayments(stack.services, { minAgeMs: 0 });
        assert.ok(summary.openTradesSettled >= 1, JSON.stringify(summary));
        assert.equal(await orderStatus(order.orderId), 'paid');
        assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
      } finally {
        await fetch(`${stack.sandboxUrl}/sandbox/faults`, { method: 'DELETE' });
      }
    });
  });
}

describe('the buyer step: refusals that change nothing', () => {
  it('a test buyer against a gateway with no test buyers (a real one) → 400 TEST_BUYER_NOT_AVAILABLE, no call', async () => {
    const real = stack.services.gateways.alipay!;
    let calls = 0;
    stack.services.gateways.alipay = {
      ...real,
      hasTestBuyers: false,
      charge: (request) => {
        calls++;
        return real.charge(request);
      },
    };
    try {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const refused = await customer.pay(order.orderId, { buyer: 'ok' });
      assert.equal(refused.status, 400, refused.text);
      assert.equal(refused.json.error.data.reason, 'TEST_BUYER_NOT_AVAILABLE');
      assert.equal(calls, 0);
      assert.equal(await orderStatus(order.orderId), 'awaiting_payment');
      assert.deepEqual(await openTrades(order.orderId), []);
      assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 0);
    } finally {
      stack.services.gateways.alipay = real;
    }
  });

  for (const [name, input, reason] of [
    ['a step the gateway does not offer', { gateway: 'wechatpay', buyerStep: 'card' }, 'BUYER_STEP_NOT_AVAILABLE'],
    ['a test buyer and a step at once', { gateway: 'alipay', buyer: 'ok', buyerStep: 'qr' }, 'INVALID_INPUT'],
    ['an unknown step', { gateway: 'alipay', buyerStep: 'fax' }, undefined],
  ] as const) {
    it(`${name} → 400, nothing changed`, async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const refused = await customer.mutate('checkout.pay', { orderId: order.orderId, ...input });
      assert.equal(refused.status, 400, refused.text);
      if (reason) assert.equal(refused.json.error.data.reason, reason);
      assert.equal(await orderStatus(order.orderId), 'awaiting_payment');
      assert.deepEqual(await openTrades(order.orderId), []);
    });
  }
});

describe('a payment a close reversed', () => {
  it('Alipay: the success notification of a payment trade.cancel refunded (payment_reversed) does not pay the order, even after a later close', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    assert.equal((await customer.pay(order.orderId, { gateway: 'alipay', buyer: null })).status, 202);
    // 1. The buyer scans and pays at the very instant our close finds no trade and cancels: Alipay's
    //    cancel refunds the payment, and the close answers in doubt. Its notification is delayed.
    await stack.sandboxFault({ gateway: 'alipay', action: 'lose_notifications', times: 1000 });
    try {
      assert.equal((await buyerPays('alipay', order.outTradeNo)).status, 200);
      const credentials = (await (await fetch(`${stack.sandboxUrl}/sandbox/credentials`)).json()) as {
        alipay: { appId: string; appPrivateKey: string; alipayPublicKey: string; gateway: string };
      };
      const { AlipaySdk } = await import('alipay-sdk');
      const sdk = new AlipaySdk({
        appId: credentials.alipay.appId,
        privateKey: credentials.alipay.appPrivateKey,
        alipayPublicKey: credentials.alipay.alipayPublicKey,
        gateway: credentials.alipay.gateway,
      });
      const cancelled = (await sdk.exec('alipay.trade.cancel', { bizContent: { out_trade_no: order.outTradeNo } })) as { action?: string };
      assert.equal(cancelled.action, 'refund');
      // What the checkout's close records when the cancel answers action=refund (CloseOutcome payment_reversed).
      await stack.sql`update order_trades set payment_reversed_at = now(), last_close_error = 'PAYMENT_REVERSED: the cancel refunded a payment'
                       where order_id = ${order.orderId} and gateway = 'alipay'`;
    } finally {
      await fetch(`${stack.sandboxUrl}/sandbox/faults`, { method: 'DELETE' });
    }
    // 1b. A later close confirms the trade closed; the trade still remembers the reversed payment.
    const ref = { id: order.orderId, outTradeNo: order.outTradeNo, amountMinor: order.amountMinor, currency: order.currency };
    assert.deepEqual(await closeOpenTrades(stack.services, ref), { kind: 'clear' });
    const [trade] = await stack.sql`select status, payment_reversed_at from order_trades where order_id = ${order.orderId}`;
    assert.equal(trade!.status, 'closed');
    assert.ok(trade!.payment_reversed_at, 'a later close does not forget the reversed payment');

    // 2. The payment's TRADE_SUCCESS notification arrives late, genuinely signed.
    const response = await fetch(`${stack.sandboxUrl}/sandbox/alipay/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo: order.outTradeNo, overrides: { trade_status: 'TRADE_SUCCESS' } }),
    });
    assert.equal(response.status, 200, await response.clone().text());
    const deliveries = ((await response.json()) as { deliveries: { status: number | null; body: string | null }[] }).deliveries;
    assert.deepEqual(
      deliveries.map((d) => d.body),
      ['success'],
      'acknowledged: there is nothing to settle',
    );
    // 3. The money went back, so the order is not paid by it.
    assert.equal(await orderStatus(order.orderId), 'awaiting_payment');
    const ledger = await stack.ledger(order.outTradeNo);
    assert.equal(ledger.charges.filter((c) => c.status === 'succeeded').length, 1);
    assert.equal(ledger.refunds.filter((r) => r.status === 'succeeded').length, 1);
  });
});
