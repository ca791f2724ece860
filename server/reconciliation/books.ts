/**
 * Our side of 对账: the payments and refunds we recorded at a gateway, as book entries (./match.ts).
 *
 * A day's books are cut by when the money moved as far as we know it — a payment when we recorded
 * its success (an authorisation when it was captured), a refund when it settled — in the gateway's
 * own time zone. We learn of money at or after the gateway moves it (a lost notification settled
 * by the reconciler minutes later; a payment a second before midnight), so the gateway may book an
 * entry of ours a day earlier: ./reconcile-day.ts looks for it there, and finds the entries behind a
 * statement's lines by their references among those we recorded later.
 */
import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '@/db/client';
import type { GatewayId } from '@/server/payments/gateway';
import type { BookEntry } from './match';

/** The time zone each gateway's statement day is cut in. */
export const STATEMENT_TIME_ZONES: Record<GatewayId, string> = {
  alipay: 'Asia/Shanghai',
  wechatpay: 'Asia/Shanghai',
  stripe: 'UTC',
  '2c2p': 'Asia/Bangkok',
};

interface BookRow extends Record<string, unknown> {
  kind: 'payment' | 'refund';
  order_id: string;
  out_trade_no: string;
  gateway_trade_no: string;
  refund_id: string | null;
  gateway_refund_id: string | null;
  amount_minor: number;
  currency: string;
  charge_amount_minor: number | null;
  refunded_before_minor: number | null;
}

/**
 * Succeeded payments and refunds at `gateway` that the two conditions pick (over `p`, `r`). A refund
 * carries the payment it returns money of, and what earlier refunds of it returned: its share of the fee.
 */
async function bookEntries(db: Database, gateway: GatewayId, where: { payments: SQL; refunds: SQL }): Promise<BookEntry[]> {
  const rows = await db.execute<BookRow>(sql`
    select 'payment' as kind, p.order_id, p.out_trade_no, p.gateway_trade_no, null as refund_id, null as gateway_refund_id,
           p.amount_minor, p.currency, null::integer as charge_amount_minor, null::integer as refunded_before_minor
      from payments p
     where p.gateway = ${gateway} and p.status = 'succeeded' and p.gateway_trade_no is not null and ${where.payments}
    union all
    select 'refund', r.order_id, r.out_trade_no, r.gateway_trade_no, r.refund_id, r.gateway_refund_id, r.amount_minor, r.currency,
           (select p.amount_minor from payments p where p.id = r.payment_id),
           (select coalesce(sum(e.amount_minor), 0)::integer from refunds e
             where e.payment_id = r.payment_id and e.status = 'succeeded'
               and (e.created_at, e.id) < (r.created_at, r.id))
      from refunds r
     where r.gateway = ${gateway} and r.status = 'succeeded' and ${where.refunds}`);
  return rows.map((row) => ({
    kind: row.kind,
    orderId: row.order_id,
    outTradeNo: row.out_trade_no,
    gatewayTradeNo: row.gateway_trade_no,
    ...(row.refund_id ? { refundId: row.refund_id } : {}),
    ...(row.gateway_refund_id ? { gatewayRefundId: row.gateway_refund_id } : {}),
    amountMinor: row.amount_minor,
    currency: row.currency,
    ...(row.charge_amount_minor !== null ? { chargeAmountMinor: row.charge_amount_minor } : {}),
    ...(row.refunded_before_minor !== null ? { refundedBeforeMinor: row.refunded_before_minor } : {}),
  }));
}

/** Our payments and refunds at `gateway` on `date`, cut in the gateway's time zone. */
export function booksOf(db: Database, gateway: GatewayId, date: string): Promise<BookEntry[]> {
  const zone = STATEMENT_TIME_ZONES[gateway];
  const starts = sql`((${date}::date)::timestamp at time zone ${zone})`;
  const ends = sql`((${date}::date + 1)::timestamp at time zone ${zone})`;
  return bookEntries(db, gateway, {
    payments: sql`coalesce(p.captured_at, p.created_at) >= ${starts} and coalesce(p.captured_at, p.created_at) < ${ends}`,
    refunds: sql`r.settled_at >= ${starts} and r.settled_at < ${ends}`,
  });
}

/**
 * Our entries behind statement lines of `date` that we recorded on a later day (we learned of the
 * money after the gateway moved it): payments by the gateway's trade number, refunds by our refund
 * id or the gateway's. Never an earlier day's: a statement listing again money we booked before is a
 * discrepancy to show, not a match.
 */
export function booksRecordedLater(
  db: Database,
  gateway: GatewayId,
  date: string,
  references: { tradeNos: readonly string[]; refundIds: readonly string[] },
): Promise<BookEntry[]> {
  const ends = sql`((${date}::date + 1)::timestamp at time zone ${STATEMENT_TIME_ZONES[gateway]})`;
  // One JSON parameter for a list of any length (drizzle spreads an array into one parameter each).
  const list = (values: readonly string[]) => sql`(select jsonb_array_elements_text(${JSON.stringify(values)}::jsonb))`;
  const refundIds = list(references.refundIds);
  return bookEntries(db, gateway, {
    payments: sql`p.gateway_trade_no in ${list(references.tradeNos)} and coalesce(p.captured_at, p.created_at) >= ${ends}`,
    refunds: sql`(r.refund_id in ${refundIds} or r.gateway_refund_id in ${refundIds}) and r.settled_at >= ${ends}`,
  });
}
