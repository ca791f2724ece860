/**
 * What the jobs ask a gateway about an out_trade_no, and how a paid answer is recorded: the same
 * question a retry of the request would have asked, journaled like every gateway call, and the same
 * settle as the response and the notification (idempotent with both).
 */
import type { CheckoutServices } from '@/server/checkout/services';
import { journaledCall } from '@/server/checkout/journal';
import { settleAuthorizedCharge } from '@/server/checkout/authorizations';
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

/**
 * Settles a charge the gateway reported paid — or an authorisation it reports holding the money —
 * idempotent with the response and the notification.
 */
export async function settleFound(
  services: CheckoutServices,
  gateway: GatewayId,
  outTradeNo: string,
  found: SucceededTrade & { kind: 'succeeded' | 'authorized' },
): Promise<void> {
  const charge = {
    gateway,
    outTradeNo,
    gatewayTradeNo: found.gatewayTradeNo,
    amountMinor: found.amountMinor,
    currency: found.currency,
    source: 'reconciliation',
  } as const;
  await services.db.transaction(async (tx) => {
    if (found.kind === 'authorized') await settleAuthorizedCharge(tx, charge);
    else await settleSucceededCharge(tx, charge);
  });
}
