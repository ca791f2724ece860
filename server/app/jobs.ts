/**
 * Starts the background workers once per process (kept on globalThis: dev-mode reloads and Next's
 * separate module instances must not start a second set). Intervals can be shortened for demos and
 * drills with JOBS_RECONCILE_SECONDS, JOBS_OUTBOX_SECONDS, JOBS_KEY_CLEANUP_SECONDS and
 * JOBS_REFUND_SECONDS; ORDER_EXPIRY_CLOSE_GRACE_MS, REFUND_BACKOFF_MS and REFUND_LEASE_MS shorten
 * the waits that a gateway in doubt or a crashed worker imposes (defaults and bounds: server/config/env.ts).
 */
import { databaseUrl } from '@/db/client';
import { appServices } from './services';
import { serverEnv } from '@/server/config/env';
import { startJobs, type RunningJobs } from '@/server/jobs/queue';

const globalForJobs = globalThis as unknown as { __payonceJobs?: Promise<RunningJobs> };

export function startAppJobs(): Promise<RunningJobs> {
  const env = serverEnv();
  globalForJobs.__payonceJobs ??= startJobs(appServices(), {
    connectionString: databaseUrl(env.DATABASE_URL),
    pooling: env.DATABASE_POOLING,
    intervals: {
      reconcileSeconds: env.JOBS_RECONCILE_SECONDS,
      outboxSeconds: env.JOBS_OUTBOX_SECONDS,
      keyCleanupSeconds: env.JOBS_KEY_CLEANUP_SECONDS,
      refundSeconds: env.JOBS_REFUND_SECONDS,
    },
    policy: {
      expiryCloseGraceMs: env.ORDER_EXPIRY_CLOSE_GRACE_MS,
      refundBackoffMs: env.REFUND_BACKOFF_MS,
      refundLeaseMs: env.REFUND_LEASE_MS,
    },
  });
  return globalForJobs.__payonceJobs;
}

/** Stops this process's workers, if it started them (a running job is waited for). */
export async function stopAppJobs(): Promise<void> {
  const jobs = globalForJobs.__payonceJobs;
  globalForJobs.__payonceJobs = undefined;
  await (await jobs)?.stop();
}
