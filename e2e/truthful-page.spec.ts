/**
 * The page tells the truth, where the shopper can see it, in the shopper's language: a paid order is
 * done (no second order by accident), a reload finishes the payment it interrupted on the gateway it
 * used, the result comes into view on a phone, and nothing on screen is English, an HTTP status or
 * an internal word unless the shopper asked for English or opened 详情.
 */
import type { Page, Request } from '@playwright/test';
import { expect, test } from './fixtures';

const sandboxUrl = () => process.env.PSP_SANDBOX_URL ?? 'http://127.0.0.1:4110';

const VIEWPORTS = [
  { name: 'desktop', viewport: { width: 1280, height: 900 } },
  { name: 'phone', viewport: { width: 390, height: 844 } },
] as const;

/** A gateway that takes `delayMs` to answer a charge (then charges), so a payment can be caught in flight. */
async function slowGateway(gateway: string, delayMs: number) {
  const response = await fetch(`${sandboxUrl()}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ gateway, operation: 'charge', action: 'slow', delayMs }),
  });
  expect(response.status, await response.text()).toBe(201);
}

test.afterEach(async () => {
  await fetch(`${sandboxUrl()}/sandbox/faults`, { method: 'DELETE' });
});

/** Everything the status region says, across reloads: a later assertion can check it never lied. */
async function recordStatusTexts(page: Page) {
  await page.addInitScript(() => {
    const seen: string[] = JSON.parse(sessionStorage.getItem('test.statusTexts') ?? '[]');
    new MutationObserver(() => {
      const text = document.querySelector('[role="status"]')?.textContent ?? '';
      if (text && seen.at(-1) !== text) {
        seen.push(text);
        sessionStorage.setItem('test.statusTexts', JSON.stringify(seen));
      }
    }).observe(document, { subtree: true, childList: true, characterData: true });
  });
  return () => page.evaluate(() => JSON.parse(sessionStorage.getItem('test.statusTexts') ?? '[]') as string[]);
}

const isProcedure = (name: string) => (request: Request) => request.url().includes(`/api/trpc/checkout.${name}`);

for (const { name, viewport } of VIEWPORTS) {
  test.describe(`${name} ${viewport.width}x${viewport.height}`, () => {
    test.use({ viewport });

    test(`after 支付成功 the order is done: the cart locks, 再来一单 starts over, and the same cart again asks first (${name})`, async ({
      checkout,
      ledger,
      page,
    }) => {
      const created: string[] = [];
      page.on('request', (request) => {
        if (isProcedure('createOrder')(request)) created.push(request.url());
      });
      let first = '';
      await test.step('1. pay: 支付成功, 订单状态 已支付, and the order is done', async () => {
        await checkout.open();
        await checkout.pay();
        await expect(checkout.status).toContainText('支付成功');
        await expect(checkout.orderStatus).toHaveText('已支付');
        first = await checkout.paidOutTradeNo();
      });

      await test.step('2. the cart is locked: no quantity, gateway or pay button to click', async () => {
        await expect(checkout.payButton).toBeDisabled();
        await expect(checkout.quantity('西湖龙井 · 明前特级 250g')).toBeDisabled();
        await expect(page.getByRole('radio', { name: '微信支付' })).toBeDisabled();
        expect(created).toHaveLength(1);
        expect(await ledger.succeededCharges(first)).toBe(1);
      });

      await test.step('3. 再来一单, the same cart: asked first; 取消 creates nothing', async () => {
        await checkout.newOrderButton.click();
        await expect(checkout.payButton).toBeEnabled();
        await checkout.pay();
        await expect(checkout.duplicateDialog).toBeVisible();
        // Seconds ago: said as such, not rounded up to "1 分钟前".
        await expect(checkout.duplicateDialog).toContainText('您刚刚为相同商品付过款，确定要再买一次吗？');
        await checkout.duplicateDialog.getByRole('button', { name: '取消' }).click();
        await expect(checkout.duplicateDialog).toBeHidden();
        expect(created, 'no second order').toHaveLength(1);
        expect((await checkout.stored()).order, 'no order waiting to be paid').toBeUndefined();
        expect((await ledger.read(first)).charges, 'the first order charged once').toHaveLength(1);
      });

      await test.step('4. asked again, 继续支付: a new order, paid once', async () => {
        await checkout.pay();
        await checkout.duplicateDialog.getByRole('button', { name: '继续支付' }).click();
        await expect(checkout.status).toContainText('支付成功');
        const second = await checkout.paidOutTradeNo();
        expect(second).not.toBe(first);
        expect(created).toHaveLength(2);
        expect(await ledger.succeededCharges(second)).toBe(1);
        expect(await ledger.succeededCharges(first)).toBe(1);
      });
    });

    test(`the result comes into view and takes focus; 处理中 asks to keep the page open (${name})`, async ({ checkout, page }) => {
      await checkout.open();
      await slowGateway('alipay', 2500);
      const paid = page.waitForResponse((response) => isProcedure('pay')(response.request()));
      await checkout.pay();
      await expect(checkout.status).toContainText('处理中');
      await expect(checkout.status).toContainText('请勿关闭页面');
      await expect(checkout.status).toContainText('支付成功');
      await expect(checkout.result).toBeInViewport();
      await expect(checkout.result).toBeFocused();
      await expect(page.getByRole('heading', { name: '订单详情' })).toBeVisible();
      await expect(checkout.orderStatus).toHaveText('已支付');
      // The order's behind-the-scenes page (built separately) is one link away.
      const orderId = ((await (await paid).json()) as { result: { data: { orderId: string } } }).result.data.orderId;
      await expect(page.getByRole('link', { name: '幕后' })).toHaveAttribute('href', `/orders/${orderId}`);
    });
  });
}

test.describe('a reload in the middle of a payment', () => {
  test('resumes the saved attempt by itself, on the gateway and buyer it used, and shows the real result', async ({
    checkout,
    ledger,
    page,
  }) => {
    const statusTexts = await recordStatusTexts(page);
    const keys: string[] = [];
    page.on('request', (request) => {
      const key = request.headers()['idempotency-key'];
      if (isProcedure('pay')(request) && key) keys.push(key);
    });
    await test.step('1. pay with 微信支付 on a slow gateway, and reload while it is in flight', async () => {
      await checkout.open();
      await checkout.chooseGateway('微信支付');
      await slowGateway('wechatpay', 3000);
      await checkout.pay();
      await expect.poll(async () => (await checkout.stored()).attempt?.gateway).toBe('wechatpay');
      await page.reload();
    });
    await test.step('2. the page finds the attempt, shows it, and finishes it with the same key', async () => {
      // A passing message: recorded as it appears (the payment may finish before a locator looks).
      await expect.poll(async () => (await statusTexts()).some((text) => text.includes('检测到未完成的支付，正在确认…'))).toBe(true);
      await expect(page.getByRole('radio', { name: '微信支付' })).toBeChecked();
      await expect(page.getByRole('radio', { name: '余额充足' })).toBeChecked();
      await expect(checkout.status).toContainText('支付成功', { timeout: 60_000 });
      await expect(checkout.orderStatus).toHaveText('已支付');
      await expect(page.getByRole('radio', { name: '微信支付' })).toBeChecked();
      expect(new Set(keys).size, 'one key across the reload').toBe(1);
    });
    await test.step('3. one WeChat Pay charge, and 未扣款 was never said', async () => {
      const charges = (await ledger.read(await checkout.paidOutTradeNo())).charges;
      expect(charges.filter((c) => c.status === 'succeeded').map((c) => c.gateway)).toEqual(['wechatpay']);
      expect((await statusTexts()).filter((text) => /未扣款|幂等键|\b4\d\d\b/.test(text))).toEqual([]);
    });
  });

  test('an attempt saved without its gateway meets 422: the page asks the order and says 支付成功, never 未扣款', async ({
    checkout,
    ledger,
    page,
  }) => {
    const statusTexts = await recordStatusTexts(page);
    const refused: number[] = [];
    let reloaded = false;
    await test.step('1. pay with 微信支付 on a slow gateway; the saved attempt keeps only its key (as pages before did)', async () => {
      await checkout.open();
      await checkout.chooseGateway('微信支付');
      await slowGateway('wechatpay', 3000);
      await checkout.pay();
      await expect.poll(async () => (await checkout.stored()).attempt?.key).toBeTruthy();
      await page.evaluate(() => {
        const state = JSON.parse(localStorage.getItem('payonce.checkout.v1') ?? '{}');
        state.attempt = { key: state.attempt.key, orderId: state.attempt.orderId };
        localStorage.setItem('payonce.checkout.v1', JSON.stringify(state));
      });
      // Listening before the reload: the resumed request may be answered before it returns.
      page.on('response', (response) => {
        if (isProcedure('pay')(response.request()) && reloaded) refused.push(response.status());
      });
      reloaded = true;
      await page.reload();
    });
    await test.step('2. resumed with 支付宝 (the page default) the key answers 422; the order says paid', async () => {
      // A passing message: recorded as it appears (the payment may finish before a locator looks).
      await expect.poll(async () => (await statusTexts()).some((text) => text.includes('检测到未完成的支付'))).toBe(true);
      await expect(checkout.status).toContainText('支付成功', { timeout: 60_000 });
      expect(refused).toContain(422);
      await expect(checkout.orderStatus).toHaveText('已支付');
      await expect(page.getByRole('radio', { name: '微信支付' }), 'the gateway that took the money').toBeChecked();
    });
    await test.step('3. one WeChat Pay charge; 未扣款 and 幂等键 were never on screen', async () => {
      const charges = (await ledger.read(await checkout.paidOutTradeNo())).charges;
      expect(charges.filter((c) => c.status === 'succeeded').map((c) => c.gateway)).toEqual(['wechatpay']);
      const said = await statusTexts();
      expect(said.some((text) => text.includes('支付成功'))).toBe(true);
      expect(said.filter((text) => /未扣款|幂等键|不一致|\b4\d\d\b/.test(text))).toEqual([]);
    });
  });
});

test.describe("the shopper's language", () => {
  for (const [gateway, label, code] of [
    ['stripe', '银行卡', 'insufficient_funds'],
    ['2c2p', '2C2P', '4051'],
  ] as const) {
    test(`a ${gateway} decline is explained in Chinese; the gateway's words stay in 详情`, async ({ checkout, page }) => {
      await checkout.open();
      await checkout.chooseGateway(label);
      await checkout.chooseBuyer('余额不足');
      await checkout.pay();
      await expect(checkout.status).toContainText('支付失败');
      await expect(checkout.status).toContainText('余额不足');
      await expect(checkout.status).toContainText('未扣款');
      await expect(checkout.status).not.toContainText(/[A-Za-z]/);
      const details = checkout.result.getByRole('group').filter({ hasText: '详情' });
      await details.getByText('详情').click();
      await expect(details).toContainText(code);
      await expect(details).toContainText('402');
      await expect(page.getByRole('radio', { name: label })).toBeEnabled();
    });
  }

  test('a retry says 网络不稳定 and its attempt number, never an HTTP status', async ({ checkout, page }) => {
    let calls = 0;
    await page.route('**/api/trpc/checkout.pay*', async (route) => {
      calls++;
      if (calls === 1) {
        // What the app answers when a gateway is unavailable: a tRPC error with status 503.
        return route.fulfill({
          status: 503,
          contentType: 'application/json',
          body: JSON.stringify({
            error: {
              message: 'The payment gateway is unavailable',
              code: -32603,
              data: { code: 'INTERNAL_SERVER_ERROR', httpStatus: 503, reason: 'GATEWAY_UNAVAILABLE' },
            },
          }),
        });
      }
      // Slow enough for the retry's words to be read.
      await new Promise((resolve) => setTimeout(resolve, 2000));
      return route.continue();
    });
    await checkout.open();
    await checkout.pay();
    await expect(checkout.status).toContainText('网络不稳定，正在重试（第 1 次）…');
    await expect(checkout.status).not.toContainText('503');
    await expect(checkout.status).toContainText('支付成功');
  });

  test('English on request: the labels switch, and a reload keeps English', async ({ page }) => {
    await page.goto('/');
    await expect(page.getByRole('heading', { name: 'PayOnce 收银台' })).toBeVisible();
    await expect(page.locator('html')).toHaveAttribute('lang', 'zh-CN');

    await test.step('1. English: heading, gateways, buyers and the pay button', async () => {
      await page.getByRole('button', { name: 'English' }).click();
      await expect(page.getByRole('button', { name: 'English' })).toHaveAttribute('aria-pressed', 'true');
      await expect(page.getByRole('heading', { name: 'PayOnce Checkout' })).toBeVisible();
      await expect(page.getByRole('radio', { name: 'WeChat Pay' })).toBeVisible();
      await expect(page.getByRole('radio', { name: 'Bank card' })).toBeVisible();
      await expect(page.getByRole('radio', { name: 'Enough balance' })).toBeVisible();
      await expect(page.getByRole('button', { name: 'Pay now' })).toBeVisible();
      await expect(page.locator('html')).toHaveAttribute('lang', 'en');
    });

    await test.step('2. a reload keeps English; paying speaks English too', async () => {
      await page.reload();
      await expect(page.getByRole('heading', { name: 'PayOnce Checkout' })).toBeVisible();
      await expect(page.getByRole('spinbutton').first()).toBeVisible();
      await page.getByRole('button', { name: 'Pay now' }).click();
      await expect(page.getByRole('status')).toContainText('Payment successful');
      await expect(page.getByTestId('order-status')).toHaveText('Paid');
      await expect(page.getByRole('region', { name: 'Order details' })).toContainText('West Lake Longjing tea');
    });

    await test.step('3. back to 中文', async () => {
      await page.getByRole('button', { name: '中文' }).click();
      await expect(page.getByRole('heading', { name: 'PayOnce 收银台' })).toBeVisible();
      await expect(page.getByRole('status')).toContainText('支付成功');
      await expect(page.locator('html')).toHaveAttribute('lang', 'zh-CN');
    });
  });
});
