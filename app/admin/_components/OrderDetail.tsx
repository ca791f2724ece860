'use client';

import { useLang } from '@/client/i18n';
import type { IntentKeys } from '@/client/console/money-actions';
import { formatMoney } from '@/client/money';
import type { OperatorApi, OperatorSession, OrderTimeline, OrderView } from '@/client/console/operator-api';
import { ORDER_STATUS } from '@/app/_components/behind-words';
import { TimelineTable } from '@/app/_components/TimelineTable';
import { beijingTime, gatewayName } from './format';
import { MoneyActions } from './MoneyActions';
import { useOrderDetail, watching } from './use-console';

type Props = { api: OperatorApi; session: OperatorSession; keys: IntentKeys; orderId: string | undefined };

/** The order picked from the list: what it is, what can be done with its money, where its money went, its journal. */
export function OrderDetail({ orderId, ...props }: Props) {
  const { t } = useLang();
  if (!orderId) {
    return (
      <section className="card detail-pane">
        <p className="meta">{t('detail.placeholder')}</p>
      </section>
    );
  }
  return <LoadedDetail {...props} orderId={orderId} />;
}

function LoadedDetail({ api, session, keys, orderId }: Props & { orderId: string }) {
  const { t } = useLang();
  const { detail, state, run } = useOrderDetail(api, session, keys, orderId);
  const timeline = detail.data;
  return (
    <section className="detail-pane" aria-labelledby="detail-heading" data-fetching={detail.isFetching}>
      {detail.isPending && <p className="card meta">{t('detail.loading')}</p>}
      {detail.isError && (
        <p className="card" role="alert">
          {t('detail.failed', { message: detail.error.message })}
        </p>
      )}
      {timeline && (
        <>
          <OrderSummary order={timeline.order} />
          <MoneyActions order={timeline.order} role={session.role} state={state} watching={watching(state, timeline)} onAction={run} />
          <Payments order={timeline.order} />
          <Refunds order={timeline.order} requests={timeline.refundRequests} />
          <Journal timeline={timeline} />
        </>
      )}
    </section>
  );
}

function OrderSummary({ order }: { order: OrderView }) {
  const { t, lang } = useLang();
  return (
    <section className="card">
      <h2 id="detail-heading">
        {t('detail.heading')} <span className="mono">{order.outTradeNo}</span>
      </h2>
      <dl className="summary">
        <dt>{t('detail.status')}</dt>
        <dd data-testid="console-order-status">{ORDER_STATUS[lang][order.status] ?? order.status}</dd>
        <dt>{t('detail.amount')}</dt>
        <dd>{formatMoney(order.amountMinor, order.currency)}</dd>
        <dt>{t('detail.createdAt')}</dt>
        <dd>{beijingTime.format(new Date(order.createdAt))}</dd>
        <dt>{t('detail.items')}</dt>
        <dd>
          {order.items
            .map((item) => `${lang === 'en' ? (item.nameEn ?? item.name) : item.name} × ${item.quantity}`)
            .join(lang === 'en' ? ', ' : '，')}
        </dd>
      </dl>
    </section>
  );
}

/** What was held, what was taken: an authorisation shows its hold beside what its capture took. */
function paymentAmount(payment: OrderView['payments'][number], t: ReturnType<typeof useLang>['t']): string {
  const money = (minor: number) => formatMoney(minor, payment.currency);
  if (payment.authorizedMinor === null) return money(payment.amountMinor);
  if (payment.status === 'succeeded')
    return t('payment.captured', { captured: money(payment.amountMinor), held: money(payment.authorizedMinor) });
  return t('payment.held', { held: money(payment.authorizedMinor) });
}

function Payments({ order }: { order: OrderView }) {
  const { t, lang } = useLang();
  return (
    <section className="card" aria-labelledby="payments-heading">
      <h2 id="payments-heading">{t('detail.payments')}</h2>
      {order.payments.length === 0 ? (
        <p className="meta">{t('detail.noPayments')}</p>
      ) : (
        <table className="money-log" aria-labelledby="payments-heading">
          <thead>
            <tr>
              <th scope="col">{t('payment.gateway')}</th>
              <th scope="col">{t('payment.amount')}</th>
              <th scope="col">{t('payment.status')}</th>
              <th scope="col">{t('payment.tradeNo')}</th>
            </tr>
          </thead>
          <tbody>
            {order.payments.map((p) => (
              <tr key={`${p.gateway}-${p.attempt}-${p.gatewayTradeNo ?? p.createdAt}`} data-testid="payment-row">
                <td>{gatewayName(p.gateway, lang)}</td>
                <td>{paymentAmount(p, t)}</td>
                <td>
                  {t(`payment.status.${p.status}`)}
                  {p.role === 'excess' && <span className="meta"> · {t('payment.excess')}</span>}
                </td>
                <td className="mono">{p.gatewayTradeNo ?? '—'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

/** Who asked for a merchant refund and why: the operators' view only (operator.order). */
type RefundRequests = readonly { refundId: string; requestedBy: string | null; note: string | null }[];

function Refunds({ order, requests }: { order: OrderView; requests: RefundRequests }) {
  const { t } = useLang();
  const asked = new Map(requests.map((r) => [r.refundId, r]));
  return (
    <section className="card" aria-labelledby="refunds-heading">
      <h2 id="refunds-heading">{t('detail.refunds')}</h2>
      {order.refunds.length === 0 ? (
        <p className="meta">{t('detail.noRefunds')}</p>
      ) : (
        <table className="money-log" aria-labelledby="refunds-heading">
          <thead>
            <tr>
              <th scope="col">{t('refund.id')}</th>
              <th scope="col">{t('refund.amount')}</th>
              <th scope="col">{t('refund.status')}</th>
              <th scope="col">{t('refund.reason')}</th>
            </tr>
          </thead>
          <tbody>
            {order.refunds.map((r) => (
              <tr key={r.refundId} data-testid="refund-row">
                <td className="mono">{r.refundId}</td>
                <td>{formatMoney(r.amountMinor, r.currency)}</td>
                <td>{t(`refund.status.${r.status}`)}</td>
                <td>
                  {t(`refund.reason.${r.reason}`)}
                  {asked.get(r.refundId)?.requestedBy && (
                    <span className="meta">
                      {' '}
                      · {asked.get(r.refundId)?.requestedBy} · {asked.get(r.refundId)?.note}
                    </span>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

/** The order's journal, each event in the words of the 幕后 view. */
function Journal({ timeline }: { timeline: OrderTimeline }) {
  const { t, lang } = useLang();
  return (
    <section className="card timeline-wrap" aria-labelledby="journal-heading">
      <h2 id="journal-heading">{t('detail.journal')}</h2>
      <TimelineTable timeline={timeline} lang={lang} time={beijingTime} hashes={false} labelledBy="journal-heading" />
    </section>
  );
}
