/**
 * Faults the failure drills arm on the sandbox, as a flaky gateway would inflict them. Each applies to
 * one operation — `charge` (the default), `close`, `refund` or `capture` (Stripe's capture of an
 * authorisation) — and never to queries (a query after a failure must still get through, as it does in
 * real life). For the others, read "charge" below as "process the close / the refund / the capture":
 *
 *   fail_before_charge    answer with the gateway's own system error without charging (its module's
 *                         `systemError`: Alipay's signed 20000 in an HTTP 200, WeChat Pay's signed
 *                         500 SYSTEM_ERROR, Stripe's 500 api_error, 2C2P's error code in an HTTP 200)
 *   timeout_before_charge hold the request for `delayMs` (default 30 s), then hang up without
 *                         processing it: the caller sees a timeout, and nothing happened
 *   slow                  wait `delayMs`, then process normally
 *   timeout_after_charge  charge, then hold the answer for `delayMs` (default 30 s) and hang up
 *   drop_after_charge     charge, then reset the connection without answering
 *   duplicate_notifications  the next scheduled notification goes out `copies` extra times at once,
 *                            each after a random delay, so the copies arrive out of order
 *   lose_notifications    the next `times` scheduled deliveries never reach the receiver (recorded
 *                         as failed deliveries), so only the reconciler can settle the payment
 *   rate_limit            the next `times` API requests of the gateway — queries included, whatever
 *                         `operation` says, as a rate limiter counts every request — are refused
 *                         unprocessed with the gateway's own 429 (its module's `rateLimited`:
 *                         Stripe's rate_limit error with Stripe-Rate-Limited-Reason)
 *
 * Armed with POST /sandbox/faults { gateway?, operation?, action, delayMs?, times?, outTradeNo? }, cleared
 * with DELETE. `outTradeNo` holds a notification fault for that order's notifications only, so a fault
 * armed for one shopper's payment never lands on another's.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { SandboxRequest } from './gateway-module';

export const SANDBOX_FAULT_ACTIONS = [
  'fail_before_charge',
  'timeout_before_charge',
  'slow',
  'timeout_after_charge',
  'drop_after_charge',
  'duplicate_notifications',
  'lose_notifications',
  'rate_limit',
] as const;

export const SANDBOX_FAULT_OPERATIONS = ['charge', 'close', 'refund', 'capture'] as const;
export type SandboxOperation = (typeof SANDBOX_FAULT_OPERATIONS)[number];

export const sandboxFaultSpec = z.object({
  gateway: z.enum(['alipay', 'wechatpay', 'stripe', '2c2p']).optional(),
  /** Which kind of request the fault fires on; notification faults ignore it. */
  operation: z.enum(SANDBOX_FAULT_OPERATIONS).default('charge'),
  action: z.enum(SANDBOX_FAULT_ACTIONS),
  delayMs: z.number().int().min(0).max(600_000).optional(),
  /** duplicate_notifications: how many extra copies. */
  copies: z.number().int().min(1).max(100).optional(),
  times: z.number().int().min(1).max(1000).default(1),
  /** Notification faults: only this order's notifications (default: the gateway's next). */
  outTradeNo: z.string().min(1).max(64).optional(),
});

export type SandboxFaultSpec = z.infer<typeof sandboxFaultSpec>;
export interface SandboxFault extends SandboxFaultSpec {
  id: string;
  fired: number;
}

/** Which gateway and operation a request is, by each gateway's own endpoints; undefined for the rest. */
export function operationOf(request: SandboxRequest): { gateway: string; operation: SandboxOperation } | undefined {
  if (request.method !== 'POST') return undefined;
  const path = request.url.pathname;
  if (path === '/gateway.do') {
    const method = request.url.searchParams.get('method') ?? new URLSearchParams(request.body).get('method') ?? '';
    if (method === 'alipay.trade.pay' || method === 'alipay.trade.create' || method === 'alipay.trade.precreate') {
      return { gateway: 'alipay', operation: 'charge' };
    }
    if (method === 'alipay.trade.close' || method === 'alipay.trade.cancel') return { gateway: 'alipay', operation: 'close' };
    if (method === 'alipay.trade.refund') return { gateway: 'alipay', operation: 'refund' };
    return undefined;
  }
  if (/^\/v3\/pay\/transactions\/(native|jsapi|app|h5)$/.test(path)) return { gateway: 'wechatpay', operation: 'charge' };
  if (/^\/v3\/pay\/transactions\/out-trade-no\/[^/]+\/close$/.test(path)) return { gateway: 'wechatpay', operation: 'close' };
  if (path === '/v3/refund/domestic/refunds') return { gateway: 'wechatpay', operation: 'refund' };
  if (/^\/v1\/payment_intents(\/[^/]+\/confirm)?$/.test(path)) return { gateway: 'stripe', operation: 'charge' };
  if (/^\/v1\/payment_intents\/[^/]+\/cancel$/.test(path)) return { gateway: 'stripe', operation: 'close' };
  if (/^\/v1\/payment_intents\/[^/]+\/capture$/.test(path)) return { gateway: 'stripe', operation: 'capture' };
  if (path === '/v1/refunds') return { gateway: 'stripe', operation: 'refund' };
  // 2C2P, whose paths ignore case: PGW v4.3's Do Payment, the buyer submitting the hosted payment page
  // (the charge of the redirect step) and cancelTransaction. Its Payment Maintenance API carries
  // refunds in an encrypted body: the 2C2P module tells those apart (SandboxGatewayInstance.operationOf).
  const folded = path.toLowerCase();
  if (folded === '/payment/4.3/payment' || folded.startsWith('/payment/4.3/hosted/')) return { gateway: '2c2p', operation: 'charge' };
  if (folded === '/payment/4.3/canceltransaction') return { gateway: '2c2p', operation: 'close' };
  return undefined;
}

/** Which gateway's API a request is on (any method): where a rate limit counts it. */
export function apiGatewayOf(request: SandboxRequest): string | undefined {
  const path = request.url.pathname;
  if (path === '/v1' || path.startsWith('/v1/')) return 'stripe';
  if (path === '/gateway.do') return 'alipay';
  if (path.startsWith('/v3/')) return 'wechatpay';
  if (path.toLowerCase().startsWith('/payment/4.3/')) return '2c2p';
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

  /**
   * How many extra copies the next scheduled notification of `gateway` gets (a consumed fault). A
   * fault armed for no order in particular waits for a new notification's first delivery: the retry
   * of an older one (a notification an instance refused while it drained, say) does not take it.
   */
  takeNotificationCopies(gateway: string, outTradeNo?: string, firstDelivery = true): number {
    const matches = (action: SandboxFault['action'], fault: SandboxFault) =>
      action === 'duplicate_notifications' && (firstDelivery || fault.outTradeNo !== undefined);
    const fault = this.#consume(gateway, matches, undefined, outTradeNo);
    return fault ? (fault.copies ?? 5) : 0;
  }

  /** Whether the next scheduled delivery of `gateway` is lost (a consumed fault). */
  takeLostNotification(gateway: string, outTradeNo?: string): boolean {
    return this.#consume(gateway, (action) => action === 'lose_notifications', undefined, outTradeNo) !== undefined;
  }

  /** Whether this API request is refused by a rate limit (a consumed fault), and for which gateway. */
  takeRateLimit(request: SandboxRequest): string | undefined {
    const gateway = apiGatewayOf(request);
    if (!gateway) return undefined;
    return this.#consume(gateway, (action) => action === 'rate_limit') ? gateway : undefined;
  }

  /**
   * The fault that fires on this charge, close or refund request, if any (consumed). `classify` reads
   * what the path cannot tell (a gateway module's own reading of the body); operationOf() the rest.
   */
  take(
    request: SandboxRequest,
    classify: (request: SandboxRequest) => ReturnType<typeof operationOf> = operationOf,
  ): SandboxFault | undefined {
    const op = classify(request);
    if (!op) return undefined;
    const requestFault = (action: SandboxFault['action']) =>
      action !== 'duplicate_notifications' && action !== 'lose_notifications' && action !== 'rate_limit';
    return this.#consume(op.gateway, requestFault, op.operation);
  }

  /** Fires the first armed fault for `gateway` whose action (and operation) matches, forgetting it once spent. */
  #consume(
    gateway: string,
    matches: (action: SandboxFault['action'], fault: SandboxFault) => boolean,
    operation?: SandboxOperation,
    outTradeNo?: string,
  ): SandboxFault | undefined {
    const fault = this.#armed.find(
      (f) =>
        matches(f.action, f) &&
        (operation === undefined || f.operation === operation) &&
        (f.outTradeNo === undefined || f.outTradeNo === outTradeNo) &&
        (f.gateway === undefined || f.gateway === gateway) &&
        f.fired < f.times,
    );
    if (!fault) return undefined;
    fault.fired++;
    if (fault.fired >= fault.times) this.#armed = this.#armed.filter((f) => f !== fault);
    return fault;
  }
}
