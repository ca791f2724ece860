/** The flash sale's printed report. */
import type { SaleResult } from './sale';

export function printSale(result: SaleResult, options: { stock: number; loserDeadlineMs: number }): void {
  const s = result.summary() as {
    shoppers: number;
    concurrency: number;
    faultRate: number;
    faultsArmed: number;
    saleSeconds: number;
    shoppersAnsweredPerSecond: number;
    soldOutAfterMs: number;
    ordersCreatedPerSecond: number;
    toSoldOutMs: Latency;
    toOrderMs: Latency;
    toPaidMs: Latency;
    outcomes: Record<string, number>;
  };
  const out: string[] = [];
  const say = (line = '') => out.push(line);
  say('');
  say(`=== PayOnce flash sale — ${s.shoppers} shoppers, ${options.stock} units, ${s.concurrency} in flight, 2 instances via PgBouncer ===`);
  say(`gateway faults armed: ${s.faultsArmed} (${s.faultRate * 100}% of charges: timeouts and lost answers)`);
  say(`the sale took ${s.saleSeconds.toFixed(1)} s: ${s.shoppersAnsweredPerSecond.toFixed(0)} shoppers answered a second`);
  say(
    `sold out ${(s.soldOutAfterMs / 1000).toFixed(1)} s after opening; orders created at ${s.ordersCreatedPerSecond.toFixed(0)} a second`,
  );
  say(`a shopper's first request → 已售罄 (SOLD_OUT): ${formatLatency(s.toSoldOutMs)}  (must be ≤ ${options.loserDeadlineMs} ms)`);
  say(`a shopper's first request → order created:     ${formatLatency(s.toOrderMs)}`);
  say(`a winner's first request → paid:                ${formatLatency(s.toPaidMs)}`);
  say(
    `outcomes: ${Object.entries(s.outcomes)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
  if (result.stock) {
    const st = result.stock;
    say(
      `stock: ${st.left} left, ${st.ordersHolding} orders hold a unit, ${st.paid} paid; charges without an order: ${st.chargedWithoutOrder}`,
    );
  }
  if (result.stats) {
    const t = result.stats;
    say(
      `ledger: ${t.ledgerCharges.succeeded} charges succeeded; orders charged twice before refunds: ${t.ordersChargedTwice}; refunds ${t.refunds.ledgerSucceeded}`,
    );
  }
  say(`checks: ${result.violations.length === 0 ? 'all hold' : `${result.violations.length} VIOLATIONS`}`);
  const kinds = [...new Set(result.violations.map((v) => v.kind))];
  for (const kind of kinds) {
    const list = result.violations.filter((v) => v.kind === kind);
    say(`  ${kind.padEnd(26)} ${list.length}`);
    for (const v of list.slice(0, 8)) say(`    ${v.subject}: ${v.detail}`);
  }
  console.log(out.join('\n'));
}

interface Latency {
  n: number;
  p50: number;
  p99: number;
  max: number;
}

function formatLatency(l: Latency): string {
  return `p50 ${l.p50} ms, p99 ${l.p99} ms, max ${l.max} ms (${l.n})`;
}
