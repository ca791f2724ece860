/**
 * Background work on a PostgreSQL-backed job queue (pg-boss), never on in-process timers: the
 * schedule lives in the database, so any number of app instances can run workers, a crashed
 * instance's job is retried by another, and nothing is lost with a process.
 *
 * Each recurring job re-enqueues its next run (startAfter) when it finishes. Queues use pg-boss's
 * `short` policy — at most one job waiting per queue across all instances — so the chain never
 * multiplies however many instances seed it at start-up, and an instance killed mid-job does not
 * hold the chain up.
 */
import PgBoss from 'pg-boss';
import { openQueueDatabase } from './queue-database';
import type { CheckoutServices } from '@/server/checkout/services';
import { cleanUpExpiredKeys } from './key-cleanup';
import { relayOutbox } from './outbox-relay';
import { processDueRefunds } from './refund-worker';
import { processDueAuthorizationActions } from './authorization-worker';
import { reconcileYesterday } from '@/server/reconciliation/schedule';
import { reconcilePayments } from './reconciler';

export interface JobIntervals {
  /** How often stuck payments are reconciled and unpaid orders expired. */
  reconcileSeconds: number;
  /** How often the outbox is relayed (confirmation emails). */
  outboxSeconds: number;
  /** How often expired idempotency keys are deleted. */
  keyCleanupSeconds: number;
  /** How often due refunds are sent, settled by query, or retried — and decided captures and releases sent. */
  refundSeconds: number;
}

export interface JobPolicy {
  /** How long an expired order waits for a close in doubt before it expires anyway (reconciler). */
  expiryCloseGraceMs?: number;
  /** The refund worker's first retry delay (doubling per attempt). */
  refundBackoffMs?: number;
  /** How long a refund worker holds a claimed refund (a crashed worker's refund waits this long). */
  refundLeaseMs?: number;
}

/** Production pace: emails and refunds within seconds, reconciliation twice a lease, keys pruned hourly. */
export const DEFAULT_JOB_INTERVALS: JobIntervals = { reconcileSeconds: 15, outboxSeconds: 2, keyCleanupSeconds: 3600, refundSeconds: 2 };

export interface RunningJobs {
  stop(): Promise<void>;
}

type JobName =
  'payments.reconcile' | 'outbox.relay' | 'idempotency.cleanup' | 'refunds.process' | 'authorizations.process' | 'statements.reconcile';

type Job = { name: JobName; everySeconds: number; run: () => Promise<string | undefined> };

export async function startJobs(
  services: CheckoutServices,
  options: {
    connectionString: string;
    /** `transaction` behind a transaction pooler (DATABASE_POOLING, db/client.ts). */
    pooling?: 'session' | 'transaction';
    intervals?: Partial<JobIntervals>;
    policy?: JobPolicy;
    log?: (message: string) => void;
  },
): Promise<RunningJobs> {
  // An interval left undefined keeps its default.
  const given = Object.entries(options.intervals ?? {}).filter(([, seconds]) => seconds !== undefined);
  const intervals: JobIntervals = { ...DEFAULT_JOB_INTERVALS, ...Object.fromEntries(given) };
  const log = options.log ?? ((message: string) => console.log(`[jobs] ${message}`));
  // Its own small pool: background work must never starve the request path of connections.
  const database = openQueueDatabase(options.connectionString, { max: 3, pooling: options.pooling ?? 'session' });
  const boss = new PgBoss({ db: database.db, schema: 'pgboss' });
  boss.on('error', (error) => log(`queue error: ${error.message}`));
  const reseeds: NodeJS.Timeout[] = [];
  try {
    await boss.start();
    for (const job of jobsOf(services, intervals, options.policy ?? {})) reseeds.push(await schedule(boss, job, log));
  } catch (error) {
    for (const timer of reseeds) clearInterval(timer);
    await boss.stop({ graceful: false, wait: true, timeout: 1_000 }).catch(() => {});
    await database.close();
    throw error;
  }
  return {
    async stop() {
      for (const timer of reseeds) clearInterval(timer);
      await boss.stop({ graceful: true, wait: true, timeout: 10_000 });
      await database.close();
    },
  };
}

/** The app's jobs, each with its pace and what it reports when it did something. */
function jobsOf(services: CheckoutServices, intervals: JobIntervals, policy: JobPolicy): Job[] {
  return [
    {
      name: 'payments.reconcile',
      everySeconds: intervals.reconcileSeconds,
      run: async () => {
        const s = await reconcilePayments(services, { expiryCloseGraceMs: policy.expiryCloseGraceMs });
        return s.examined + s.expired + s.swept > 0
          ? `reconciled ${s.examined} (settled ${s.settled}, reopened ${s.reopened}, undecided ${s.undecided}); expired ${s.expired}; closed trades of ${s.swept} settled order(s)`
          : undefined;
      },
    },
    {
      name: 'refunds.process',
      everySeconds: intervals.refundSeconds,
      run: async () => {
        const s = await processDueRefunds(services, { backoffMs: policy.refundBackoffMs, leaseMs: policy.refundLeaseMs });
        return s.examined > 0
          ? `refunds: ${s.succeeded} succeeded, ${s.processing} processing, ${s.failed} failed, ${s.retried} to retry`
          : undefined;
      },
    },
    {
      // The merchant's captures and releases, and excess authorisations released: at the refunds' pace.
      name: 'authorizations.process',
      everySeconds: intervals.refundSeconds,
      run: async () => {
        const s = await processDueAuthorizationActions(services, { backoffMs: policy.refundBackoffMs, leaseMs: policy.refundLeaseMs });
        return s.examined > 0
          ? `authorisations: ${s.captured} captured, ${s.released} released, ${s.failed} refused, ${s.retried} to retry`
          : undefined;
      },
    },
    {
      name: 'outbox.relay',
      everySeconds: intervals.outboxSeconds,
      run: async () => {
        let total = 0;
        for (let batch = await relayOutbox(services.db); batch > 0; batch = await relayOutbox(services.db)) total += batch;
        return total > 0 ? `delivered ${total} email(s)` : undefined;
      },
    },
    {
      // 对账: yesterday's statements, hourly until each is read (server/reconciliation/schedule.ts).
      name: 'statements.reconcile',
      everySeconds: 3600,
      run: async () => {
        const days = await reconcileYesterday(services);
        return days.length > 0
          ? `对账: ${days.map((d) => `${d.gateway} ${d.date} ${d.status} (${d.mismatches.length} mismatches)`).join('; ')}`
          : undefined;
      },
    },
    {
      name: 'idempotency.cleanup',
      everySeconds: intervals.keyCleanupSeconds,
      run: async () => {
        const deleted = await cleanUpExpiredKeys(services);
        return deleted > 0 ? `deleted ${deleted} expired idempotency key(s)` : undefined;
      },
    },
  ];
}

/**
 * One job as a chain in pg-boss: each run schedules the next, whichever instance runs it.
 *
 * A link can fail to be written — the database restarting or failing over just as a run finishes
 * ("could not schedule …") — and a chain with no job waiting would never run again. So each instance
 * also re-seeds every chain now and then (SEED_EVERY × the job's pace): with the `short` policy a
 * seed while a job is already waiting adds nothing, so this costs one statement and never doubles a
 * chain. The timer only writes to the queue; the work itself still runs from the database's schedule.
 * Returns the timer, cleared when the jobs stop.
 */
async function schedule(boss: PgBoss, job: Job, log: (message: string) => void): Promise<NodeJS.Timeout> {
  // `short`: at most one job waiting, however many instances seed or re-enqueue it, while a new run
  // may start even if an earlier one is still marked active — as it is after its instance was
  // killed mid-job, until it expires (30 s) and is retried. The jobs are safe to overlap.
  await boss.createQueue(job.name, { name: job.name, policy: 'short', expireInSeconds: 30, retryLimit: 1, retryDelay: 1 });
  const next = () =>
    boss.send(job.name, {}, { startAfter: job.everySeconds }).catch((error: Error) => {
      log(`could not schedule ${job.name}: ${error.message} (re-seeded within ${seedEverySeconds(job)} s)`);
      return null;
    });
  await boss.work(job.name, { pollingIntervalSeconds: Math.max(0.5, Math.min(2, job.everySeconds / 2)) }, async () => {
    try {
      const report = await job.run();
      if (report) log(`${job.name}: ${report}`);
    } finally {
      await next();
    }
  });
  // Seed the chain; with the short policy a seed from every instance still leaves one job waiting.
  await boss.send(job.name, {});
  const reseed = setInterval(() => void next(), seedEverySeconds(job) * 1000);
  reseed.unref();
  return reseed;
}

/** Three of the job's periods, at least 10 s and at most 10 minutes: a broken chain waits no longer. */
const seedEverySeconds = (job: Job) => Math.min(600, Math.max(10, job.everySeconds * 3));
