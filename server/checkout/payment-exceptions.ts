/**
 * Payment exceptions: what the system will not decide on its own and a person must see — a verified
 * notification for the wrong amount or an unknown order, a refund the gateway refused for good.
 * Recorded once per dedupe key (a gateway retrying the same notification counts occurrences), in its
 * own short transaction or the caller's.
 */
import { sql } from 'drizzle-orm';
import type { Executor } from '@/db/client';
import { paymentExceptions } from '@/db/schema';
import { journal } from './journal';

export interface PaymentException {
  kind: 'amount_mismatch' | 'unknown_order' | 'refund_failed';
  dedupeKey: string;
  gateway: string;
  outTradeNo: string | null;
  orderId: string | null;
  details: Record<string, unknown>;
}

export async function recordPaymentException(db: Executor, exception: PaymentException): Promise<void> {
  await db
    .insert(paymentExceptions)
    .values(exception)
    .onConflictDoUpdate({
      target: paymentExceptions.dedupeKey,
      set: { occurrences: sql`${paymentExceptions.occurrences} + 1`, lastSeenAt: sql`now()` },
    });
  await journal(db, {
    orderId: exception.orderId,
    gateway: exception.gateway,
    kind: 'exception.recorded',
    data: { exception: exception.kind, gateway: exception.gateway, outTradeNo: exception.outTradeNo },
  });
}
