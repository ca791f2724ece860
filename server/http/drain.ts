/**
 * An instance leaving gracefully, as a pod evicted with SIGTERM and a grace period does:
 *
 *   1. draining — the health check answers 503 (the load balancer stops sending traffic here), and a
 *      new API request or gateway notification is refused with 503 + Retry-After before it claims
 *      anything, so the client retries it on another instance (or on this one, restarted);
 *   2. in flight — every request already past that gate finishes, up to SHUTDOWN_GRACE_MS. A request
 *      still running when the grace runs out is cut off as a crash would cut it: its key's lease
 *      runs out and the retry takes it over at its recovery point, so nothing is charged twice;
 *   3. the background jobs stop (pg-boss waits for a running one) and the database pool closes;
 *   4. the process exits.
 *
 * `next start` handles SIGTERM itself (it closes the listening socket at once) unless
 * NEXT_MANUAL_SIG_HANDLE is set; the app's start scripts set it, and instrumentation.ts then
 * installs this, and counts every HTTP response until it is written (countHttpResponses). The tRPC
 * endpoint (../trpc/http.ts) and the webhooks (../app/webhook-route.ts) refuse new work while draining. State lives on globalThis: instrumentation and the route handlers are separate
 * module instances of one process.
 */

import { onEveryRequest } from './every-request';

interface DrainState {
  draining: boolean;
  inFlight: number;
  /** Called whenever a request finishes while draining. */
  onIdle: Set<() => void>;
}

const globalForDrain = globalThis as unknown as { __payonceDrain?: DrainState };

function state(): DrainState {
  globalForDrain.__payonceDrain ??= { draining: false, inFlight: 0, onIdle: new Set() };
  return globalForDrain.__payonceDrain;
}

/** Whether this instance has begun to leave: new work is refused. */
export function isDraining(): boolean {
  return state().draining;
}

/** Requests this instance is working on right now. */
export function requestsInFlight(): number {
  return state().inFlight;
}

/** Runs work that must finish before the process exits, counted as in flight until it settles. */
export async function inFlight<T>(work: () => Promise<T>): Promise<T> {
  const done = begin();
  try {
    return await work();
  } finally {
    done();
  }
}

function begin(): () => void {
  const current = state();
  current.inFlight++;
  return () => {
    current.inFlight--;
    for (const notify of current.onIdle) notify();
  };
}

/**
 * Counts every HTTP response of every server in this process as in flight from its request until
 * its last byte is handed to the socket ('close' of the response): a Route Handler's promise settles
 * before its response is written, and an exit in between would cut the answer off.
 */
export function countHttpResponses(): void {
  onEveryRequest('drain', (_request, response) => response.once('close', begin()));
}

/** Until no request is in flight, or `graceMs` has passed: which came first. */
function settled(graceMs: number): Promise<'drained' | 'grace_elapsed'> {
  const current = state();
  return new Promise((resolve) => {
    const done = (outcome: 'drained' | 'grace_elapsed') => {
      clearTimeout(timer);
      current.onIdle.delete(check);
      resolve(outcome);
    };
    const check = () => {
      if (current.inFlight === 0) done('drained');
    };
    const timer = setTimeout(() => done('grace_elapsed'), graceMs);
    current.onIdle.add(check);
    check();
  });
}

export interface DrainOptions {
  graceMs: number;
  /** What closes after the requests: the jobs, then the pool. Each is given what is left of the grace. */
  close: { name: string; run: () => Promise<unknown> }[];
  log?: (line: string) => void;
}

export interface DrainReport {
  requests: 'drained' | 'grace_elapsed';
  /** Requests still running when the grace ran out (0 when drained). */
  cutOff: number;
  ms: number;
}

/** Steps 1–3: stop taking work, let what is in flight finish within the grace, close what is open. */
export async function drain(options: DrainOptions): Promise<DrainReport> {
  const started = performance.now();
  const log = options.log ?? ((line: string) => console.log(`[drain] ${line}`));
  state().draining = true;
  log(`draining: ${requestsInFlight()} request(s) in flight, grace ${options.graceMs} ms`);
  const requests = await settled(options.graceMs);
  const cutOff = requestsInFlight();
  log(requests === 'drained' ? 'every request in flight finished' : `grace elapsed with ${cutOff} request(s) still running`);
  for (const { name, run } of options.close) {
    const left = Math.max(1000, options.graceMs - (performance.now() - started));
    const closed = await Promise.race([run().then(() => 'closed' as const), sleep(left).then(() => 'timed out' as const)]).catch(
      (error: unknown) => `failed: ${error instanceof Error ? error.message : String(error)}`,
    );
    log(`${name}: ${closed}`);
  }
  const ms = Math.round(performance.now() - started);
  log(`drained in ${ms} ms`);
  return { requests, cutOff, ms };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** SIGTERM (and SIGINT) start the drain once; the process exits when it is done. */
export function exitGracefullyOnSignals(options: DrainOptions): void {
  countHttpResponses();
  let leaving = false;
  const leave = (signal: NodeJS.Signals) => {
    if (leaving) return;
    leaving = true;
    (options.log ?? console.log)(`[drain] ${signal}: leaving gracefully`);
    void drain(options).then(
      () => process.exit(0),
      (error: unknown) => {
        console.error('[drain] failed; exiting', error);
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', leave);
  process.once('SIGINT', leave);
}
