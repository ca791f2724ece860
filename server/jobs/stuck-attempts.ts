/**
 * Attempts nobody finished: orders left in `paying` because the customer closed the tab, the process
 * died between the charge and the commit, or the response was lost and never retried. The gateway is
 * asked by out_trade_no and its answer recorded: paid → settled; no money moved → the order is
 * payable again. Reopening does not close the gateway's trade: it stays on the order's open trades,
 * so the buyer may still finish paying it, a new attempt on the same gateway reuses it, and an attempt
 * elsewhere or the expiry closes it first (server/checkout/trades.ts).
 */
import { sql } from 'drizzle-orm';
import { customerScope, type CheckoutServices } from '@/server/checkout/services';
import { journal } from '@/server/checkout/journal';
import { applyOrderTransition } from '@/server/checkout/order-state';
import { assertNever } from '@/server/payments/transport';
import type { GatewayId, PaymentGateway, TradeStatus } from '@/server/payments/gateway';
import { askGateway, settleFound } from './gateway-answers';

interface StuckOrder extends Record<string, unknown> {
  id: string;
  customer_id: string;
  out_trade_no: string;
  attempt_gateway: GatewayId | null;
  payment_attempt: number;
  attempt_key_id: string | null;
}

export interface StuckAttemptsSummary {
  examined: number;
  settled: number;
  reopened: number;
  undecided: number;
}

/** Attempts older than `minAgeMs` whose key no request holds, at most `limit` per run. */
export async function reconcileStuckAttempts(
  services: CheckoutServices,
  options: { minAgeMs: number; limit: number },
): Promise<StuckAttemptsSummary> {
  const { minAgeMs, limit } = options;
  const summary: StuckAttemptsSummary = { examined: 0, settled: 0, reopened: 0, undecided: 0 };
  // An attempt is stuck when it is old and no request holds its key's lease (the key may also be
  // gone altogether, or released after a transient failure that was never retried). The lease is
  // the idempotency core's business: the store says which of these keys are held.
  const candidates = await services.db.execute<StuckOrder>(sql`
    select o.id, o.customer_id, o.out_trade_no, o.attempt_gateway, o.payment_attempt, o.attempt_key_id
      from orders o
     where o.status = 'paying'
       and o.attempt_started_at <= now() - (${minAgeMs}::bigint * interval '1 millisecond')
     order by o.attempt_started_at
     limit ${limit}`);
  const held = await services.idempotencyStore.leasesHeld(
    candidates.flatMap((order) => (order.attempt_key_id ? [{ scope: customerScope(order.customer_id), id: order.attempt_key_id }] : [])),
  );
  const stuck = candidates.filter((order) => !order.attempt_key_id || !held.has(order.attempt_key_id));

  for (const order of stuck) {
    summary.examined++;
    const gateway = order.attempt_gateway ? services.gateways[order.attempt_gateway] : undefined;
    const outcome = gateway ? await settleOrReopen(services, gateway, order) : 'undecided';
    if (outcome) summary[outcome]++;
  }
  return summary;
}

/**
 * The gateway's answer for one stuck attempt, recorded: settled, reopened, or undecided (ask again
 * next run); undefined when another run reopened it first.
 */
async function settleOrReopen(
  services: CheckoutServices,
  gateway: PaymentGateway,
  order: StuckOrder,
): Promise<'settled' | 'reopened' | 'undecided' | undefined> {
  const answer = await askGateway(services, gateway, order.id, order.out_trade_no);
  if (answer.kind === 'unavailable') return 'undecided';
  const trade = answer.trade;
  switch (trade.kind) {
    case 'succeeded':
    case 'authorized':
      await settleFound(services, gateway.id, order.out_trade_no, trade);
      return 'settled';
    case 'not_found':
    case 'pending':
    case 'closed':
      // No money moved. Reopen the order so the customer can pay; the gateway's trade (if any) stays
      // on the order's open trades, closed before any attempt elsewhere and before expiry.
      return (await reopen(services, order, trade)) ? 'reopened' : undefined;
    default:
      return assertNever(trade);
  }
}

async function reopen(services: CheckoutServices, order: StuckOrder, trade: TradeStatus): Promise<boolean> {
  return services.db.transaction(async (tx) => {
    const reopened = await applyOrderTransition(tx, order.id, 'attempt_abandoned', { attempt: order.payment_attempt });
    if (reopened.applied) {
      await journal(tx, {
        orderId: order.id,
        kind: 'attempt.abandoned',
        data: { attempt: order.payment_attempt, gateway: order.attempt_gateway, trade: trade.kind },
      });
    }
    return reopened.applied;
  });
}
