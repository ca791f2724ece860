/**
 * The page's fault switchboard (demo mode): a failure armed with one click in the browser, a payment,
 * and the 幕后 view telling what happened — with the gateway's ledger showing one charge.
 */
import type { Page } from '@playwright/test';
import { CheckoutPage } from '@/e2e/pages/checkout-page';
import { expect, test } from './drill';

async function openBehindTheScenes(page: Page, outTradeNo: string) {
  await page.goto('/orders');
  await page.getByRole('link', { name: outTradeNo }).click();
  await expect(page.getByRole('heading', { name: '幕后', level: 1 })).toBeVisible();
  await expect(page.getByText(outTradeNo, { exact: true })).toBeVisible();
}

test.describe('the fault switchboard', () => {
  test('响应丢失 from the switchboard: the retry is a replay, and the 幕后 view shows both requests and one charge', async ({
    checkout,
    drill,
    page,
  }) => {
    const board = page.getByRole('region', { name: /故障开关/ });
    await test.step('1. arm 响应丢失 on the switchboard: its explanation is on the page, not in a tooltip', async () => {
      await checkout.open();
      await expect(board.getByRole('button', { name: '响应丢失' })).toHaveAccessibleDescription('已提交但答复丢失，重试得到重放');
      await board.getByRole('button', { name: '响应丢失' }).click();
      await expect(board.getByTestId('switchboard-status')).toContainText('已布置「响应丢失」');
      await expect(board.getByTestId('switchboard-status')).toContainText('本浏览器下一次');
    });

    let outTradeNo = '';
    await test.step('2. pay with Alipay: the first answer is lost, the page retries and shows 支付成功', async () => {
      await checkout.chooseGateway('支付宝');
      await checkout.chooseBuyer('余额充足');
      await checkout.pay();
      await expect(checkout.status).toContainText('支付成功');
      outTradeNo = await checkout.paidOutTradeNo();
      await drill.expectChargedExactlyOnce(outTradeNo, 'alipay');
      await expect(board.getByTestId('switchboard-status')).toContainText('「响应丢失」已触发');
    });

    await test.step('3. the 幕后 view: claimed 201 (answer lost), then replayed 201; one charge; chain intact', async () => {
      await openBehindTheScenes(page, outTradeNo);
      const timeline = page.getByRole('table', { name: '事件时间线' });
      const payRequests = timeline.locator('tr[data-kind="request"]').filter({ hasText: 'checkout.pay' });
      await expect(payRequests).toHaveCount(2);
      await expect(payRequests.nth(0)).toContainText('首次受理');
      await expect(payRequests.nth(0)).toContainText('HTTP 201');
      await expect(payRequests.nth(1)).toContainText('重放已存答复');
      await expect(payRequests.nth(1)).toContainText('HTTP 201');
      await expect(timeline.locator('tr[data-kind="fault.injected"]')).toHaveCount(1);
      await expect(timeline.locator('tr[data-kind="fault.injected"]')).toContainText('答复丢失');
      await expect(timeline.locator('tr[data-kind="gateway.call"]')).toHaveCount(1);
      await expect(timeline.locator('tr[data-kind="payment.succeeded"]')).toHaveCount(1);
      await expect(page.getByTestId('ledger-badge')).toHaveText('1 笔扣款');
      await expect(page.getByTestId('chain-badge')).toContainText('哈希链完整');
      await page.getByText('怎么读这一页').click();
      await expect(page.locator('.legend')).toContainText('同一个键再次到来');
    });
  });

  test('重复通知 from the switchboard: every copy is acknowledged, one is processed, one charge', async ({ checkout, drill, page }) => {
    await checkout.open();
    const board = page.getByRole('region', { name: /故障开关/ });
    await board.getByRole('button', { name: '重复通知' }).click();
    await expect(board.getByTestId('switchboard-status')).toContainText('已布置「重复通知」');
    await checkout.chooseGateway('微信支付');
    await checkout.pay();
    await expect(checkout.status).toContainText('支付成功');
    const outTradeNo = await checkout.paidOutTradeNo();
    await drill.expectChargedExactlyOnce(outTradeNo, 'wechatpay');

    await openBehindTheScenes(page, outTradeNo);
    const timeline = page.getByRole('table', { name: '事件时间线' });
    // The notification and its ten copies: each delivery has its line. One is processed; the others
    // are acknowledged as duplicates, or — arriving while the first was still in flight — turned away
    // unacknowledged (the gateway's own retry of its notification comes back as a duplicate).
    const deliveries = timeline.locator('tr[data-kind^="notification."]');
    await expect.poll(() => deliveries.count(), { timeout: 30_000 }).toBeGreaterThanOrEqual(11);
    await expect(timeline.locator('tr[data-kind="notification.processed"]')).toHaveCount(1);
    await expect(timeline.locator('tr[data-kind="fault.injected"]')).toContainText('多发十次');
    await expect(timeline.locator('tr[data-kind="notification.duplicate"]').first()).toContainText('已确认，不再处理');
    await expect(page.getByTestId('ledger-badge')).toHaveText('1 笔扣款');
  });
});

test('a drill armed in one browser fires on that browser’s next payment only, never on another’s', async ({
  browser,
  checkout,
  drill,
  page,
}) => {
  const board = page.getByRole('region', { name: /故障开关/ });
  await test.step('1. browser A arms 响应丢失', async () => {
    await checkout.open();
    await board.getByRole('button', { name: '响应丢失' }).click();
    await expect(board.getByTestId('switchboard-status')).toContainText('已布置「响应丢失」');
  });
  const other = await browser.newContext({ locale: 'zh-CN', baseURL: test.info().project.use.baseURL });
  try {
    await test.step('2. browser B pays with WeChat Pay: one request, answered at once, nothing lost', async () => {
      const page2 = await other.newPage();
      const pays: number[] = [];
      page2.on('response', (response) => {
        if (response.url().includes('/api/trpc/checkout.pay')) pays.push(response.status());
      });
      const checkout2 = new CheckoutPage(page2);
      await checkout2.open();
      await checkout2.chooseGateway('微信支付');
      await checkout2.chooseBuyer('余额充足');
      await checkout2.pay();
      await expect(checkout2.status).toContainText('支付成功');
      expect(pays).toEqual([201]);
      await drill.expectChargedExactlyOnce(await checkout2.paidOutTradeNo(), 'wechatpay');
    });
  } finally {
    await other.close();
  }
  await test.step('3. A’s drill is still armed, and fires on A’s own payment', async () => {
    await expect(board.getByTestId('switchboard-status')).toContainText('已布置「响应丢失」');
    await checkout.chooseGateway('2C2P');
    await checkout.chooseBuyer('余额充足');
    await checkout.pay();
    await expect(checkout.status).toContainText('支付成功');
    await expect(board.getByTestId('switchboard-status')).toContainText('「响应丢失」已触发');
    await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), '2c2p');
  });
});

test('the control routes refuse what another site can make a browser send: nothing is armed', async ({ drill }) => {
  const request = drill.request;
  const formPost = { headers: { 'content-type': 'text/plain' }, data: '{"point":"after_claim","action":{"kind":"crash"}}' };
  const foreign = { headers: { 'content-type': 'application/json', origin: 'https://evil.example' } };
  await test.step('1. a text/plain form post: 415 on /api/faults and /api/demo/drills', async () => {
    expect((await request.post('/api/faults', formPost)).status()).toBe(415);
    expect((await request.post('/api/demo/drills', { ...formPost, data: '{"drill":"lost_response","gateway":"alipay"}' })).status()).toBe(
      415,
    );
  });
  await test.step('2. a foreign Origin: 403 on each, and on DELETE /api/faults', async () => {
    expect((await request.post('/api/faults', { ...foreign, data: { point: 'after_claim', action: { kind: 'crash' } } })).status()).toBe(
      403,
    );
    expect((await request.post('/api/demo/drills', { ...foreign, data: { drill: 'lost_response', gateway: 'alipay' } })).status()).toBe(
      403,
    );
    expect((await request.delete('/api/faults', { headers: { 'sec-fetch-site': 'cross-site' } })).status()).toBe(403);
  });
  await test.step('3. the sandbox: a text/plain post and a cross-site one arm nothing', async () => {
    expect(
      (await request.post(`${drill.sandboxUrl}/sandbox/faults`, { ...formPost, data: '{"action":"drop_after_charge"}' })).status(),
    ).toBe(415);
    expect((await request.post(`${drill.sandboxUrl}/sandbox/faults`, { ...foreign, data: { action: 'drop_after_charge' } })).status()).toBe(
      403,
    );
  });
  await test.step('4. nothing is armed anywhere', async () => {
    expect(((await (await request.get('/api/faults')).json()) as { faults: unknown[] }).faults).toEqual([]);
    expect(await drill.armedSandboxFaults()).toEqual([]);
  });
});
