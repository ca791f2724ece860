'use client';

import { QueryClient, QueryClientProvider, useQuery } from '@tanstack/react-query';
import Link from 'next/link';
import { useMemo, useState } from 'react';
import { createCheckoutClient, type CheckoutClient } from '@/client/trpc-client';
import { LangProvider, LangSwitch, useLang, type Lang } from '@/client/i18n';
import { formatMoney } from '@/client/money';
import type { OrderTimeline } from '@/server/checkout/timeline';
import { LEGEND, ORDER_STATUS, TEXT } from './behind-words';
import { TimelineTable } from './TimelineTable';
import './behind.css';

/**
 * 幕后 (under the hood): one order's journal as it happens — every request and what the idempotency
 * guard made of it, every gateway call and answer, every notification, close, refund and email — next
 * to the gateway ledger's own count of charges and refunds, and whether the journal's hash chain holds.
 */
export function BehindTheScenes({ orderId }: { orderId: string }) {
  const [queryClient] = useState(() => new QueryClient());
  const client = useMemo(() => createCheckoutClient({ url: '/api/trpc' }), []);
  return (
    <QueryClientProvider client={queryClient}>
      <LangProvider>
        <TimelineView client={client} orderId={orderId} />
      </LangProvider>
    </QueryClientProvider>
  );
}

const beijingTime = new Intl.DateTimeFormat('zh-CN', {
  timeZone: 'Asia/Shanghai',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  fractionalSecondDigits: 3,
  hour12: false,
});

function LedgerBadge({ timeline, lang }: { timeline: OrderTimeline; lang: Lang }) {
  const text = TEXT[lang];
  if (timeline.ledger.source !== 'sandbox') return <span className="badge">{text.ledgerUnavailable}</span>;
  const charges = timeline.ledger.charges.filter((c) => c.status === 'succeeded').length;
  const refunds = timeline.ledger.refunds.filter((r) => r.status === 'succeeded').length;
  const label = [text.charges(charges), refunds > 0 ? text.refunded(refunds) : ''].filter(Boolean).join(' · ');
  const tone = charges - refunds <= 1 ? 'ok' : 'bad';
  return (
    <span className="badge" data-tone={tone} data-testid="ledger-badge">
      {label}
    </span>
  );
}

function TimelineView({ client, orderId }: { client: CheckoutClient; orderId: string }) {
  const { lang } = useLang();
  const text = TEXT[lang];
  const timeline = useQuery({
    queryKey: ['timeline', orderId],
    queryFn: () => client.checkout.timeline.query({ orderId }),
    // Live while things can still happen: notifications, the reconciler and refunds arrive later.
    refetchInterval: 1500,
    retry: false,
  });
  const data = timeline.data as OrderTimeline | undefined;

  return (
    <main className="shell behind">
      <header className="masthead">
        <nav className="crumbs">
          <Link href="/">{text.back}</Link> · <Link href="/orders">{text.allOrders}</Link>
        </nav>
        <LangSwitch />
        <h1>{text.title}</h1>
        {data && <p className="meta mono">{data.order.outTradeNo}</p>}
      </header>
      {timeline.isPending && <p>{text.loading}</p>}
      {timeline.isError && <p role="alert">{text.notFound}</p>}
      {data && (
        <>
          <OrderSummary timeline={data} lang={lang} />
          <Legend lang={lang} />
          <EventTable timeline={data} lang={lang} />
        </>
      )}
    </main>
  );
}

/** The order's status and amount, the gateway ledger's count, and whether the journal's chain holds. */
function OrderSummary({ timeline: data, lang }: { timeline: OrderTimeline; lang: Lang }) {
  const text = TEXT[lang];
  return (
    <section className="card" aria-label={text.ledger}>
      <dl className="summary">
        <dt>{text.status}</dt>
        <dd data-testid="behind-order-status">{ORDER_STATUS[lang][data.order.status] ?? data.order.status}</dd>
        <dt>{text.amount}</dt>
        <dd>{formatMoney(data.order.amountMinor, data.order.currency)}</dd>
        <dt>{text.ledger}</dt>
        <dd>
          <LedgerBadge timeline={data} lang={lang} />{' '}
          {data.ledger.source === 'sandbox' && (
            <span className="meta">
              {text.kept} {formatMoney(data.ledger.keptMinor, data.order.currency)}
            </span>
          )}
        </dd>
        <dt>{lang === 'zh' ? '事件日志' : 'Event log'}</dt>
        <dd>
          <span className="badge" data-tone={data.chain.intact ? 'ok' : 'bad'} data-testid="chain-badge">
            {data.chain.intact ? `${text.chainOk} ✓` : text.chainBroken(data.chain.brokenAtSeq)}
          </span>
        </dd>
      </dl>
    </section>
  );
}

function EventTable({ timeline, lang }: { timeline: OrderTimeline; lang: Lang }) {
  const text = TEXT[lang];
  return (
    <section className="card timeline-wrap">
      <TimelineTable
        timeline={timeline}
        lang={lang}
        time={beijingTime}
        hashes
        label={lang === 'zh' ? '事件时间线' : 'Event timeline'}
        caption={
          <>
            {text.caption} <span className="meta">({text.live})</span>
          </>
        }
      />
    </section>
  );
}

/** The guard's verdicts, the hash chain and the ledger badge, in a sentence each: the page explains itself. */
function Legend({ lang }: { lang: Lang }) {
  const legend = LEGEND[lang];
  return (
    <details className="card legend">
      <summary>{legend.heading}</summary>
      <dl>
        {legend.items.map(([term, meaning]) => (
          <div key={term}>
            <dt>{term}</dt>
            <dd>{meaning}</dd>
          </div>
        ))}
      </dl>
    </details>
  );
}
