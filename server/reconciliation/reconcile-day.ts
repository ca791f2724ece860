/**
 * Reconciling one gateway's statement for one day (对账): fetch the statement through the adapter,
 * read our books for the same day in the gateway's time zone, match (./match), and record the run and
 * every mismatch — a mismatch seen again by a later run of the same day is the same row, so a day can
 * be reconciled as often as needed without piling up work for a person.
 *
 * Our books for a day: every successful charge we recorded at that gateway (the order's payment and
 * any excess one: both are money at the gateway) and every refund that succeeded, by when we
 * recorded it. A payment recorded in the last minutes of a day may sit on the gateway's next day:
 * reconciling the next day matches it there; see docs/operations.md#reconcile. A refund carries the
 * payment it returns money of, and what earlier refunds of it returned: its share of the fee.
 */
import { sql } from 'drizzle-orm';
import type { Database } from '@/db/client';
import { reconciliationMismatches, reconciliationRuns } from '@/db/schema';
import { journal } from '@/server/checkout/journal';
import type { CheckoutServices } from '@/server/checkout/services';
import type { GatewayId } from '@/server/payments/gateway';
import { matchStatement, type BookEntry, type Matched, type StatementLine } from './match';

/** The time zone each gateway's statement day is cut in. */
export const STATEMENT_TIME_ZONES: Record<GatewayId, string> = {
  alipay: 'Asia/Shanghai',
  wechatpay: 'Asia/Shanghai',
  stripe: 'UTC',
  '2c2p': 'Asia/Bangkok',
};

const DATE = /^\d{4}-\d{2}-\d{2}$/;

export interface DayReconciliation {
  gateway: GatewayId;
  date: string;
  status: 'clean' | 'mismatches' | 'no_statement' | 'failed';
  lines: number;
  matched: number;
  feesMinor: number;
  feesChecked: boolean;
  mismatches: Matched['mismatches'];
  error?: string;
}

export async function reconcileDay(services: CheckoutServices, gateway: GatewayId, date: string, by: string): Promise<DayReconciliation> {
  if (!DATE.test(date) || Number.isNaN(Date.parse(`${date}T00:00:00Z`))) throw new Error(`date: YYYY-MM-DD, got ${JSON.stringify(date)}`);
  const adapter = services.gateways[gateway];
  const startedAt = new Date();
  const books = await booksOf(services.db, gateway, date);
  const fetched = adapter?.statement
    ? await adapter.statement(date, { currencies: await shopCurrencies(services.db, books) })
    : ({ kind: 'unavailable', code: 'NOT_SUPPORTED', message: `${gateway} is not configured, or has no statement here` } as const);
  // No statement for a day our books have money on is not a quiet day: everything recorded is
  // missing from it (the gateways answer "no bill" only once the day's bill is due; ./schedule.ts).
  if (fetched.kind === 'none' && books.length > 0) return recordMatched(services, gateway, date, [], books, by, startedAt);
  if (fetched.kind !== 'lines') {
    const status = fetched.kind === 'none' ? 'no_statement' : 'failed';
    const result: DayReconciliation = {
      gateway,
      date,
      status,
      lines: 0,
      matched: 0,
      feesMinor: 0,
      feesChecked: false,
      mismatches: [],
      error: `${fetched.code}: ${fetched.message}`,
    };
    await recordRun(services.db, result, by, startedAt);
    return result;
  }
  return recordMatched(services, gateway, date, fetched.lines, books, by, startedAt);
}

async function recordMatched(
  services: CheckoutServices,
  gateway: GatewayId,
  date: string,
  lines: StatementLine[],
  books: BookEntry[],
  by: string,
  startedAt: Date,
): Promise<DayReconciliation> {
  const matched = matchStatement(gateway, lines, books, services.feeContracts?.[gateway]);
  const result: DayReconciliation = { gateway, date, status: matched.mismatches.length ? 'mismatches' : 'clean', ...matched };
  await recordRun(services.db, result, by, startedAt);
  return result;
}

/** Our payments and refunds at `gateway` recorded on `date`, cut in the gateway's time zone. */
export async function booksOf(db: Database, gateway: GatewayId, date: string): Promise<BookEntry[]> {
  const zone = STATEMENT_TIME_ZONES[gateway];
  const rows = await db.execute<{
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
  }>(sql`
    with day as (select (${date}::date)::timestamp at time zone ${zone} as starts,
                        (${date}::date + 1)::timestamp at time zone ${zone} as ends)
    select 'payment' as kind, p.order_id, p.out_trade_no, p.gateway_trade_no, null as refund_id, null as gateway_refund_id,
           p.amount_minor, p.currency, null::integer as charge_amount_minor, null::integer as refunded_before_minor
      from payments p, day
     where p.gateway = ${gateway} and p.status = 'succeeded' and p.gateway_trade_no is not null
       and p.created_at >= day.starts and p.created_at < day.ends
    union all
    select 'refund', r.order_id, r.out_trade_no, r.gateway_trade_no, r.refund_id, r.gateway_refund_id, r.amount_minor, r.currency,
           (select p.amount_minor from payments p where p.id = r.payment_id),
           (select coalesce(sum(e.amount_minor), 0)::integer from refunds e
             where e.payment_id = r.payment_id and e.status = 'succeeded'
               and (e.created_at, e.id) < (r.created_at, r.id))
      from refunds r, day
     where r.gateway = ${gateway} and r.status = 'succeeded'
       and r.settled_at >= day.starts and r.settled_at < day.ends`);
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

/** The currencies the shop sells in and the day's books hold: a statement per currency where a gateway issues one so. */
async function shopCurrencies(db: Database, books: readonly BookEntry[]): Promise<string[]> {
  const rows = await db.execute<{ currency: string }>(sql`select distinct currency from products`);
  return [...new Set([...rows.map((row) => row.currency), ...books.map((entry) => entry.currency)])].sort();
}

/** The run, and each mismatch once per day and reference (a re-run moves `last_run_id` on), together. */
async function recordRun(db: Database, result: DayReconciliation, by: string, startedAt: Date): Promise<void> {
  await db.transaction(async (tx) => {
    const [run] = await tx
      .insert(reconciliationRuns)
      .values({
        ...{ gateway: result.gateway, statementDate: result.date, status: result.status, lines: result.lines, matched: result.matched },
        ...{ mismatches: result.mismatches.length, feesMinor: result.feesMinor, feesChecked: result.feesChecked },
        ...{ error: result.error ?? null, by, startedAt },
      })
      .returning({ id: reconciliationRuns.id });
    if (!run) throw new Error('recording the reconciliation run returned no row');
    for (const m of result.mismatches) {
      await tx
        .insert(reconciliationMismatches)
        .values({
          ...{ gateway: m.gateway, statementDate: result.date, kind: m.kind, reference: m.reference, outTradeNo: m.outTradeNo },
          ...{ orderId: m.orderId, ours: m.ours, theirs: m.theirs, firstRunId: run.id, lastRunId: run.id },
        })
        .onConflictDoUpdate({
          target: [
            reconciliationMismatches.gateway,
            reconciliationMismatches.statementDate,
            reconciliationMismatches.kind,
            reconciliationMismatches.reference,
          ],
          set: { lastRunId: run.id, ours: m.ours, theirs: m.theirs },
        });
    }
    await journal(tx, {
      orderId: null,
      stream: 'reconciliation',
      kind: 'reconciliation.run',
      data: {
        gateway: result.gateway,
        date: result.date,
        status: result.status,
        lines: result.lines,
        matched: result.matched,
        mismatches: result.mismatches.length,
        by,
      },
    });
  });
}
