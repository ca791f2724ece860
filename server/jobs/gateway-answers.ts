/**
 * What the jobs ask a gateway about an out_trade_no, and how a paid answer is recorded: the same
 * question a retry of the request would have asked, journaled like every gateway call, and the same
 * settle as the response and the notification (idempotent with both).
 */
import type { CheckoutServices } from '@/server/checkout/services';
import { journaledCall } from '@/server/checkout/journal';
import { settleSucceededCharge } from '@/server/checkout/settle';
import type { GatewayId, PaymentGateway, QueryOutcome, SucceededTrade } from '@/server/payments/gateway';

/** The reconciler's question, journaled like every gateway call: what became of this out_trade_no? */
export function askGateway(
  services: CheckoutServices,
  gateway: PaymentGateway,
  orderId: string,
  outTradeNo: string,
): Promise<QueryOutcome> {
  return journaledCall(services.db, { orderId, gateway: gateway.id, operation: 'query', request: { outTradeNo, by: 'reconciler' } }, () =>
    gateway.query(outTradeNo),
  );
}

/** Settles a charge the gateway reported paid; idempotent with the response and the notification. */
export async function settleFound(services: CheckoutServices, gateway: GatewayId, outTradeNo: string, paid: SucceededTrade): Promise<void> {
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
