/**
 * Faults the failure drills arm on the sandbox, as a flaky gateway would inflict them. They apply to
 * charge requests only (a query after a failure must still get through, as it does in real life):
 *
 *   fail_before_charge    answer HTTP 500 without charging (PSP 5xx before processing)
 *   slow                  wait `delayMs`, then process normally
 *   timeout_after_charge  charge, then hold the answer for `delayMs` (default 30 s) and hang up
 *   drop_after_charge     charge, then reset the connection without answering
 *   duplicate_notifications  the next scheduled notification goes out `copies` extra times at once,
 *                            each after a random delay, so the copies arrive out of order
 *   lose_notifications    the next `times` scheduled deliveries never reach the receiver (recorded
 *                         as failed deliveries), so only the reconciler can settle the payment
 *
 * Armed with POST /sandbox/faults { gateway?, action, delayMs?, times? }, cleared with DELETE.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { SandboxRequest } from './gateway-module';

export const SANDBOX_FAULT_ACTIONS = [
  'fail_before_charge',
  'slow',
  'timeout_after_charge',
  'drop_after_charge',
  'duplicate_notifications',
  'lose_notifications',
] as const;

export const sandboxFaultSpec = z.object({
  gateway: z.enum(['alipay', 'wechatpay', 'stripe', '2c2p']).optional(),
  action: z.enum(SANDBOX_FAULT_ACTIONS),
  delayMs: z.number().int().min(0).max(600_000).optional(),
  /** duplicate_notifications: how many extra copies. */
  copies: z.number().int().min(1).max(100).optional(),
  times: z.number().int().min(1).max(1000).default(1),
});

export type SandboxFaultSpec = z.infer<typeof sandboxFaultSpec>;
export interface SandboxFault extends SandboxFaultSpec {
  id: string;
  fired: number;
}

/** Which gateway a request is a charge for, by each gateway's own charge endpoints. */
export function chargeGatewayOf(request: SandboxRequest): string | undefined {
  if (request.method !== 'POST') return undefined;
  const path = request.url.pathname;
  if (path === '/gateway.do') {
    const method =
      request.url.searchParams.get('method') ?? new URLSearchParams(request.body).get('method') ?? '';
    return method === 'alipay.trade.pay' || method === 'alipay.trade.create' ? 'alipay' : undefined;
  }
  if (/^\/v3\/pay\/transactions\/(native|jsapi|app|h5)$/.test(path)) return 'wechatpay';
  if (/^\/v1\/payment_intents(\/[^/]+\/confirm)?$/.test(path)) return 'stripe';
  if (path === '/payment/4.3/payment') return '2c2p';
  return undefined;
}

export class SandboxFaults {
  #armed: SandboxFault[] = [];

  arm(spec: SandboxFaultSpec): SandboxFault {
    const fault: SandboxFault = { ...spec, id: randomUUID(), fired: 0 };
    this.#armed.push(fault);
    return fault;
  }

  list(): SandboxFault[] {
    return this.#armed.map((f) => ({ ...f }));
  }

  clear(): void {
    this.#armed = [];
  }

  /** How many extra copies the next scheduled notification of `gateway` gets (a consumed fault). */
  takeNotificationCopies(gateway: string): number {
    const fault = this.#consume(gateway, (action) => action === 'duplicate_notifications');
    return fault ? (fault.copies ?? 5) : 0;
  }

  /** Whether the next scheduled delivery of `gateway` is lost (a consumed fault). */
  takeLostNotification(gateway: string): boolean {
    return this.#consume(gateway, (action) => action === 'lose_notifications') !== undefined;
  }

  /** The fault that fires on this charge request, if any (consumed). */
  take(request: SandboxRequest): SandboxFault | undefined {
    const gateway = chargeGatewayOf(request);
    if (!gateway) return undefined;
    return this.#consume(gateway, (action) => action !== 'duplicate_notifications' && action !== 'lose_notifications');
  }

  /** Fires the first armed fault for `gateway` whose action matches, forgetting it once spent. */
  #consume(gateway: string, matches: (action: SandboxFault['action']) => boolean): SandboxFault | undefined {
    const fault = this.#armed.find(
      (f) => matches(f.action) && (f.gateway === undefined || f.gateway === gateway) && f.fired < f.times,
    );
    if (!fault) return undefined;
    fault.fired++;
    if (fault.fired >= fault.times) this.#armed = this.#armed.filter((f) => f !== fault);
    return fault;
  }
}
