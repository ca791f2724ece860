import type { CheckoutServices } from '../checkout/services';
import { deleteExpiredKeys } from '../idempotency';

/** Deletes expired idempotency keys in bounded batches (design.md §3.7). */
export async function cleanUpExpiredKeys(services: CheckoutServices): Promise<number> {
  const deleted = await deleteExpiredKeys(services.idempotencyStore, { batchSize: 1000, maxBatches: 50 });
  services.metrics?.keysCleaned.inc(deleted);
  return deleted;
}
