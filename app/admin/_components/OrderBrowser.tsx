'use client';

import { useLang } from '@/client/i18n';
import type { IntentKeys } from '@/client/console/money-actions';
import { formatMoney } from '@/client/money';
import type { OperatorApi, OperatorSession, OrderListing } from '@/client/console/operator-api';
import { OrderDetail } from './OrderDetail';
import { useOrders, type StatusFilter } from './use-console';
import { beijingMinute } from './format';

const FILTERS: StatusFilter[] = ['all', 'awaiting_payment', 'authorized', 'paid', 'expired', 'voided'];

interface Props {
  api: OperatorApi;
  session: OperatorSession;
  /** The filter, the order picked and the keys live above this view (useWorkspace), so a visit to 对账 keeps them. */
  filter: StatusFilter;
  onFilter: (filter: StatusFilter) => void;
  selected: string | undefined;
  onSelect: (orderId: string) => void;
  keys: IntentKeys;
}

/** The order list beside the order picked from it. */
export function OrderBrowser({ api, session, filter, onFilter, selected, onSelect, keys }: Props) {
  return (
    <div className="console-grid">
      <OrderList api={api} filter={filter} onFilter={onFilter} selected={selected} onSelect={onSelect} />
      <OrderDetail key={selected ?? 'none'} api={api} session={session} keys={keys} orderId={selected} />
    </div>
  );
}

function OrderList(props: {
  api: OperatorApi;
  filter: StatusFilter;
  onFilter: (filter: StatusFilter) => void;
  selected: string | undefined;
  onSelect: (orderId: string) => void;
}) {
  const { t } = useLang();
  const orders = useOrders(props.api, props.filter);
  return (
    <section className="card order-pane" aria-labelledby="orders-heading">
      <h2 id="orders-heading">{t('orders.heading')}</h2>
      <div className="filters" role="group" aria-label={t('orders.filter')}>
        {FILTERS.map((filter) => (
          <button key={filter} type="button" aria-pressed={props.filter === filter} onClick={() => props.onFilter(filter)}>
            {t(`filter.${filter}`)}
          </button>
        ))}
      </div>
      {orders.isPending && <p className="meta">{t('orders.loading')}</p>}
      {orders.isError && <p role="alert">{t('orders.failed', { message: orders.error.message })}</p>}
      {orders.data?.length === 0 && <p className="meta">{t('orders.empty')}</p>}
      {orders.data && orders.data.length > 0 && <OrderTable orders={orders.data} selected={props.selected} onSelect={props.onSelect} />}
    </section>
  );
}

function OrderTable({
  orders,
  selected,
  onSelect,
}: {
  orders: OrderListing[];
  selected: string | undefined;
  onSelect: (id: string) => void;
}) {
  const { t } = useLang();
  return (
    <table className="orders" aria-label={t('orders.heading')}>
      <thead>
        <tr>
          <th scope="col">{t('orders.outTradeNo')}</th>
          <th scope="col">{t('orders.status')}</th>
          <th scope="col">{t('orders.amount')}</th>
          <th scope="col">{t('orders.time')}</th>
        </tr>
      </thead>
      <tbody>
        {orders.map((order) => (
          <tr key={order.orderId} data-selected={order.orderId === selected} data-status={order.status}>
            <td>
              <button type="button" className="link mono" onClick={() => onSelect(order.orderId)}>
                {order.outTradeNo}
              </button>
            </td>
            <td>{t(`orders.status.${order.status}`)}</td>
            <td className="num">{formatMoney(order.amountMinor, order.currency)}</td>
            <td className="meta">{beijingMinute.format(new Date(order.createdAt))}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
