/**
 * The page's fault switchboard (demo mode only): each button arms, for this browser's next payment
 * (its session's, whichever gateway it pays with), one of the failures the Playwright drills use — the
 * same app fault points and PSP-sandbox faults — so anyone can break a payment in the browser and then
 * read in the 幕后 view what happened and that one charge was kept. Nobody else's payment is touched.
 *
 *   dropped_request     请求前丢失   the request dies before the guard claims its key (503); the page retries
 *   error_in_processing 处理中出错   the key is claimed, then processing fails (503): the key is released
 *   crash_after_charge  扣款后崩溃   the gateway charged, the process dies before recording it (SIGKILL);
 *                                   the retry takes the stale key over and the gateway's dedupe answers
 *   lost_response       响应丢失     everything committed, the answer is lost (503): the retry is a replay
 *   gateway_timeout     网关超时     the gateway charges but answers after the adapter's timeout
 *   duplicate_notifications 重复通知 the gateway sends this order's notification ten extra times at once
 *   late_buyer          买家稍后支付 after the payment, the buyer completes every trade this order ever
 *                                   opened (a QR code still on the phone, a second tab): each must be
 *                                   refused, or refunded if it could take money
 *
 * The sandbox's faults are armed only when this session's payment reaches its gateway (fault point
 * before_gateway_call), for that gateway and, for notifications, that order.
 */
import { and, desc, eq, sql } from 'drizzle-orm';
import { orders, orderTrades } from '@/db/schema';
import type { CheckoutServices } from '@/server/checkout/services';
import type { Executor } from '@/db/client';
import type { ArmedFault, FaultInjector, FaultSite, FaultSpec } from './faults';

/**
 * The checkout's services, plus what only the app's own control routes use: the fault injector that
 * /api/faults and demo mode's switchboard arm (wired into the checkout as its `faults`), and the PSP
 * sandbox that local runs pay at, where the switchboard's late buyer pays.
 */
export interface DemoServices extends CheckoutServices {
  faultInjector?: FaultInjector;
  pspSandboxUrl?: string;
}

export const DEMO_DRILLS = [
  'dropped_request',
  'error_in_processing',
  'crash_after_charge',
  'lost_response',
  'gateway_timeout',
  'duplicate_notifications',
  'late_buyer',
] as const;
export type DemoDrill = (typeof DEMO_DRILLS)[number];

function plan(drill: Exclude<DemoDrill, 'late_buyer'>, customerId: string): FaultSpec {
  const forThisBrowser = { customerId, procedure: 'checkout.pay' };
  switch (drill) {
    case 'dropped_request':
      return { ...forThisBrowser, point: 'before_claim', action: { kind: 'throw' } };
    case 'error_in_processing':
      return { ...forThisBrowser, point: 'after_claim', action: { kind: 'throw' } };
    case 'crash_after_charge':
      return { ...forThisBrowser, point: 'after_gateway_call', action: { kind: 'crash' } };
    case 'lost_response':
      return { ...forThisBrowser, point: 'after_commit', action: { kind: 'throw' } };
    case 'gateway_timeout':
      // Longer than the adapters' 5 s timeout: the money moves, the answer comes too late.
      return {
        ...forThisBrowser,
        point: 'before_gateway_call',
        action: { kind: 'sandbox', fault: { action: 'timeout_after_charge', delayMs: 7000 } },
      };
    case 'duplicate_notifications':
      return {
        ...forThisBrowser,
        point: 'before_gateway_call',
        action: { kind: 'sandbox', fault: { action: 'duplicate_notifications', copies: 10 } },
      };
    default: {
      const unreachable: never = drill;
      throw new Error(`unknown drill ${String(unreachable)}`);
    }
  }
}

export class DemoDrillError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

async function sandboxPost(sandboxUrl: string | undefined, path: string, body: unknown): Promise<{ status: number; body: unknown }> {
  if (!sandboxUrl) throw new DemoDrillError(409, 'No PSP sandbox is configured (PSP_SANDBOX_URL).');
  const response = await fetch(new URL(path, sandboxUrl), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(5000),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // plain text answer
  }
  return { status: response.status, body: parsed };
}

/** Arms `drill` for this customer's next payment; the armed fault's id lets the page watch it fire. */
export function armDemoDrill(
  services: DemoServices,
  drill: Exclude<DemoDrill, 'late_buyer'>,
  customerId: string,
): { drill: DemoDrill; id: string } {
  const faults = services.faultInjector;
  if (!faults) throw new DemoDrillError(404, 'not found');
  // One armed drill per browser: a new choice replaces the one not yet fired.
  for (const armed of faults.list(customerId)) faults.disarm(armed.id);
  return { drill, id: faults.arm(plan(drill, customerId)).id };
}

/** Posts a fault to the PSP sandbox (the switchboard's sandbox faults, armed as a payment reaches its gateway). */
export async function armSandboxFault(sandboxUrl: string | undefined, fault: Record<string, unknown>): Promise<void> {
  const armed = await sandboxPost(sandboxUrl, '/sandbox/faults', fault);
  if (armed.status !== 201) throw new Error(`the sandbox refused the fault: ${armed.status} ${JSON.stringify(armed.body)}`);
}

/**
 * The late buyer: completes, at the sandbox, every trade the order opened. The customer's own order
 * only. Each answer is returned: 409 TRADE_NOT_PAYABLE where the trade was closed or already paid, 200
 * where money moved — which the gateway's notification then brings in as a payment that must not stay.
 */
export async function lateBuyer(
  services: DemoServices,
  customerId: string,
  orderId: string | undefined,
): Promise<{ orderId: string; outTradeNo: string; results: { gateway: string; status: number; answer: unknown }[] }> {
  if (!services.faultInjector) throw new DemoDrillError(404, 'not found');
  const [order] = await services.db
    .select({ id: orders.id, outTradeNo: orders.outTradeNo })
    .from(orders)
    .where(and(eq(orders.customerId, customerId), orderId ? eq(orders.id, orderId) : undefined))
    .orderBy(desc(orders.createdAt))
    .limit(1);
  if (!order) throw new DemoDrillError(404, 'No such order.');
  const trades = await services.db.select({ gateway: orderTrades.gateway }).from(orderTrades).where(eq(orderTrades.orderId, order.id));
  const results = [];
  for (const { gateway } of trades) {
    const paid = await sandboxPost(services.pspSandboxUrl, `/sandbox/${gateway}/buyer-pays`, { outTradeNo: order.outTradeNo, buyer: 'ok' });
    results.push({ gateway, status: paid.status, answer: paid.body });
  }
  return { orderId: order.id, outTradeNo: order.outTradeNo, results };
}

/**
 * A fault's line in the order's journal, as the 幕后 view shows it: into the order the request names,
 * when it exists and is the requesting customer's (a request naming someone else's order, or none,
 * leaves no line anywhere — as for the request's own line, journalRequest).
 */
export async function journalFault(db: Executor, site: FaultSite, fault: ArmedFault): Promise<void> {
  if (!site.orderId || !site.customerId) return;
  const action = fault.action.kind === 'sandbox' ? fault.action.fault.action : fault.action.kind;
  await db.execute(sql`
    select append_payment_event('order:' || o.id::text, o.id, 'fault.injected',
                                ${JSON.stringify({ point: fault.point, action, procedure: fault.procedure })}::jsonb)
      from orders o where o.id = ${site.orderId}::uuid and o.customer_id = ${site.customerId}::uuid`);
}
