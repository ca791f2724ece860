/**
 * Fault injection for the failure drills and the demo, off unless CHECKOUT_FAULTS=1 or demo mode
 * (PAYONCE_DEMO=1, see demo.ts). With it off, no injector exists (`services.faults` is undefined),
 * the fault endpoints answer 404, and no fault code runs.
 *
 * Faults are armed per app instance at the checkout's fault points (./checkout/fault-points.ts)
 * and fire a set number of times.
 *
 * Actions: `throw` (a transient error: the key is released), `delay` (ms), `crash` (the process
 * dies at once with SIGKILL, like a Pod evicted between the charge and the database write), and
 * `sandbox`: arm a PSP-sandbox fault for this very payment, on the gateway it is about to call (with
 * its out_trade_no, so a notification fault lands on this order's notifications and no other's).
 *
 * A fault may be held for one customer (`customerId`): the demo's switchboard arms faults for the
 * browser that asked, never for whoever pays next.
 */
import { randomUUID } from 'node:crypto';
import { CheckoutError } from '@/server/checkout/refusals';
import { envFrom, type RawEnv } from '@/server/config/env';
import type { FaultPoint, FaultPoints, FaultSite } from '@/server/checkout/fault-points';

export { FAULT_POINTS, type FaultPoint, type FaultSite } from '@/server/checkout/fault-points';

/** A PSP-sandbox fault (sandbox/faults.ts), armed at the moment a payment reaches its gateway. */
export interface SandboxFaultRequest {
  action: 'timeout_after_charge' | 'duplicate_notifications' | 'lose_notifications' | 'drop_after_charge' | 'fail_before_charge';
  delayMs?: number;
  copies?: number;
}

export type FaultAction =
  | { kind: 'throw' }
  | { kind: 'delay'; ms: number }
  | { kind: 'crash' }
  /** SIGTERM to this process, as a pod's eviction sends it; the request itself carries on. */
  | { kind: 'terminate' }
  | { kind: 'sandbox'; fault: SandboxFaultRequest };

/** Told of every fault as it fires, before its action (a crash leaves no later moment). */
export type OnFaultFired = (fault: ArmedFault, site: FaultSite) => Promise<void>;

/** Arms a sandbox fault for the payment at `site`; the app wires it to the PSP sandbox's /sandbox/faults. */
export type ArmSandboxFault = (fault: SandboxFaultRequest & { gateway: string; outTradeNo?: string }) => Promise<void>;

export interface FaultSpec {
  point: FaultPoint;
  action: FaultAction;
  /** Only requests to this procedure (default: checkout.pay). */
  procedure?: string;
  /** Only payments through this gateway (default: any). */
  gateway?: string;
  /** How many matching requests it fires on (default 1). */
  times?: number;
  /** Only requests of this customer (default: anyone's). */
  customerId?: string;
}

export interface ArmedFault extends Required<Omit<FaultSpec, 'gateway' | 'customerId'>> {
  id: string;
  gateway: string | null;
  customerId: string | null;
  fired: number;
}

export class InjectedFaultError extends CheckoutError {
  constructor(point: FaultPoint) {
    super('INJECTED_FAULT', `Injected fault at ${point}; retry with the same Idempotency-Key.`);
    this.name = 'InjectedFaultError';
  }
}

export class FaultInjector implements FaultPoints {
  #armed: ArmedFault[] = [];
  readonly #armSandboxFault: ArmSandboxFault | undefined;
  readonly #onFire: OnFaultFired | undefined;

  constructor(options: { armSandboxFault?: ArmSandboxFault; onFire?: OnFaultFired } = {}) {
    this.#armSandboxFault = options.armSandboxFault;
    this.#onFire = options.onFire;
  }

  arm(spec: FaultSpec): ArmedFault {
    const fault: ArmedFault = {
      id: randomUUID(),
      point: spec.point,
      action: spec.action,
      procedure: spec.procedure ?? 'checkout.pay',
      gateway: spec.gateway ?? null,
      customerId: spec.customerId ?? null,
      times: spec.times ?? 1,
      fired: 0,
    };
    this.#armed.push(fault);
    return fault;
  }

  /** The faults still armed (a fault that fired is gone); `customerId`: only that customer's. */
  list(customerId?: string): ArmedFault[] {
    return this.#armed.filter((fault) => customerId === undefined || fault.customerId === customerId).map((fault) => ({ ...fault }));
  }

  clear(): void {
    this.#armed = [];
  }

  disarm(id: string): void {
    this.#armed = this.#armed.filter((fault) => fault.id !== id);
  }

  /** Called at each fault point; fires the first matching armed fault, if any. */
  async hit(point: FaultPoint, at: FaultSite): Promise<void> {
    const fault = this.#armed.find(
      (f) =>
        f.point === point &&
        f.procedure === at.procedure &&
        (f.gateway === null || f.gateway === at.gateway) &&
        (f.customerId === null || f.customerId === at.customerId) &&
        f.fired < f.times,
    );
    if (!fault) return;
    fault.fired++;
    if (fault.fired >= fault.times) this.#armed = this.#armed.filter((f) => f !== fault);
    // Recorded first, so that even a crash leaves its mark (the 幕后 view shows the fault's row); a
    // record that fails must not stop the drill.
    await this.#onFire?.(fault, at).catch((error: unknown) => console.error('[faults] recording a fired fault failed', error));
    switch (fault.action.kind) {
      case 'throw':
        throw new InjectedFaultError(point);
      case 'delay':
        await new Promise((resolve) => setTimeout(resolve, fault.action.kind === 'delay' ? fault.action.ms : 0));
        return;
      case 'sandbox':
        if (!this.#armSandboxFault || !at.gateway) throw new Error('a sandbox fault needs the PSP sandbox (PSP_SANDBOX_URL) and a gateway');
        {
          // Notification faults wait for this order's notifications; a charge fault fires on the
          // charge that follows at once (the sandbox cannot tell one merchant request's order from
          // another's), so it is armed only now, a moment before this payment's request.
          const notification =
            fault.action.fault.action === 'duplicate_notifications' || fault.action.fault.action === 'lose_notifications';
          await this.#armSandboxFault({
            ...fault.action.fault,
            gateway: at.gateway,
            ...(notification && at.outTradeNo ? { outTradeNo: at.outTradeNo } : {}),
          });
        }
        return;
      case 'terminate':
        console.error(`[faults] SIGTERM at ${point}: the process drains and exits`);
        process.kill(process.pid, 'SIGTERM');
        return;
      case 'crash':
        console.error(`[faults] crash at ${point}: the process dies now`);
        // SIGKILL: no finally blocks, no graceful shutdown, no released keys — a real crash.
        process.kill(process.pid, 'SIGKILL');
        await new Promise(() => {}); // never reached
        return;
      default: {
        const unreachable: never = fault.action;
        throw new Error(`unknown fault action ${JSON.stringify(unreachable)}`);
      }
    }
  }
}

/** CHECKOUT_FAULTS=1 alone is what the drills and the soak ask for; the demo brings it along. */
export function faultsEnabled(env?: RawEnv): boolean {
  const config = envFrom(env);
  return config.CHECKOUT_FAULTS || config.PAYONCE_DEMO;
}
