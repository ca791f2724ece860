/**
 * Reconciling one gateway's statement for one day (对账): fetch the statement through the adapter,
 * read our books for the same day in the gateway's time zone, match (./match), and record the run and
 * every mismatch — a mismatch seen again by a later run of the same day is the same row, so a day can
 * be reconciled as often as needed without piling up work for a person.
 *
 * Our books for a day (./books.ts): every successful charge we recorded at that gateway (the order's
 * payment and any excess one: both are money at the gateway) and every refund that succeeded. We
 * learn of money at or after the gateway moves it, so a day is matched across midnight: a line whose
 * entry we recorded on a later day is known money, and an entry the day's statement lacks is looked
 * for on the statement of the day before (docs/operations.md#reconcile).
 */
import { sql } from 'drizzle-orm';
import type { Database } from '@/db/client';
import { reconciliationMismatches, reconciliationRuns } from '@/db/schema';
import { journal } from '@/server/checkout/journal';
import type { CheckoutServices } from '@/server/checkout/services';
import type { GatewayId } from '@/server/payments/gateway';
import type { FeeContract } from '@/server/config/fee-contract';
import { booksOf, booksRecordedLater, STATEMENT_TIME_ZONES } from './books';
import { entryKeys, matchStatement, type BookEntry, type Matched, type StatementLine } from './match';

export { STATEMENT_TIME_ZONES };

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
  const contract = services.feeContracts?.[gateway];
  const known = [...books, ...(await recordedLater(services.db, gateway, date, lines, books))];
  const matched = await foundTheDayBefore(services, gateway, date, matchStatement(gateway, lines, known, contract), contract);
  const result: DayReconciliation = { gateway, date, status: matched.mismatches.length ? 'mismatches' : 'clean', ...matched };
  await recordRun(services.db, result, by, startedAt);
  return result;
}

/** The entries behind the statement's lines that are not in the day's books: money we learned of on a later day, known all the same. */
async function recordedLater(
  db: Database,
  gateway: GatewayId,
  date: string,
  lines: readonly StatementLine[],
  books: readonly BookEntry[],
): Promise<BookEntry[]> {
  const ours = new Set(books.flatMap(entryKeys));
  const strangers = lines.filter((line) => !entryKeys(line).some((key) => ours.has(key)));
  if (strangers.length === 0) return [];
  const found = await booksRecordedLater(db, gateway, date, {
    tradeNos: strangers.filter((line) => line.kind === 'payment').map((line) => line.gatewayTradeNo),
    refundIds: strangers.filter((line) => line.kind === 'refund').flatMap((line) => [line.refundId ?? '', line.gatewayRefundId ?? '']),
  });
  return found.filter((entry) => !entryKeys(entry).some((key) => ours.has(key)));
}

/**
 * Entries of the day that its statement lacks, looked for on the day before's: we learn of money at
 * or after the gateway moves it, so what we recorded just after midnight (or settled late by the
 * reconciler) may be on the gateway's previous day. Found there, they are matched there (amount and
 * fee still checked); otherwise, or when that statement cannot be read, they stay missing.
 */
async function foundTheDayBefore(
  services: CheckoutServices,
  gateway: GatewayId,
  date: string,
  matched: Matched,
  contract: FeeContract | undefined,
): Promise<Matched> {
  const missing = matched.mismatches.filter((m) => m.kind === 'missing_payment' || m.kind === 'missing_refund');
  const entries = missing.flatMap((m) => (m.ours ? [m.ours] : []));
  const adapter = services.gateways[gateway];
  if (entries.length === 0 || !adapter?.statement) return matched;
  const dayBefore = new Date(Date.parse(`${date}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10);
  const statement = await adapter.statement(dayBefore, { currencies: [...new Set(entries.map((entry) => entry.currency))].sort() });
  if (statement.kind !== 'lines') return matched;
  const keys = new Set(entries.flatMap(entryKeys));
  const there = statement.lines.filter((line) => entryKeys(line).some((key) => keys.has(key)));
  const rechecked = matchStatement(gateway, there, entries, contract);
  return { ...matched, mismatches: [...matched.mismatches.filter((m) => !missing.includes(m)), ...rechecked.mismatches] };
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
