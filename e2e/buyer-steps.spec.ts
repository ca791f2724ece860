/**
 * The buyer pays on their own step at each gateway, as a real buyer would: the page shows a QR code
 * that a phone scans (the sandbox's phone, opened with the code read off the screen), sends the buyer
 * to the gateway's hosted page and back, or mounts the gateway's card form. The merchant's request
 * carries no test buyer; the order is settled by the gateway's notification, and the ledger shows one
 * charge.
 */
import type { Page, Request } from '@playwright/test';
import jsQR from 'jsqr';
import { PNG } from 'pngjs';
import { expect, test } from './fixtures';
import type { CheckoutPage } from './pages/checkout-page';

const SANDBOX = process.env.PSP_SANDBOX_URL ?? 'http://127.0.0.1:4110';

/** Every checkout.pay request body the page sends, to prove no test buyer is in any of them. */
function recordPayRequests(page: Page): Record<string, unknown>[] {
  const bodies: Record<string, unknown>[] = [];
  page.on('request', (request: Request) => {
    if (request.method() === 'POST' && request.url().includes('/api/trpc/checkout.pay')) bodies.push(request.postDataJSON());
  });
  return bodies;
}

/** Reads the QR code off the page as a phone's camera would: from the pixels on screen. */
async function scanQrCode(page: Page, gatewayName: string): Promise<string> {
  const image = page.getByRole('img', { name: `${gatewayName}付款二维码` });
  await expect(image).toBeVisible();
  const png = PNG.sync.read(await image.screenshot());
  const decoded = jsQR(new Uint8ClampedArray(png.data), png.width, png.height);
  expect(decoded, 'the QR code on the page decodes').not.toBeNull();
  return decoded!.data;
}

async function startSelfPayment(checkout: CheckoutPage, gatewayName: string, step?: string) {
  await checkout.open();
  await checkout.chooseGateway(gatewayName);
  await checkout.page.getByRole('radio', { name: '我自己付款' }).check();
  if (step) await checkout.page.getByRole('radio', { name: step }).check();
  await checkout.pay();
  await expect(checkout.status).toContainText('等待付款');
}

async function expectPaidOnce(
  checkout: CheckoutPage,
  ledger: { succeededCharges(outTradeNo: string): Promise<number> },
  bodies: Record<string, unknown>[],
) {
  await expect(checkout.status).toContainText('支付成功', { timeout: 30_000 });
  const outTradeNo = await checkout.paidOutTradeNo();
  expect(await ledger.succeededCharges(outTradeNo)).toBe(1);
  expect(bodies.length).toBeGreaterThan(0);
  for (const body of bodies) expect(body, 'no test buyer in the merchant’s request').not.toHaveProperty('buyer');
}

for (const { name, gateway } of [
  { name: '微信支付', gateway: 'wechatpay' },
  { name: '支付宝', gateway: 'alipay' },
] as const) {
  test(`${gateway}: the buyer scans the QR code on the page, is declined once, pays, and the page shows it paid`, async ({
    checkout,
    ledger,
    page,
    context,
  }) => {
    const bodies = recordPayRequests(page);
    await test.step('1. pay without a test buyer: the page shows a QR code', async () => {
      await startSelfPayment(checkout, name, gateway === 'alipay' ? '扫码支付' : undefined);
    });
    const code = await test.step('2. read the code off the screen', async () => {
      const text = await scanQrCode(page, name);
      expect(text).toMatch(gateway === 'wechatpay' ? /^weixin:\/\/wxpay\/bizpayurl\?pr=/ : /^https?:\/\//);
      return text;
    });
    const phone = await context.newPage();
    await test.step('3. the phone scans it; the buyer has too little balance, then pays', async () => {
      await phone.goto(`${SANDBOX}/sandbox/scan?code=${encodeURIComponent(code)}`);
      await phone.getByRole('button', { name: /余额不足/ }).click();
      await expect(phone.getByText(/余额不足/).first()).toBeVisible();
      await expect(checkout.status).toContainText('等待付款');
      await phone.getByRole('button', { name: /确认付款/ }).click();
    });
    await test.step('4. the notification settles the order; the page shows it paid, charged once', async () => {
      await expectPaidOnce(checkout, ledger, bodies);
    });
  });
}

test('alipay: the buyer goes to the Alipay cashier page, pays, and comes back to a paid order', async ({ checkout, ledger, page }) => {
  const bodies = recordPayRequests(page);
  await startSelfPayment(checkout, '支付宝', '跳转到收银台');
  await page.getByRole('link', { name: '前往支付宝收银台付款' }).click();
  await expect(page).toHaveURL(new RegExp(`^${SANDBOX}/`));
  await page.getByRole('button', { name: /确认付款/ }).click();
  await expect(page).toHaveURL(/127\.0\.0\.1:\d+\/\?returned=/);
  await expectPaidOnce(checkout, ledger, bodies);
});

test('2c2p: the buyer pays on the hosted payment page and comes back to a paid order', async ({ checkout, ledger, page }) => {
  const bodies = recordPayRequests(page);
  await startSelfPayment(checkout, '2C2P');
  await page.getByRole('link', { name: '前往2C2P收银台付款' }).click();
  await expect(page).toHaveURL(new RegExp(`^${SANDBOX}/`));
  await page.getByLabel(/卡号|Card number/).fill('4111111111111111');
  await page.getByLabel(/有效期|Expiry/).fill('12/30');
  await page.getByLabel(/CVV|安全码/).fill('123');
  await page.getByLabel(/持卡人姓名|Name on card/).fill('LI LEI');
  await page.getByRole('button', { name: /确认付款/ }).click();
  await expect(page).toHaveURL(/127\.0\.0\.1:\d+\/\?returned=/);
  await expectPaidOnce(checkout, ledger, bodies);
});

test('stripe: the buyer enters a declined card, then a good one, in Stripe.js’s card form on the page', async ({
  checkout,
  ledger,
  page,
}) => {
  const bodies = recordPayRequests(page);
  await startSelfPayment(checkout, '银行卡');
  const card = page.frameLocator('iframe').first();
  await card.getByLabel(/卡号|Card number/).fill('4000000000009995');
  await card.getByLabel(/有效期|MM/).fill('12 / 30');
  await card.getByLabel(/CVC/).fill('123');
  await page.getByRole('button', { name: /确认付款/ }).click();
  await expect(checkout.result.getByRole('alert')).toBeVisible();
  await expect(checkout.status).toContainText('等待付款');

  await card.getByLabel(/卡号|Card number/).fill('4242424242424242');
  await page.getByRole('button', { name: /确认付款/ }).click();
  await expectPaidOnce(checkout, ledger, bodies);
});
