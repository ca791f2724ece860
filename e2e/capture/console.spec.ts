/**
 * The merchant console (/admin) on the capture stack (STRIPE_CAPTURE_METHOD=manual, playwright.config.ts):
 * an operator signs in, finds an authorised order and captures it — a double click sends one
 * request, and an answer lost on its way back is asked again under the same key, each taking the
 * money once by the sandbox's ledger; a refunder refunds part of the paid order, clicking twice, and
 * the gateway refunds exactly that once; a viewer sees the order and no way to move its money; a wrong
 * password is refused in words.
 *
 * Operators are made in the stack's database with the accounts module, as `npm run operator` makes
 * them; orders are authorised through the public API with a sandbox test buyer.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { expect, test as base, type APIRequestContext, type Locator, type Page, type TestInfo } from '@playwright/test';
import { openDatabase } from '@/db/client';
import { addOperator } from '@/server/operators/accounts';

const SANDBOX_URL = process.env.CAPTURE_SANDBOX_URL ?? 'http://127.0.0.1:4310';

interface Account {
  username: string;
  password: string;
}

interface AuthorisedOrder {
  orderId: string;
  outTradeNo: string;
  amountMinor: number;
}

/** The console as an operator sees it. */
class ConsolePage {
  readonly orderStatus: Locator;
  readonly outcome: Locator;
  readonly operatorName: Locator;

  constructor(readonly page: Page) {
    this.orderStatus = page.getByTestId('console-order-status');
    this.outcome = page.getByTestId('action-outcome');
    this.operatorName = page.getByTestId('operator-name');
  }

  async signIn(account: Account) {
    await this.page.goto('/admin');
    await this.page.getByLabel('用户名').fill(account.username);
    await this.page.getByLabel('密码').fill(account.password);
    await this.page.getByRole('button', { name: '登录' }).click();
  }

  async filter(status: string) {
    await this.page.getByRole('group', { name: '按状态筛选' }).getByRole('button', { name: status, exact: true }).click();
  }

  /** Filters the list by a status and opens the order from it. */
  async openOrder(status: string, outTradeNo: string) {
    await this.filter(status);
    await this.page.getByRole('button', { name: outTradeNo }).click();
    await expect(this.page.getByRole('heading', { name: new RegExp(outTradeNo) })).toBeVisible();
  }

  /** The order's row in the list (the journal's rows name it too). */
  orderRow(outTradeNo: string): Locator {
    return this.page.getByRole('table', { name: '订单', exact: true }).getByRole('row', { name: new RegExp(outTradeNo) });
  }

  button(name: string): Locator {
    return this.page.getByRole('button', { name, exact: true });
  }
}

const test = base.extend<{ admin: ConsolePage }, { accounts: { refunder: Account; viewer: Account } }>({
  accounts: [
    // eslint-disable-next-line no-empty-pattern -- Playwright reads a fixture's dependencies from its first parameter
    async ({}, use) => {
      const handle = openDatabase(process.env.CAPTURE_DATABASE_URL!, { max: 1 });
      const add = async (role: 'refunder' | 'viewer'): Promise<Account> => {
        const account = { username: `${role}-${randomUUID().slice(0, 8)}`, password: `console walk ${randomUUID()}` };
        await addOperator(handle.db, { ...account, role }, 'e2e:console.spec');
        return account;
      };
      let accounts: { refunder: Account; viewer: Account };
      try {
        accounts = { refunder: await add('refunder'), viewer: await add('viewer') };
      } finally {
        await handle.sql.end({ timeout: 5 });
      }
      await use(accounts);
    },
    { scope: 'worker' },
  ],
  admin: async ({ page }, use) => {
    await use(new ConsolePage(page));
  },
});

/** A shopper's order paid by card with manual capture: 201, the money only held. */
async function authorisedOrder(request: APIRequestContext): Promise<AuthorisedOrder> {
  // The first request opens the shopper's session, which the mutations' keys are scoped to.
  expect((await request.get('/api/trpc/checkout.products')).status()).toBe(200);
  const created = await request.post('/api/trpc/checkout.createOrder', {
    data: { items: [{ sku: 'TEA-LONGJING', quantity: 1 }] },
    headers: { 'idempotency-key': randomUUID() },
  });
  expect(created.status(), await created.text()).toBe(201);
  const order = ((await created.json()) as { result: { data: AuthorisedOrder } }).result.data;
  const paid = await request.post('/api/trpc/checkout.pay', {
    data: { orderId: order.orderId, gateway: 'stripe', buyer: 'ok' },
    headers: { 'idempotency-key': randomUUID() },
  });
  expect(paid.status(), await paid.text()).toBe(201);
  expect(((await paid.json()) as { result: { data: { status: string } } }).result.data.status).toBe('authorized');
  return { orderId: order.orderId, outTradeNo: order.outTradeNo, amountMinor: order.amountMinor };
}

/** The charges Stripe took for the order, by the sandbox's own ledger. */
async function succeededCharges(request: APIRequestContext, outTradeNo: string) {
  const response = await request.get(`${SANDBOX_URL}/ledger?outTradeNo=${encodeURIComponent(outTradeNo)}`);
  expect(response.status()).toBe(200);
  const ledger = (await response.json()) as { charges: { status: string; amountMinor: number }[] };
  return ledger.charges.filter((c) => c.status === 'succeeded').map((c) => c.amountMinor);
}

/** Into docs/screenshots/ with UPDATE_SCREENSHOTS=1, as the README's screenshots are; else into the test's output. */
async function screenshot(page: Page, testInfo: TestInfo) {
  const file =
    process.env.UPDATE_SCREENSHOTS === '1' ? path.join('docs', 'screenshots', 'console.png') : testInfo.outputPath('console.png');
  await page.screenshot({ path: file, animations: 'disabled' });
}

test.describe('the merchant console', () => {
  test.use({ viewport: { width: 1280, height: 900 } });

  test('a refunder double-clicks 扣款 on an authorised order: one capture request, one charge, 已支付', async ({
    admin,
    accounts,
    page,
  }, testInfo) => {
    const order = await test.step('1. a shopper’s card is authorised: nothing taken yet', async () => {
      const order = await authorisedOrder(page.request);
      expect(await succeededCharges(page.request, order.outTradeNo)).toEqual([]);
      return order;
    });

    await test.step('2. the refunder signs in: their name and role in the header', async () => {
      await admin.signIn(accounts.refunder);
      await expect(admin.operatorName).toHaveText(accounts.refunder.username);
      await expect(page.getByTestId('operator-role')).toHaveText('退款员');
    });

    await test.step('3. the order under 已授权: held, with 扣款 (all of it by default) and 释放授权', async () => {
      await admin.openOrder('已授权', order.outTradeNo);
      await expect(admin.orderStatus).toContainText('已授权');
      await expect(page.getByLabel(/扣款金额/)).toHaveValue((order.amountMinor / 100).toFixed(2));
      await expect(admin.button('释放授权')).toBeEnabled();
    });

    const captures = await test.step('4. a double click on 扣款 sends one request, with its key and CSRF token', async () => {
      const sent: Record<string, string>[] = [];
      page.on('request', (request) => {
        if (request.url().includes('/api/trpc/merchant.capture')) sent.push(request.headers());
      });
      await admin.button('扣款').dblclick();
      await expect(admin.outcome).toContainText('已受理');
      expect(sent).toHaveLength(1);
      expect(sent[0]!['idempotency-key']).toMatch(/^[0-9a-f-]{36}$/);
      expect(sent[0]!['x-csrf-token']).toBeTruthy();
      return sent;
    });

    await test.step('5. the console follows the capture until it settles: 已支付, one charge in the ledger', async () => {
      await expect(admin.orderStatus).toHaveText('已支付', { timeout: 30_000 });
      await expect(admin.outcome).toContainText('渠道已确认');
      expect(await succeededCharges(page.request, order.outTradeNo)).toEqual([order.amountMinor]);
      expect(captures, 'no request after the answer either').toHaveLength(1);
      await expect(page.getByTestId('payment-row')).toContainText('已扣款');
      await expect(page.locator('tr[data-kind="payment.captured"]')).toContainText('请款成功');
      await expect(admin.button('扣款')).toHaveCount(0);
      await expect(admin.button('退款')).toBeVisible();
    });

    await test.step('6. the list follows: the order is under 已支付 now', async () => {
      await admin.filter('已支付');
      await expect(admin.orderRow(order.outTradeNo)).toContainText('已支付');
      await screenshot(page, testInfo);
    });

    await test.step('7. 退出: the sign-in form is back', async () => {
      await admin.button('退出').click();
      await expect(admin.button('登录')).toBeVisible();
      await expect(admin.operatorName).toHaveCount(0);
    });
  });

  test('the capture’s answer is lost on its way back: the console asks again under the same key, and the money is taken once', async ({
    admin,
    accounts,
    page,
  }) => {
    const order = await authorisedOrder(page.request);
    const keys: string[] = [];
    // The first capture reaches the server and is decided; its answer never reaches the page.
    await page.route('**/api/trpc/merchant.capture', async (route) => {
      keys.push(route.request().headers()['idempotency-key'] ?? '');
      if (keys.length > 1) return route.continue();
      const response = await route.fetch();
      expect(response.status()).toBe(202);
      await route.abort('connectionreset');
    });
    await admin.signIn(accounts.refunder);
    await admin.openOrder('已授权', order.outTradeNo);
    await admin.button('扣款').click();
    await expect(admin.outcome).toContainText('已受理');
    expect(keys).toHaveLength(2);
    expect(keys[1], 'the retry carries the first try’s key').toBe(keys[0]);
    await expect(admin.orderStatus).toHaveText('已支付', { timeout: 30_000 });
    expect(await succeededCharges(page.request, order.outTradeNo)).toEqual([order.amountMinor]);
  });

  test('a refunder refunds part of a paid order, clicking twice: one refund of exactly that amount at the gateway', async ({
    admin,
    accounts,
    page,
  }) => {
    const order = await authorisedOrder(page.request);
    await admin.signIn(accounts.refunder);
    await admin.openOrder('已授权', order.outTradeNo);
    await admin.button('扣款').click();
    await expect(admin.orderStatus).toHaveText('已支付', { timeout: 30_000 });

    const sent: string[] = [];
    page.on('request', (request) => {
      if (request.url().includes('/api/trpc/merchant.refund')) sent.push(request.headers()['idempotency-key'] ?? '');
    });
    await page.getByLabel(/退款金额/).fill('50.00');
    await page.getByLabel('退款原因').fill('买家退回一盒');
    await admin.button('退款').dblclick();
    await expect(admin.outcome).toContainText('已受理：退款 ¥50.00');
    expect(sent, 'a double click sends one refund').toHaveLength(1);
    await expect(page.getByTestId('refund-row')).toContainText('已退款', { timeout: 30_000 });
    await expect(page.getByTestId('refund-row')).toContainText(`operator:${accounts.refunder.username}`);
    await expect(page.getByLabel(/退款金额/)).toHaveValue(((order.amountMinor - 5000) / 100).toFixed(2));

    const ledger = (await (await page.request.get(`${SANDBOX_URL}/ledger?outTradeNo=${order.outTradeNo}`)).json()) as {
      refunds: { status: string; amountMinor: number }[];
    };
    expect(ledger.refunds.filter((r) => r.status === 'succeeded').map((r) => r.amountMinor)).toEqual([5000]);
    expect(await succeededCharges(page.request, order.outTradeNo)).toEqual([order.amountMinor]);
  });

  test('a viewer sees an authorised order and no way to move its money', async ({ admin, accounts, page }) => {
    const order = await authorisedOrder(page.request);
    await admin.signIn(accounts.viewer);
    await expect(page.getByTestId('operator-role')).toHaveText('查看员');
    await admin.openOrder('已授权', order.outTradeNo);
    await expect(admin.orderStatus).toContainText('已授权');
    await expect(page.getByTestId('viewer-note')).toContainText('只能查看');
    for (const name of ['扣款', '释放授权', '退款']) await expect(admin.button(name)).toHaveCount(0);
    expect(await succeededCharges(page.request, order.outTradeNo)).toEqual([]);
  });

  test('a wrong password is refused in words, and nobody is signed in', async ({ admin, accounts, page }) => {
    await admin.signIn({ username: accounts.refunder.username, password: 'not the password at all' });
    await expect(page.getByTestId('sign-in-refusal')).toHaveText('用户名或密码错误，或该账户已停用。');
    await expect(admin.operatorName).toHaveCount(0);
    expect((await page.request.get('/api/operator/session')).status()).toBe(401);
  });
});
