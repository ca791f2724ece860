/**
 * The customer's money across an order's whole life, with the gateway's ledger as judge: every trade
 * an order abandons is closed before it opens another or expires, and money that lands where it must
 * not stay goes back exactly once. For pairs of gateways (A, B) in which every gateway is A once and
 * B once (the whole 12-pair matrix, and each refund case for each gateway, run in node:test,
 * test/integration/order-lifetime.test.ts, in seconds; here the page, its tabs and a killed app show
 * their part):
 *
 *   decline on A → switch to B → the buyer completes the A trade late            → refused, one charge
 *   A charged but the answer lost → the other tab pays with B                    → B never charged
 *   declined on A, then on B → the order expires → the buyer pays both late      → refused, stock back
 *   declined on A, then on B → every close of B times out → the order expires anyway after the grace
 *     → the buyer pays B late → refunded once; and, by pair, the refund's answer lost or the app
 *     killed between the refund call and its commit → asked by refund id, one refund
 *     (the three refund cases in turn, pair by pair)
 *
 * Per order, once settled: succeeded charges − succeeded refunds = the amount if paid, 0 otherwise.
 */
import { randomUUID } from 'node:crypto';
import type { APIRequestContext, Page } from '@playwright/test';
import { FULL_MATRIX } from '@/e2e/fixtures';
import { DRILL_GATEWAYS, GATEWAY_LABELS, drillMs, expect, test, type Drill, type DrillGateway } from './drill';

const SECOND_APP = process.env.DRILL_SECOND_APP_URL ?? 'http://127.0.0.1:3201';
/** Each gateway followed by the next: alipay → wechatpay → stripe → 2c2p → alipay. */
const PAIRS = DRILL_GATEWAYS.map((a, i) => [a, DRILL_GATEWAYS[(i + 1) % DRILL_GATEWAYS.length]!] as const);
/**
 * Which pairs each of the four drills below runs on: the late buyer on the first, the lost answer on
 * the second, the expiry on the fourth, and the close that times out on the first three (one refund
 * case each: none, the answer lost, a crash), so that every gateway is A and B at least once. The
 * twelve-pair matrix is proved in node:test (test/integration/order-lifetime.test.ts);
 * DRILL_MATRIX=full runs every drill on every pair.
 */
const DRILL_PAIRS: readonly (readonly number[])[] = [[0], [1], [3], [0, 1, 2]];
const pairRuns = (drill: number, first: DrillGateway, second: DrillGateway): boolean =>
  FULL_MATRIX ||
  DRILL_PAIRS[drill]!.some((index) => PAIRS.length > index && PAIRS[index]![0] === first && PAIRS[index]![1] === second) ||
  // Fewer gateways than pairs named above (DRILL_GATEWAYS narrowed): every drill on the first pair.
  (PAIRS.length <= Math.max(...DRILL_PAIRS[drill]!) && PAIRS[0]![0] === first && PAIRS[0]![1] === second);
/**
 * How many tries one fault must spoil to fail one call: stripe-node retries a 5xx, a timeout or a
 * dropped connection itself (twice, same key); alipay-sdk's HTTP client re-sends a POST once after a
 * dropped connection; the other adapters do not retry.
 */
function triesPerCall(gateway: DrillGateway, action: string): number {
  if (gateway === 'stripe') return 3;
  if (gateway === 'alipay' && action !== 'fail_before_charge') return 2;
  return 1;
}

interface MoneyLedger {
  charges: { status: string; amountMinor: number; gateway: string }[];
  refunds: { status: string; amountMinor: number; gateway: string; refundId: string }[];
}

/** Succeeded charges − succeeded refunds for one order, at the gateways. */
async function moneyKept(drill: Drill, outTradeNo: string) {
  const response = await drill.request.get(`${drill.sandboxUrl}/ledger?outTradeNo=${outTradeNo}`);
  const ledger = (await response.json()) as MoneyLedger;
  const charged = ledger.charges.filter((c) => c.status === 'succeeded');
  const refunded = ledger.refunds.filter((r) => r.status === 'succeeded');
  return {
    kept: charged.reduce((sum, c) => sum + c.amountMinor, 0) - refunded.reduce((sum, r) => sum + r.amountMinor, 0),
    charges: charged,
    refunds: ledger.refunds,
  };
}

async function buyerPays(request: APIRequestContext, drill: Drill, gateway: DrillGateway, outTradeNo: string) {
  const response = await request.post(`${drill.sandboxUrl}/sandbox/${gateway}/buyer-pays`, {
    data: { outTradeNo, buyer: 'ok' },
    failOnStatusCode: false,
  });
  return { status: response.status(), body: (await response.json()) as { code?: string } };
}

const storedOrder = (page: Page) =>
  page.evaluate(
    () =>
      JSON.parse(localStorage.getItem('payonce.checkout.v1') ?? '{}').order as
        { orderId: string; outTradeNo: string; amountMinor: number } | undefined,
  );

/**
 * On the page: choose A and a buyer without money, pay, see the decline. Returns the order. With
 * `mug`, the cart is one 龙泉青瓷马克杯 instead of the default tea: a SKU no other drill leaves unpaid,
 * so its stock moves only with this order.
 */
async function declineOn(
  checkout: import('@/e2e/pages/checkout-page').CheckoutPage,
  gateway: DrillGateway,
  options: { mug?: boolean } = {},
) {
  await checkout.open();
  if (options.mug) {
    await checkout.setQuantity('西湖龙井 · 明前特级 250g', 0);
    await checkout.setQuantity('龙泉青瓷马克杯', 1);
  }
  await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
  await checkout.chooseBuyer('余额不足');
  await checkout.pay();
  await expect(checkout.status).toContainText('支付失败');
  await expect.poll(async () => (await storedOrder(checkout.page))?.outTradeNo).toMatch(/^PO/);
  return (await storedOrder(checkout.page))!;
}

for (const [first, second] of PAIRS) {
  test.describe(`${first} then ${second}`, () => {
    if (pairRuns(0, first, second))
      test(`decline on ${first} → pay with ${second} → the buyer completes the ${first} trade late: refused, one charge`, async ({
        checkout,
        drill,
        request,
      }) => {
        const order = await test.step(`1. ${first}: 余额不足, declined`, () => declineOn(checkout, first));
        await test.step(`2. switch to ${second}: paid — the ${first} trade is closed first`, async () => {
          await checkout.chooseGateway(GATEWAY_LABELS[second]);
          await checkout.chooseBuyer('余额充足');
          await checkout.pay();
          await expect(checkout.status).toContainText('支付成功');
          const state = await drill.state(order.outTradeNo);
          expect(state.trades).toEqual(
            expect.arrayContaining([
              expect.objectContaining({ gateway: first, status: 'closed' }),
              expect.objectContaining({ gateway: second, status: 'paid' }),
            ]),
          );
        });
        await test.step(`3. the buyer scans / confirms the old ${first} trade: the gateway refuses`, async () => {
          const late = await buyerPays(request, drill, first, order.outTradeNo);
          expect(late.status, JSON.stringify(late.body)).toBe(409);
          expect(late.body.code).toBe('TRADE_NOT_PAYABLE');
        });
        await test.step('4. the ledger: one charge, the order keeps exactly its amount', async () => {
          const money = await moneyKept(drill, order.outTradeNo);
          expect(money.charges.map((c) => c.gateway)).toEqual([second]);
          expect(money.kept).toBe(order.amountMinor);
          await drill.expectChargedExactlyOnce(order.outTradeNo, second);
        });
      });

    if (pairRuns(1, first, second))
      test(`${first} charged but its answer and notification lost → the other tab pays with ${second}: ${second} is never charged`, async ({
        checkout,
        drill,
        context,
      }) => {
        await drill.armSandboxFault({ gateway: first, action: 'drop_after_charge', times: triesPerCall(first, 'drop_after_charge') });
        await drill.armSandboxFault({ gateway: first, action: 'lose_notifications', times: 100 });
        await checkout.open();
        await checkout.chooseGateway(GATEWAY_LABELS[first]);
        await checkout.chooseBuyer('余额充足');
        const order =
          await test.step(`1. tab 1 pays with ${first}: charged at the gateway, but no answer and no notification reach the app; the tab is closed`, async () => {
            let seen = 0;
            await checkout.page.route('**/api/trpc/checkout.pay*', async (route) => {
              // The first request is processed in full (503: the gateway's answer was lost); the page's
              // retries never leave the tab, which the customer then closes.
              if (seen++ === 0) await route.fetch().catch(() => undefined);
              await route.abort('connectionreset');
            });
            await checkout.pay();
            await expect.poll(() => seen).toBeGreaterThanOrEqual(1);
            await expect.poll(async () => (await moneyKept(drill, (await storedOrder(checkout.page))!.outTradeNo)).charges.length).toBe(1);
            const stored = (await storedOrder(checkout.page))!;
            await checkout.page.close();
            return stored;
          });
        await test.step(`3. tab 2 pays the same order with ${second}: held (409) until the ${first} payment is settled, then paid by it`, async () => {
          const tab2 = await context.newPage();
          const key = randomUUID();
          await expect
            .poll(
              async () => {
                const response = await tab2.request.post('/api/trpc/checkout.pay', {
                  headers: { 'idempotency-key': key },
                  data: { orderId: order.orderId, gateway: second, buyer: 'ok' },
                  failOnStatusCode: false,
                });
                return response.status() === 201 ? ((await response.json()).result.data.payment.gateway as string) : response.status();
              },
              { timeout: 60_000, intervals: [1000] },
            )
            .toBe(first);
        });
        await test.step(`4. the ledger: one charge, on ${first}`, async () => {
          const money = await moneyKept(drill, order.outTradeNo);
          expect(money.charges.map((c) => c.gateway)).toEqual([first]);
          expect(money.kept).toBe(order.amountMinor);
        });
      });
  });
}

const REFUND_CASES = ['none', 'answer_lost', 'crash'] as const;
type RefundCase = (typeof REFUND_CASES)[number];
const REFUND_CASE_TITLES: Record<RefundCase, string> = {
  none: 'refunded once, with a 退款通知',
  answer_lost: "the refund's answer is lost → asked by refund id → one refund",
  crash: 'the app crashes between the refund call and its commit → asked by refund id → one refund',
};
/** Which refund case the pair (A, B) runs: the cases in turn, so that every one runs. */
const refundCaseOf = (first: DrillGateway, second: DrillGateway): RefundCase =>
  REFUND_CASES[PAIRS.findIndex(([a, b]) => a === first && b === second) % REFUND_CASES.length]!;

/** Declined on A, then on B (which closes A first): the order holds one open trade, at B. */
async function declinedOnBoth(
  checkout: import('@/e2e/pages/checkout-page').CheckoutPage,
  drill: Drill,
  first: DrillGateway,
  second: DrillGateway,
  options: { mug?: boolean } = {},
) {
  const order = await declineOn(checkout, first, options);
  await checkout.chooseGateway(GATEWAY_LABELS[second]);
  await checkout.pay();
  await expect(checkout.status).toContainText('支付失败');
  await expect
    .poll(async () => (await drill.state(order.outTradeNo)).trades.map((t) => `${t.gateway}:${t.status}`).sort())
    .toEqual([`${first}:closed`, `${second}:open`].sort());
  return order;
}

for (const [first, second] of PAIRS) {
  test.describe(`${first} then ${second}: expiry and refunds`, () => {
    if (pairRuns(2, first, second))
      test(`declined on ${first} and ${second} → expired: both trades closed first, both late buyers refused, the stock back once`, async ({
        checkout,
        drill,
        request,
      }) => {
        const stockBefore = await drill.stock('MUG-CELADON');
        const order = await declinedOnBoth(checkout, drill, first, second, { mug: true });
        expect(await drill.stock('MUG-CELADON')).toBe(stockBefore - 1);
        await drill.expireNow(order.outTradeNo);
        await expect.poll(async () => (await drill.state(order.outTradeNo)).order.status, { timeout: 30_000 }).toBe('expired');
        expect(
          (await drill.state(order.outTradeNo)).trades.every((t) => t.status === 'closed'),
          'every trade closed',
        ).toBe(true);
        expect(await drill.stock('MUG-CELADON')).toBe(stockBefore);
        for (const gateway of [first, second]) {
          const late = await buyerPays(request, drill, gateway, order.outTradeNo);
          expect(late.status, `${gateway}: ${JSON.stringify(late.body)}`).toBe(409);
        }
        expect((await moneyKept(drill, order.outTradeNo)).kept).toBe(0);
      });

    const refundCase = refundCaseOf(first, second);
    if (pairRuns(3, first, second))
      test(`declined on ${first} and ${second} → the ${second} close times out → expired after the grace → late payment → ${REFUND_CASE_TITLES[refundCase]}`, async ({
        checkout,
        drill,
        request,
      }) => {
        // Closes that time out (Stripe's SDK tries each three times), a restart, a refund lease.
        test.setTimeout(180_000);
        const order = await declinedOnBoth(checkout, drill, first, second);
        await test.step(`1. every close of the ${second} trade times out without reaching the gateway`, async () => {
          await drill.armSandboxFault({
            gateway: second,
            operation: 'close',
            action: 'timeout_before_charge',
            delayMs: drillMs(6000),
            times: 100,
          });
        });
        await test.step('2. due for expiry: the stock stays held through the grace, then the order expires anyway', async () => {
          await drill.expireNow(order.outTradeNo);
          await expect.poll(async () => (await drill.state(order.outTradeNo)).order.status, { timeout: 80_000 }).toBe('expired');
          expect((await drill.state(order.outTradeNo)).trades).toEqual(
            expect.arrayContaining([expect.objectContaining({ gateway: second, status: 'open' })]),
          );
        });
        await test.step('3. the refund faults are armed; the buyer completes both old trades late', async () => {
          await drill.request.delete(`${drill.sandboxUrl}/sandbox/faults`);
          // The close keeps timing out until the buyer has paid: the reconciler's sweep closes a trade
          // still open on an expired order, and one that got through now would leave nothing to pay late.
          await drill.armSandboxFault({
            gateway: second,
            operation: 'close',
            action: 'timeout_before_charge',
            delayMs: drillMs(6000),
            times: 100,
          });
          if (refundCase === 'answer_lost') {
            await drill.armSandboxFault({
              gateway: second,
              operation: 'refund',
              action: 'drop_after_charge',
              times: triesPerCall(second, 'drop_after_charge'),
            });
          }
          if (refundCase === 'crash') {
            // The refund worker runs on whichever instance picks the job: arm both.
            for (const base of ['', SECOND_APP]) {
              const armed = await drill.request.post(`${base}/api/faults`, {
                data: { point: 'after_refund_call', action: { kind: 'crash' }, procedure: 'refunds.process', gateway: second },
              });
              expect(armed.status(), await armed.text()).toBe(201);
            }
          }
          // Refund notifications would settle it too; lost, only the query can.
          if (refundCase !== 'none') await drill.armSandboxFault({ gateway: second, action: 'lose_notifications', times: 100 });
          const lateFirst = await buyerPays(request, drill, first, order.outTradeNo);
          expect(lateFirst.status, `the ${first} trade was closed: ${JSON.stringify(lateFirst.body)}`).toBe(409);
          const lateSecond = await buyerPays(request, drill, second, order.outTradeNo);
          expect(lateSecond.status, JSON.stringify(lateSecond.body)).toBe(200);
        });
        await test.step('4. the money goes back exactly once; the order stays expired', async () => {
          if (refundCase === 'crash') await drill.waitForApp();
          await expect
            .poll(async () => (await drill.state(order.outTradeNo)).refunds.map((r) => r.status), { timeout: 120_000 })
            .toEqual(['succeeded']);
          const money = await moneyKept(drill, order.outTradeNo);
          expect(money.charges.map((c) => c.gateway)).toEqual([second]);
          expect(money.refunds.map((r) => `${r.gateway}:${r.status}`)).toEqual([`${second}:succeeded`]);
          expect(money.kept).toBe(0);
          const state = await drill.state(order.outTradeNo);
          expect(state.order.status).toBe('expired');
          if (refundCase !== 'none') expect(state.refunds[0]!.attempts, 'settled by a second run').toBeGreaterThanOrEqual(2);
          await expect
            .poll(async () => (await drill.state(order.outTradeNo)).refundEmails, { timeout: 30_000 })
            .toEqual({ queued: 1, sent: 1 });
        });
      });
  });
}
