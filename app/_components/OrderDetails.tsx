'use client';

import { useQuery } from '@tanstack/react-query';
import { useLang } from '@/client/i18n';
import { formatMoney } from '@/client/money';
import type { CheckoutClient } from '@/client/trpc-client';

/**
 * The paid (or authorised) order as the server has it: what was bought, how it was paid, every charge
 * and refund. Read by the session, or by a return link's `token` when the buyer came back without the
 * session.
 */
export function OrderDetails({ client, orderId, token }: { client: CheckoutClient; orderId: string; token?: string }) {
  const { t, lang } = useLang();
  const order = useQuery({
    queryKey: ['order', orderId, token],
    queryFn: () => (token ? client.checkout.returnedOrder.query({ orderId, token }) : client.checkout.order.query({ orderId })),
  });
  // An authorised order's payment holds the money instead of having taken it: still how the order is paid.
  const payment = order.data?.payments.find((p) => p.role === 'payment' && (p.status === 'succeeded' || p.status === 'authorized'));
  const charges = order.data?.payments.filter((p) => p.status === 'succeeded') ?? [];
  const refunds = order.data?.refunds ?? [];
  return (
    <section className="order-details" aria-labelledby="order-heading">
      <h3 id="order-heading">{t('order.heading')}</h3>
      {order.isPending && <p>{t('order.loading')}</p>}
      {order.data && (
        <dl className="summary">
          <dt>{t('order.outTradeNo')}</dt>
          <dd data-testid="out-trade-no">{order.data.outTradeNo}</dd>
          <dt>{t('order.status')}</dt>
          <dd data-testid="order-status">{t(`order.status.${order.data.status}`)}</dd>
          <dt>{t('order.amount')}</dt>
          <dd>{formatMoney(order.data.amountMinor, order.data.currency)}</dd>
          <dt>{t('order.items')}</dt>
          <dd>
            {order.data.items
              .map((item) => `${lang === 'en' ? (item.nameEn ?? item.name) : item.name} × ${item.quantity}`)
              .join(lang === 'en' ? ', ' : '，')}
          </dd>
          {payment && (
            <>
              <dt>{t('order.gateway')}</dt>
              <dd>{t(`gateway.${payment.gateway}`)}</dd>
              <dt>{t('order.gatewayTradeNo')}</dt>
              <dd data-testid="gateway-trade-no">{payment.gatewayTradeNo}</dd>
            </>
          )}
        </dl>
      )}
      {(charges.length > 1 || refunds.length > 0) && <MoneyLog charges={charges} refunds={refunds} />}
      <p className="behind">
        {/* The order's own page (built separately) shows what happened behind the scenes. */}
        <a href={`/orders/${orderId}`}>{t('order.behindTheScenes')}</a>
      </p>
    </section>
  );
}

type OrderView = Awaited<ReturnType<CheckoutClient['checkout']['order']['query']>>;

/** Every charge and refund of the order, when there is more than its one payment to show. */
function MoneyLog({ charges, refunds }: { charges: OrderView['payments']; refunds: OrderView['refunds'] }) {
  const { t } = useLang();
  const gatewayLabel = (id: string) => t(`gateway.${id}`);
  return (
    <table className="money-log" aria-label={t('money.label')}>
      <caption>{t('money.caption')}</caption>
      <thead>
        <tr>
          <th scope="col">{t('money.type')}</th>
          <th scope="col">{t('money.gateway')}</th>
          <th scope="col">{t('money.amount')}</th>
          <th scope="col">{t('money.state')}</th>
        </tr>
      </thead>
      <tbody>
        {charges.map((c) => (
          <tr key={`charge-${c.gateway}-${c.gatewayTradeNo}`}>
            <td>{t('money.charge')}</td>
            <td>{gatewayLabel(c.gateway)}</td>
            <td>{formatMoney(c.amountMinor, c.currency)}</td>
            <td>{c.role === 'payment' ? t('money.forOrder') : t('money.excess')}</td>
          </tr>
        ))}
        {refunds.map((r) => (
          <tr key={`refund-${r.refundId}`} data-testid="refund-row">
            <td>{t('money.refund')}</td>
            <td>{gatewayLabel(r.gateway)}</td>
            <td>{formatMoney(r.amountMinor, r.currency)}</td>
            <td>
              {r.status === 'succeeded' ? t('money.refunded') : r.status === 'failed' ? t('money.refundFailed') : t('money.refundPending')}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
