'use client';

import { QueryClient, QueryClientProvider, useQuery } from '@tanstack/react-query';
import Link from 'next/link';
import { useMemo, useState } from 'react';
import { createCheckoutClient, type CheckoutClient } from '../../client/trpc-client';
import { LangProvider, LangSwitch, useLang, type Lang } from '../../client/i18n';
import type { OrderTimeline, TimelineEvent } from '../../server/checkout/timeline';
import { GATEWAY_NAMES, isGatewayId } from '../../server/payments/gateway-ids';
import { formatMoney } from './money';
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

const TEXT = {
  zh: {
    title: '幕后',
    back: '返回收银台',
    allOrders: '订单列表',
    loading: '正在读取事件日志…',
    notFound: '没有这个订单（只能查看自己的订单）。',
    status: '订单状态',
    amount: '金额',
    ledger: '网关账本',
    ledgerUnavailable: '无法读取网关账本',
    kept: '实收',
    chainOk: '哈希链完整',
    chainBroken: (seq: number) => `哈希链在第 ${seq} 条断裂：日志被改动过`,
    time: '时间（北京时间）',
    event: '事件',
    details: '详情',
    hash: '哈希',
    caption: '每个请求、每次网关调用与答复、每条通知、关单、退款与邮件，按发生顺序',
    charges: (n: number) => `${n} 笔扣款`,
    refunded: (n: number) => `${n} 笔已退款`,
    live: '实时更新中',
  },
  en: {
    title: 'Under the hood',
    back: 'Back to checkout',
    allOrders: 'Orders',
    loading: 'Reading the event log…',
    notFound: 'No such order (you can only see your own orders).',
    status: 'Order status',
    amount: 'Amount',
    ledger: 'Gateway ledger',
    ledgerUnavailable: 'Gateway ledger unavailable',
    kept: 'kept',
    chainOk: 'Hash chain intact',
    chainBroken: (seq: number) => `Hash chain broken at #${seq}: the log was altered`,
    time: 'Time (Beijing)',
    event: 'Event',
    details: 'Details',
    hash: 'Hash',
    caption: 'Every request, gateway call and answer, notification, close, refund and email, in order',
    charges: (n: number) => (n === 1 ? '1 charge' : `${n} charges`),
    refunded: (n: number) => `${n} refunded`,
    live: 'live',
  },
} as const;

const ORDER_STATUS: Record<Lang, Record<string, string>> = {
  zh: { awaiting_payment: '待支付', paying: '支付中', paid: '已支付', failed: '已失败', expired: '已过期' },
  en: { awaiting_payment: 'awaiting payment', paying: 'paying', paid: 'paid', failed: 'failed', expired: 'expired' },
};

const GUARD: Record<Lang, Record<string, string>> = {
  zh: {
    claimed: '首次受理',
    taken_over: '接管中断的请求',
    replayed: '重放已存答复',
    in_progress: '同键请求处理中',
    mismatch: '同键不同请求',
    released: '失败，释放键以便重试',
  },
  en: {
    claimed: 'claimed',
    taken_over: 'taken over',
    replayed: 'replayed',
    in_progress: 'in progress',
    mismatch: 'key reused',
    released: 'released for retry',
  },
};

const OPERATION: Record<Lang, Record<string, string>> = {
  zh: { charge: '扣款', query: '查询交易', close: '关闭交易', refund: '退款', refund_query: '查询退款' },
  en: { charge: 'charge', query: 'query', close: 'close trade', refund: 'refund', refund_query: 'refund query' },
};

const OUTCOME: Record<Lang, Record<string, string>> = {
  zh: {
    succeeded: '成功',
    declined: '拒绝',
    retryable: '暂不可用（可重试）',
    indeterminate: '结果未知',
    closed: '已关闭',
    already_paid: '已被支付',
    answered: '已答复',
    unavailable: '暂不可用',
    pending: '处理中',
    failed: '失败',
    error: '出错',
  },
  en: {
    succeeded: 'succeeded',
    declined: 'declined',
    retryable: 'unavailable (retryable)',
    indeterminate: 'outcome unknown',
    closed: 'closed',
    already_paid: 'already paid',
    answered: 'answered',
    unavailable: 'unavailable',
    pending: 'pending',
    failed: 'failed',
    error: 'error',
  },
};

/** What each injected fault did, as the switchboard names it. */
const FAULT: Record<Lang, Record<string, string>> = {
  zh: {
    'before_claim:throw': '注入故障：请求在受理前丢失（503，页面会重试）',
    'after_claim:throw': '注入故障：受理后处理出错（503，释放幂等键）',
    'after_gateway_call:crash': '注入故障：网关已答复，进程被杀（SIGKILL），尚未记录任何结果',
    'after_commit:throw': '注入故障：已提交，答复丢失（503，重试将得到重放）',
    delay: '注入故障：请求在此被拖慢',
    timeout_after_charge: '注入故障：网关将扣款但超时才答复',
    duplicate_notifications: '注入故障：网关将把本订单的通知多发十次',
    lose_notifications: '注入故障：网关的通知将丢失',
    drop_after_charge: '注入故障：网关扣款后断开连接',
    fail_before_charge: '注入故障：网关在扣款前返回系统错误',
  },
  en: {
    'before_claim:throw': 'Fault injected: the request is dropped before the claim (503; the page retries)',
    'after_claim:throw': 'Fault injected: processing fails after the claim (503; the key is released)',
    'after_gateway_call:crash': 'Fault injected: the gateway answered, the process is killed (SIGKILL) before recording anything',
    'after_commit:throw': 'Fault injected: committed, the answer is lost (503; the retry is a replay)',
    delay: 'Fault injected: the request is held here',
    timeout_after_charge: 'Fault injected: the gateway will charge but answer too late',
    duplicate_notifications: 'Fault injected: the gateway will send this order’s notification ten extra times',
    lose_notifications: 'Fault injected: the gateway’s notifications will be lost',
    drop_after_charge: 'Fault injected: the gateway hangs up after charging',
    fail_before_charge: 'Fault injected: the gateway answers a system error before charging',
  },
};

const VIA: Record<Lang, Record<string, string>> = {
  zh: { response: '网关同步答复', notification: '网关通知', reconciliation: '对账查询', close: '关单时发现已付' },
  en: { response: 'gateway answer', notification: 'notification', reconciliation: 'reconciliation', close: 'found paid on close' },
};

const beijingTime = new Intl.DateTimeFormat('zh-CN', {
  timeZone: 'Asia/Shanghai',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  fractionalSecondDigits: 3,
  hour12: false,
});

function describe(event: TimelineEvent, lang: Lang): { title: string; details: string; tone?: 'ok' | 'warn' | 'bad' } {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each event kind writes its own JSON shape; each case reads its own fields
  const d = event.data as Record<string, any>;
  const zh = lang === 'zh';
  const gw = (id: unknown) => (isGatewayId(id) ? GATEWAY_NAMES[id][lang] : String(id));
  const money = (minor: unknown, currency: unknown) => (typeof minor === 'number' ? formatMoney(minor, String(currency ?? 'CNY')) : '');
  switch (event.kind) {
    case 'request': {
      const guard = GUARD[lang][String(d.outcome)] ?? String(d.outcome);
      const key = typeof d.key === 'string' ? `${d.key.slice(0, 8)}…` : '—';
      const tone = d.status >= 500 || d.status === 409 || d.status === 422 ? 'warn' : d.status >= 400 ? 'bad' : 'ok';
      return {
        title: `${zh ? '请求' : 'Request'} ${d.procedure} → HTTP ${d.status}`,
        details: [
          `${zh ? '幂等键' : 'key'} ${key}`,
          d.gateway ? gw(d.gateway) : '',
          d.attempt ? (zh ? `第 ${d.attempt} 次尝试` : `attempt ${d.attempt}`) : '',
          `${zh ? '守卫' : 'guard'}: ${guard}`,
        ]
          .filter(Boolean)
          .join(' · '),
        tone,
      };
    }
    case 'order.created':
      return {
        title: zh ? '创建订单，扣减库存' : 'Order created, stock taken',
        details: `${d.outTradeNo} · ${money(d.amountMinor, d.currency)}`,
      };
    case 'attempt.started':
      return {
        title: zh ? `开始第 ${d.attempt} 次支付` : `Payment attempt ${d.attempt} started`,
        details: gw(d.gateway),
      };
    case 'attempt.abandoned':
      return {
        title: zh ? `对账：第 ${d.attempt} 次尝试未扣款，订单重新可付` : `Reconciler: attempt ${d.attempt} took no money`,
        details: `${gw(d.gateway)} · ${d.trade}`,
      };
    case 'gateway.call':
      return {
        title: `→ ${gw(d.gateway)} ${OPERATION[lang][String(d.operation)] ?? d.operation}`,
        details: [d.outTradeNo, d.refundId, d.attempt ? (zh ? `尝试 ${d.attempt}` : `attempt ${d.attempt}`) : '']
          .filter(Boolean)
          .join(' · '),
      };
    case 'gateway.answer': {
      const tone = d.outcome === 'succeeded' || d.outcome === 'closed' ? 'ok' : d.outcome === 'declined' ? 'bad' : 'warn';
      return {
        title: `← ${gw(d.gateway)} ${OPERATION[lang][String(d.operation)] ?? d.operation}: ${OUTCOME[lang][String(d.outcome)] ?? d.outcome}`,
        details: [d.gatewayTradeNo, d.code, d.message, `${d.ms} ms`].filter(Boolean).join(' · '),
        tone,
      };
    }
    case 'payment.succeeded':
      return {
        title: zh ? '扣款成功，订单已支付' : 'Charge succeeded, order paid',
        details: `${gw(d.gateway)} · ${money(d.amountMinor, d.currency)} · ${VIA[lang][String(d.via)] ?? d.via} · ${d.gatewayTradeNo}`,
        tone: 'ok',
      };
    case 'payment.declined':
      return { title: zh ? '支付被拒绝' : 'Payment declined', details: `${gw(d.gateway)} · ${d.code}`, tone: 'bad' };
    case 'payment.awaiting_buyer':
      return {
        title: zh ? '交易已开，等待买家付款（扫码 / 银行卡 / 收银台）' : 'Trade open, waiting for the buyer (QR code / card / hosted page)',
        details: `${gw(d.gateway)} · ${d.step}`,
      };
    case 'payment.excess':
      return {
        title: zh ? '多收的一笔：不保留，自动退款' : 'A charge that must not stay: refund queued',
        details: `${gw(d.gateway)} · ${money(d.amountMinor, d.currency)} · ${VIA[lang][String(d.via)] ?? d.via} · ${d.refundId}`,
        tone: 'warn',
      };
    case 'trade.closed':
      return { title: zh ? '关闭网关交易（不能再付款）' : 'Gateway trade closed', details: gw(d.gateway) };
    case 'notification.processed':
      return {
        title: zh ? '收到网关通知：验签通过，已处理并确认' : 'Notification verified, processed, acknowledged',
        details: `${gw(d.gateway)} · ${d.about} · ${String(d.eventId).slice(0, 24)}`,
        tone: 'ok',
      };
    case 'notification.duplicate':
      return {
        title: zh ? '重复通知：已确认，不再处理' : 'Duplicate notification: acknowledged, not processed again',
        details: `${gw(d.gateway)} · ${String(d.eventId).slice(0, 24)}`,
      };
    case 'notification.in_flight':
      return {
        title: zh ? '通知到达时首条仍在处理：不确认，让网关稍后重发' : 'Notification while the first is in flight: not acknowledged',
        details: `${gw(d.gateway)} · ${String(d.eventId).slice(0, 24)}`,
        tone: 'warn',
      };
    case 'refund.succeeded':
      return {
        title: zh ? '退款成功' : 'Refund succeeded',
        details: `${gw(d.gateway)} · ${money(d.amountMinor, d.currency)} · ${d.refundId}`,
        tone: 'ok',
      };
    case 'refund.failed':
      return { title: zh ? '退款失败，已转人工' : 'Refund failed: a person follows up', details: String(d.error), tone: 'bad' };
    case 'email.queued':
      return {
        title: zh ? (d.email === 'refund' ? '退款通知邮件入队' : '支付成功邮件入队') : `Email queued (${d.email})`,
        details: zh ? '与状态变更同一事务写入发件箱' : 'outbox, same transaction',
      };
    case 'email.sent':
      return { title: zh ? '邮件已发出' : 'Email sent', details: String(d.subject ?? '') };
    case 'order.expired':
      return { title: zh ? '订单过期，库存归还' : 'Order expired, stock returned', details: '' };
    case 'fault.injected':
      return {
        title:
          FAULT[lang][`${d.point}:${d.action}`] ??
          FAULT[lang][String(d.action)] ??
          `${zh ? '注入故障' : 'Fault injected'}: ${d.point} ${d.action}`,
        details: zh ? `演示 / 演练 · ${d.point}` : `demo / drill · ${d.point}`,
        tone: 'warn',
      };
    case 'exception.recorded':
      return { title: zh ? '异常已记录，待人工处理' : 'Exception recorded for follow-up', details: String(d.exception), tone: 'bad' };
    default:
      return { title: event.kind, details: JSON.stringify(d) };
  }
}

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
          <Legend lang={lang} />
          <section className="card timeline-wrap">
            <table className="timeline" aria-label={lang === 'zh' ? '事件时间线' : 'Event timeline'}>
              <caption>
                {text.caption} <span className="meta">({text.live})</span>
              </caption>
              <thead>
                <tr>
                  <th scope="col">#</th>
                  <th scope="col">{text.time}</th>
                  <th scope="col">{text.event}</th>
                  <th scope="col">{text.details}</th>
                  <th scope="col">{text.hash}</th>
                </tr>
              </thead>
              <tbody>
                {data.events.map((event) => {
                  const shown = describe(event, lang);
                  return (
                    <tr key={event.seq} data-kind={event.kind} data-tone={shown.tone}>
                      <td>{event.seq}</td>
                      <td className="mono">{beijingTime.format(new Date(event.at))}</td>
                      <td>{shown.title}</td>
                      <td className="meta">{shown.details}</td>
                      <td className="mono meta">{event.hash}</td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </section>
        </>
      )}
    </main>
  );
}

const LEGEND: Record<Lang, { heading: string; items: [string, string][] }> = {
  zh: {
    heading: '怎么读这一页',
    items: [
      ['首次受理', '这个幂等键第一次出现：请求被处理，答复与业务数据在同一事务中保存。'],
      ['重放已存答复', '同一个键再次到来（重试、刷新）：不再处理，原样返回第一次的答复。'],
      ['同键请求处理中', '同一个键的第一次请求还没结束：返回 409，稍后重试。'],
      ['接管中断的请求', '处理该键的进程死了，租约过期：一次重试从恢复点接着做，用同一个 out_trade_no 询问网关。'],
      ['同键不同请求', '同一个键带着不同的内容：拒绝（422），什么都不改。'],
      ['失败，释放键以便重试', '暂时的故障（网络、网关 5xx）：键被释放，重试会重新处理——网关按 out_trade_no 去重，不会多扣。'],
      ['哈希链', '每一行都带着上一行的哈希：改动或删除任何一行，链就会断，npm run audit 会指出是哪一行。'],
      ['网关账本', '沙箱里网关自己的记录：成功扣款的笔数，以及保留的金额（扣款减退款），应等于订单金额。'],
      ['注入故障', '演示模式的故障开关或演练故意制造的故障，标出它发生的位置。'],
    ],
  },
  en: {
    heading: 'How to read this page',
    items: [
      ['claimed', 'The key’s first request: processed, and its answer stored in the same transaction as the business data.'],
      ['replayed', 'The same key again (a retry, a reload): not processed again; the first answer is returned as it was.'],
      ['in progress', 'The key’s first request has not finished: 409, retry later.'],
      [
        'taken over',
        'The process handling the key died and its lease ran out: one retry resumes at the recovery point and asks the gateway with the same out_trade_no.',
      ],
      ['key reused', 'The same key with a different request: refused (422), nothing changed.'],
      [
        'released for retry',
        'A transient failure (network, gateway 5xx): the key is freed and a retry runs again — the gateway deduplicates on out_trade_no, so nothing is charged twice.',
      ],
      [
        'hash chain',
        'Each row carries the hash of the one before: editing or deleting any row breaks the chain, and npm run audit names the row.',
      ],
      [
        'gateway ledger',
        'The gateway’s own record in the sandbox: how many charges succeeded, and the money kept (charges − refunds), which must equal the order’s amount.',
      ],
      ['fault injected', 'A failure made on purpose by demo mode’s switchboard or a drill, shown where it happened.'],
    ],
  },
};

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
