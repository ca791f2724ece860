/**
 * The buyer's pages of the sandbox's Alipay, as plain server-rendered HTML: the phone page the
 * Alipay app shows after scanning a precreate QR code (扫码付款), the cashier (收银台) that
 * alipay.trade.page.pay opens in the buyer's browser, and the gateway's error page. No external
 * assets (the sandbox runs offline), phone-sized, and usable through role/label locators: the test
 * buyers are real <button>s with their names in Chinese and English.
 */
import type { SandboxResponse } from './gateway-module';

export interface TradeView {
  merchant: string;
  subject: string;
  /** Yuan, as Alipay shows it: "12.30". */
  totalAmount: string;
  outTradeNo: string;
}

/** The test buyers' buttons: `name="buyer"` carries the sandbox test buyer. */
const BUYER_BUTTONS: readonly { value: string; label: string }[] = [
  { value: 'ok', label: '确认付款 (pay)' },
  { value: 'insufficient_funds', label: '余额不足 (insufficient funds)' },
  { value: 'account_restricted', label: '账户受限 (account restricted)' },
];

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(status: number, title: string, body: string): SandboxResponse {
  const html = `<!doctype html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>
body{font-family:system-ui,-apple-system,"PingFang SC","Microsoft YaHei",sans-serif;margin:0;background:#f5f5f5;color:#333}
main{max-width:420px;margin:0 auto;padding:16px}
header{background:#1677ff;color:#fff;padding:12px 16px;font-size:18px}
.card{background:#fff;border-radius:8px;padding:16px;margin-bottom:12px}
.amount{font-size:32px;font-weight:600;text-align:center;margin:8px 0}
dl{display:grid;grid-template-columns:auto 1fr;gap:4px 12px;margin:0}
dt{color:#888}dd{margin:0;word-break:break-all}
button{display:block;width:100%;padding:12px;margin:8px 0;font-size:16px;border-radius:6px;border:1px solid #1677ff;background:#fff;color:#1677ff}
button[value=ok]{background:#1677ff;color:#fff}
[role=alert]{background:#fff1f0;border:1px solid #ffa39e;color:#a8071a;border-radius:6px;padding:12px;margin-bottom:12px}
[role=status]{background:#f6ffed;border:1px solid #b7eb8f;color:#135200;border-radius:6px;padding:12px;margin-bottom:12px}
</style>
</head>
<body>
<header>支付宝 (Alipay sandbox)</header>
<main>
${body}
</main>
</body>
</html>`;
  return { status, headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }, body: html };
}

function tradeCard(trade: TradeView): string {
  return `<section class="card" aria-label="订单信息 (order)">
<p class="amount" aria-label="金额 (amount)">¥${escapeHtml(trade.totalAmount)}</p>
<dl>
<dt>收款方 (merchant)</dt><dd>${escapeHtml(trade.merchant)}</dd>
<dt>商品 (subject)</dt><dd>${escapeHtml(trade.subject)}</dd>
<dt>订单号 (order no.)</dt><dd>${escapeHtml(trade.outTradeNo)}</dd>
</dl>
</section>`;
}

function buyerForm(action: string, hidden: Record<string, string>): string {
  const fields = Object.entries(hidden)
    .map(([name, value]) => `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`)
    .join('\n');
  const buttons = BUYER_BUTTONS.map((b) => `<button type="submit" name="buyer" value="${b.value}">${escapeHtml(b.label)}</button>`).join(
    '\n',
  );
  return `<form method="post" action="${escapeHtml(action)}" aria-label="选择测试买家 (test buyer)">
${fields}
<p>沙箱测试买家 (sandbox test buyers):</p>
${buttons}
</form>`;
}

/**
 * The page a payer sees: the trade, an optional failure of the last try (the trade stays payable,
 * as in the Alipay app) and the test buyers.
 */
export function payPage(options: {
  title: string;
  trade: TradeView;
  action: string;
  hidden?: Record<string, string>;
  failure?: { subCode: string; subMsg: string };
}): SandboxResponse {
  const alert = options.failure
    ? `<div role="alert">支付失败 (payment failed): ${escapeHtml(options.failure.subMsg)} [${escapeHtml(options.failure.subCode)}]</div>`
    : '';
  return page(
    200,
    options.title,
    `<h1>${escapeHtml(options.title)}</h1>\n${alert}\n${tradeCard(options.trade)}\n${buyerForm(options.action, options.hidden ?? {})}`,
  );
}

export function paidPage(trade: TradeView, tradeNo: string): SandboxResponse {
  return page(
    200,
    '支付成功',
    `<h1>支付成功 (paid)</h1>\n<div role="status">付款成功 (payment succeeded)，交易号 (trade no.) ${escapeHtml(tradeNo)}</div>\n${tradeCard(trade)}`,
  );
}

/** A trade the buyer can no longer pay, or a request the gateway refuses. */
export function errorPage(status: number, title: string, subCode: string, subMsg: string): SandboxResponse {
  return page(
    status,
    title,
    `<h1>${escapeHtml(title)}</h1>\n<div role="alert"><p>${escapeHtml(subMsg)}</p><p>错误码 (error code): <code>${escapeHtml(subCode)}</code></p></div>`,
  );
}

export function redirect(location: string): SandboxResponse {
  return {
    status: 302,
    headers: { location, 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' },
    body: `Redirecting to ${location}`,
  };
}
