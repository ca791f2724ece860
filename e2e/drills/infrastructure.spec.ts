/**
 * Failures around the app rather than in it: a storm of duplicate notifications arriving at once and
 * out of order, and retries of one key spread across two app instances behind a load balancer.
 */
import { randomUUID } from 'node:crypto';
import { DRILL_GATEWAYS, GATEWAY_LABELS, expect, test } from './drill';

const SECOND_APP = process.env.DRILL_SECOND_APP_URL ?? 'http://127.0.0.1:3201';

for (const gateway of DRILL_GATEWAYS) {
  test.describe(`${gateway}`, () => {
    test(`notification storm: 25 duplicates at once, out of order, make one email (${gateway})`, async ({ checkout, drill, request }) => {
      await test.step('1. the gateway sends its notification 25 times, each copy after a random delay', async () => {
        await drill.armSandboxFault({ gateway, action: 'duplicate_notifications', copies: 24 });
        await checkout.open();
        await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
        await checkout.pay();
        await expect(checkout.status).toContainText('支付成功');
      });
      const outTradeNo = await checkout.paidOutTradeNo();
      await expect
        .poll(async () => (await drill.ledger(outTradeNo)).notifications.length, { message: '25 deliveries' })
        .toBeGreaterThanOrEqual(25);
      await test.step("2. and 25 more fired at once by the sandbox's notification tool", async () => {
        const storm = await request.post(`${drill.sandboxUrl}/sandbox/${gateway}/notify`, { data: { outTradeNo, copies: 25 } });
        expect(storm.status(), await storm.text()).toBe(200);
        expect(((await storm.json()) as { deliveries: unknown[] }).deliveries).toHaveLength(25);
      });
      await test.step('3. one payment, one email', async () => {
        await drill.expectChargedExactlyOnce(outTradeNo, gateway);
      });
    });

    test(`two app instances: retries of one key alternate between them, one charge (${gateway})`, async ({ request, drill }) => {
      // One customer (one session cookie, valid on both instances) behind a load balancer; the
      // first request opens the session.
      expect((await request.get('/api/trpc/checkout.products')).status()).toBe(200);
      const create = await request.post('/api/trpc/checkout.createOrder', {
        headers: { 'idempotency-key': randomUUID() },
        data: { items: [{ sku: 'MUG-CELADON', quantity: 1 }] },
      });
      expect(create.status(), await create.text()).toBe(201);
      const order = (await create.json()).result.data as { orderId: string; outTradeNo: string };
      const key = randomUUID();
      const pay = (base: string) =>
        request.post(`${base}/api/trpc/checkout.pay`, {
          headers: { 'idempotency-key': key },
          data: { orderId: order.orderId, gateway, buyer: 'ok' },
          failOnStatusCode: false,
        });

      // The first instance is slow after claiming the key; the retries meanwhile alternate.
      await drill.armAppFault({ point: 'after_claim', action: { kind: 'delay', ms: 2500 }, gateway });
      const slow = pay('');
      await new Promise((resolve) => setTimeout(resolve, 300));
      const statuses: number[] = [];
      const bodies: string[] = [];
      for (let retry = 0; retry < 12 && bodies.length < 2; retry++) {
        const response = await pay(retry % 2 === 0 ? SECOND_APP : '');
        statuses.push(response.status());
        if (response.status() === 201) bodies.push(await response.text());
        else await new Promise((resolve) => setTimeout(resolve, 400));
      }
      const first = await slow;
      expect(first.status()).toBe(201);
      expect(statuses, 'the other instance saw the key in flight').toContain(409);
      expect(bodies).toHaveLength(2);
      for (const body of bodies) expect(body).toBe(await first.text());
      await drill.expectChargedExactlyOnce(order.outTradeNo, gateway);
    });
  });
}
