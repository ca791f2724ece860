/**
 * The failure matrix, every gateway × every failure case, in-process and cheap: an error after the
 * claim, a charge that was never committed, a gateway timing out after charging, an answer lost
 * after the commit, a process dying between the charge and the commit, a double click, two tabs (on
 * one gateway and on two) and a key reused with a changed request. Each ends with the ground truth:
 * exactly one successful charge in the sandbox's ledger, and the right HTTP answers on the way.
 * The browser drills (e2e/drills/failure-modes.spec.ts, customer-behaviour.spec.ts) keep each case
 * once, to prove the page's side of it; this file carries the full matrix.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, it } from 'node:test';
import { GATEWAY_IDS, type GatewayId } from '@/server/payments/gateway-ids';
import { MAX_TRIES_PER_GATEWAY_CALL, type ChargeRequest, type PaymentGateway } from '@/server/payments/gateway';
import { eventually, startTestStack, type ApiResponse, type TestStack } from '@/test/support/stack';

/** Per try: a gateway that hangs after charging is seen to time out quickly. */
const GATEWAY_TIMEOUT_MS = 500;
/** Short, so that a dead request's lease runs out within the case; still longer than one gateway call can take. */
const LEASE_MS = 1600;
assert.ok(LEASE_MS > GATEWAY_TIMEOUT_MS * MAX_TRIES_PER_GATEWAY_CALL, 'the lease outlasts a gateway call');

let stack: TestStack;
before(async () => {
  stack = await startTestStack({ faults: true, gatewayTimeoutMs: GATEWAY_TIMEOUT_MS, idempotency: { leaseMs: LEASE_MS } });
});
after(async () => {
  await stack?.close();
});
afterEach(async () => {
  // A case that failed half-way must not leave a fault armed for the next one.
  stack.faults?.clear();
  await fetch(`${stack.sandboxUrl}/sandbox/faults`, { method: 'DELETE' });
});

async function keyRow(key: string) {
  const [row] = await stack.sql<{ recovery_point: string; completed_at: Date | null; lease_token: string | null }[]>`
    select recovery_point, completed_at, lease_token from idempotency_keys where key = ${key}`;
  return row;
}
async function paymentsFor(orderId: string): Promise<number> {
  const [row] = await stack.sql<{ n: number }[]>`
    select count(*)::int as n from payments where order_id = ${orderId} and status = 'succeeded'`;
  return row!.n;
}
function reason(response: ApiResponse): string | undefined {
  return (response.json as { error?: { data?: { reason?: string } } } | undefined)?.error?.data?.reason;
}

for (const [index, gateway] of GATEWAY_IDS.entries()) {
  const next: GatewayId = GATEWAY_IDS[(index + 1) % GATEWAY_IDS.length]!;

  describe(`failure matrix: ${gateway}`, () => {
    it('1. error after the claim: 503 INJECTED_FAULT, no key left, nothing charged; the retry pays once', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      stack.faults!.arm({ point: 'after_claim', action: { kind: 'throw' }, gateway });
      const failed = await customer.pay(order.orderId, { key, gateway });
      assert.equal(failed.status, 503, failed.text);
      assert.equal(reason(failed), 'INJECTED_FAULT');
      assert.equal(await keyRow(key), undefined, 'no key is left behind');
      assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 0, 'nothing reached the gateway');
      const retry = await customer.pay(order.orderId, { key, gateway });
      assert.equal(retry.status, 201, retry.text);
      assert.equal(retry.json.result.data.payment.gateway, gateway);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    it('2. charged but not committed: 503, one charge; the key keeps attempt_started and the retry settles the same charge', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      stack.faults!.arm({ point: 'after_gateway_call', action: { kind: 'throw' }, gateway });
      const failed = await customer.pay(order.orderId, { key, gateway });
      assert.equal(failed.status, 503, failed.text);
      assert.equal(reason(failed), 'INJECTED_FAULT');
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'the money moved');
      const row = await keyRow(key);
      assert.equal(row?.recovery_point, 'attempt_started');
      assert.equal(row?.completed_at, null);
      const retry = await customer.pay(order.orderId, { key, gateway });
      assert.equal(retry.status, 201, retry.text);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'still one charge');
    });

    it('3. the gateway times out after charging: 503 PAYMENT_OUTCOME_UNKNOWN, one charge; the retry is deduped by the gateway', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      const HELD_MS = 5000;
      // The answer is held far past the timeout: undici's timers are coarse (a 400 ms timeout was seen
      // to fire ~900 ms in), and a hang-up before it is a dropped connection, which the Alipay SDK's
      // client (urllib, socketErrorRetry) retries by itself and gets "paid". Every try of the call
      // times out: the Stripe SDK retries a timeout itself (same Idempotency-Key), so with one held
      // answer its retry would be replayed and the app would never see the timeout.
      await stack.sandboxFault({
        gateway,
        action: 'timeout_after_charge',
        delayMs: HELD_MS,
        times: gateway === 'stripe' ? MAX_TRIES_PER_GATEWAY_CALL : 1,
      });
      const started = performance.now();
      const failed = await customer.pay(order.orderId, { key, gateway });
      const elapsed = performance.now() - started;
      assert.equal(failed.status, 503, failed.text);
      assert.equal(reason(failed), 'PAYMENT_OUTCOME_UNKNOWN');
      // The app gave up by its own timeout: not at once (a reset), not when the sandbox hung up.
      assert.ok(elapsed >= GATEWAY_TIMEOUT_MS && elapsed < HELD_MS, `answered after ${Math.round(elapsed)} ms`);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'the money moved');
      const retry = await customer.pay(order.orderId, { key, gateway });
      assert.equal(retry.status, 201, retry.text);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'still one charge');
    });

    it('4. the answer is lost after the commit: 503, the key completed; the retry is replayed, one charge', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      stack.faults!.arm({ point: 'after_commit', action: { kind: 'throw' }, gateway });
      const lost = await customer.pay(order.orderId, { key, gateway });
      assert.equal(lost.status, 503, lost.text);
      assert.ok((await keyRow(key))?.completed_at, 'the key completed with the payment');
      const retry = await customer.pay(order.orderId, { key, gateway });
      assert.equal(retry.status, 201, retry.text);
      assert.equal(retry.headers.get('idempotency-replayed'), 'true');
      assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 1, 'the replay never reached the gateway');
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    it('5. the process dies between the charge and the commit: 409 during the lease, 201 after it, one charge, one payment', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      const real = stack.services.gateways[gateway]!;
      // The call never returns and nothing commits. Its notifications are lost, so that the retry, not
      // the webhook, is what settles the order. (Lost at the sandbox rather than sent to another
      // notifyUrl: 2C2P refuses a retry of the same idempotencyID whose request differs.)
      await stack.sandboxFault({ gateway, action: 'lose_notifications', times: 100 });
      const dying: PaymentGateway = {
        ...real,
        charge: async (request: ChargeRequest) => {
          await real.charge(request);
          return new Promise(() => {});
        },
      };
      stack.services.gateways[gateway] = dying;
      try {
        void customer
          .send('POST', 'checkout.pay', {
            input: { orderId: order.orderId, gateway, buyer: 'ok' },
            key,
            signal: AbortSignal.timeout(1000), // the customer's connection is lost too
          })
          .catch(() => undefined);
        await eventually(
          async () => ((await stack.succeededCharges(order.outTradeNo)).length === 1 ? true : undefined),
          5000,
          'the charge',
        );
      } finally {
        stack.services.gateways[gateway] = real;
      }
      const [row] = await stack.sql<{ status: string }[]>`select status from orders where id = ${order.orderId}`;
      assert.equal(row?.status, 'paying', 'charged, and nothing committed');
      const during = await customer.pay(order.orderId, { key, gateway });
      assert.equal(during.status, 409, `the lease is still fresh: ${during.text}`);
      assert.equal(reason(during), 'REQUEST_IN_PROGRESS');
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 100));
      const retry = await customer.pay(order.orderId, { key, gateway });
      assert.equal(retry.status, 201, retry.text);
      assert.equal(retry.json.result.data.payment.outTradeNo, order.outTradeNo);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'one charge in the ledger');
      assert.equal(await paymentsFor(order.orderId), 1, 'one payment row');
    });

    it('6. double click: 10 concurrent calls with one key get 201 or 409 REQUEST_IN_PROGRESS, one answer, one charge', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder(); // takes the session cookie before the burst
      const key = randomUUID();
      const responses = await Promise.all(Array.from({ length: 10 }, () => customer.pay(order.orderId, { key, gateway })));
      for (const r of responses) {
        if (r.status === 409) assert.equal(reason(r), 'REQUEST_IN_PROGRESS');
        else assert.equal(r.status, 201, r.text);
      }
      const bodies = new Set(responses.filter((r) => r.status === 201).map((r) => JSON.stringify(r.json.result.data)));
      assert.equal(bodies.size, 1, 'one distinct answer');
      const ledger = await stack.ledger(order.outTradeNo);
      assert.equal(ledger.charges.length, 1, 'one call reached the gateway');
      assert.equal(ledger.charges[0]!.status, 'succeeded');
      assert.equal(ledger.charges[0]!.gateway, gateway);
    });

    it('7. two tabs: 6 concurrent calls with their own keys on one order get 201 or 409 ORDER_PAYMENT_IN_PROGRESS, one charge', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const responses = await Promise.all(Array.from({ length: 6 }, () => customer.pay(order.orderId, { gateway })));
      for (const r of responses) {
        if (r.status === 409) assert.equal(reason(r), 'ORDER_PAYMENT_IN_PROGRESS');
        else assert.equal(r.status, 201, r.text);
      }
      assert.ok(
        responses.some((r) => r.status === 201),
        'one tab paid',
      );
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
      assert.equal((await stack.ledger(order.outTradeNo)).charges.length, 1);
    });

    it(`8. two tabs, two gateways (${gateway} + ${next}): concurrent pays on one order, one charge across the ledger`, async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const responses = await Promise.all(
        Array.from({ length: 6 }, (_, i) => customer.pay(order.orderId, { gateway: i % 2 === 0 ? gateway : next })),
      );
      for (const r of responses) {
        if (r.status === 409) assert.equal(reason(r), 'ORDER_PAYMENT_IN_PROGRESS');
        else assert.equal(r.status, 201, r.text);
      }
      const paid = responses.filter((r) => r.status === 201);
      assert.ok(paid.length >= 1, 'one tab paid');
      assert.equal(new Set(paid.map((r) => JSON.stringify(r.json.result.data))).size, 1, 'every tab that paid sees the one payment');
      // The ledger by out_trade_no spans every gateway: the order's charges wherever they were made.
      const ledger = await stack.ledger(order.outTradeNo);
      assert.equal(ledger.charges.filter((c) => c.status === 'succeeded').length, 1, 'one successful charge in total');
      assert.equal(ledger.charges.length, 1, 'only one gateway was called');
      assert.equal(ledger.charges[0]!.gateway, paid[0]!.json.result.data.payment.gateway);
    });

    it(`9. the same key with a changed request (${next} instead): 422 KEY_REUSED_WITH_DIFFERENT_REQUEST, nothing more charged`, async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      const first = await customer.pay(order.orderId, { key, gateway });
      assert.equal(first.status, 201, first.text);
      const changed = await customer.pay(order.orderId, { key, gateway: next });
      assert.equal(changed.status, 422, changed.text);
      assert.equal(reason(changed), 'KEY_REUSED_WITH_DIFFERENT_REQUEST');
      const ledger = await stack.ledger(order.outTradeNo);
      assert.equal(ledger.charges.length, 1, 'nothing more reached any gateway');
      assert.equal(ledger.charges[0]!.gateway, gateway);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });
  });
}
