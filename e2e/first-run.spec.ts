/**
 * A newcomer's first minute: the page says what it is and what to do, in either language; 立即支付
 * cannot swallow a click before the page is interactive; and the buyer's own step comes into view.
 */
import { expect, test } from './fixtures';

test('the first visit says what the demo proves, how to pay as a buyer and where the ledger is; 知道了 hides it for good', async ({
  checkout,
  page,
}) => {
  const panel = page.getByRole('region', { name: '先看这里：这个演示证明什么' });
  await test.step('1. on the first visit the panel is there, with the real buyer step and the ledger', async () => {
    await checkout.open();
    await expect(panel).toBeVisible();
    await expect(panel).toContainText('只扣一次款');
    await expect(panel).toContainText('我自己付款');
    await expect(panel.getByRole('link', { name: '沙箱账本' })).toHaveAttribute('href', /\/sandbox\/ledger$/);
    // Not demo mode: it says how to get the switchboard.
    await expect(panel).toContainText('npm run demo');
  });
  await test.step('2. the ledger link opens the sandbox’s ledger page', async () => {
    const href = await panel.getByRole('link', { name: '沙箱账本' }).getAttribute('href');
    const ledger = await page.request.get(href!);
    expect(ledger.status()).toBe(200);
    expect(await ledger.text()).toContain('Ledger');
  });
  await test.step('3. in English it reads in English', async () => {
    await page.getByRole('button', { name: 'English' }).click();
    const english = page.getByRole('region', { name: 'Start here: what this demo proves' });
    await expect(english).toContainText('I pay myself');
    await expect(english.getByRole('link', { name: 'sandbox ledger' })).toBeVisible();
    // The catalogue too: product names in English, not only the labels.
    await expect(page.getByText('Longquan celadon mug')).toBeVisible();
    await expect(page.getByText('龙泉青瓷马克杯')).toHaveCount(0);
    await page.getByRole('button', { name: '中文' }).click();
  });
  await test.step('4. 知道了 hides it, and a reload does not bring it back', async () => {
    await panel.getByRole('button', { name: '知道了' }).click();
    await expect(panel).toBeHidden();
    await page.reload();
    await checkout.loaded();
    await expect(panel).toBeHidden();
  });
});

test('立即支付 is disabled in the page as the server sends it, before React makes it work', async ({ request, checkout }) => {
  const html = await (await request.get('/')).text();
  const button = /<button[^>]*class="pay"[^>]*>/.exec(html)?.[0];
  expect(button, 'the pay button is in the server-rendered page').toBeTruthy();
  expect(button).toMatch(/\bdisabled\b/);
  await checkout.open();
  await expect(checkout.payButton).toBeEnabled();
});

test.describe('phone 390x844', () => {
  test.use({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });

  test('the buyer’s own step (a QR code) scrolls into view and takes focus after 立即支付', async ({ checkout, page }) => {
    await checkout.open();
    await checkout.chooseGateway('微信支付');
    await page.getByRole('radio', { name: /我自己付款/ }).check();
    await checkout.pay();
    await expect(checkout.status).toContainText('等待付款');
    await expect(page.getByRole('img', { name: '微信支付付款二维码' })).toBeInViewport();
    await expect(checkout.result).toBeFocused();
  });
});
