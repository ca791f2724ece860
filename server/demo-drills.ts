/**
 * The page's fault switchboard (demo mode only): each button arms, for the next payment, one of the
 * failures the Playwright drills use — the same app fault points and PSP-sandbox faults — so anyone
 * can break a payment in the browser and then read in the 幕后 view what happened and that one charge
 * was kept.
 *
 *   dropped_request     请求前丢失   the request dies before the guard claims its key (503); the page retries
 *   error_in_processing 处理中出错   the key is claimed, then processing fails (503): the key is released
 *   crash_after_charge  扣款后崩溃   the gateway charged, the process dies before recording it (SIGKILL);
 *                                   the retry takes the stale key over and the gateway's dedupe answers
 *   lost_response       响应丢失     everything committed, the answer is lost (503): the retry is a replay
 *   gateway_timeout     网关超时     the gateway charges but answers after the adapter's timeout
 *   duplicate_notifications 重复通知 the gateway sends its notification ten extra times at once
 *   late_buyer          买家稍后支付 after the payment, the buyer completes every trade this order ever
 *                                   opened (a QR code still on the phone, a second tab): each must be
 *                                   refused, or refunded if it could take money
 */
import { and, desc, eq } from 'drizzle-orm';
import { orders, orderTrades } from '../db/schema';
import type { CheckoutServices } from './checkout/services';
import type { FaultSpec } from './faults';
import type { GatewayId } from './payments/gateway';

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

type SandboxFault = { gateway: GatewayId; action: string; delayMs?: number; copies?: number; times?: number };

function plan(drill: Exclude<DemoDrill, 'late_buyer'>, gateway: GatewayId): { app?: FaultSpec; sandbox?: SandboxFault[] } {
  switch (drill) {
    case 'dropped_request':
      return { app: { point: 'before_claim', action: { kind: 'throw' }, gateway } };
    case 'error_in_processing':
      return { app: { point: 'after_claim', action: { kind: 'throw' }, gateway } };
    case 'crash_after_charge':
      return { app: { point: 'after_gateway_call', action: { kind: 'crash' }, gateway } };
    case 'lost_response':
      return { app: { point: 'after_commit', action: { kind: 'throw' }, gateway } };
    case 'gateway_timeout':
      // Longer than the adapters' 5 s timeout: the money moves, the answer comes too late.
      return { sandbox: [{ gateway, action: 'timeout_after_charge', delayMs: 7000 }] };
    case 'duplicate_notifications':
      return { sandbox: [{ gateway, action: 'duplicate_notifications', copies: 10 }] };
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

async function sandboxPost(services: CheckoutServices, path: string, body: unknown): Promise<{ status: number; body: unknown }> {
  if (!services.pspSandboxUrl) throw new DemoDrillError(409, 'No PSP sandbox is configured (PSP_SANDBOX_URL).');
  const response = await fetch(new URL(path, services.pspSandboxUrl), {
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

/** Arms `drill` for the next payment through `gateway`. */
export async function armDemoDrill(
  services: CheckoutServices,
  drill: Exclude<DemoDrill, 'late_buyer'>,
  gateway: GatewayId,
): Promise<{ drill: DemoDrill; gateway: GatewayId }> {
  if (!services.faults) throw new DemoDrillError(404, 'not found');
  const { app, sandbox } = plan(drill, gateway);
  if (app) services.faults.arm(app);
  for (const fault of sandbox ?? []) {
    const armed = await sandboxPost(services, '/sandbox/faults', fault);
    if (armed.status !== 201) throw new DemoDrillError(502, `The sandbox refused the fault: ${JSON.stringify(armed.body)}`);
  }
  return { drill, gateway };
}

/**
 * The late buyer: completes, at the sandbox, every trade the order opened. The customer's own order
 * only. Each answer is returned: 409 TRADE_NOT_PAYABLE where the trade was closed or already paid, 200
 * where money moved — which the gateway's notification then brings in as a payment that must not stay.
 */
export async function lateBuyer(
  services: CheckoutServices,
  customerId: string,
  orderId: string | undefined,
): Promise<{ orderId: string; outTradeNo: string; results: { gateway: string; status: number; answer: unknown }[] }> {
  if (!services.faults) throw new DemoDrillError(404, 'not found');
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
    const paid = await sandboxPost(services, `/sandbox/${gateway}/buyer-pays`, { outTradeNo: order.outTradeNo, buyer: 'ok' });
    results.push({ gateway, status: paid.status, answer: paid.body });
  }
  return { orderId: order.id, outTradeNo: order.outTradeNo, results };
}
