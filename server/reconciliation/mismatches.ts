/**
 * Mismatches a person resolves: listed for the console, resolved once with who and what — the
 * resolution is journaled on the `reconciliation` stream (and on the order's, when it names one).
 */
import { and, desc, eq, isNull, sql } from 'drizzle-orm';
import type { Database, Executor } from '@/db/client';
import { reconciliationMismatches } from '@/db/schema';
import { journal } from '@/server/checkout/journal';
import { CheckoutError } from '@/server/checkout/refusals';

export type MismatchRow = typeof reconciliationMismatches.$inferSelect;

/** Open mismatches first, newest day first; `open: false` lists the resolved too. */
export async function listMismatches(db: Executor, options: { open: boolean; limit: number }): Promise<MismatchRow[]> {
  return db
    .select()
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
