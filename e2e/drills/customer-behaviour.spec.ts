/**
 * What customers do: click twice, pay from two tabs (even with two gateways), reload mid-payment,
 * come back with a changed request, get declined and try another buyer, or close the tab and never
 * come back. The ground truth stays at one charge. Each drill runs on one gateway, the drills taking
 * the gateways in turn; every gateway × behaviour is proved in node:test
 * (test/integration/failure-matrix.test.ts), and DRILL_MATRIX=full runs every drill on every gateway.
 */
import { CheckoutPage } from '@/e2e/pages/checkout-page';
import { DRILL_GATEWAYS, GATEWAY_LABELS, drillMs, drillRunsOn, expect, test } from './drill';

for (const gateway of DRILL_GATEWAYS) {
  test.describe(`${gateway}`, () => {
    if (drillRunsOn(0, gateway))
      test(`double click on 立即支付 charges once (${gateway})`, async ({ checkout, drill, page }) => {
        const sent: string[] = [];
        page.on('request', (request) => {
          const procedure = /checkout\.(createOrder|pay)/.exec(request.url())?.[1];
          if (procedure) sent.push(procedure);
        });
        await checkout.open();
        await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
        await checkout.payButton.dblclick();
        await expect(checkout.status).toContainText('支付成功');
        expect(sent, 'one order and one payment request for two clicks').toEqual(['createOrder', 'pay']);
        await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), gateway);
      });

    for (const [drill, other] of [
      [1, gateway],
      [2, DRILL_GATEWAYS.find((g) => g !== gateway) ?? gateway],
    ] as const) {
      const title = other === gateway ? 'two tabs' : `two tabs and two gateways (${gateway} + ${other})`;
      if (drillRunsOn(drill, gateway))
        test(`${title}: the same order paid at once charges once (${gateway})`, async ({ checkout, drill, context }) => {
          // The second tab is open before the first pays, so that only a reload separates the first
          // tab's attempt from the second's (a new tab's first page load is the slow part on a busy
          // machine). It knows the order but starts its own attempt: a new Idempotency-Key. (Left in
          // storage, the first tab's attempt would be resumed by the page as it loads.)
          const second = new CheckoutPage(await context.newPage());
          await second.page.addInitScript(() => {
            const state = JSON.parse(localStorage.getItem('payonce.checkout.v1') ?? '{}');
            delete state.attempt;
            localStorage.setItem('payonce.checkout.v1', JSON.stringify(state));
          });
          await second.open();
          await checkout.page.bringToFront();
          await test.step('1. the first tab starts paying; its gateway is slow, so the attempt stays in flight', async () => {
            // Held in the app, with the attempt started (the order is paying) and before the gateway is
            // called: long enough for the second tab to open and pay on a busy machine, and shorter than
            // the drills' lease. A slow gateway would not do: past the drills' gateway timeout, the
            // first tab's retry would pay before the second tab arrived.
            await drill.armAppFault({ point: 'before_gateway_call', action: { kind: 'delay', ms: drillMs(12000) }, gateway });
            await checkout.open();
            await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
            await checkout.pay();
            await expect.poll(() => checkout.page.evaluate(() => localStorage.getItem('payonce.checkout.v1') ?? '')).toContain('attempt');
          });
          await test.step('2. a second tab pays the same order with an attempt (and key) of its own', async () => {
            await second.page.bringToFront();
            await second.page.reload();
            await second.loaded();
            await second.chooseGateway(GATEWAY_LABELS[other]);
            await second.pay();
            // While the first tab's attempt is in flight, the second says so in the shopper's words.
            await expect(second.status).toContainText('另一个标签页正在为这笔订单付款');
          });
          await test.step('3. both tabs end on the one payment of the one order', async () => {
            await expect(checkout.status).toContainText('支付成功', { timeout: 60_000 });
            await expect(second.status).toContainText('支付成功', { timeout: 60_000 });
            const first = await checkout.paidOutTradeNo();
            expect(await second.paidOutTradeNo()).toBe(first);
            await drill.expectChargedExactlyOnce(first, gateway);
            const ledger = await drill.ledger(first);
            expect(ledger.charges.filter((c) => c.gateway === other && other !== gateway)).toHaveLength(0);
          });
        });
    }

    if (drillRunsOn(3, gateway))
      test(`reload in the middle of a payment reuses the stored key (${gateway})`, async ({ checkout, drill, page }) => {
        await checkout.open();
        await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
        // The server is slow after claiming the key: the customer reloads before the answer.
        await drill.armAppFault({ point: 'after_claim', action: { kind: 'delay', ms: 5000 }, gateway });
        const keys: string[] = [];
        page.on('request', (request) => {
          const key = request.headers()['idempotency-key'];
          if (request.url().includes('checkout.pay') && key) keys.push(key);
        });
        await checkout.pay();
        await expect.poll(() => keys.length).toBeGreaterThan(0);
        // Reloaded, not opened anew: a second navigation would race the resume the reload started.
        await page.reload();
        await checkout.loaded();
        // The page resumes the saved attempt by itself, on the gateway it was sent with.
        await expect(page.getByRole('radio', { name: GATEWAY_LABELS[gateway] })).toBeChecked();
        await expect(checkout.status).toContainText('支付成功', { timeout: 60_000 });
        expect(new Set(keys).size, 'one key across the reload').toBe(1);
        await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), gateway);
      });

    if (drillRunsOn(4, gateway))
      test(`the same key with a changed request is refused with 422, shown clearly, nothing charged (${gateway})`, async ({
        checkout,
        drill,
        page,
      }) => {
        await checkout.open();
        await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
        await checkout.chooseBuyer('余额不足');
        // The server is slow after claiming the key; the customer reloads before the answer…
        await drill.armAppFault({ point: 'after_claim', action: { kind: 'delay', ms: 5000 }, gateway });
        await checkout.pay();
        await expect.poll(() => page.evaluate(() => localStorage.getItem('payonce.checkout.v1') ?? '')).toContain('attempt');
        // …and the saved attempt no longer matches the request its key was sent with (another buyer),
        // so the page's resume meets a different request under the stored key.
        await page.evaluate(() => {
          const state = JSON.parse(localStorage.getItem('payonce.checkout.v1') ?? '{}');
          state.attempt.buyer = 'ok';
          localStorage.setItem('payonce.checkout.v1', JSON.stringify(state));
        });
        // Reloaded, not opened anew: a second navigation would race the resume the reload started.
        await page.reload();
        await checkout.loaded();
        // The page asks the order: the first request was declined, so nothing was charged.
        await expect(checkout.status).toContainText('支付失败', { timeout: 60_000 });
        await expect(checkout.status).toContainText('未扣款');
        const outTradeNo = (await page.evaluate(
          () => JSON.parse(localStorage.getItem('payonce.checkout.v1') ?? '{}').order?.outTradeNo,
        )) as string;
        await expect.poll(async () => (await drill.ledger(outTradeNo)).charges.length).toBeGreaterThan(0);
        const ledger = await drill.ledger(outTradeNo);
        expect(
          ledger.charges.filter((c) => c.status === 'succeeded'),
          'the 422 charged nothing',
        ).toHaveLength(0);
      });

    if (drillRunsOn(5, gateway))
      test(`a terminal decline is the same on retry, with no retry loop; another buyer then pays once (${gateway})`, async ({
        checkout,
        drill,
        page,
      }) => {
        await checkout.open();
        await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
        await checkout.chooseBuyer('余额不足');
        const payRequests: string[] = [];
        page.on('request', (request) => {
          if (request.url().includes('checkout.pay')) payRequests.push(request.headers()['idempotency-key'] ?? '');
        });
        await checkout.pay();
        await expect(checkout.status).toContainText('支付失败');
        expect(payRequests, 'a 402 is not retried').toHaveLength(1);
        await checkout.chooseBuyer('余额充足');
        await checkout.pay();
        await expect(checkout.status).toContainText('支付成功');
        expect(payRequests).toHaveLength(2);
        expect(payRequests[1]).not.toBe(payRequests[0]);
        await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), gateway);
      });

    if (drillRunsOn(6, gateway))
      test(`the customer closes the tab after a mid-processing crash; the reconciler settles the order (${gateway})`, async ({
        checkout,
        drill,
        page,
      }) => {
        await checkout.open();
        await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
        await drill.armAppFault({ point: 'after_gateway_call', action: { kind: 'crash' }, gateway });
        // The gateway's notifications are lost too: only the reconciler can settle this payment.
        await drill.armSandboxFault({ gateway, action: 'lose_notifications', times: 100 });
        await checkout.pay();
        const storedOutTradeNo = () =>
          page.evaluate(() => JSON.parse(localStorage.getItem('payonce.checkout.v1') ?? '{}').order?.outTradeNo as string | undefined);
        await expect.poll(storedOutTradeNo).toMatch(/^PO/);
        const outTradeNo = (await storedOutTradeNo())!;
        await expect.poll(async () => (await drill.ledger(outTradeNo)).charges.filter((c) => c.status === 'succeeded').length).toBe(1);
        await page.close(); // gone for good: no retry will ever come
        await drill.waitForApp(); // the supervisor restarts the crashed process
        await expect.poll(async () => (await drill.state(outTradeNo)).order.status, { timeout: 60_000 }).toBe('paid');
        const state = await drill.state(outTradeNo);
        expect(state.payments.find((p) => p.status === 'succeeded')?.source).toBe('reconciliation');
        await expect.poll(async () => (await drill.state(outTradeNo)).emails, { timeout: 30_000 }).toEqual({ queued: 1, sent: 1 });
        expect((await drill.ledger(outTradeNo)).charges.filter((c) => c.status === 'succeeded')).toHaveLength(1);
      });
  });
}
