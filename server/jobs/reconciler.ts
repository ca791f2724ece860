/**
 * The reconciler settles what no request will: orders left in `paying` because the customer closed
 * the tab, the process died between the charge and the commit, or the response was lost and never
 * retried. It asks the gateway by out_trade_no — the question a retry would have asked — and records
 * the answer. It also expires unpaid orders and gives their stock back, and closes any trade still
 * open on an order that is over.
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
import { sql } from 'drizzle-orm';
import { customerScope, type CheckoutServices } from '../checkout/services';
import { journal, journaledCall } from '../checkout/journal';
import { applyOrderTransition } from '../checkout/order-state';
import { settleSucceededCharge } from '../checkout/settle';
import { closeOpenTrades, settledOrdersWithOpenTrades } from '../checkout/trades';
import type { GatewayId, PaymentGateway, QueryOutcome, SucceededTrade } from '../payments/gateway';

export interface ReconcileSummary {
  examined: number;
  settled: number;
  reopened: number;
  undecided: number;
  expired: number;
  /** Trades closed on orders that were already over (paid, expired, failed). */
  swept: number;
  /** Open trades of payable orders (the buyer's own step, a decline) found paid at the gateway and settled. */
  openTradesSettled: number;
}

/**
 * How long past its expiry an order waits for its open trade to be closed before it expires anyway.
 * While a close is in doubt the stock stays held, because a late payment could still settle the order;
 * past this grace the stock goes back, and a payment that still lands is refunded.
 */
export const DEFAULT_EXPIRY_CLOSE_GRACE_MS = 10 * 60_000;

interface StuckOrder extends Record<string, unknown> {
  id: string;
  customer_id: string;
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
    expiryCloseGraceMs?: number;
  } = {},
): Promise<ReconcileSummary> {
  const minAgeMs = options.minAgeMs ?? services.idempotencyOptions.leaseMs;
  const limit = options.limit ?? 100;
  const summary: ReconcileSummary = { examined: 0, settled: 0, reopened: 0, undecided: 0, expired: 0, swept: 0, openTradesSettled: 0 };

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
    if (!gateway || !order.attempt_gateway) {
      summary.undecided++;
      continue;
    }
    const answer = await askGateway(services, gateway, order.id, order.out_trade_no);
    if (answer.kind === 'unavailable') {
      summary.undecided++; // ask again on the next run
      continue;
    }
    const trade = answer.trade;
    switch (trade.kind) {
      case 'succeeded':
        await settleFound(services, order.attempt_gateway, order.out_trade_no, trade);
        summary.settled++;
        break;
      case 'not_found':
      case 'pending':
      case 'closed': {
        // No money moved. Reopen the order so the customer can pay; the gateway's trade (if any) stays
        // on the order's open trades, closed before any attempt elsewhere and before expiry.
        const reopened = await services.db.transaction(async (tx) => {
          const reopen = await applyOrderTransition(tx, order.id, 'attempt_abandoned', { attempt: order.payment_attempt });
          if (reopen.applied) {
            await journal(tx, {
              orderId: order.id,
              kind: 'attempt.abandoned',
              data: { attempt: order.payment_attempt, gateway: order.attempt_gateway, trade: trade.kind },
            });
          }
          return reopen.applied;
        });
        if (reopened) summary.reopened++;
        break;
      }
      default: {
        const unreachable: never = trade;
        throw new Error(`unknown trade status ${JSON.stringify(unreachable)}`);
      }
    }
  }

  summary.openTradesSettled = await settlePaidOpenTrades(services, { minAgeMs, limit });
  summary.expired = await expireUnpaidOrders(services, limit, options.expiryCloseGraceMs);
  summary.swept = await closeTradesOfSettledOrders(services, limit);
  return summary;
}

/** The reconciler's question, journaled like every gateway call: what became of this out_trade_no? */
function askGateway(services: CheckoutServices, gateway: PaymentGateway, orderId: string, outTradeNo: string): Promise<QueryOutcome> {
  return journaledCall(services.db, { orderId, gateway: gateway.id, operation: 'query', request: { outTradeNo, by: 'reconciler' } }, () =>
    gateway.query(outTradeNo),
  );
}

/** Settles a charge the gateway reported paid; idempotent with the response and the notification. */
async function settleFound(services: CheckoutServices, gateway: GatewayId, outTradeNo: string, paid: SucceededTrade): Promise<void> {
  await services.db.transaction((tx) =>
    settleSucceededCharge(tx, {
      gateway,
      outTradeNo,
      gatewayTradeNo: paid.gatewayTradeNo,
      amountMinor: paid.amountMinor,
      currency: paid.currency,
      source: 'reconciliation',
    }),
  );
}

/**
 * A payable order's open trade may have been paid with no notification reaching us (the buyer scanned
 * the QR code, entered a card or paid on a hosted page, and the gateway's notifications were lost or
 * are still on their retry schedule): ask the gateway, as the page's polling would want, and settle
 * what it says is paid. Only trades older than `minAgeMs` (the pay request that opened one has long
 * answered), each again after a quarter of its age (about twenty questions over a 30-minute order,
 * most of them early, when buyers pay), a random sample of at most `limit` per run so that many waiting
 * buyers are all asked in turn; a trade nobody pays is closed at the order's expiry.
 */
export async function settlePaidOpenTrades(services: CheckoutServices, options: { minAgeMs: number; limit: number }): Promise<number> {
  const open = await services.db.execute<{ id: string; out_trade_no: string; gateway: GatewayId }>(sql`
    select o.id, o.out_trade_no, t.gateway
      from order_trades t
      join orders o on o.id = t.order_id
     where t.status = 'open'
       and o.status = 'awaiting_payment'
       and t.opened_at <= now() - (${options.minAgeMs}::bigint * interval '1 millisecond')
       and (t.last_queried_at is null
            or t.last_queried_at <= now() - greatest(${options.minAgeMs}::bigint * interval '1 millisecond', (now() - t.opened_at) / 4))
     order by random()
     limit ${options.limit}`);
  let settled = 0;
  for (const trade of open) {
    const gateway = services.gateways[trade.gateway];
    if (!gateway) continue;
    await services.db.execute(
      sql`update order_trades set last_queried_at = now() where order_id = ${trade.id} and gateway = ${trade.gateway} and status = 'open'`,
    );
    const answer = await askGateway(services, gateway, trade.id, trade.out_trade_no);
    if (answer.kind !== 'answered' || answer.trade.kind !== 'succeeded') continue;
    await settleFound(services, trade.gateway, trade.out_trade_no, answer.trade);
    settled++;
  }
  return settled;
}

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
      await tx.execute(sql`
        update products p set stock = p.stock + i.quantity
          from order_items i
         where i.order_id = ${order.id} and p.sku = i.sku`);
      await journal(tx, { orderId: order.id, kind: 'order.expired', data: { restocked: true, tradeInDoubt: force } });
      return 1;
    });
  }
  return expired;
}
