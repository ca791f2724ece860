/**
 * The README's screenshots, taken from the real page on desktop (1280×900) and phone (390×844): the
 * first visit with its first-run panel, paying, retrying, paid, and the 幕后 view of a payment whose
 * answer was lost. Each state is asserted
 * before it is captured, so a screenshot can only show what the page really does.
 *
 * `npm run screenshots` refreshes docs/screenshots/; any other run writes them under test-results/.
 */
import path from 'node:path';
import type { Page, TestInfo } from '@playwright/test';
import { expect, test } from './drill';

const VIEWPORTS = [
  { name: 'desktop', viewport: { width: 1280, height: 900 } },
  { name: 'phone', viewport: { width: 390, height: 844 } },
] as const;

async function capture(page: Page, testInfo: TestInfo, name: string) {
  const file =
    process.env.UPDATE_SCREENSHOTS === '1' ? path.join('docs', 'screenshots', `${name}.png`) : testInfo.outputPath(`${name}.png`);
  await page.screenshot({ path: file, animations: 'disabled' });
}

for (const { name, viewport } of VIEWPORTS) {
  test.describe(`screenshots on ${name}`, () => {
    test.use({ viewport });

    test(`first visit, paying, retrying, paid and 幕后 on ${name}`, async ({ checkout, drill, page }, testInfo) => {
      await test.step('0. the first visit: what the demo proves and what to do, above the cart', async () => {
        await checkout.open();
        const panel = page.getByRole('region', { name: '先看这里：这个演示证明什么' });
        await expect(panel).toBeInViewport();
        await expect(panel).toContainText('故障开关在本页下方');
        await capture(page, testInfo, `${name}-first-run`);
      });

      await test.step('1. paying: the request is held for a few seconds', async () => {
        await drill.armAppFault({ point: 'after_claim', action: { kind: 'delay', ms: 4000 }, gateway: 'alipay' });
        await checkout.open();
        await checkout.setQuantity('龙泉青瓷马克杯', 2);
        await checkout.chooseGateway('支付宝');
        await checkout.pay();
        await expect(checkout.status).toContainText('请勿关闭页面');
        await capture(page, testInfo, `${name}-paying`);
        await expect(checkout.status).toContainText('支付成功');
      });

      await test.step('2. paid: the result in view, the order done', async () => {
        await expect(checkout.orderStatus).toHaveText('已支付');
        await expect(checkout.status).toBeInViewport();
        await capture(page, testInfo, `${name}-paid`);
      });

      await test.step('3. retrying: the first answer is lost, the page retries with the same key', async () => {
        await page.getByRole('button', { name: '再来一单' }).click();
        await drill.armAppFault({ point: 'after_commit', action: { kind: 'throw' }, gateway: 'wechatpay' });
        // The retry is held, so the retrying state stays on screen long enough to be seen.
        await drill.armAppFault({ point: 'before_claim', action: { kind: 'delay', ms: 4000 }, gateway: 'wechatpay', times: 2 });
        await checkout.setQuantity('广式月饼礼盒 · 六只装', 1);
        await checkout.chooseGateway('微信支付');
        await checkout.pay();
        await expect(checkout.status).toContainText('重试');
        await capture(page, testInfo, `${name}-retrying`);
        await expect(checkout.status).toContainText('支付成功', { timeout: 30_000 });
      });

      await test.step('4. 幕后: the lost answer, the replay, one charge', async () => {
        await page.getByRole('link', { name: '幕后' }).click();
        const timeline = page.getByRole('table', { name: '事件时间线' });
        await expect(timeline.locator('tr[data-kind="request"]').filter({ hasText: '重放已存答复' })).toHaveCount(1);
        await expect(page.getByTestId('ledger-badge')).toHaveText('1 笔扣款');
        await expect(page.getByTestId('chain-badge')).toContainText('哈希链完整');
        await capture(page, testInfo, `${name}-behind`);
      });
    });
  });
}
