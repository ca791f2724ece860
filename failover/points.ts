/**
 * The moments at which the failover drill kills the primary, and how each is reached: a fault armed at
 * one of the checkout's fault points (server/checkout/fault-points.ts) holds a request or a job there
 * with a delay; once the hold has begun — the fault is gone from /api/faults — the primary dies under
 * it. For the COMMIT in flight the standby's WAL receiver is paused first, so that the settle's
 * COMMIT, written on the primary, waits for the synchronous standby's acknowledgement when the
 * primary dies — and what the receiver had not read is discarded, so the COMMIT exists only on the
 * dead primary.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import type { HaNode, HaPostgres } from '@/scripts/ha-postgres';

export const POINTS = {
  key_claimed: 'while a payment holds its key (claimed, no gateway call yet)',
  charged_not_settled: 'after the gateway charged, before the settle commits',
  commit_in_flight: "with the settle's COMMIT in flight (written, not yet on the standby)",
  notification: "while a gateway's notification is processed",
  refund_lease: 'while the refund worker holds a refund (after its gateway call)',
} as const;
export type PointName = keyof typeof POINTS;
export const POINT_NAMES = Object.keys(POINTS) as PointName[];

/** Long enough for the failover to happen while the request is held. */
const HOLD_MS = 4000;

interface FaultSpec {
  point: string;
  procedure: string;
  gateway?: string;
  ms: number;
}

const SPECS: Record<PointName, FaultSpec> = {
  key_claimed: { point: 'after_claim', procedure: 'checkout.pay', ms: HOLD_MS },
  charged_not_settled: { point: 'after_gateway_call', procedure: 'checkout.pay', ms: HOLD_MS },
  commit_in_flight: { point: 'after_gateway_call', procedure: 'checkout.pay', ms: 300 },
  notification: { point: 'after_claim', procedure: 'webhook.alipay', gateway: 'alipay', ms: HOLD_MS },
  refund_lease: { point: 'after_refund_call', procedure: 'refunds.process', ms: HOLD_MS },
};

/** Arms the point's fault on every instance; resolves once one of them has started its hold. */
export async function armAndWait(appUrls: string[], name: PointName, timeoutMs = 60_000): Promise<number> {
  const spec = SPECS[name];
  const body = JSON.stringify({
    point: spec.point,
    procedure: spec.procedure,
    ...(spec.gateway ? { gateway: spec.gateway } : {}),
    action: { kind: 'delay', ms: spec.ms },
    times: 1,
  });
  const armed = new Map<string, string>();
  for (const url of appUrls) {
    const response = await fetch(`${url}/api/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    if (response.status !== 201) throw new Error(`arming ${name} on ${url}: ${response.status} ${await response.text()}`);
    armed.set(url, ((await response.json()) as { fault: { id: string } }).fault.id);
  }
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for (const [url, id] of armed) {
      const listed = await fetch(`${url}/api/faults`).then((r) => r.json() as Promise<{ faults: { id: string }[] }>);
      if (!listed.faults.some((f) => f.id === id)) {
        await disarm(appUrls.filter((other) => other !== url));
        return Date.now();
      }
    }
    if (Date.now() > deadline) {
      await disarm(appUrls);
      throw new Error(`the fault for "${POINTS[name]}" never fired within ${timeoutMs} ms`);
    }
    await sleep(25);
  }
}

async function disarm(appUrls: string[]): Promise<void> {
  await Promise.all(appUrls.map((url) => fetch(`${url}/api/faults`, { method: 'DELETE' }).catch(() => undefined)));
}

/**
 * The standby's WAL receiver, paused (SIGSTOP): replication stalls as over a cut link. What the
 * primary sends meanwhile still lands in the receiver's socket buffer; `resume` lets it read on,
 * `discard` kills it (SIGKILL) with that buffer unread — what a standby behind by the pause keeps when
 * the primary dies then. (Its postmaster restarts the standby's processes, and it goes on as a
 * standby, now without those records.)
 */
export async function pauseReplication(ha: HaPostgres, standby: HaNode): Promise<{ resume(): void; discard(): void }> {
  const sql = postgres(ha.nodeUrl(standby, 'postgres'), { max: 1, onnotice: () => {} });
  try {
    // A standby that just rejoined may still be replaying towards a consistent state: wait for its receiver.
    let row: { pid: number } | undefined;
    for (const deadline = Date.now() + 60_000; !row && Date.now() < deadline; await sleep(200)) {
      [row] = await sql<{ pid: number }[]>`select pid from pg_stat_wal_receiver where status = 'streaming'`.catch(() => []);
    }
    if (!row) throw new Error(`${standby.name} has no streaming WAL receiver`);
    const pid = row.pid;
    const signal = (name: NodeJS.Signals) => {
      try {
        process.kill(pid, name);
      } catch {
        // gone: the standby restarted it
      }
    };
    signal('SIGSTOP');
    return { resume: () => signal('SIGCONT'), discard: () => signal('SIGKILL') };
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** Waits until a backend on the primary waits for the synchronous standby (wait_event SyncRep). */
export async function commitWaitingForStandby(ha: HaPostgres, primary: HaNode, timeoutMs = 10_000): Promise<number> {
  const sql = postgres(ha.nodeUrl(primary, 'postgres'), { max: 1, onnotice: () => {} });
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity where wait_event = 'SyncRep' and application_name = 'payonce'`;
      if (row!.n > 0) return row!.n;
      if (Date.now() > deadline) return 0;
      await sleep(20);
    }
  } finally {
    await sql.end({ timeout: 1 });
  }
}
