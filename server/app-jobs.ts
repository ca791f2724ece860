/**
 * Starts the background workers once per process (kept on globalThis: dev-mode reloads and Next's
 * separate module instances must not start a second set). Intervals can be shortened for demos and
 * drills with JOBS_RECONCILE_SECONDS, JOBS_OUTBOX_SECONDS and JOBS_KEY_CLEANUP_SECONDS.
 */
import { databaseUrl } from '../db/client';
import { appServices } from './app-services';
import { startJobs, type RunningJobs } from './jobs/queue';

const globalForJobs = globalThis as unknown as { __payonceJobs?: Promise<RunningJobs> };

function seconds(name: string): number | undefined {
  const value = Number(process.env[name]);
  return Number.isFinite(value) && value > 0 ? value : undefined;
}

export function startAppJobs(): Promise<RunningJobs> {
  globalForJobs.__payonceJobs ??= startJobs(appServices(), {
    connectionString: databaseUrl(),
    intervals: {
      reconcileSeconds: seconds('JOBS_RECONCILE_SECONDS'),
      outboxSeconds: seconds('JOBS_OUTBOX_SECONDS'),
      keyCleanupSeconds: seconds('JOBS_KEY_CLEANUP_SECONDS'),
    },
  });
  return globalForJobs.__payonceJobs;
}
