/**
 * The seed's three failure modes, made to happen for real in the browser:
 *   pre-server        the request never reaches the server
 *   mid-processing    it reaches the server and fails part-way (error, gateway timeout, crash)
 *   post-processing   the server finishes and the answer never reaches the browser
 * Each ends with the ground truth: exactly one charge, one paid order, one email. Each drill runs on
 * one gateway, the drills taking the gateways in turn; every gateway × failure is proved in node:test
 * (test/integration/failure-matrix.test.ts), and DRILL_MATRIX=full runs every drill on every gateway.
 */
import { DRILL_GATEWAYS, GATEWAY_LABELS, drillMs, drillRunsOn, expect, test } from './drill';

for (const gateway of DRILL_GATEWAYS) {
  test.describe(`${gateway}`, () => {
    test.beforeEach(async ({ checkout }) => {
      await checkout.open();
      await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
      await checkout.chooseBuyer('余额充足');
    });

    if (drillRunsOn(0, gateway))
      test(`pre-server: the first pay request never leaves the browser, the retry charges once (${gateway})`, async ({
        checkout,
        drill,
        page,
      }) => {
        let dropped = 0;
        await test.step('1. drop the first checkout.pay request at the network', async () => {
          await page.route('**/api/trpc/checkout.pay*', async (route) => {
            if (dropped++ === 0) return route.abort('connectionreset');
            return route.continue();
          });
        });
        await test.step('2. pay: the page retries and succeeds', async () => {
          await checkout.pay();
          await expect(checkout.status).toContainText('支付成功');
          expect(dropped).toBeGreaterThanOrEqual(2);
        });
        await test.step('3. the ground truth: one charge', async () => {
          await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), gateway);
        });
      });

    if (drillRunsOn(1, gateway))
      test(`mid-processing: an error after the claim releases the key, the retry charges once (${gateway})`, async ({
        checkout,
        drill,
      }) => {
        await drill.armAppFault({ point: 'after_claim', action: { kind: 'throw' }, gateway });
        await checkout.pay();
        await expect(checkout.status).toContainText('支付成功');
        await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), gateway);
      });

    if (drillRunsOn(2, gateway))
      test(`mid-processing: the gateway times out after charging, the retry is deduped by the gateway (${gateway})`, async ({
        checkout,
        drill,
      }) => {
        // Longer than the adapter's 5 s timeout: the app cannot know whether the money moved. The
        // notification is lost too, so only the retry (and the gateway's own dedupe) can settle it.
        await drill.armSandboxFault({ gateway, action: 'timeout_after_charge', delayMs: drillMs(7000) });
        await drill.armSandboxFault({ gateway, action: 'lose_notifications', times: 100 });
        await checkout.pay();
        // Retried by the page (503 PAYMENT_OUTCOME_UNKNOWN) or already inside the adapter (the Stripe
        // SDK retries a timeout itself, with the same explicit idempotency key): either way, one charge.
        await expect(checkout.status).toContainText('支付成功', { timeout: 60_000 });
        expect(
          (await drill.armedSandboxFaults()).filter((f) => (f as { action: string }).action === 'timeout_after_charge'),
          'the timeout fault fired',
        ).toHaveLength(0);
        await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), gateway);
      });

    if (drillRunsOn(3, gateway))
      test(`mid-processing: the process crashes between the charge and the commit, restarts, and the retry recovers (${gateway})`, async ({
        checkout,
        drill,
        page,
      }) => {
        await drill.armAppFault({ point: 'after_gateway_call', action: { kind: 'crash' }, gateway });
        const responses: number[] = [];
        page.on('response', (response) => {
          if (response.url().includes('checkout.pay')) responses.push(response.status());
        });
        await checkout.pay();
        // The process died mid-request; the supervisor brings it back; the browser keeps retrying
        // (409 while the dead request's lease runs out) until the stale lease is taken over — or,
        // asking the order before each such retry, until the gateway's notification has paid it.
        await expect(checkout.status).toContainText('支付成功', { timeout: 80_000 });
        const last = responses.at(-1);
        expect(last === 201 || last === 409, `the last pay answer: ${last}`).toBe(true);
        await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), gateway);
      });

    if (drillRunsOn(4, gateway))
      test(`post-processing: the server commits, the answer is lost, the retry is replayed (${gateway})`, async ({
        checkout,
        drill,
        page,
      }) => {
        const bodies: string[] = [];
        const replayed: (string | null)[] = [];
        let lost = 0;
        await page.route('**/api/trpc/checkout.pay*', async (route) => {
          const response = await route.fetch(); // the server processes it in full
          bodies.push(await response.text());
          replayed.push(response.headers()['idempotency-replayed'] ?? null);
          if (lost++ === 0) return route.abort('connectionreset'); // …and the browser never hears
          return route.fulfill({ response });
        });
        await checkout.pay();
        await expect(checkout.status).toContainText('支付成功');
        expect(bodies.length).toBeGreaterThanOrEqual(2);
        expect(replayed[0]).toBeNull();
        expect(replayed.at(-1)).toBe('true');
        expect(bodies.at(-1)).toBe(bodies[0]);
        await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), gateway);
      });
  });
}
