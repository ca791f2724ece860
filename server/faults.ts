/**
 * Fault injection for the failure drills and the demo, off unless CHECKOUT_FAULTS=1 or demo mode
 * (PAYONCE_DEMO=1, see demo.ts). With it off, no injector exists (`services.faults` is undefined),
 * the fault endpoints answer 404, and no fault code runs.
 *
 * Faults are armed per app instance at named points of the pay flow and fire a set number of times:
 *
 *   before_claim        the request arrived, nothing is claimed yet
 *   after_claim         the key is claimed, nothing else has happened
 *   after_gateway_call  the gateway answered (money may have moved), nothing is committed
 *   after_commit        everything is committed, the response has not been sent
 *   after_refund_call   the refund worker's gateway call answered (money may have gone back),
 *                       nothing is committed (procedure `refunds.process`)
 *
 * Actions: `throw` (a transient error: the key is released), `delay` (ms), and `crash` (the process
 * dies at once with SIGKILL, like a Pod evicted between the charge and the database write).
 */
import { randomUUID } from 'node:crypto';
import { CheckoutError } from './checkout/errors';
import { envFrom, type RawEnv } from './env';

export const FAULT_POINTS = ['before_claim', 'after_claim', 'after_gateway_call', 'after_commit', 'after_refund_call'] as const;
export type FaultPoint = (typeof FAULT_POINTS)[number];

export type FaultAction = { kind: 'throw' } | { kind: 'delay'; ms: number } | { kind: 'crash' };

export interface FaultSpec {
  point: FaultPoint;
  action: FaultAction;
  /** Only requests to this procedure (default: checkout.pay). */
  procedure?: string;
  /** Only payments through this gateway (default: any). */
  gateway?: string;
  /** How many matching requests it fires on (default 1). */
  times?: number;
}

export interface ArmedFault extends Required<Omit<FaultSpec, 'gateway'>> {
  id: string;
  gateway: string | null;
  fired: number;
}

export class InjectedFaultError extends CheckoutError {
  constructor(point: FaultPoint) {
    super(503, 'INJECTED_FAULT', `Injected fault at ${point}; retry with the same Idempotency-Key.`, 1);
    this.name = 'InjectedFaultError';
  }
}

export class FaultInjector {
  #armed: ArmedFault[] = [];

  arm(spec: FaultSpec): ArmedFault {
    const fault: ArmedFault = {
      id: randomUUID(),
      point: spec.point,
      action: spec.action,
      procedure: spec.procedure ?? 'checkout.pay',
      gateway: spec.gateway ?? null,
      times: spec.times ?? 1,
      fired: 0,
    };
    this.#armed.push(fault);
    return fault;
  }

  list(): ArmedFault[] {
    return this.#armed.map((fault) => ({ ...fault }));
  }

  clear(): void {
    this.#armed = [];
  }

  /** Called at each fault point; fires the first matching armed fault, if any. */
  async hit(point: FaultPoint, at: { procedure: string; gateway?: string }): Promise<void> {
    const fault = this.#armed.find(
      (f) => f.point === point && f.procedure === at.procedure && (f.gateway === null || f.gateway === at.gateway) && f.fired < f.times,
    );
    if (!fault) return;
    fault.fired++;
    if (fault.fired >= fault.times) this.#armed = this.#armed.filter((f) => f !== fault);
    switch (fault.action.kind) {
      case 'throw':
        throw new InjectedFaultError(point);
      case 'delay':
        await new Promise((resolve) => setTimeout(resolve, fault.action.kind === 'delay' ? fault.action.ms : 0));
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
