/**
 * The reconciler settles what no request will, one pass of five jobs, each in a file of its own:
 *
 *   ./stuck-attempts.ts  orders left in `paying` (tab closed, process died between the charge and the
 *                        commit, response lost): the gateway is asked by out_trade_no, the answer recorded
 *   ./open-trades.ts     open trades of payable orders the buyer may have paid, notification lost
 *   ./expire-orders.ts   unpaid orders past their expiry: trades closed, stock given back
 *   ./sweep-trades.ts    trades still open on orders that are over, closed
 *   ./held-authorizations.ts  authorised orders whose hold lapsed, or was captured or released
 *                        elsewhere, with no notification: settled by what the gateway says
 *
 * Closing follows one rule (server/checkout/trades.ts): an order's open trades are closed before it
 * opens a trade anywhere else and before it expires. Reopening a stuck order does not close its trade:
 * the trade stays on the order's list of open trades, so the buyer may still finish paying it (the
 * payment then settles the order), a new attempt on the same gateway reuses it, and an attempt
 * elsewhere or the expiry closes it first. Closing it here would only shut the customer out of that
 * gateway for this order (one out_trade_no per order, and a closed out_trade_no is refused for good).
 *
 * Safe on several instances at once: settling is idempotent (settleSucceededCharge), closes are
 * idempotent at the gateway, and every other change is a conditional UPDATE on the state this run
 * observed, which only one run can win.
 */
import type { CheckoutServices } from '@/server/checkout/services';
import { DEFAULT_EXPIRY_CLOSE_GRACE_MS, expireUnpaidOrders } from './expire-orders';
import { settleEndedAuthorizations } from './held-authorizations';
import { settlePaidOpenTrades } from './open-trades';
import { reconcileStuckAttempts } from './stuck-attempts';
import { closeTradesOfSettledOrders } from './sweep-trades';

export { DEFAULT_EXPIRY_CLOSE_GRACE_MS, expireUnpaidOrders };

export interface ReconcileSummary {
  examined: number;
  settled: number;
  reopened: number;
  undecided: number;
  expired: number;
  /** Trades closed on orders that were already over (paid, expired). */
  swept: number;
  /** Open trades of payable orders (the buyer's own step, a decline) found paid at the gateway and settled. */
  openTradesSettled: number;
  /** Authorised orders found captured or voided at the gateway. */
  authorizationsSettled: number;
}

/** One pass of the reconciler's five jobs. */
export async function reconcilePayments(
  services: CheckoutServices,
  options: {
    /** Only attempts older than this: a live request (inside its lease) is left alone. */
    minAgeMs?: number;
    limit?: number;
    expiryCloseGraceMs?: number;
  } = {},
): Promise<ReconcileSummary> {
  const minAgeMs = options.minAgeMs ?? services.idempotencyOptions.leaseMs;
  const limit = options.limit ?? 100;
  const stuck = await reconcileStuckAttempts(services, { minAgeMs, limit });
  const openTradesSettled = await settlePaidOpenTrades(services, { minAgeMs, limit });
  const expired = await expireUnpaidOrders(services, limit, options.expiryCloseGraceMs);
  const swept = await closeTradesOfSettledOrders(services, limit);
  const authorizationsSettled = await settleEndedAuthorizations(services, { minAgeMs, limit });
  return { ...stuck, expired, swept, openTradesSettled, authorizationsSettled };
}
