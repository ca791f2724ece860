'use client';

import { QueryClient, QueryClientProvider, useQuery } from '@tanstack/react-query';
import Link from 'next/link';
import { useMemo, useState } from 'react';
import { LangProvider, LangSwitch, useLang } from '@/client/i18n';
import { formatMoney } from '@/client/money';
import { createCheckoutClient, type CheckoutClient } from '@/client/trpc-client';

/** The customer's newest orders (every customer's in demo mode), each linking to its 幕后 view. */
export function OrderList() {
  const [queryClient] = useState(() => new QueryClient());
  const client = useMemo(() => createCheckoutClient({ url: '/api/trpc' }), []);
  return (
    <QueryClientProvider client={queryClient}>
      <LangProvider>
        <Orders client={client} />
      </LangProvider>
    </QueryClientProvider>
  );
}

function Orders({ client }: { client: CheckoutClient }) {
  const { lang, t } = useLang();
  const zh = lang === 'zh';
  const orders = useQuery({ queryKey: ['recentOrders'], queryFn: () => client.checkout.recentOrders.query(), refetchInterval: 3000 });
  return (
    <main className="shell">
      <header className="masthead">
        <nav className="crumbs">
          <Link href="/">{zh ? '返回收银台' : 'Back to checkout'}</Link>
        </nav>
        <LangSwitch />
        <h1>{zh ? '订单 · 幕后' : 'Orders · Under the hood'}</h1>
      </header>
      <section className="card">
        {orders.isPending && <p>{zh ? '正在加载…' : 'Loading…'}</p>}
        {orders.data?.length === 0 && <p>{zh ? '还没有订单。' : 'No orders yet.'}</p>}
        <ul className="order-list">
          {(orders.data ?? []).map((order) => (
            <li key={order.orderId}>
              <Link href={`/orders/${order.orderId}`}>{order.outTradeNo}</Link>{' '}
              <span className="meta">
                {formatMoney(order.amountMinor, order.currency)} · {t(`order.status.${order.status}`)}
                {!order.mine && (zh ? ' · 其他顾客（演示模式）' : ' · another customer (demo mode)')}
              </span>
            </li>
          ))}
        </ul>
      </section>
    </main>
  );
}
