/**
 * Open trades of payable orders that the buyer may have paid with no notification reaching us: asked
 * at the gateway on a schedule, settled when paid.
 */
import { sql } from 'drizzle-orm';
import type { CheckoutServices } from '@/server/checkout/services';
import type { GatewayId } from '@/server/payments/gateway';
import { askGateway, settleFound } from './gateway-answers';

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
    if (answer.kind !== 'answered' || (answer.trade.kind !== 'succeeded' && answer.trade.kind !== 'authorized')) continue;
    await settleFound(services, trade.gateway, trade.out_trade_no, answer.trade);
    settled++;
  }
  return settled;
}
