/**
 * Starts the background workers once per process (kept on globalThis: dev-mode reloads and Next's
 * separate module instances must not start a second set). Intervals can be shortened for demos and
 * drills with JOBS_RECONCILE_SECONDS, JOBS_OUTBOX_SECONDS, JOBS_KEY_CLEANUP_SECONDS and
 * JOBS_REFUND_SECONDS; ORDER_EXPIRY_CLOSE_GRACE_MS, REFUND_BACKOFF_MS and REFUND_LEASE_MS shorten
 * the waits that a gateway in doubt or a crashed worker imposes.
 */
import { databaseUrl } from '../db/client';
import { appServices } from './app-services';
import { startJobs, type RunningJobs } from './jobs/queue';

const globalForJobs = globalThis as unknown as { __payonceJobs?: Promise<RunningJobs> };

function seconds(name: string): number | undefined {
  const value = Number(process.env[name]);
  return Number.isFinite(value) && value > 0 ? value : undefined;
}

function milliseconds(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const value = Number(raw);
  return Number.isFinite(value) && value >= 0 ? value : undefined;
}

export function startAppJobs(): Promise<RunningJobs> {
  globalForJobs.__payonceJobs ??= startJobs(appServices(), {
    connectionString: databaseUrl(),
    intervals: {
      reconcileSeconds: seconds('JOBS_RECONCILE_SECONDS'),
      outboxSeconds: seconds('JOBS_OUTBOX_SECONDS'),
      keyCleanupSeconds: seconds('JOBS_KEY_CLEANUP_SECONDS'),
      refundSeconds: seconds('JOBS_REFUND_SECONDS'),
    },
    policy: {
      expiryCloseGraceMs: milliseconds('ORDER_EXPIRY_CLOSE_GRACE_MS'),
      refundBackoffMs: milliseconds('REFUND_BACKOFF_MS'),
      refundLeaseMs: milliseconds('REFUND_LEASE_MS'),
    },
  });
  return globalForJobs.__payonceJobs;
}
