/**
 * Authorise, then capture, as a shop that charges at shipment runs it (the capture stack:
 * STRIPE_CAPTURE_METHOD=manual, playwright.config.ts): the buyer pays by card on the page and only a
 * hold is placed; the merchant's back office captures it — through a lost answer, a retry and a
 * second operator — or releases it, or the hold lapses at the gateway. Each drill asserts on the
 * sandbox's ledger (money taken) and the app's database (order, stock, decision).
 */
import { randomUUID } from 'node:crypto';
import { expect, test as base, type APIRequestContext, type Page } from '@playwright/test';
import { CheckoutPage } from '@/e2e/pages/checkout-page';
import { openGroundTruth, type GroundTruthSql } from '@/e2e/drills/ground-truth';

const SANDBOX_URL = process.env.CAPTURE_SANDBOX_URL ?? 'http://127.0.0.1:4310';
const TOKEN = process.env.CAPTURE_MERCHANT_TOKEN ?? '';
const CARD = '4242424242424242';

/** The merchant's back office and the ground truth, over the capture stack. */
class Shop {
  constructor(
    readonly request: APIRequestContext,
    readonly database: GroundTruthSql,
  ) {}

  /** merchant.capture / merchant.release with the merchant's token; the HTTP status and body. */
  async decide(procedure: 'merchant.capture' | 'merchant.release', input: Record<string, unknown>, key = randomUUID()) {
    const response = await this.request.post(`/api/trpc/${procedure}`, {
      data: input,
      headers: { authorization: `Bearer ${TOKEN}`, 'idempotency-key': key },
    });
    return {
      status: response.status(),
      body: (await response.json()) as Record<string, any>,
      replayed: response.headers()['idempotency-replayed'],
    };
  }

  async order(outTradeNo: string) {
    const [order] = await this.database<{ id: string; status: string; amount_minor: number }[]>`
      select id, status, amount_minor from orders where out_trade_no = ${outTradeNo}`;
    expect(order, `order ${outTradeNo}`).toBeDefined();
    return order!;
  }

  async decisions(orderId: string) {
    return this.database<{ action: string; status: string; amount_minor: number | null }[]>`
      select action, status, amount_minor from authorization_actions where order_id = ${orderId} order by created_at`;
  }

  /** Money taken at Stripe for the order, by the sandbox's ledger. */
  async taken(outTradeNo: string): Promise<{ charges: number; amountMinor: number }> {
    const response = await this.request.get(`${SANDBOX_URL}/ledger?outTradeNo=${outTradeNo}`);
    const ledger = (await response.json()) as { charges: { status: string; amountMinor: number }[] };
    const taken = ledger.charges.filter((c) => c.status === 'succeeded');
    return { charges: taken.length, amountMinor: taken.reduce((sum, c) => sum + c.amountMinor, 0) };
  }

  async stock(sku: string): Promise<number> {
    const [row] = await this.database<{ stock: number }[]>`select stock from products where sku = ${sku}`;
    return row!.stock;
  }

  async paymentIntent(outTradeNo: string): Promise<string> {
    const [row] = await this.database<{ gateway_trade_no: string }[]>`
      select p.gateway_trade_no from payments p join orders o on o.id = p.order_id
       where o.out_trade_no = ${outTradeNo} and p.role = 'payment' and p.authorized_minor is not null`;
    expect(row, 'the order’s authorisation').toBeDefined();
    return row!.gateway_trade_no;
  }

  async armAppFault(spec: Record<string, unknown>) {
    const response = await this.request.post('/api/faults', { data: spec });
    expect(response.status(), await response.text()).toBe(201);
  }
}

const test = base.extend<{ checkout: CheckoutPage; shop: Shop }, { database: GroundTruthSql }>({
  database: [
    // eslint-disable-next-line no-empty-pattern -- Playwright reads a fixture's dependencies from its first parameter
    async ({}, use) => {
      const sql = openGroundTruth(process.env.CAPTURE_DATABASE_URL);
      await use(sql);
      await sql.end({ timeout: 5 });
    },
    { scope: 'worker' },
  ],
  checkout: async ({ page }, use) => {
    await use(new CheckoutPage(page));
  },
  shop: async ({ request, database }, use) => {
    await use(new Shop(request, database));
    await request.delete('/api/faults');
  },
});

/** checkout.order as the buyer's browser asks it (their session): what they are told of the order. */
async function buyersView(page: Page, orderId: string) {
  const response = await page.request.get(`/api/trpc/checkout.order?input=${encodeURIComponent(JSON.stringify({ orderId }))}`);
  expect(response.status()).toBe(200);
  return ((await response.json()) as { result: { data: Record<string, unknown> } }).result.data;
}

/** The buyer pays by card on the page; with manual capture the page says the money is held. */
async function buyerAuthorises(checkout: CheckoutPage): Promise<string> {
  const { page } = checkout;
  await checkout.open();
  await checkout.chooseGateway('银行卡');
  await page.getByRole('radio', { name: '我自己付款' }).check();
  await checkout.pay();
  await expect(checkout.status).toContainText('等待付款');
  const card = page.frameLocator('iframe').first();
  await card.getByLabel(/卡号|Card number/).fill(CARD);
  await card.getByLabel(/有效期|MM/).fill('12 / 30');
  await card.getByLabel(/CVC/).fill('123');
  await page.getByRole('button', { name: /确认付款/ }).click();
  await expect(checkout.status).toContainText('已授权', { timeout: 30_000 });
  return checkout.paidOutTradeNo();
}

test('the buyer’s card is only held; the merchant’s capture, its answer lost, retried and repeated by a second operator, takes the money once', async ({
  checkout,
  shop,
  page,
}) => {
  const outTradeNo = await test.step('1. the buyer pays: 已授权, nothing taken', async () => {
    const outTradeNo = await buyerAuthorises(checkout);
    expect(await shop.taken(outTradeNo)).toEqual({ charges: 0, amountMinor: 0 });
    await expect(checkout.result).toContainText('发货时扣款');
    return outTradeNo;
  });
  const order = await shop.order(outTradeNo);
  expect(order.status).toBe('authorized');

  await test.step('2. the capture commits, its answer is lost; the retry gets the stored answer', async () => {
    await shop.armAppFault({ point: 'after_commit', procedure: 'merchant.capture', action: { kind: 'throw' } });
    const key = randomUUID();
    const lost = await shop.decide('merchant.capture', { orderId: order.id }, key);
    expect(lost.status).toBe(503);
    const retried = await shop.decide('merchant.capture', { orderId: order.id }, key);
    expect(retried.status).toBe(202);
    expect(retried.replayed).toBe('true');
    const second = await shop.decide('merchant.capture', { orderId: order.id });
    expect(second.status, 'a second operator asking the same capture gets the same decision').toBe(202);
  });

  await test.step('3. the worker captures once; the order is paid, as the buyer’s own view of it says', async () => {
    await expect.poll(async () => (await shop.order(outTradeNo)).status, { timeout: 30_000 }).toBe('paid');
    expect(await shop.taken(outTradeNo)).toEqual({ charges: 1, amountMinor: order.amount_minor });
    expect(await shop.decisions(order.id)).toEqual([{ action: 'capture', status: 'succeeded', amount_minor: order.amount_minor }]);
    expect(await buyersView(page, order.id)).toMatchObject({
      status: 'paid',
      payments: [{ status: 'succeeded', amountMinor: order.amount_minor }],
    });
  });
});

test('two operators capture different amounts at once: one decision, one capture of that amount', async ({ checkout, shop }) => {
  const outTradeNo = await buyerAuthorises(checkout);
  const order = await shop.order(outTradeNo);
  const answers = await Promise.all([
    shop.decide('merchant.capture', { orderId: order.id }),
    shop.decide('merchant.capture', { orderId: order.id, amountMinor: 1000 }),
  ]);
  expect(answers.map((a) => a.status).sort()).toEqual([202, 409]);
  const won = answers.find((a) => a.status === 202)!.body.result.data.amountMinor as number;
  await expect.poll(async () => (await shop.order(outTradeNo)).status, { timeout: 30_000 }).toBe('paid');
  expect(await shop.taken(outTradeNo)).toEqual({ charges: 1, amountMinor: won });
});

test('the merchant releases the hold: the order is voided, its stock back, nothing taken, a later capture refused', async ({
  checkout,
  shop,
  page,
}) => {
  const sku = 'TEA-LONGJING'; // the page's default cart: one of it
  const before = await shop.stock(sku);
  const outTradeNo = await buyerAuthorises(checkout);
  const order = await shop.order(outTradeNo);
  expect((await shop.decide('merchant.release', { orderId: order.id })).status).toBe(202);
  await expect.poll(async () => (await shop.order(outTradeNo)).status, { timeout: 30_000 }).toBe('voided');
  expect(await shop.stock(sku)).toBe(before);
  expect((await shop.decide('merchant.capture', { orderId: order.id })).status).toBe(409);
  expect(await shop.taken(outTradeNo)).toEqual({ charges: 0, amountMinor: 0 });
  expect(await buyersView(page, order.id)).toMatchObject({ status: 'voided', payments: [{ status: 'voided' }] });
});

test('the hold lapses at the gateway: the order is voided by its notification, and a capture decided too late takes nothing', async ({
  checkout,
  shop,
  request,
}) => {
  const outTradeNo = await buyerAuthorises(checkout);
  const order = await shop.order(outTradeNo);
  const paymentIntent = await shop.paymentIntent(outTradeNo);
  const lapse = await request.post(`${SANDBOX_URL}/sandbox/stripe/lapse-authorization`, { data: { paymentIntent } });
  expect(lapse.status(), await lapse.text()).toBe(200);
  await expect.poll(async () => (await shop.order(outTradeNo)).status, { timeout: 30_000 }).toBe('voided');
  const late = await shop.decide('merchant.capture', { orderId: order.id });
  expect(late.status).toBe(409);
  expect(late.body.error.data.reason).toBe('AUTHORIZATION_RELEASED');
  expect(await shop.taken(outTradeNo)).toEqual({ charges: 0, amountMinor: 0 });
});
