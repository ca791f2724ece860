import type { CheckoutServices } from '@/server/checkout/services';
import { deleteExpiredKeys } from '@payonce/idempotency';
import { deleteEndedRateLimitWindows } from '@/server/http/rate-limit';

/**
 * Deletes expired idempotency keys in bounded batches (design.md §3.7), and the rate-limit counters
 * whose window has ended (a bucket hit again starts a new row).
 */
export async function cleanUpExpiredKeys(services: CheckoutServices): Promise<number> {
  const deleted = await deleteExpiredKeys(services.idempotencyStore, { batchSize: 1000, maxBatches: 50 });
  services.metrics?.keysCleaned.inc(deleted);
  await deleteEndedRateLimitWindows(services.db, { batchSize: 1000, maxBatches: 50 });
  return deleted;
}
