/** The net under the one-open-trade rule: trades still open on orders that are over, closed. */
import type { CheckoutServices } from '@/server/checkout/services';
import { closeOpenTrades, settledOrdersWithOpenTrades } from '@/server/checkout/trades';

/**
 * A trade left open on an order that is over can still take the buyer's money: close it. A trade
 * that turns out paid is settled as excess and refunded. Normally there is none — every trade is
 * closed before another opens — so this is the net under that rule (and under orders recorded before
 * trades were tracked).
 */
export async function closeTradesOfSettledOrders(services: CheckoutServices, limit = 100): Promise<number> {
  let swept = 0;
  for (const order of await settledOrdersWithOpenTrades(services, limit)) {
    const result = await closeOpenTrades(services, order);
    if (result.kind !== 'in_doubt') swept++;
  }
  return swept;
}
