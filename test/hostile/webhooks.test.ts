/**
 * Hostile notifications for all four gateways, delivered by the sandbox exactly as the gateway would
 * send them but forged, downgraded, stale or replayed. A forgery gets a 4xx and leaves no trace; a
 * replay of a genuine notification is acknowledged as the duplicate it is and changes nothing. For
 * Stripe, whose events the adapter re-fetches by id before acting, a correctly signed event (a leaked
 * secret) is believed only as far as the API's copy: an id the API does not know is acknowledged and
 * leaves no trace; a body that lies is acted on as the API says.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { GatewayId } from '@/server/payments/gateway';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';
import { leavesNoTrace } from './support';

let stack: TestStack;
before(async () => {
  stack = await startTestStack();
});
after(async () => {
  await stack?.close();
});

async function deliver(gateway: GatewayId, outTradeNo: string, overrides: Record<string, string> = {}) {
  const response = await fetch(`${stack.sandboxUrl}/sandbox/${gateway}/notify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ outTradeNo, overrides }),
  });
  assert.equal(response.status, 200, await response.clone().text());
  const [delivery] = ((await response.json()) as { deliveries: { status: number | null; body: string | null }[] }).deliveries;
  return delivery!;
}

const now = () => Math.floor(Date.now() / 1000);
const unsignedJwt = (claims: object) =>
  `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.`;

/** Per gateway: the forgeries and downgrades a stranger could try. */
const ATTACKS: Record<GatewayId, [string, () => Record<string, string>][]> = {
  alipay: [
    ['a forged signature', () => ({ sign: Buffer.from('not alipay').toString('base64') })],
    ['a downgrade to sign_type RSA (SHA-1)', () => ({ sign_type: 'RSA' })],
  ],
  wechatpay: [
    ['a forged signature', () => ({ 'Wechatpay-Signature': Buffer.from('not wechat').toString('base64') })],
    ['a signature an hour old', () => ({ 'Wechatpay-Timestamp': String(now() - 3600) })],
    ['a signature ten minutes ahead', () => ({ 'Wechatpay-Timestamp': String(now() + 600) })],
    ['a platform key we do not know', () => ({ 'Wechatpay-Serial': 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF' })],
  ],
  stripe: [
    ['a forged signature', () => ({ signature: 'ab'.repeat(32) })],
    ['a signature an hour old', () => ({ timestamp: String(now() - 3600) })],
    ['a signature ten minutes ahead', () => ({ timestamp: String(now() + 600) })],
  ],
  '2c2p': [
    ['an unsigned token (alg none)', () => ({ payload: unsignedJwt({ invoiceNo: 'X', respCode: '0000', amount: '1' }) })],
    ['a token signed with another key', () => ({ payload: `${unsignedJwt({ invoiceNo: 'X' }).slice(0, -1)}.c2lnbmF0dXJl` })],
  ],
};

for (const gateway of Object.keys(ATTACKS) as GatewayId[]) {
  describe(`hostile notifications: ${gateway}`, () => {
    let order: { orderId: string; outTradeNo: string };

    before(async () => {
      const customer = stack.customer();
      order = await customer.createOrder();
      assert.equal((await customer.pay(order.orderId, { gateway, buyer: 'ok' })).status, 201);
      // The gateway's own notification first, so nothing arrives on its own during the attacks.
      await eventually(
        async () => {
          const [row] = await stack.sql<{ n: number }[]>`
          select count(*)::int as n from payment_events where order_id = ${order.orderId} and kind = 'notification.processed'`;
          return row!.n > 0 ? true : undefined;
        },
        15_000,
        'the genuine notification',
      );
    });

    for (const [name, overrides] of ATTACKS[gateway]) {
      it(`${name} → 4xx, not acknowledged, nothing recorded`, async () => {
        const delivery = await leavesNoTrace(stack, () => deliver(gateway, order.outTradeNo, overrides()));
        assert.ok(
          delivery.status !== null && delivery.status >= 400 && delivery.status < 500,
          `status ${delivery.status}: ${delivery.body}`,
        );
      });
    }

    it('a replay of the genuine notification → acknowledged as a duplicate, nothing else changes', async () => {
      const paymentsOf = async () =>
        (await stack.sql<{ n: number }[]>`select count(*)::int as n from payments where order_id = ${order.orderId}`)[0]!.n;
      const payments = await paymentsOf();
      const delivery = await deliver(gateway, order.outTradeNo);
      assert.ok(delivery.status !== null && delivery.status >= 200 && delivery.status < 300, `status ${delivery.status}`);
      assert.equal(await paymentsOf(), payments);
      const duplicates = await stack.sql`
        select 1 from payment_events where order_id = ${order.orderId} and kind = 'notification.duplicate'`;
      assert.equal(duplicates.length, 1);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    if (gateway === 'stripe') {
      it('a signed event whose id Stripe does not know → acknowledged, nothing recorded', async () => {
        const delivery = await leavesNoTrace(stack, () =>
          deliver(gateway, order.outTradeNo, { event_id: 'evt_1ForgedWithALeakedSecret0' }),
        );
        assert.ok(delivery.status !== null && delivery.status >= 200 && delivery.status < 300, `status ${delivery.status}`);
      });

      it('a genuine event Stripe cannot be asked about right now (rate limited) → 503, not acknowledged, nothing recorded', async () => {
        const arm = await fetch(`${stack.sandboxUrl}/sandbox/faults`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ gateway: 'stripe', action: 'rate_limit', times: 20 }),
        });
        assert.equal(arm.status, 201, await arm.text());
        try {
          const delivery = await leavesNoTrace(stack, () => deliver(gateway, order.outTradeNo));
          assert.equal(delivery.status, 503, `status ${delivery.status}: ${delivery.body}`);
        } finally {
          await fetch(`${stack.sandboxUrl}/sandbox/faults`, { method: 'DELETE' });
        }
      });

      it('a signed event whose body lies (another order, 1 fen) → the API’s copy: the paid order’s duplicate (after the replay above)', async () => {
        const victim = await stack.customer().createOrder();
        const traceOf = async () =>
          stack.sql`
            select 'payment' as what from payments where order_id = ${victim.orderId}
            union all select kind from payment_exceptions where order_id = ${victim.orderId}
            union all select kind from payment_events where order_id = ${victim.orderId}`;
        const before = await traceOf();
        const delivery = await deliver(gateway, order.outTradeNo, { out_trade_no: victim.outTradeNo, amount: '1' });
        assert.ok(delivery.status !== null && delivery.status >= 200 && delivery.status < 300, `status ${delivery.status}`);
        assert.deepEqual(await traceOf(), before, 'the victim order is untouched');
        assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
      });
    }
  });
}
