/**
 * The reconciler settles what no request will: orders left in `paying` because the customer closed
 * the tab, the process died between the charge and the commit, or the response was lost and never
 * retried. It asks the gateway by out_trade_no — the question a retry would have asked — and records
 * the answer. It also expires unpaid orders and gives their stock back.
 *
 * Safe on several instances at once: settling is idempotent (settleSucceededCharge), and every
 * other change is a conditional UPDATE on the state this run observed, which only one run can win.
 */
import { and, eq, sql } from 'drizzle-orm';
import { orders } from '../../db/schema';
import type { CheckoutServices } from '../checkout/services';
import { settleSucceededCharge } from '../checkout/settle';
import type { GatewayId } from '../payments/gateway';

export interface ReconcileSummary {
  examined: number;
  settled: number;
  reopened: number;
  undecided: number;
  expired: number;
}

interface StuckOrder extends Record<string, unknown> {
  id: string;
  out_trade_no: string;
  attempt_gateway: GatewayId | null;
  payment_attempt: number;
  attempt_key_id: string | null;
}

export async function reconcilePayments(
  services: CheckoutServices,
  options: {
    /** Only attempts older than this: a live request (inside its lease) is left alone. */
    minAgeMs?: number;
    limit?: number;
  } = {},
): Promise<ReconcileSummary> {
  const minAgeMs = options.minAgeMs ?? services.idempotencyOptions.leaseMs;
  const limit = options.limit ?? 100;
  const summary: ReconcileSummary = { examined: 0, settled: 0, reopened: 0, undecided: 0, expired: 0 };

  // An attempt is stuck when it is old and no request holds its key's lease (the key may also be
  // gone altogether, or released after a transient failure that was never retried).
  const stuck = await services.db.execute<StuckOrder>(sql`
    select o.id, o.out_trade_no, o.attempt_gateway, o.payment_attempt, o.attempt_key_id
      from orders o
      left join idempotency_keys k on k.id = o.attempt_key_id
     where o.status = 'paying'
       and o.attempt_started_at <= now() - (${minAgeMs}::bigint * interval '1 millisecond')
       and (k.id is null or k.lease_expires_at is null or k.lease_expires_at <= now())
     order by o.attempt_started_at
     limit ${limit}`);

  for (const order of stuck) {
    summary.examined++;
    const gateway = order.attempt_gateway ? services.gateways[order.attempt_gateway] : undefined;
    if (!gateway || !order.attempt_gateway) {
      summary.undecided++;
      continue;
    }
    const answer = await gateway.query(order.out_trade_no);
    if (answer.kind === 'unavailable') {
      summary.undecided++; // ask again on the next run
      continue;
    }
    const trade = answer.trade;
    switch (trade.kind) {
      case 'succeeded':
        await services.db.transaction((tx) =>
          settleSucceededCharge(tx, {
            gateway: order.attempt_gateway!,
            outTradeNo: order.out_trade_no,
            gatewayTradeNo: trade.gatewayTradeNo,
            amountMinor: trade.amountMinor,
            currency: trade.currency,
            source: 'reconciliation',
          }),
        );
        summary.settled++;
        break;
      case 'not_found':
      case 'pending':
      case 'closed': {
        // No money moved. Reopen the order so the customer can pay; the gateway's trade (if any)
        // stays keyed by the same out_trade_no, so a late retry of the old attempt is still deduped.
        const reopened = await services.db
          .update(orders)
          .set({ status: 'awaiting_payment', attemptKeyId: null, updatedAt: sql`now()` })
          .where(
            and(
              eq(orders.id, order.id),
              eq(orders.status, 'paying'),
              eq(orders.paymentAttempt, order.payment_attempt),
            ),
          )
          .returning({ id: orders.id });
        if (reopened.length > 0) summary.reopened++;
        break;
      }
      default: {
        const unreachable: never = trade;
        throw new Error(`unknown trade status ${JSON.stringify(unreachable)}`);
      }
    }
  }

  summary.expired = await expireUnpaidOrders(services, limit);
  return summary;
}

/**
 * Orders still awaiting payment past their expiry give their stock back, once: the status change
 * and the restock commit together, and only the run that flips the status restocks.
 */
export async function expireUnpaidOrders(services: CheckoutServices, limit = 100): Promise<number> {
  return services.db.transaction(async (tx) => {
    const expired = await tx.execute<{ id: string }>(sql`
      with doomed as (
        select id from orders
         where status = 'awaiting_payment' and expires_at <= now()
         order by expires_at
         limit ${limit}
         for update skip locked
      )
      update orders o set status = 'expired', updated_at = now()
        from doomed where o.id = doomed.id
      returning o.id`);
    if (expired.length === 0) return 0;
    await tx.execute(sql`
      update products p set stock = p.stock + returned.quantity
        from (select sku, sum(quantity)::int as quantity from order_items
               where order_id in (select (jsonb_array_elements_text(${JSON.stringify(expired.map((e) => e.id))}::jsonb))::uuid)
               group by sku) returned
       where p.sku = returned.sku`);
    return expired.length;
  });
}
