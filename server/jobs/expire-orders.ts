/** Unpaid orders past their expiry: their trades closed, then expired and restocked, once. */
import { sql } from 'drizzle-orm';
import type { CheckoutServices } from '@/server/checkout/services';
import { restockOrder } from '@/server/checkout/catalogue';
import { journal } from '@/server/checkout/journal';
import { applyOrderTransition } from '@/server/checkout/order-state';
import { closeOpenTrades } from '@/server/checkout/trades';

/**
 * How long past its expiry an order waits for its open trade to be closed before it expires anyway.
 * While a close is in doubt the stock stays held, because a late payment could still settle the order;
 * past this grace the stock goes back, and a payment that still lands is refunded.
 */
export const DEFAULT_EXPIRY_CLOSE_GRACE_MS = 10 * 60_000;

/**
 * Orders still awaiting payment past their expiry give their stock back, once: their open trades are
 * closed first (a trade found paid settles the order instead), then the status change and the restock
 * commit together, and only the run that flips the status restocks. An order whose close stays in
 * doubt keeps its stock until `closeGraceMs` past its expiry, then expires anyway: any payment that
 * lands after that is refunded.
 */
export async function expireUnpaidOrders(
  services: CheckoutServices,
  limit = 100,
  closeGraceMs = DEFAULT_EXPIRY_CLOSE_GRACE_MS,
): Promise<number> {
  const due = await services.db.execute<{
    id: string;
    out_trade_no: string;
    amount_minor: number;
    currency: string;
    past_grace: boolean;
  }>(sql`
    select id, out_trade_no, amount_minor, currency,
           expires_at <= now() - (${closeGraceMs}::bigint * interval '1 millisecond') as past_grace
      from orders
     where status = 'awaiting_payment' and expires_at <= now()
     order by expires_at
     limit ${limit}`);
  let expired = 0;
  for (const order of due) {
    const closed = await closeOpenTrades(services, {
      id: order.id,
      outTradeNo: order.out_trade_no,
      amountMinor: order.amount_minor,
      currency: order.currency,
    });
    if (closed.kind === 'settled') continue; // paid after all
    if (closed.kind === 'in_doubt' && !order.past_grace) continue; // ask again next run
    const force = closed.kind === 'in_doubt';
    expired += await services.db.transaction(async (tx) => {
      const expiry = await applyOrderTransition(tx, order.id, 'expired', { tradeInDoubt: force });
      if (!expiry.applied) return 0;
      await restockOrder(tx, order.id);
      await journal(tx, { orderId: order.id, kind: 'order.expired', data: { restocked: true, tradeInDoubt: force } });
      return 1;
    });
  }
  return expired;
}
