/**
 * The page's fault switchboard (demo mode): a failure armed with one click in the browser, a payment,
 * and the 幕后 view telling what happened — with the gateway's ledger showing one charge.
 */
import type { Page } from '@playwright/test';
import { expect, test } from './drill';

async function openBehindTheScenes(page: Page, outTradeNo: string) {
  await page.goto('/orders');
  await page.getByRole('link', { name: outTradeNo }).click();
  await expect(page.getByRole('heading', { name: /幕后/ })).toContainText(outTradeNo);
}

test.describe('the fault switchboard', () => {
  test('响应丢失 from the switchboard: the retry is a replay, and the 幕后 view shows both requests and one charge', async ({
    checkout,
    drill,
    page,
  }) => {
    await test.step('1. arm 响应丢失 for Alipay on the switchboard', async () => {
      await checkout.open();
      const board = page.getByRole('region', { name: /故障开关/ });
      await board.getByRole('combobox', { name: '故障作用的支付方式' }).selectOption('alipay');
      await board.getByRole('button', { name: '响应丢失' }).click();
      await expect(board.getByTestId('switchboard-status')).toContainText('已布置「响应丢失」');
    });

    let outTradeNo = '';
    await test.step('2. pay with Alipay: the first answer is lost, the page retries and shows 支付成功', async () => {
      await checkout.chooseGateway('支付宝');
      await checkout.chooseBuyer('余额充足');
      await checkout.pay();
      await expect(checkout.status).toContainText('支付成功');
      outTradeNo = await checkout.paidOutTradeNo();
      await drill.expectChargedExactlyOnce(outTradeNo, 'alipay');
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
      await expect(timeline.locator('tr[data-kind="gateway.call"]')).toHaveCount(1);
      await expect(timeline.locator('tr[data-kind="payment.succeeded"]')).toHaveCount(1);
      await expect(page.getByTestId('ledger-badge')).toHaveText('1 笔扣款');
      await expect(page.getByTestId('chain-badge')).toContainText('哈希链完整');
    });
  });

  test('重复通知 from the switchboard: every copy is acknowledged, one is processed, one charge', async ({ checkout, drill, page }) => {
    await checkout.open();
    const board = page.getByRole('region', { name: /故障开关/ });
    await board.getByRole('combobox', { name: '故障作用的支付方式' }).selectOption('wechatpay');
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
    await expect(timeline.locator('tr[data-kind="notification.duplicate"]').first()).toContainText('已确认，不再处理');
    await expect(page.getByTestId('ledger-badge')).toHaveText('1 笔扣款');
  });
});
