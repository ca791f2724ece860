/**
 * Authorised orders whose hold may have ended with no notification reaching us: a card
 * authorisation lapses at the gateway after about seven days (Stripe cancels the PaymentIntent), and
 * a capture or release may have been made elsewhere (the Dashboard). Asked at the gateway on a
 * schedule and settled by what it says — held: nothing to do; captured: the order paid; gone: voided,
 * stock back.
 */
import { sql } from 'drizzle-orm';
import { settleVoidedAuthorization } from '@/server/checkout/authorizations';
import type { CheckoutServices } from '@/server/checkout/services';
import type { GatewayId } from '@/server/payments/gateway';
import { askGateway, settleFound } from './gateway-answers';

/**
 * Authorised orders older than `minAgeMs`, each asked again after a quarter of its age (a handful of
 * questions over a seven-day hold, the last ones near its end, when it lapses), at most `limit` per
 * run, oldest question first. Returns how many changed.
 */
export async function settleEndedAuthorizations(services: CheckoutServices, options: { minAgeMs: number; limit: number }): Promise<number> {
  const due = await services.db.execute<{ id: string; out_trade_no: string; gateway: GatewayId; gateway_trade_no: string }>(sql`
    select o.id, o.out_trade_no, p.gateway, p.gateway_trade_no
      from orders o
      join payments p on p.order_id = o.id and p.role = 'payment' and p.status = 'authorized'
      join order_trades t on t.order_id = o.id and t.gateway = p.gateway
     where o.status = 'authorized'
       and o.authorized_at <= now() - (${options.minAgeMs}::bigint * interval '1 millisecond')
       and (t.last_queried_at is null
            or t.last_queried_at <= now() - greatest(${options.minAgeMs}::bigint * interval '1 millisecond', (now() - o.authorized_at) / 4))
     order by t.last_queried_at nulls first
     limit ${options.limit}`);
  let changed = 0;
  for (const order of due) {
    const gateway = services.gateways[order.gateway];
    if (!gateway) continue;
    await services.db.execute(
      sql`update order_trades set last_queried_at = now() where order_id = ${order.id} and gateway = ${order.gateway}`,
    );
    const answer = await askGateway(services, gateway, order.id, order.out_trade_no);
    if (answer.kind !== 'answered') continue;
    const trade = answer.trade;
    if (trade.kind === 'succeeded' && trade.gatewayTradeNo === order.gateway_trade_no) {
      await settleFound(services, order.gateway, order.out_trade_no, trade);
      changed++;
    } else if (trade.kind === 'closed') {
      // Every PaymentIntent of the order is final and none succeeded: the hold is gone.
      const trade = { gateway: order.gateway, outTradeNo: order.out_trade_no, gatewayTradeNo: order.gateway_trade_no };
      if ((await services.db.transaction((tx) => settleVoidedAuthorization(tx, trade))) === 'voided') changed++;
    }
  }
  return changed;
}
