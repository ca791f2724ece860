/**
 * The sale itself: the hot SKU, the shoppers, the gateway's faults, and what the run measured.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type postgres from 'postgres';
import type { GatewayId } from '@/server/payments/gateway';
import { runCustomer, type CustomerResult } from '@/soak/customer';
import type { InvariantStats, Ledger } from '@/soak/invariants';
import { GATEWAYS } from '@/soak/schedule';

export const FLASH_SKU = 'FLASH-MOUTAI';

/** Longer than a shopper's whole retry budget (ten retries, up to 8 s apart, 15 s a request). */
const SHOPPER_DEADLINE_MS = 180_000;

/** The one product of the sale, with `stock` units (created, or reset, before the baseline). */
export async function stockTheSku(sql: postgres.Sql, stock: number): Promise<void> {
  await sql`
    insert into products (sku, name, name_en, price_minor, currency, stock)
    values (${FLASH_SKU}, '飞天茅台 53%vol 500ml（秒杀）', 'Moutai 53% 500 ml (flash sale)', 149900, 'CNY', ${stock})
    on conflict (sku) do update set stock = excluded.stock`;
}

export interface SaleOptions {
  shoppers: number;
  stock: number;
  concurrency: number;
  faultRate: number;
  loserDeadlineMs: number;
  appUrls: string[];
  sandboxUrl: string;
  sql: postgres.Sql;
  log: (line: string) => void;
}

export interface Shopper {
  index: number;
  gateway: GatewayId;
  startedAt: number;
  result: CustomerResult;
  /** When the shopper was refused for good, and why (SOLD_OUT for the sale's losers). */
  refusal?: { reason: string; at: number };
  createdAt?: number;
}

const FAULTS = [
  { action: 'timeout_after_charge', delayMs: 3000 }, // charged; the answer never comes (the app times out)
  { action: 'drop_after_charge' }, // charged; the connection reset without an answer
  { action: 'timeout_before_charge', delayMs: 3000 }, // a timeout, nothing charged
] as const;

export interface SaleResult {
  sku: string;
  shoppers: Shopper[];
  startedAt: number;
  endedAt: number;
  faultsArmed: number;
  violations: { kind: string; subject: string; detail: string }[];
  stats?: InvariantStats;
  /** What the database and the ledger say of the stock, checked after the sale settled. */
  stock?: { left: number; ordersHolding: number; paid: number; chargedWithoutOrder: number };
  checkStock(ledger: Ledger, since: Date): Promise<void>;
  summary(): Record<string, unknown>;
}

export async function runSale(options: SaleOptions): Promise<SaleResult> {
  const shoppers: Shopper[] = [];
  let next = 0;
  let payRequests = 0;
  let faultsArmed = 0;
  const every = options.faultRate > 0 ? Math.round(1 / options.faultRate) : Infinity;
  const armFault = async () => {
    const fault = FAULTS[faultsArmed % FAULTS.length]!;
    faultsArmed++;
    await fetch(`${options.sandboxUrl}/sandbox/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...fault, times: 1 }),
    }).catch((error: Error) => options.log(`[sale] arming a fault failed: ${error.message}`));
  };

  const shop = async () => {
    for (let index = next++; index < options.shoppers; index = next++) {
      const gateway = GATEWAYS[index % GATEWAYS.length]!;
      const shopper: Shopper = { index, gateway, startedAt: Date.now(), result: undefined as unknown as CustomerResult };
      // A watchdog: a shopper still busy after SHOPPER_DEADLINE_MS is cut off and counted, so one
      // wedged shopper cannot hold the sale's report up.
      const giveUp = new AbortController();
      const watchdog = setTimeout(() => giveUp.abort(), SHOPPER_DEADLINE_MS);
      shopper.result = await runCustomer(
        {
          index,
          gateway,
          cart: [{ sku: FLASH_SKU, quantity: 1 }],
          home: index % 2,
          buyer: 'ok',
          retryAfterDecline: false,
          retryGateway: gateway,
        },
        {
          appUrls: options.appUrls,
          giveUp: giveUp.signal,
          onAnswer: (answer) => {
            if (answer.procedure === 'checkout.createOrder' && answer.status === 201) shopper.createdAt = answer.at;
            if (answer.procedure === 'checkout.pay' && ++payRequests % every === 0) void armFault();
            if (answer.status === 409 && answer.reason) shopper.refusal = { reason: answer.reason, at: answer.at };
          },
        },
      );
      clearTimeout(watchdog);
      if (giveUp.signal.aborted) options.log(`[sale] shopper ${index} cut off after ${SHOPPER_DEADLINE_MS} ms: ${shopper.result.outcome}`);
      shoppers.push(shopper);
      if (shoppers.length % 500 === 0 || options.shoppers - shoppers.length <= 5) {
        console.error(`  ${shoppers.length} / ${options.shoppers} shoppers answered`);
      }
    }
  };

  const startedAt = Date.now();
  await Promise.all(Array.from({ length: Math.min(options.concurrency, options.shoppers) }, shop));
  const endedAt = Date.now();
  await fetch(`${options.sandboxUrl}/sandbox/faults`, { method: 'DELETE' }).catch(() => undefined);
  await sleep(0);
  return saleResult(options, shoppers, startedAt, endedAt, faultsArmed);
}

function saleResult(options: SaleOptions, shoppers: Shopper[], startedAt: number, endedAt: number, faultsArmed: number): SaleResult {
  const violations: SaleResult['violations'] = [];
  const paid = shoppers.filter((s) => s.result.outcome === 'paid');
  const losers = shoppers.filter((s) => s.result.outcome !== 'paid');
  for (const s of losers) {
    const told = s.refusal ? s.refusal.at - s.startedAt : undefined;
    if (s.refusal?.reason !== 'SOLD_OUT') {
      violations.push({
        kind: 'loser_not_told_sold_out',
        subject: `shopper ${s.index}`,
        detail: `${s.result.outcome}: ${s.result.reason ?? 'no reason'}`,
      });
    } else if (told! > options.loserDeadlineMs) {
      violations.push({ kind: 'sold_out_told_late', subject: `shopper ${s.index}`, detail: `told 已售罄 after ${told} ms` });
    }
  }
  if (paid.length !== options.stock) {
    violations.push({ kind: 'paid_not_stock', subject: FLASH_SKU, detail: `${paid.length} shoppers paid for ${options.stock} units` });
  }
  const result: SaleResult = {
    sku: FLASH_SKU,
    shoppers,
    startedAt,
    endedAt,
    faultsArmed,
    violations,
    async checkStock(ledger, since) {
      result.stock = await stockCheck(options.sql, ledger, violations, options.stock, since);
    },
    summary: () => summarize(result, options),
  };
  return result;
}

/** The stock against the orders and the ledger, once everything settled. */
async function stockCheck(sql: postgres.Sql, ledger: Ledger, violations: SaleResult['violations'], stock: number, since: Date) {
  const [product] = await sql<{ stock: number }[]>`select stock from products where sku = ${FLASH_SKU}`;
  // This sale's orders (a database kept from an earlier sale holds that one's too).
  const orders = await sql<{ out_trade_no: string; status: string; quantity: number }[]>`
    select o.out_trade_no, o.status, i.quantity from orders o join order_items i on i.order_id = o.id
     where i.sku = ${FLASH_SKU} and o.created_at >= ${since}`;
  const holding = orders.filter((o) => o.status !== 'expired');
  const held = holding.reduce((sum, o) => sum + o.quantity, 0);
  const paid = orders.filter((o) => o.status === 'paid').length;
  if (product!.stock < 0 || held + product!.stock !== stock) {
    violations.push({ kind: 'oversold', subject: FLASH_SKU, detail: `${held} units held by orders + ${product!.stock} left ≠ ${stock}` });
  }
  const known = new Set(orders.map((o) => o.out_trade_no));
  const chargedWithoutOrder = ledger.charges.filter(
    (c) => c.status === 'succeeded' && new Date(c.createdAt) >= since && !known.has(c.outTradeNo),
  ).length;
  if (chargedWithoutOrder > 0)
    violations.push({ kind: 'charged_without_stock', subject: FLASH_SKU, detail: `${chargedWithoutOrder} charges` });
  return { left: product!.stock, ordersHolding: holding.length, paid, chargedWithoutOrder };
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

export function latencies(values: number[]) {
  return { n: values.length, p50: percentile(values, 50), p99: percentile(values, 99), max: Math.max(0, ...values) };
}

function summarize(result: SaleResult, options: SaleOptions): Record<string, unknown> {
  const created = result.shoppers.filter((s) => s.createdAt !== undefined);
  const paid = result.shoppers.filter((s) => s.result.outcome === 'paid');
  const losers = result.shoppers.filter((s) => s.refusal?.reason === 'SOLD_OUT');
  const firstCreate = Math.min(...created.map((s) => s.createdAt!));
  const lastCreate = Math.max(...created.map((s) => s.createdAt!));
  return {
    shoppers: result.shoppers.length,
    stock: options.stock,
    concurrency: options.concurrency,
    faultRate: options.faultRate,
    faultsArmed: result.faultsArmed,
    saleSeconds: (result.endedAt - result.startedAt) / 1000,
    shoppersAnsweredPerSecond: result.shoppers.length / ((result.endedAt - result.startedAt) / 1000),
    soldOutAfterMs: lastCreate - result.startedAt,
    ordersCreatedPerSecond: created.length / Math.max(0.001, (lastCreate - firstCreate) / 1000),
    toSoldOutMs: latencies(losers.map((s) => s.refusal!.at - s.startedAt)),
    toOrderMs: latencies(created.map((s) => s.createdAt! - s.startedAt)),
    toPaidMs: latencies(paid.map((s) => s.result.durationMs)),
    outcomes: tally(result.shoppers.map((s) => (s.refusal ? `${s.result.outcome} (${s.refusal.reason})` : s.result.outcome))),
    stockCheck: result.stock,
    violations: result.violations.length,
  };
}

function tally(values: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const value of values) out[value] = (out[value] ?? 0) + 1;
  return out;
}
