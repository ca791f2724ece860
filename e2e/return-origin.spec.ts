/**
 * A gateway's own page sends the buyer back to the address they started from. To a browser,
 * `localhost` and `127.0.0.1` are two origins with two cookie jars and two localStorages: a buyer sent
 * back to the other one lands on a blank cart with no session, and a second 立即支付 there is a second
 * order and a second charge. Each gateway page that returns the buyer (Alipay's cashier, 2C2P's hosted
 * page) is walked from both loopback names and on both a desktop and a phone — as a Latin square:
 * each gateway from each name and on each screen, each name on each screen, four walks in all
 * (DRILL_MATRIX=full walks all eight) — and the ledger must show one charge.
 */
import type { Page } from '@playwright/test';
import { expect, FULL_MATRIX, test } from './fixtures';
import { CheckoutPage } from './pages/checkout-page';

const SANDBOX = process.env.PSP_SANDBOX_URL ?? 'http://127.0.0.1:4110';

const VIEWPORTS = [
  { name: 'desktop', use: { viewport: { width: 1280, height: 900 } } },
  { name: 'phone', use: { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true } },
] as const;

/** The same app under each loopback name a newcomer might type. */
function origins(baseURL: string | undefined): { name: string; origin: string }[] {
  const base = new URL(baseURL ?? 'http://127.0.0.1:3100');
  return ['127.0.0.1', 'localhost'].map((host) => ({ name: host, origin: `${base.protocol}//${host}:${base.port}` }));
}

const GATEWAY_PAGES = [
  {
    gateway: 'alipay',
    label: '支付宝',
    step: '跳转到收银台',
    link: '前往支付宝收银台付款',
    async payThere(page: Page) {
      await page.getByRole('button', { name: /确认付款/ }).click();
    },
  },
  {
    gateway: '2c2p',
    label: '2C2P',
    step: undefined,
    link: '前往2C2P收银台付款',
    async payThere(page: Page) {
      await page.getByLabel(/卡号|Card number/).fill('4111111111111111');
      await page.getByLabel(/有效期|Expiry/).fill('12/30');
      await page.getByLabel(/CVV|安全码/).fill('123');
      await page.getByLabel(/持卡人姓名|Name on card/).fill('LI LEI');
      await page.getByRole('button', { name: /确认付款/ }).click();
    },
  },
] as const;

/** Whether a walk runs: all eight with DRILL_MATRIX=full, else those where the three indices sum to an even number. */
const walks = (viewport: number, host: number, gateway: number) => FULL_MATRIX || (viewport + host + gateway) % 2 === 0;

for (const [viewportIndex, viewport] of VIEWPORTS.entries()) {
  test.describe(viewport.name, () => {
    test.use(viewport.use);
    for (const [hostIndex, { name: host, origin }] of origins(
      process.env.E2E_BASE_URL ?? `http://127.0.0.1:${process.env.E2E_APP_PORT ?? 3100}`,
    ).entries()) {
      for (const [gatewayIndex, gatewayPage] of GATEWAY_PAGES.entries()) {
        if (walks(viewportIndex, hostIndex, gatewayIndex))
          test(`${gatewayPage.gateway}: started on ${host}, the buyer pays on the gateway's page and comes back there, paid once (${viewport.name})`, async ({
            page,
            ledger,
          }) => {
            const checkout = new CheckoutPage(page);
            await test.step(`1. open the checkout on ${origin} and pay as the buyer`, async () => {
              await page.goto(`${origin}/`);
              await checkout.loaded();
              await checkout.chooseGateway(gatewayPage.label);
              await page.getByRole('radio', { name: '我自己付款' }).check();
              if (gatewayPage.step) await page.getByRole('radio', { name: gatewayPage.step }).check();
              await checkout.pay();
              await expect(checkout.status).toContainText('等待付款');
            });
            await test.step("2. pay on the gateway's own page", async () => {
              await page.getByRole('link', { name: gatewayPage.link }).click();
              await expect(page).toHaveURL(new RegExp(`^${SANDBOX}/`));
              await gatewayPage.payThere(page);
            });
            await test.step('3. back on the origin the buyer started from, the order shows paid', async () => {
              await expect(page).toHaveURL(new RegExp(`^${origin}/`));
              await expect(checkout.status).toContainText('支付成功', { timeout: 30_000 });
              await expect(checkout.payButton).toBeDisabled();
            });
            await test.step('4. the ledger holds exactly one charge for the order', async () => {
              const outTradeNo = await checkout.paidOutTradeNo();
              expect(await ledger.succeededCharges(outTradeNo)).toBe(1);
            });
          });
      }
    }
  });
}

test('a return link opened where the session is not (another browser) shows the order by its token; a forged one shows none', async ({
  page,
  browser,
  ledger,
}) => {
  const checkout = new CheckoutPage(page);
  const landing = await test.step('1. pay on 2C2P’s hosted page and come back paid', async () => {
    await checkout.open();
    await checkout.chooseGateway('2C2P');
    await page.getByRole('radio', { name: '我自己付款' }).check();
    await checkout.pay();
    await page.getByRole('link', { name: '前往2C2P收银台付款' }).click();
    await GATEWAY_PAGES[1].payThere(page);
    await expect(checkout.status).toContainText('支付成功', { timeout: 30_000 });
    return new URL(page.url());
  });
  const outTradeNo = await checkout.paidOutTradeNo();
  expect(landing.searchParams.get('returned')).toMatch(/^[0-9a-f-]{36}$/);

  const elsewhere = await browser.newContext({ locale: 'zh-CN' });
  try {
    const other = new CheckoutPage(await elsewhere.newPage());
    await test.step('2. the same link in another browser: the order, paid, and nothing to pay again', async () => {
      await other.page.goto(landing.toString());
      await expect(other.status).toContainText('支付成功', { timeout: 30_000 });
      await expect(other.outTradeNo).toHaveText(outTradeNo);
      await expect(other.payButton).toBeDisabled();
    });
    await test.step('3. the link with a forged token: no order shown', async () => {
      const forged = new URL(landing);
      const token = forged.searchParams.get('t')!;
      forged.searchParams.set('t', `${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}`);
      await other.page.goto(forged.toString());
      await expect(other.status).toContainText('无法识别这个返回链接');
      await expect(other.outTradeNo).toHaveCount(0);
    });
    await test.step('4. 再来一单 clears the link: a reload is a fresh checkout', async () => {
      await other.page.goto(landing.toString());
      await expect(other.status).toContainText('支付成功', { timeout: 30_000 });
      await other.newOrderButton.click();
      await expect(other.page).toHaveURL(/\/$/);
      await other.page.reload();
      await other.loaded();
      await expect(other.status).toBeHidden();
    });
  } finally {
    await elsewhere.close();
  }
  expect(await ledger.succeededCharges(outTradeNo)).toBe(1);
});
