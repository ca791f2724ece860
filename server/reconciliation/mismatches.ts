/**
 * Mismatches a person resolves: listed for the console, resolved once with who and what — the
 * resolution is journaled on the `reconciliation` stream (and on the order's, when it names one).
 */
import { and, desc, eq, getTableColumns, isNull, sql } from 'drizzle-orm';
import type { Database, Executor } from '@/db/client';
import { reconciliationMismatches } from '@/db/schema';
import { journal } from '@/server/checkout/journal';
import { CheckoutError } from '@/server/checkout/refusals';

export type MismatchRow = typeof reconciliationMismatches.$inferSelect;

/**
 * A listed mismatch, and whether the day's statement still shows it: `notSeenSince` is when a later
 * run of the same day, with a statement in hand, no longer found it (a statement corrected, a
 * payment the gateway booked late) — still a person's to resolve, with that to go on.
 */
export type ListedMismatch = MismatchRow & { notSeenSince: string | null };

/**
 * The newest run of the mismatch's gateway and day that had a statement to match, when it is not the
 * last that saw the mismatch. The outer table is named in full: drizzle writes a column of the
 * query's own table unqualified, which inside the subquery would mean the run's column instead.
 */
const notSeenSince = sql<string | null>`(
  select to_char(r.finished_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') from reconciliation_runs r
   where r.gateway = reconciliation_mismatches.gateway and r.statement_date = reconciliation_mismatches.statement_date
     and r.status in ('clean', 'mismatches') and r.id <> reconciliation_mismatches.last_run_id
     and r.finished_at > (select seen.finished_at from reconciliation_runs seen where seen.id = reconciliation_mismatches.last_run_id)
   order by r.finished_at desc limit 1)`;

/** Open mismatches first, newest day first; `open: false` lists the resolved too. */
export async function listMismatches(db: Executor, options: { open: boolean; limit: number }): Promise<ListedMismatch[]> {
  return db
    .select({ ...getTableColumns(reconciliationMismatches), notSeenSince })
    .from(reconciliationMismatches)
    .where(options.open ? isNull(reconciliationMismatches.resolvedAt) : undefined)
    .orderBy(desc(reconciliationMismatches.statementDate), desc(reconciliationMismatches.firstSeenAt))
    .limit(options.limit);
}

/** Resolves one mismatch, once: a second resolution of the same row is refused and changes nothing. */
export async function resolveMismatch(db: Database, input: { id: string; resolution: string }, by: string): Promise<MismatchRow> {
  return db.transaction(async (tx) => {
    const [resolved] = await tx
      .update(reconciliationMismatches)
      .set({ resolvedAt: sql`now()`, resolvedBy: by, resolution: input.resolution })
      .where(and(eq(reconciliationMismatches.id, input.id), isNull(reconciliationMismatches.resolvedAt)))
      .returning();
    if (!resolved) {
      const [exists] = await tx
        .select({ by: reconciliationMismatches.resolvedBy })
        .from(reconciliationMismatches)
        .where(eq(reconciliationMismatches.id, input.id));
      throw exists
        ? new CheckoutError('MISMATCH_ALREADY_RESOLVED', `Already resolved by ${exists.by ?? 'someone'}.`)
        : new CheckoutError('MISMATCH_NOT_FOUND', 'No such mismatch.');
    }
    const data = {
      ...{ gateway: resolved.gateway, date: resolved.statementDate, kind: resolved.kind, reference: resolved.reference },
      ...{ resolution: input.resolution, by },
    };
    await journal(tx, { orderId: null, stream: 'reconciliation', kind: 'reconciliation.resolved', data });
    if (resolved.orderId) await journal(tx, { orderId: resolved.orderId, kind: 'reconciliation.resolved', data });
    return resolved;
  });
}
