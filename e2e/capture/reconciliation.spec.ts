/**
 * 对账 in the merchant console (/admin) on the capture stack (playwright.config.ts): a shopper pays by
 * Alipay; the sandbox's statement for the day leaves that payment out and takes ¥1.00 more fee than
 * the contract on another (injected discrepancies); the day's reconciliation — `npm run reconcile`, as finance runs it — exits 1 and prints the mismatch;
 * in the console's 对账 view a viewer reads the row and has no way to resolve it, an admin resolves it
 * and the row says who and when, and a second admin whose page was read before is refused in words
 * and shown who did. Each step's outcome is checked in the stack's database as well as on the screen.
 *
 * Operators are made in the stack's database with the accounts module, as `npm run operator` makes
 * them; the order is paid through the public API with a sandbox test buyer.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { expect, test as base, type APIRequestContext, type Browser, type Locator, type Page, type TestInfo } from '@playwright/test';
import { openDatabase } from '@/db/client';
import { openGroundTruth, type GroundTruthSql } from '@/e2e/drills/ground-truth';
import { addOperator } from '@/server/operators/accounts';

const SANDBOX_URL = process.env.CAPTURE_SANDBOX_URL ?? 'http://127.0.0.1:4310';
const DISCREPANCIES = `${SANDBOX_URL}/sandbox/statements/discrepancies`;
/** Variables that configure a real gateway: left out, so the reconciliation reads the capture sandbox's statements. */
const GATEWAY_VARIABLE = /^(ALIPAY|WECHATPAY|STRIPE|TWOC2P)_/;

interface Account {
  username: string;
  password: string;
}

interface Accounts {
  admin: Account;
  secondAdmin: Account;
  viewer: Account;
}

interface PaidOrder {
  orderId: string;
  outTradeNo: string;
  amountMinor: number;
}

/** The console's 对账 view as an operator sees it. */
class ReconciliationConsole {
  readonly heading: Locator;

  constructor(readonly page: Page) {
    this.heading = page.getByRole('heading', { name: '对账差异' });
  }

  async signIn(account: Account) {
    await this.page.goto('/admin');
    await this.page.getByLabel('用户名').fill(account.username);
    await this.page.getByLabel('密码').fill(account.password);
    await this.page.getByRole('button', { name: '登录' }).click();
    await expect(this.page.getByTestId('operator-name')).toHaveText(account.username);
  }

  async openReconciliation() {
    await this.page.getByRole('tab', { name: /对账/ }).click();
    await expect(this.heading).toBeVisible();
  }

  /** The mismatch's row: its out_trade_no names it. */
  row(outTradeNo: string): Locator {
    return this.page.getByTestId('mismatch-row').filter({ hasText: outTradeNo });
  }

  async resolve(outTradeNo: string, resolution: string) {
    const row = this.row(outTradeNo);
    await row.getByLabel('处理说明').fill(resolution);
    await row.getByRole('button', { name: '处理', exact: true }).click();
  }
}

const test = base.extend<{ adminConsole: ReconciliationConsole }, { accounts: Accounts; database: GroundTruthSql }>({
  accounts: [
    // eslint-disable-next-line no-empty-pattern -- Playwright reads a fixture's dependencies from its first parameter
    async ({}, use) => {
      const handle = openDatabase(process.env.CAPTURE_DATABASE_URL!, { max: 1 });
      const add = async (role: 'admin' | 'viewer'): Promise<Account> => {
        const account = { username: `${role}-${randomUUID().slice(0, 8)}`, password: `reconciliation walk ${randomUUID()}` };
        await addOperator(handle.db, { ...account, role }, 'e2e:reconciliation.spec');
        return account;
      };
      let accounts: Accounts;
      try {
        accounts = { admin: await add('admin'), secondAdmin: await add('admin'), viewer: await add('viewer') };
      } finally {
        await handle.sql.end({ timeout: 5 });
      }
      await use(accounts);
    },
    { scope: 'worker' },
  ],
  database: [
    // eslint-disable-next-line no-empty-pattern -- Playwright reads a fixture's dependencies from its first parameter
    async ({}, use) => {
      const sql = openGroundTruth(process.env.CAPTURE_DATABASE_URL);
      await use(sql);
      await sql.end({ timeout: 5 });
    },
    { scope: 'worker' },
  ],
  adminConsole: async ({ page }, use) => {
    await use(new ReconciliationConsole(page));
  },
});

/** Today in Beijing: Alipay's statement day (server/reconciliation/reconcile-day.ts STATEMENT_TIME_ZONES). */
const beijingToday = () =>
  new Intl.DateTimeFormat('en-CA', { timeZone: 'Asia/Shanghai', year: 'numeric', month: '2-digit', day: '2-digit' }).format(new Date());

/** A shopper's order paid by Alipay with the sandbox's test buyer: 201, paid. */
async function paidByAlipay(request: APIRequestContext): Promise<PaidOrder> {
  // The first request opens the shopper's session, which the mutations' keys are scoped to.
  expect((await request.get('/api/trpc/checkout.products')).status()).toBe(200);
  const created = await request.post('/api/trpc/checkout.createOrder', {
    data: { items: [{ sku: 'TEA-LONGJING', quantity: 1 }] },
    headers: { 'idempotency-key': randomUUID() },
  });
  expect(created.status(), await created.text()).toBe(201);
  const order = ((await created.json()) as { result: { data: PaidOrder } }).result.data;
  const paid = await request.post('/api/trpc/checkout.pay', {
    data: { orderId: order.orderId, gateway: 'alipay', buyer: 'ok' },
    headers: { 'idempotency-key': randomUUID() },
  });
  expect(paid.status(), await paid.text()).toBe(201);
  expect(((await paid.json()) as { result: { data: { status: string } } }).result.data.status).toBe('paid');
  return { orderId: order.orderId, outTradeNo: order.outTradeNo, amountMinor: order.amountMinor };
}

/**
 * `npm run reconcile -- --date <date> --gateway alipay` against the capture stack's database, its
 * gateways the capture sandbox's (no gateway variables: the command asks PSP_SANDBOX_URL for them).
 */
async function reconcile(date: string): Promise<{ code: number | null; output: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: process.env.CAPTURE_DATABASE_URL, PSP_SANDBOX_URL: SANDBOX_URL };
  for (const name of Object.keys(env)) if (GATEWAY_VARIABLE.test(name)) delete env[name];
  const child = spawn('npm', ['run', '-s', 'reconcile', '--', '--date', date, '--gateway', 'alipay'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });
  return { code, output };
}

/** Another operator's browser, as the project configures one (its own cookies: its own sign-in). */
async function secondBrowser(browser: Browser, testInfo: TestInfo): Promise<ReconciliationConsole> {
  const context = await browser.newContext({
    baseURL: testInfo.project.use.baseURL,
    locale: 'zh-CN',
    viewport: { width: 1280, height: 900 },
  });
  return new ReconciliationConsole(await context.newPage());
}

async function mismatchRow(database: GroundTruthSql, outTradeNo: string) {
  return database<{ kind: string; resolved_by: string | null; resolution: string | null; resolved: boolean }[]>`
    select kind, resolved_by, resolution, resolved_at is not null as resolved
      from reconciliation_mismatches where gateway = 'alipay' and out_trade_no = ${outTradeNo}`;
}

test.describe('对账 in the merchant console', () => {
  test.use({ viewport: { width: 1280, height: 900 } });
  const date = beijingToday();

  test.afterEach(async ({ request }) => {
    const cleared = await request.delete(`${DISCREPANCIES}?gateway=alipay&date=${date}`);
    expect(cleared.status()).toBe(204);
  });

  test('a payment the Alipay statement leaves out: reconciled, read by a viewer, resolved once by an admin', async ({
    adminConsole,
    accounts,
    database,
    browser,
    page,
  }, testInfo) => {
    test.setTimeout(180_000);
    const money = (minor: number) => `¥${(minor / 100).toFixed(2)}`;

    const { order, overcharged } =
      await test.step('1. two shoppers pay by Alipay; the statement leaves one payment out and takes ¥1.00 too much fee on the other', async () => {
        // The other payment keeps a line on the day's bill: Alipay answers a day with no lines
        // 账单不存在 (isp.bill_not_exist), which the reconciliation takes for no statement, not a mismatch.
        const overcharged = await paidByAlipay(page.request);
        const order = await paidByAlipay(page.request);
        for (const data of [
          { gateway: 'alipay', date, kind: 'missing_payment', outTradeNo: order.outTradeNo },
          { gateway: 'alipay', date, kind: 'fee_differs', outTradeNo: overcharged.outTradeNo, amountMinor: 100 },
        ]) {
          const injected = await page.request.post(DISCREPANCIES, { data });
          expect(injected.status(), await injected.text()).toBe(201);
        }
        return { order, overcharged };
      });

    await test.step('2. npm run reconcile for the day: exit 1, the missing payment printed, one open row recorded', async () => {
      const { code, output } = await reconcile(date);
      expect(output).toMatch(
        new RegExp(`missing_payment\\s+\\S+\\s+${order.outTradeNo}\\s+ours ${order.amountMinor} CNY; not on the statement`),
      );
      // 0.6 % of the amount, the contract the sandbox publishes with its credentials: ¥1.00 less than the bill's.
      const contractFee = Math.round(overcharged.amountMinor * 0.006);
      expect(output).toContain(`fee_differs`);
      expect(output).toContain(
        `${overcharged.outTradeNo}  ours ${overcharged.amountMinor} CNY; gateway ${overcharged.amountMinor} CNY; fee ${contractFee + 100}, contract ${contractFee}`,
      );
      expect(output).toMatch(/fees \d+\.\d{2} checked against the contract/);
      expect(code, output).toBe(1);
      expect(await mismatchRow(database, order.outTradeNo)).toEqual([
        { kind: 'missing_payment', resolved_by: null, resolution: null, resolved: false },
      ]);
      expect(await mismatchRow(database, overcharged.outTradeNo)).toEqual([
        { kind: 'fee_differs', resolved_by: null, resolution: null, resolved: false },
      ]);
    });

    await test.step('3. a viewer reads the row under 对账 and is told only an admin resolves it: no form anywhere', async () => {
      const viewer = await secondBrowser(browser, testInfo);
      await viewer.signIn(accounts.viewer);
      await viewer.openReconciliation();
      const row = viewer.row(order.outTradeNo);
      await expect(row).toContainText('支付宝');
      await expect(row).toContainText('我方已记账、对账单未见');
      await expect(row.getByTestId('mismatch-ours')).toHaveText(money(order.amountMinor));
      await expect(row.getByTestId('mismatch-theirs')).toHaveText('未见');
      await expect(row).toContainText('待管理员处理');
      await expect(viewer.page.getByTestId('recon-admin-only')).toHaveText('只有管理员可以处理对账差异；你的角色（查看员）可以查看。');
      await expect(viewer.page.getByRole('button', { name: '处理', exact: true })).toHaveCount(0);
      await expect(viewer.page.getByLabel('处理说明')).toHaveCount(0);
      await viewer.page.context().close();
    });

    // A second admin opens 对账 now: their page holds the row as open while the first admin resolves it.
    const secondAdmin = await test.step('4. a second admin opens 对账 too: the row is open, with its form', async () => {
      const second = await secondBrowser(browser, testInfo);
      await second.signIn(accounts.secondAdmin);
      await second.openReconciliation();
      await expect(second.row(order.outTradeNo).getByRole('button', { name: '处理', exact: true })).toBeVisible();
      return second;
    });

    await test.step('5. the admin’s 对账: the day, 支付宝, 我方已记账、对账单未见, our amount beside the statement’s', async () => {
      await adminConsole.signIn(accounts.admin);
      await adminConsole.openReconciliation();
      await expect(page.getByRole('heading', { name: `对账日 ${date}` })).toBeVisible();
      const row = adminConsole.row(order.outTradeNo);
      await expect(row).toContainText('支付宝');
      await expect(row).toContainText('我方已记账、对账单未见');
      await expect(row.getByTestId('mismatch-ours')).toHaveText(money(order.amountMinor));
      await expect(row.getByTestId('mismatch-theirs')).toHaveText('未见');
      await expect(page.getByTestId('recon-admin-only')).toHaveCount(0);

      const fee = adminConsole.row(overcharged.outTradeNo);
      await expect(fee).toContainText('手续费与签约费率不符');
      await expect(fee.getByTestId('mismatch-ours')).toContainText('按签约费率手续费');
      await expect(fee.getByTestId('mismatch-theirs')).toContainText('手续费差额 +¥1.00');
    });

    await test.step('6. 处理 with nothing written is refused in words, and nothing is sent', async () => {
      const sent: string[] = [];
      page.on('request', (request) => {
        if (request.url().includes('operator.resolveMismatch')) sent.push(request.url());
      });
      await adminConsole.row(order.outTradeNo).getByRole('button', { name: '处理', exact: true }).click();
      await expect(adminConsole.row(order.outTradeNo)).toContainText('请写明处理说明（1–500 字）。');
      expect(sent).toEqual([]);
    });

    await test.step('7. the admin resolves it: the row says who and when, its form gone; the database agrees', async () => {
      const headers: Record<string, string>[] = [];
      page.on('request', (request) => {
        if (request.url().includes('operator.resolveMismatch')) headers.push(request.headers());
      });
      await adminConsole.resolve(order.outTradeNo, '渠道后台已查到此笔，次日对账单补记');
      const row = adminConsole.row(order.outTradeNo);
      await expect(row.getByTestId('mismatch-resolved')).toContainText(`已处理：${accounts.admin.username}，`);
      await expect(row.getByTestId('mismatch-resolved')).toContainText('渠道后台已查到此笔，次日对账单补记');
      await expect(row.getByLabel('处理说明')).toHaveCount(0);
      await page.screenshot({ path: testInfo.outputPath('reconciliation.png'), fullPage: true, animations: 'disabled' });
      expect(headers).toHaveLength(1);
      expect(headers[0]!['x-csrf-token']).toBeTruthy();
      expect(await mismatchRow(database, order.outTradeNo)).toEqual([
        {
          kind: 'missing_payment',
          resolved_by: `operator:${accounts.admin.username}`,
          resolution: '渠道后台已查到此笔，次日对账单补记',
          resolved: true,
        },
      ]);
    });

    await test.step('8. the second admin resolves it from the page read before: refused in words, shown who did; nothing changes', async () => {
      await secondAdmin.resolve(order.outTradeNo, '我也处理一下');
      const row = secondAdmin.row(order.outTradeNo);
      await expect(row.getByTestId('resolve-outcome')).toContainText('未记录：这条差异已经有人处理过了');
      await expect(row.getByTestId('mismatch-resolved')).toContainText(`已处理：${accounts.admin.username}，`);
      await expect(row.getByLabel('处理说明')).toHaveCount(0);
      const [stored] = await mismatchRow(database, order.outTradeNo);
      expect(stored?.resolution).toBe('渠道后台已查到此笔，次日对账单补记');
      await secondAdmin.page.context().close();
    });

    await test.step('9. its out_trade_no opens the order under 订单', async () => {
      await adminConsole.row(order.outTradeNo).getByRole('button', { name: order.outTradeNo }).click();
      await expect(page.getByRole('tab', { name: '订单' })).toHaveAttribute('aria-selected', 'true');
      await expect(page.getByRole('heading', { name: new RegExp(order.outTradeNo) })).toBeVisible();
      await expect(page.getByTestId('console-order-status')).toHaveText('已支付');
    });
  });
});
