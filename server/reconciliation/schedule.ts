/**
 * The daily 对账: every hour, each configured gateway's yesterday (in its own time zone) is
 * reconciled until a run has read its statement — the gateways publish a day's statement some hours
 * into the next (Alipay after about 09:00, WeChat Pay after 10:00 Beijing time), so the first tries
 * of a day find none and the next hour asks again. A day read once is not re-run by the job;
 * `npm run reconcile -- --date …` re-runs any day by hand.
 */
import { sql } from 'drizzle-orm';
import type { CheckoutServices } from '@/server/checkout/services';
import { GATEWAY_IDS, type GatewayId } from '@/server/payments/gateway-ids';
import { reconcileDay, STATEMENT_TIME_ZONES, type DayReconciliation } from './reconcile-day';

/**
 * The hour (in the gateway's zone) after which yesterday's statement is due: Alipay publishes by
 * about 09:00 and WeChat Pay by 10:00 Beijing time, 2C2P drops its file before 04:00 Bangkok time,
 * Stripe's balance transactions are there as they happen. Asked earlier, "no bill" would only mean
 * "not yet" — and a day with money on it and no bill is read as everything missing (./reconcile-day).
 */
export const STATEMENT_DUE_HOUR: Record<GatewayId, number> = { alipay: 10, wechatpay: 11, stripe: 1, '2c2p': 5 };

/** The hour of the day (0–23) in `timeZone`. */
function hourIn(timeZone: string, now: Date): number {
  return Number(new Intl.DateTimeFormat('en-GB', { timeZone, hour: '2-digit', hourCycle: 'h23' }).format(now));
}

/** Yesterday's date (YYYY-MM-DD) in `timeZone`. */
export function yesterdayIn(timeZone: string, now = new Date()): string {
  const today = new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' }).format(now);
  const day = new Date(`${today}T00:00:00Z`);
  day.setUTCDate(day.getUTCDate() - 1);
  return day.toISOString().slice(0, 10);
}

export async function reconcileYesterday(services: CheckoutServices, now = new Date()): Promise<DayReconciliation[]> {
  const results: DayReconciliation[] = [];
  for (const gateway of GATEWAY_IDS) {
    if (!services.gateways[gateway]?.statement) continue;
    if (hourIn(STATEMENT_TIME_ZONES[gateway], now) < STATEMENT_DUE_HOUR[gateway]) continue;
    const date = yesterdayIn(STATEMENT_TIME_ZONES[gateway], now);
    const [read] = await services.db.execute<{ n: number }>(sql`
      select count(*)::int as n from reconciliation_runs
       where gateway = ${gateway} and statement_date = ${date} and status in ('clean', 'mismatches')`);
    if ((read?.n ?? 0) > 0) continue;
    results.push(await reconcileDay(services, gateway, date, 'job'));
  }
  return results;
}
