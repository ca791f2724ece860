/**
 * The drill harness: the checkout page, the app's fault injection, the sandbox's faults, and the
 * ground truth — the sandbox's ledger and the app's database — that every drill asserts on.
 */
import { test as base, expect, type APIRequestContext, type Page } from '@playwright/test';
import { GATEWAY_IDS, type GatewayId } from '@/server/payments/gateway-ids';
import { FULL_MATRIX } from '@/e2e/fixtures';
import { CheckoutPage } from '@/e2e/pages/checkout-page';
import { expireNow, openGroundTruth, orderState, type GroundTruthSql, type OrderState } from './ground-truth';

export type { OrderState } from './ground-truth';

export type DrillGateway = GatewayId;

/** The gateways every drill runs for (DRILL_GATEWAYS=alipay,stripe narrows it). */
export const DRILL_GATEWAYS: DrillGateway[] = (process.env.DRILL_GATEWAYS ?? GATEWAY_IDS.join(','))
  .split(',')
  .map((g) => g.trim())
  .filter(Boolean) as DrillGateway[];

/**
 * Whether drill number `drill` of a spec file runs for `gateway`. The gateway × failure matrices are
 * proved in node:test, where a case costs a second (test/integration/failure-matrix.test.ts and
 * gateway-contract.test.ts); the browser proves what only a browser shows — the page's retries, the
 * key it keeps across a reload, two tabs, what it says — once per drill, the drills of a file taking
 * the gateways in turn so that every gateway meets the page. DRILL_MATRIX=full runs every drill on
 * every gateway of DRILL_GATEWAYS.
 */
export function drillRunsOn(drill: number, gateway: DrillGateway): boolean {
  if (FULL_MATRIX) return true;
  return DRILL_GATEWAYS[drill % DRILL_GATEWAYS.length] === gateway;
}

/**
 * A duration on the drills' clock: `ms` × DRILL_TIME_SCALE (playwright.config.ts), for a gateway delay
 * that must outlast the drills' gateway timeout, which scales the same way.
 */
export const drillMs = (ms: number): number => Math.round(ms * Number(process.env.DRILL_TIME_SCALE ?? 1));

export const GATEWAY_LABELS: Record<DrillGateway, string> = {
  alipay: '支付宝',
  wechatpay: '微信支付',
  stripe: '银行卡',
  '2c2p': '2C2P',
};

export class Drill {
  readonly sandboxUrl = process.env.DRILL_SANDBOX_URL ?? 'http://127.0.0.1:4210';

  constructor(
    readonly request: APIRequestContext,
    readonly page: Page,
    /** The drills' own connection to the app's database (./ground-truth.ts). */
    readonly database: GroundTruthSql,
  ) {}

  async armAppFault(spec: { point: string; action: { kind: string; ms?: number }; gateway?: string; times?: number }) {
    const response = await this.request.post('/api/faults', { data: spec });
    expect(response.status(), await response.text()).toBe(201);
  }

  async armSandboxFault(spec: {
    gateway?: string;
    operation?: 'charge' | 'close' | 'refund';
    action: string;
    delayMs?: number;
    times?: number;
    copies?: number;
  }) {
    const response = await this.request.post(`${this.sandboxUrl}/sandbox/faults`, { data: spec });
    expect(response.status(), await response.text()).toBe(201);
  }

  /** The sandbox faults still armed (a fault that fired is gone). */
  async armedSandboxFaults(): Promise<unknown[]> {
    const response = await this.sandboxGet(`${this.sandboxUrl}/sandbox/faults`);
    return ((await response.json()) as { faults: unknown[] }).faults;
  }

  async clearFaults() {
    await this.waitForApp();
    await this.appGet('/api/faults'); // (rides out a restart still in progress)
    await this.request.delete('/api/faults');
    await this.request.delete(`${this.sandboxUrl}/sandbox/faults`);
  }

  /** After a crash drill: until the supervisor has the app answering again. */
  async waitForApp(timeoutMs = 60_000) {
    await expect
      .poll(
        async () => {
          try {
            return (await this.request.get('/api/health', { timeout: 5000 })).status();
          } catch {
            return 0; // connection refused while the process restarts
          }
        },
        { timeout: timeoutMs, message: 'the app answers again' },
      )
      .toBe(200);
  }

  async ledger(outTradeNo: string) {
    const response = await this.sandboxGet(`${this.sandboxUrl}/ledger?outTradeNo=${outTradeNo}`);
    return (await response.json()) as {
      charges: { status: string; amountMinor: number; gateway: string }[];
      notifications: { acknowledged: boolean }[];
    };
  }

  /**
   * A GET to the sandbox, tried again when a kept-alive connection is reset under it: the server may
   * close an idle socket just as the request goes out on it (its keep-alive timeout), which says
   * nothing about the ledger. A read, so asking again changes nothing.
   */
  async sandboxGet(url: string) {
    for (let tries = 1; ; tries++) {
      try {
        return await this.request.get(url, { timeout: 10_000 });
      } catch (error) {
        if (tries >= 3 || !/ECONNRESET|socket hang up/.test(String(error))) throw error;
      }
    }
  }

  /** What the app's database holds for the order (./ground-truth.ts). */
  async state(outTradeNo: string): Promise<OrderState> {
    const state = await orderState(this.database, outTradeNo);
    expect(state, `order ${outTradeNo} in the database`).toBeDefined();
    return state!;
  }

  /** Makes an unpaid order due for expiry now; the reconciler expires it on its next run. */
  async expireNow(outTradeNo: string) {
    expect(await expireNow(this.database, outTradeNo), `order ${outTradeNo} awaiting payment`).toBe('awaiting_payment');
  }

  /**
   * A GET to the app that rides out a crash drill's restart: a process that has just been killed
   * resets or refuses connections until the supervisor has it back.
   */
  async appGet(url: string) {
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        return await this.request.get(url, { timeout: 10_000 });
      } catch (error) {
        if (Date.now() > deadline || !/ECONNRESET|ECONNREFUSED|socket hang up/.test(String(error))) throw error;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  }

  async stock(sku: string): Promise<number> {
    const response = await this.appGet('/api/trpc/checkout.products');
    const products = (await response.json()).result.data as { sku: string; stock: number }[];
    return products.find((p) => p.sku === sku)!.stock;
  }

  /**
   * The promises of design.md §1 for one order, against the ground truth: one successful charge in
   * the gateway's ledger, one paid order with one successful payment, one confirmation email, and
   * every payment key of this customer completed (none left in flight).
   */
  async expectChargedExactlyOnce(outTradeNo: string, gateway: DrillGateway) {
    const ledger = await this.ledger(outTradeNo);
    expect(
      ledger.charges.filter((c) => c.status === 'succeeded'),
      'successful charges in the ledger',
    ).toHaveLength(1);
    expect(ledger.charges.find((c) => c.status === 'succeeded')!.gateway).toBe(gateway);
    await expect
      .poll(async () => (await this.state(outTradeNo)).emails, { message: 'one confirmation email, sent once' })
      .toEqual({ queued: 1, sent: 1 });
    const state = await this.state(outTradeNo);
    expect(state.order.status).toBe('paid');
    expect(state.payments.filter((p) => p.status === 'succeeded')).toHaveLength(1);
    expect(state.refunds, 'nothing to give back').toEqual([]);
    expect(
      state.trades.filter((t) => t.status === 'open'),
      'no trade left open',
    ).toEqual([]);
    // Every key settles: a page that showed the order paid before its key answered (the order was
    // asked while a dead request's lease ran out) goes on retrying the key until it is taken over and
    // completed — within the drills' lease (16 s × DRILL_TIME_SCALE) and a retry's backoff.
    await expect
      .poll(async () => (await this.state(outTradeNo)).keys.filter((key) => key.leaseHeld).map((key) => key.key), {
        message: 'no payment key left in flight',
        timeout: 45_000,
      })
      .toEqual([]);
    await expect
      .poll(async () => (await this.state(outTradeNo)).keys.some((k) => k.completed && k.status === 201), {
        message: 'a key completed with 201',
        timeout: 45_000,
      })
      .toBe(true);
  }
}

export const test = base.extend<{ checkout: CheckoutPage; drill: Drill }, { database: GroundTruthSql }>({
  database: [
    // eslint-disable-next-line no-empty-pattern -- Playwright reads a fixture's dependencies from its first parameter
    async ({}, use) => {
      const sql = openGroundTruth();
      await use(sql);
      await sql.end({ timeout: 5 });
    },
    { scope: 'worker' },
  ],
  checkout: async ({ page }, use) => {
    await use(new CheckoutPage(page));
  },
  drill: async ({ request, page, database }, use) => {
    const drill = new Drill(request, page, database);
    await drill.clearFaults();
    await use(drill);
    await drill.clearFaults();
  },
});

export { expect };
