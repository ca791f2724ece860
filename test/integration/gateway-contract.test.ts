/**
 * One contract, every gateway: the same cases run against each adapter, its sandbox module and the
 * app's webhook, through real HTTP and real PostgreSQL. A gateway joins by adding a fixture below.
 */
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { reconcilePayments } from '@/server/jobs/reconciler';
import type { GatewayId, PaymentGateway } from '@/server/payments/gateway';
import { serveFetch, type FetchServer } from '@/test/support/serve-fetch';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

interface CapturedDelivery {
  headers: Record<string, string>;
  body: string;
}

/** What differs per gateway: only its own idempotency rule, checked at the wire. */
interface GatewayFixture {
  id: GatewayId;
  /** Tool overrides that aim a genuine, re-signed notification at another order with a wrong amount. */
  lie: (victimOutTradeNo: string) => Record<string, string>;
  ownIdempotencyRule: { name: string; check: (ctx: { stack: TestStack; gateway: PaymentGateway }) => Promise<void> };
}

const FIXTURES: GatewayFixture[] = [
  {
    id: 'alipay',
    lie: (victim) => ({ out_trade_no: victim, total_amount: '0.01' }),
    ownIdempotencyRule: {
      name: 'the same out_trade_no with another amount is refused with ACQ.CONTEXT_INCONSISTENT',
      check: async ({ stack, gateway }) => {
        const outTradeNo = `PO${randomUUID().replaceAll('-', '').slice(0, 18).toUpperCase()}`;
        const base = { outTradeNo, currency: 'CNY', subject: 'rule', attempt: 1, notifyUrl: 'http://127.0.0.1:9/x' };
        const declined = await gateway.charge({ ...base, amountMinor: 100, buyer: 'insufficient_funds' });
        assert.equal(declined.kind, 'declined');
        const changed = await gateway.charge({ ...base, amountMinor: 200, buyer: 'ok' });
        assert.deepEqual(changed.kind === 'declined' ? changed.code : changed.kind, 'ACQ.CONTEXT_INCONSISTENT');
        assert.equal((await stack.succeededCharges(outTradeNo)).length, 0);
      },
    },
  },
  {
    id: 'wechatpay',
    lie: (victim) => ({ out_trade_no: victim, 'amount.total': '1' }),
    ownIdempotencyRule: {
      name: 'the same out_trade_no with another amount is refused with 403 OUT_TRADE_NO_USED',
      check: async ({ stack, gateway }) => {
        const outTradeNo = `PO${randomUUID().replaceAll('-', '').slice(0, 18).toUpperCase()}`;
        const base = { outTradeNo, currency: 'CNY', subject: 'rule', attempt: 1, notifyUrl: 'http://127.0.0.1:9/x' };
        const declined = await gateway.charge({ ...base, amountMinor: 100, buyer: 'insufficient_funds' });
        assert.equal(declined.kind, 'declined');
        const changed = await gateway.charge({ ...base, amountMinor: 200, buyer: 'ok' });
        assert.deepEqual(changed.kind === 'declined' ? changed.code : changed.kind, 'OUT_TRADE_NO_USED');
        assert.equal((await stack.succeededCharges(outTradeNo)).length, 0);
      },
    },
  },
  {
    id: 'stripe',
    lie: (victim) => ({ out_trade_no: victim, amount: '1' }),
    ownIdempotencyRule: {
      name: 'one Idempotency-Key with other parameters is 400 idempotency_error; mid-execution it is 409; replays say so',
      check: async ({ stack }) => {
        const { stripe: c } = (await (await fetch(`${stack.sandboxUrl}/sandbox/credentials`)).json()) as {
          stripe: { secretKey: string };
        };
        const post = (body: string, key: string) =>
          fetch(`${stack.sandboxUrl}/v1/payment_intents`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${c.secretKey}`,
              'content-type': 'application/x-www-form-urlencoded',
              'idempotency-key': key,
            },
            body,
          });
        const key = `contract-${randomUUID()}`;
        const body = (amount: number) =>
          `amount=${amount}&currency=cny&confirm=true&payment_method=pm_card_visa&allowed_payment_method_types[0]=card&metadata[out_trade_no]=PO${randomUUID().slice(0, 8).toUpperCase()}`;
        const first = body(1000);
        const created = await post(first, key);
        assert.equal(created.status, 200);
        const replay = await post(first, key);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), await created.text());
        const mismatch = await post(body(2000), key);
        assert.equal(mismatch.status, 400);
        assert.equal(((await mismatch.json()) as { error: { type: string } }).error.type, 'idempotency_error');

        // Mid-execution: hold the key's execution lock, as a first request still running would.
        const busyKey = `contract-${randomUUID()}`;
        const scope = createHash('sha256').update(c.secretKey).digest('hex');
        const holder = await stack.sql.reserve();
        try {
          await holder`select pg_advisory_lock(hashtextextended(${`stripe-idem:${scope}:${busyKey}`}, 0))`;
          const busy = await post(body(1000), busyKey);
          assert.equal(busy.status, 409);
          assert.equal(((await busy.json()) as { error: { code: string } }).error.code, 'idempotency_key_in_use');
        } finally {
          await holder`select pg_advisory_unlock_all()`;
          holder.release();
        }
      },
    },
  },
  {
    id: '2c2p',
    lie: (victim) => ({ invoiceNo: victim, amount: '0.01' }),
    ownIdempotencyRule: {
      name: 'the same invoiceNo with another amount is refused with 9015 (existing invoice number)',
      check: async ({ stack, gateway }) => {
        const outTradeNo = `PO${randomUUID().replaceAll('-', '').slice(0, 18).toUpperCase()}`;
        const base = { outTradeNo, currency: 'CNY', subject: 'rule', attempt: 1, notifyUrl: 'http://127.0.0.1:9/x' };
        const declined = await gateway.charge({ ...base, amountMinor: 100, buyer: 'insufficient_funds' });
        assert.equal(declined.kind, 'declined');
        // A new attempt (a new idempotencyID) for the same invoice with another amount.
        const changed = await gateway.charge({ ...base, attempt: 2, amountMinor: 200, buyer: 'ok' });
        assert.deepEqual(changed.kind === 'declined' ? changed.code : changed.kind, '9015');
        assert.equal((await stack.succeededCharges(outTradeNo)).length, 0);
      },
    },
  },
];

let stack: TestStack;
/** Stands in for the app's webhook URL: records every delivery, forwards it unless told not to. */
let relay: FetchServer;
const captured = new Map<string, CapturedDelivery[]>();
let forwarding = true;

before(async () => {
  stack = await startTestStack();
  relay = await serveFetch((pathname) => {
    const gateway = pathname.split('/').pop()!;
    return async (request) => {
      const body = await request.text();
      const headers: Record<string, string> = {};
      request.headers.forEach((value, name) => {
        if (!['host', 'content-length', 'connection'].includes(name)) headers[name] = value;
      });
      const list = captured.get(gateway) ?? [];
      list.push({ headers, body });
      captured.set(gateway, list);
      if (!forwarding) return new Response('relay closed', { status: 503 });
      const answer = await fetch(`${stack.appUrl}/api/webhooks/${gateway}`, { method: 'POST', headers, body });
      return new Response(await answer.text(), { status: answer.status, headers: answer.headers });
    };
  });
});
after(async () => {
  await relay?.close();
  await stack?.close();
});

async function count(sqlText: 'payments' | 'emails', orderId: string): Promise<number> {
  const rows =
    sqlText === 'payments'
      ? await stack.sql<{ n: number }[]>`select count(*)::int as n from payments where order_id = ${orderId} and status = 'succeeded'`
      : await stack.sql<
          { n: number }[]
        >`select count(*)::int as n from outbox where topic = 'email.order_paid' and payload->>'orderId' = ${orderId}`;
  return rows[0]!.n;
}
async function status(orderId: string) {
  return (await stack.sql<{ status: string }[]>`select status from orders where id = ${orderId}`)[0]!.status;
}

/** An order charged at the gateway with the notification aimed at the relay (forwarding off). */
async function chargedOrder(gatewayId: GatewayId) {
  const order = await stack.customer().createOrder();
  await stack.sql`
    update orders set status = 'paying', payment_attempt = 1, attempt_gateway = ${gatewayId},
                      attempt_started_at = now() - interval '1 minute'
     where id = ${order.orderId}`;
  forwarding = false;
  const outcome = await stack.services.gateways[gatewayId]!.charge({
    outTradeNo: order.outTradeNo,
    amountMinor: order.amountMinor,
    currency: order.currency,
    subject: `PayOnce 订单 ${order.outTradeNo}`,
    attempt: 1,
    buyer: 'ok',
    notifyUrl: `${relay.url}/relay/${gatewayId}`,
  });
  assert.equal(outcome.kind, 'succeeded', JSON.stringify(outcome));
  return order;
}

async function tool(gatewayId: GatewayId, body: unknown) {
  const response = await fetch(`${stack.sandboxUrl}/sandbox/${gatewayId}/notify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 200, await response.clone().text());
  return ((await response.json()) as { deliveries: { status: number | null; body: string | null }[] }).deliveries;
}

for (const fixture of FIXTURES) {
  describe(`gateway contract: ${fixture.id}`, () => {
    const gateway = () => stack.services.gateways[fixture.id]!;

    it('1. pays: 201, one charge in the ledger, and a retry replays the same body', async () => {
      forwarding = true;
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      const first = await customer.pay(order.orderId, { gateway: fixture.id, key });
      assert.equal(first.status, 201, first.text);
      assert.equal(first.json.result.data.payment.gateway, fixture.id);
      const replay = await customer.pay(order.orderId, { gateway: fixture.id, key });
      assert.equal(replay.headers.get('idempotency-replayed'), 'true');
      assert.equal(replay.text, first.text);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    it('2. stores a decline as 402 and replays it; another buyer then pays the same order once', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      const declined = await customer.pay(order.orderId, { gateway: fixture.id, key, buyer: 'insufficient_funds' });
      assert.equal(declined.status, 402, declined.text);
      assert.equal(declined.json.error.data.reason, 'PAYMENT_DECLINED');
      const replay = await customer.pay(order.orderId, { gateway: fixture.id, key, buyer: 'insufficient_funds' });
      assert.equal(replay.status, 402);
      assert.equal(replay.text, declined.text);
      const paid = await customer.pay(order.orderId, { gateway: fixture.id, buyer: 'ok' });
      assert.equal(paid.status, 201, paid.text);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    it('3. the same out_trade_no charged twice is one charge: the second answer is the first payment', async () => {
      const outTradeNo = `PO${randomUUID().replaceAll('-', '').slice(0, 18).toUpperCase()}`;
      const request = {
        outTradeNo,
        amountMinor: 6800,
        currency: 'CNY',
        subject: 'twice',
        attempt: 1,
        buyer: 'ok' as const,
        notifyUrl: 'http://127.0.0.1:9/x',
      };
      const first = await gateway().charge(request);
      const second = await gateway().charge(request);
      assert.equal(first.kind, 'succeeded', JSON.stringify(first));
      assert.deepEqual(second, first);
      assert.equal((await stack.succeededCharges(outTradeNo)).length, 1);
    });

    it(`4. keeps the gateway's own idempotency rule: ${fixture.ownIdempotencyRule.name}`, async () => {
      await fixture.ownIdempotencyRule.check({ stack, gateway: gateway() });
    });

    it('5. settles from 25 concurrent duplicate notifications once: one paid transition, one email', async () => {
      const order = await chargedOrder(fixture.id);
      forwarding = true;
      const deliveries = await tool(fixture.id, { outTradeNo: order.outTradeNo, copies: 25 });
      assert.equal(deliveries.length, 25);
      await eventually(async () => ((await status(order.orderId)) === 'paid' ? true : undefined), 10_000, 'paid');
      assert.equal(await count('payments', order.orderId), 1);
      assert.equal(await count('emails', order.orderId), 1);
    });

    it('6. rejects a forged notification with a 4xx and records nothing', async () => {
      const order = await chargedOrder(fixture.id);
      await tool(fixture.id, { outTradeNo: order.outTradeNo });
      const webhookKeys = async () =>
        (await stack.sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where scope = ${`webhook:${fixture.id}`}`)[0]!.n;
      const keysBefore = await webhookKeys();
      const genuine = captured.get(fixture.id)!.at(-1)!;
      // Change one digit of the signed body: the signature no longer matches.
      const forgedBody = genuine.body.replace(/[0-8]/, (d) => String(Number(d) + 1));
      assert.notEqual(forgedBody, genuine.body);
      const response = await fetch(`${stack.appUrl}/api/webhooks/${fixture.id}`, {
        method: 'POST',
        headers: genuine.headers,
        body: forgedBody,
      });
      assert.ok(response.status >= 400 && response.status < 500, `status ${response.status}`);
      assert.equal(await status(order.orderId), 'paying');
      assert.equal(await webhookKeys(), keysBefore, 'no dedupe key was written for the forgery');

      // The genuine one, replayed as captured, is accepted: the forgery failed only on its signature.
      const real = await fetch(`${stack.appUrl}/api/webhooks/${fixture.id}`, {
        method: 'POST',
        headers: genuine.headers,
        body: genuine.body,
      });
      assert.ok(real.status >= 200 && real.status < 300, `status ${real.status}`);
      assert.equal(await status(order.orderId), 'paid');
    });

    it('7. rejects a validly signed notification whose amount does not match the order: nothing settled, one exception for a person', async () => {
      const paidOrder = await chargedOrder(fixture.id);
      const victim = await stack.customer().createOrder();
      forwarding = true;
      const [delivery] = await tool(fixture.id, {
        outTradeNo: paidOrder.outTradeNo,
        overrides: fixture.lie(victim.outTradeNo),
      });
      assert.ok(delivery!.status !== null && delivery!.status >= 400 && delivery!.status < 500, `status ${delivery!.status}`);
      assert.equal(await status(victim.orderId), 'awaiting_payment');
      assert.equal(await count('payments', victim.orderId), 0);
      // Not acknowledged (the gateway keeps it and retries), and never dropped without trace.
      const exceptions = await stack.sql<{ kind: string; occurrences: number }[]>`
        select kind, occurrences from payment_exceptions where order_id = ${victim.orderId}`;
      assert.deepEqual(
        exceptions.map((e) => e.kind),
        ['amount_mismatch'],
      );
    });

    it('8. the reconciler settles an order whose response was never recorded', async () => {
      const order = await chargedOrder(fixture.id);
      await reconcilePayments(stack.services, { minAgeMs: 0 });
      assert.equal(await status(order.orderId), 'paid');
      assert.equal(await count('payments', order.orderId), 1);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    it('9. close: after a decline the trade is closed, twice is still closed, and the buyer can no longer pay it', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      assert.equal((await customer.pay(order.orderId, { gateway: fixture.id, buyer: 'insufficient_funds' })).status, 402);
      const request = { outTradeNo: order.outTradeNo, amountMinor: order.amountMinor, currency: order.currency };
      assert.deepEqual(await gateway().close(request), { kind: 'closed' });
      assert.deepEqual(await gateway().close(request), { kind: 'closed' });
      const late = await fetch(`${stack.sandboxUrl}/sandbox/${fixture.id}/buyer-pays`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ outTradeNo: order.outTradeNo, buyer: 'ok' }),
      });
      assert.equal(late.status, 409);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 0);
    });

    it('10. close of a paid trade reports the payment; a refund by one refund id twice refunds once; money kept = 0', async () => {
      const order = await chargedOrder(fixture.id);
      const request = { outTradeNo: order.outTradeNo, amountMinor: order.amountMinor, currency: order.currency };
      const closed = await gateway().close(request);
      assert.equal(closed.kind, 'already_paid', JSON.stringify(closed));
      const charge = closed.kind === 'already_paid' ? closed.charges[0]! : undefined;
      assert.equal(charge?.amountMinor, order.amountMinor);
      const refund = {
        outTradeNo: order.outTradeNo,
        gatewayTradeNo: charge!.gatewayTradeNo,
        refundId: `R${order.outTradeNo.slice(2)}1`,
        amountMinor: order.amountMinor,
        chargeAmountMinor: order.amountMinor,
        currency: order.currency,
        reason: 'contract',
      };
      const first = await gateway().refund(refund);
      assert.ok(first.kind === 'succeeded' || first.kind === 'pending', JSON.stringify(first));
      const again = await gateway().refund(refund);
      assert.ok(again.kind === 'succeeded' || again.kind === 'pending', JSON.stringify(again));
      const found = await eventually(
        async () => {
          const answer = await gateway().queryRefund(refund);
          return answer.kind === 'answered' && answer.refund.kind === 'succeeded' ? answer.refund : undefined;
        },
        10_000,
        'the refund to succeed',
      );
      assert.equal(found.amountMinor, order.amountMinor);
      const ledger = (await stack.ledger(order.outTradeNo)) as Awaited<ReturnType<TestStack['ledger']>> & {
        refunds: { status: string; amountMinor: number }[];
      };
      assert.equal(ledger.refunds.length, 1, 'one refund at the gateway');
      const kept =
        ledger.charges.filter((c) => c.status === 'succeeded').reduce((sum, c) => sum + c.amountMinor, 0) -
        ledger.refunds.filter((r) => r.status === 'succeeded').reduce((sum, r) => sum + r.amountMinor, 0);
      assert.equal(kept, 0);
      const unknown = await gateway().queryRefund({ ...refund, refundId: `R${order.outTradeNo.slice(2)}9` });
      assert.deepEqual(unknown, { kind: 'answered', refund: { kind: 'not_found' } });
    });
  });
}
