/**
 * The sandbox's pages for people: its front page (what it is, where everything is) and the ledger as a
 * table — per order, what each gateway charged, declined and refunded, and the money it kept — beside
 * the JSON at /ledger that tests and drills read. Bilingual, like the sandbox's other pages.
 */
import type { Ledger } from './store';

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

const STYLE = `body{font-family:system-ui,sans-serif;max-width:960px;margin:24px auto;padding:0 16px;color:#1d1d1f}
table{border-collapse:collapse;width:100%;font-size:14px}th,td{border-bottom:1px solid #ddd;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f7}code{font-size:13px}
form{margin:12px 0}input{font-size:15px;padding:6px;width:18em}button{font-size:15px;padding:6px 12px}`;

function page(title: string, body: string): string {
  return `<!doctype html><html lang="zh-CN"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>${escapeHtml(title)}</title><style>${STYLE}</style></head><body>${body}</body></html>`;
}

const money = (minor: number, currency: string) => `${(minor / 100).toFixed(2)} ${escapeHtml(currency)}`;

/** How many orders the table shows at once, newest first: a long soak leaves thousands. */
const MAX_ORDERS = 200;

interface OrderLine {
  outTradeNo: string;
  gateways: Set<string>;
  succeeded: number;
  declined: number;
  charged: number;
  refunded: number;
  refundsPending: number;
  notifications: number;
  unacknowledged: number;
  currency: string;
  last: string;
}

function byOrder(ledger: Ledger): OrderLine[] {
  const lines = new Map<string, OrderLine>();
  const line = (outTradeNo: string, currency: string, at: string) => {
    let entry = lines.get(outTradeNo);
    if (!entry) {
      entry = {
        outTradeNo,
        gateways: new Set(),
        succeeded: 0,
        declined: 0,
        charged: 0,
        refunded: 0,
        refundsPending: 0,
        notifications: 0,
        unacknowledged: 0,
        currency,
        last: at,
      };
      lines.set(outTradeNo, entry);
    }
    if (at > entry.last) entry.last = at;
    return entry;
  };
  for (const charge of ledger.charges) {
    const entry = line(charge.outTradeNo, charge.currency, charge.createdAt);
    entry.gateways.add(charge.gateway);
    if (charge.status === 'succeeded') {
      entry.succeeded++;
      entry.charged += charge.amountMinor;
    } else entry.declined++;
  }
  for (const refund of ledger.refunds) {
    const entry = line(refund.outTradeNo, refund.currency, refund.createdAt);
    if (refund.status === 'succeeded') entry.refunded += refund.amountMinor;
    if (refund.status === 'pending') entry.refundsPending++;
  }
  for (const notification of ledger.notifications) {
    const entry = lines.get(notification.outTradeNo);
    if (!entry) continue;
    entry.notifications++;
    if (!notification.acknowledged) entry.unacknowledged++;
  }
  return [...lines.values()].sort((a, b) => (a.last < b.last ? 1 : -1));
}

/** GET /sandbox/ledger[?outTradeNo=]: the ledger as a person reads it. */
export function ledgerPage(ledger: Ledger, outTradeNo: string | null): string {
  const orders = byOrder(ledger);
  const shown = orders.slice(0, MAX_ORDERS);
  const rows = shown
    .map((o) => {
      const kept = o.charged - o.refunded;
      return `<tr><td><a href="/sandbox/ledger?outTradeNo=${encodeURIComponent(o.outTradeNo)}"><code>${escapeHtml(o.outTradeNo)}</code></a></td>
<td>${[...o.gateways].map(escapeHtml).join(', ')}</td><td>${o.succeeded}</td><td>${o.declined}</td><td>${money(o.charged, o.currency)}</td>
<td>${money(o.refunded, o.currency)}${o.refundsPending ? ` (+${o.refundsPending} 退款处理中 pending)` : ''}</td>
<td><strong>${money(kept, o.currency)}</strong></td><td>${o.notifications}${o.unacknowledged ? ` (${o.unacknowledged} 未确认 unacknowledged)` : ''}</td></tr>`;
    })
    .join('\n');
  const detail = outTradeNo
    ? `<h2>明细 · Every entry for <code>${escapeHtml(outTradeNo)}</code></h2>
<table><thead><tr><th>时间 Time</th><th>渠道 Gateway</th><th>类型 Entry</th><th>状态 Status</th><th>金额 Amount</th><th>渠道单号 Reference</th></tr></thead><tbody>
${[
  ...ledger.charges.map((c) => ({
    at: c.createdAt,
    gateway: c.gateway,
    kind: '扣款 charge',
    status: c.status,
    amount: money(c.amountMinor, c.currency),
    ref: c.gatewayTradeNo ?? '',
  })),
  ...ledger.refunds.map((r) => ({
    at: r.createdAt,
    gateway: r.gateway,
    kind: '退款 refund',
    status: r.status,
    amount: money(r.amountMinor, r.currency),
    ref: r.refundId,
  })),
  ...ledger.notifications.map((n) => ({
    at: n.at,
    gateway: n.gateway,
    kind: `通知 notification #${n.attempt}`,
    status: n.acknowledged ? 'acknowledged' : 'not acknowledged',
    amount: '',
    ref: '',
  })),
]
  .sort((a, b) => (a.at < b.at ? -1 : 1))
  .map(
    (e) =>
      `<tr><td>${escapeHtml(e.at)}</td><td>${escapeHtml(e.gateway)}</td><td>${e.kind}</td><td>${escapeHtml(e.status)}</td><td>${e.amount}</td><td><code>${escapeHtml(e.ref)}</code></td></tr>`,
  )
  .join('\n')}</tbody></table>`
    : '';
  return page(
    '沙箱账本 · PSP sandbox ledger',
    `<h1>沙箱账本 · Ledger</h1>
<p>What the gateways themselves recorded — the ground truth the drills count. Per order: charges that succeeded and were declined, money refunded, and the money kept (succeeded charges − succeeded refunds), which must equal the order's amount if it is paid and 0 otherwise. The same data as JSON: <a href="/ledger${outTradeNo ? `?outTradeNo=${encodeURIComponent(outTradeNo)}` : ''}">/ledger</a>.</p>
<form method="get" action="/sandbox/ledger"><label>订单号 out_trade_no <input name="outTradeNo" value="${escapeHtml(outTradeNo ?? '')}" placeholder="PO…"></label> <button type="submit">查找 Find</button>${outTradeNo ? ' <a href="/sandbox/ledger">全部 All</a>' : ''}</form>
${detail}
<h2>按订单 · By order${orders.length > shown.length ? ` (newest ${shown.length} of ${orders.length})` : ''}</h2>
${
  shown.length === 0
    ? '<p>暂无记录 · Nothing recorded yet.</p>'
    : `<table><thead><tr><th>订单号 out_trade_no</th><th>渠道 Gateways</th><th>成功扣款 Charges</th><th>拒绝 Declines</th><th>扣款合计 Charged</th><th>已退款 Refunded</th><th>保留 Kept</th><th>通知 Notifications</th></tr></thead><tbody>
${rows}</tbody></table>`
}`,
  );
}

/** GET /: what this server is and where its pages are. */
export function indexPage(): string {
  return page(
    'PSP 沙箱 · PSP sandbox',
    `<h1>PSP 沙箱 · PSP sandbox</h1>
<p>A local stand-in for Alipay, WeChat Pay, Stripe and 2C2P that speaks their wire protocols, so the checkout and the official SDKs talk to it as they would to the real gateways. It keeps its own ledger of every charge, refund and notification.</p>
<ul>
<li><a href="/sandbox/ledger">账本 · The ledger</a> — what was charged and refunded, per order (JSON: <a href="/ledger">/ledger</a>)</li>
<li><a href="/sandbox/scan">沙箱手机 · The sandbox phone</a> — open a QR code's text as a buyer's payment app would</li>
<li><a href="/sandbox/credentials">商户密钥 · Merchant credentials</a> (JSON), as a gateway's developer console shows them</li>
<li><a href="/sandbox/faults">已布置的故障 · Armed faults</a> (JSON)</li>
</ul>`,
  );
}
