/**
 * Fires the schedule's faults at the running stack, over the same HTTP endpoints the drills use:
 * app faults on one instance (POST /api/faults), sandbox faults (POST /sandbox/faults), and beside
 * them pg_terminate_backend of the app's connections and the sandbox's notification tool.
 *
 * "Fired" for an armed fault means consumed: it is no longer listed where it was armed (a matching
 * request took it). A crash wipes what was armed on that instance; a fault that vanished across a
 * restart it did not cause is counted as lost, not fired.
 */
import postgres from 'postgres';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AppFaultAction } from './schedule';

interface Tracked {
  id: string;
  label: string;
  /** 'app:0', 'app:1' or 'sandbox'. */
  where: string;
  armedAt: number;
  crash: boolean;
  state: 'armed' | 'fired' | 'lost';
}

export class FaultController {
  readonly #tracked = new Map<string, Tracked>();
  /** Per instance, when the supervisor reported it exited. */
  readonly #exits: number[][];
  /** Faults fired by the harness itself (pg_terminate, give_up, late_notification). */
  readonly #direct = new Map<string, { armed: number; fired: number }>();
  readonly armFailures = new Map<string, number>();
  #polling: NodeJS.Timeout | undefined;
  terminatedBackends = 0;
  lateNotifications = { sent: 0, deliveries: 0, acknowledged: 0, failed: 0 };
  /** The buyer completing an order's trades late: what the gateways answered. */
  lateCompletions = { paid: 0, refused: 0, declined: 0, failed: 0 };
  /** Orders charged again outside the checkout, and what the gateway said. */
  strayCharges = { succeeded: 0, refused: 0, failed: 0 };

  constructor(
    private readonly appUrls: string[],
    private readonly sandboxUrl: string,
    private readonly sql: postgres.Sql,
  ) {
    this.#exits = appUrls.map(() => []);
  }

  /** Told by the stack's log: the supervisor saw instance `instance` exit. */
  recordExit(instance: number): void {
    this.#exits[instance]?.push(Date.now());
  }

  get restarts(): number {
    return this.#exits.reduce((sum, list) => sum + list.length, 0);
  }

  restartsOf(instance: number): number {
    return this.#exits[instance]?.length ?? 0;
  }

  /** A fault the harness fires itself; `fired` false when its moment never came (the order was over). */
  recordDirect(label: string, fired = true): void {
    const entry = this.#direct.get(label) ?? { armed: 0, fired: 0 };
    entry.armed++;
    if (fired) entry.fired++;
    this.#direct.set(label, entry);
  }

  #failedToArm(label: string): void {
    this.armFailures.set(label, (this.armFailures.get(label) ?? 0) + 1);
  }

  /** POSTs until answered: an instance restarting after a crash refuses connections for a few seconds. */
  async #post(url: string, body: unknown, deadlineMs = 30_000): Promise<{ id: string } | undefined> {
    const deadline = Date.now() + deadlineMs;
    for (;;) {
      try {
        const response = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(5000),
        });
        const text = await response.text();
        if (response.status === 201) return (JSON.parse(text) as { fault: { id: string } }).fault;
        throw new Error(`${url} answered ${response.status}: ${text}`);
      } catch (error) {
        if (Date.now() > deadline) return undefined;
        if (error instanceof Error && /answered 4\d\d/.test(error.message)) throw error; // a bug in the harness
        await sleep(250);
      }
    }
  }

  async armApp(
    label: string,
    instance: number,
    spec: { point: string; action: AppFaultAction; procedure: string; gateway?: string },
  ): Promise<boolean> {
    const url = this.appUrls[instance];
    if (!url) throw new Error(`no app instance ${instance}`);
    const fault = await this.#post(`${url}/api/faults`, { ...spec, times: 1 });
    if (!fault) {
      this.#failedToArm(label);
      return false;
    }
    this.#tracked.set(fault.id, {
      id: fault.id,
      label,
      where: `app:${instance}`,
      armedAt: Date.now(),
      crash: spec.action.kind === 'crash',
      state: 'armed',
    });
    return true;
  }

  /** `track: false` for a fault that is only part of another (the slow gateway of a customer giving up). */
  async armSandbox(
    label: string,
    spec: { gateway: string; operation?: 'charge' | 'close' | 'refund'; action: string; delayMs?: number; copies?: number; times?: number },
    track = true,
  ): Promise<boolean> {
    const fault = await this.#post(`${this.sandboxUrl}/sandbox/faults`, { times: 1, ...spec });
    if (!fault) {
      this.#failedToArm(label);
      return false;
    }
    if (!track) return true;
    this.#tracked.set(fault.id, { id: fault.id, label, where: 'sandbox', armedAt: Date.now(), crash: false, state: 'armed' });
    return true;
  }

  /** Kills every connection the app holds on this database, mid-transaction or idle. */
  async terminateAppBackends(): Promise<number> {
    // The targets are chosen first, in a materialised CTE: in a plain WHERE clause the planner may
    // call pg_terminate_backend before the other conditions, on every backend of the server.
    const rows = await this.sql<{ pid: number; terminated: boolean }[]>`
      with targets as materialized (
        select pid from pg_stat_activity
         where application_name = 'payonce' and datname = current_database() and pid <> pg_backend_pid()
      )
      select pid, pg_terminate_backend(pid) as terminated from targets`;
    const terminated = rows.filter((row) => row.terminated).length;
    this.terminatedBackends += terminated;
    return terminated;
  }

  /** The sandbox's notification tool: `copies` more notifications for a settled trade. */
  async lateNotification(gateway: string, outTradeNo: string, copies: number): Promise<void> {
    try {
      const response = await fetch(`${this.sandboxUrl}/sandbox/${gateway}/notify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ outTradeNo, copies }),
        signal: AbortSignal.timeout(30_000),
      });
      const body = (await response.json().catch(() => ({}))) as { deliveries?: { status?: number; error?: string }[] };
      if (response.status !== 200) {
        this.lateNotifications.failed++;
        return;
      }
      this.lateNotifications.sent++;
      for (const delivery of body.deliveries ?? []) {
        this.lateNotifications.deliveries++;
        if (delivery.status !== undefined && delivery.status >= 200 && delivery.status < 300 && !delivery.error) {
          this.lateNotifications.acknowledged++;
        }
      }
    } catch {
      this.lateNotifications.failed++;
    }
  }

  /** The sandbox's buyer tool: the buyer completes the order's trade at `gateway` now. */
  async buyerPays(gateway: string, outTradeNo: string): Promise<void> {
    try {
      const response = await fetch(`${this.sandboxUrl}/sandbox/${gateway}/buyer-pays`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ outTradeNo, buyer: 'ok' }),
        signal: AbortSignal.timeout(30_000),
      });
      const body = (await response.json().catch(() => ({}))) as { status?: string };
      if (response.status === 409) this.lateCompletions.refused++;
      else if (response.status === 200 && body.status === 'succeeded') this.lateCompletions.paid++;
      else if (response.status === 200) this.lateCompletions.declined++;
      else this.lateCompletions.failed++;
    } catch {
      this.lateCompletions.failed++;
    }
  }

  /** Looks at what is still armed; what vanished has fired (or was lost to a restart). */
  async poll(): Promise<void> {
    const listings = await Promise.all([
      ...this.appUrls.map((url, i) => this.#list(`${url}/api/faults`).then((ids) => [`app:${i}`, ids] as const)),
      this.#list(`${this.sandboxUrl}/sandbox/faults`).then((ids) => ['sandbox', ids] as const),
    ]);
    const now = Date.now();
    for (const [where, ids] of listings) {
      if (!ids) continue; // not answering (restarting): decide next time
      for (const fault of this.#tracked.values()) {
        if (fault.where !== where || fault.state !== 'armed' || ids.has(fault.id)) continue;
        const instance = where.startsWith('app:') ? Number(where.slice(4)) : -1;
        const restarted = instance >= 0 && (this.#exits[instance] ?? []).some((t) => t >= fault.armedAt && t <= now);
        fault.state = restarted && !fault.crash ? 'lost' : 'fired';
      }
    }
  }

  async #list(url: string): Promise<Set<string> | undefined> {
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(3000) });
      if (!response.ok) return undefined;
      const body = (await response.json()) as { faults: { id: string }[] };
      return new Set(body.faults.map((f) => f.id));
    } catch {
      return undefined;
    }
  }

  startPolling(intervalMs = 1000): void {
    const tick = () => {
      this.poll()
        .catch(() => {})
        .finally(() => {
          if (this.#polling) this.#polling = setTimeout(tick, intervalMs);
        });
    };
    this.#polling = setTimeout(tick, intervalMs);
  }

  stopPolling(): void {
    if (this.#polling) clearTimeout(this.#polling);
    this.#polling = undefined;
  }

  /** Disarms whatever is left, so the settling phase runs without faults. */
  async disarmAll(): Promise<void> {
    await this.poll();
    await Promise.all(
      [...this.appUrls.map((url) => `${url}/api/faults`), `${this.sandboxUrl}/sandbox/faults`].map((url) =>
        fetch(url, { method: 'DELETE', signal: AbortSignal.timeout(5000) }).catch(() => undefined),
      ),
    );
  }

  get firedCount(): number {
    let n = 0;
    for (const f of this.#tracked.values()) if (f.state === 'fired') n++;
    for (const entry of this.#direct.values()) n += entry.fired;
    return n;
  }

  /** Per label: armed, fired, lost to a restart, never fired, failed to arm. */
  summary(): Map<string, { armed: number; fired: number; lost: number; unfired: number; armFailed: number }> {
    const out = new Map<string, { armed: number; fired: number; lost: number; unfired: number; armFailed: number }>();
    const entry = (label: string) => {
      let e = out.get(label);
      if (!e) out.set(label, (e = { armed: 0, fired: 0, lost: 0, unfired: 0, armFailed: 0 }));
      return e;
    };
    for (const f of this.#tracked.values()) {
      const e = entry(f.label);
      e.armed++;
      if (f.state === 'fired') e.fired++;
      else if (f.state === 'lost') e.lost++;
      else e.unfired++;
    }
    for (const [label, direct] of this.#direct) {
      const e = entry(label);
      e.armed += direct.armed;
      e.fired += direct.fired;
      e.unfired += direct.armed - direct.fired;
    }
    for (const [label, count] of this.armFailures) entry(label).armFailed += count;
    return new Map([...out.entries()].sort(([a], [b]) => a.localeCompare(b)));
  }
}
