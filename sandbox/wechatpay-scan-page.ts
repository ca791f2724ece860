/**
 * The page a buyer sees in WeChat after scanning a Native pay QR code (code_url), as the sandbox plays
 * it: the merchant, what is bought, the amount, and the sandbox's test buyers as the ways to confirm.
 * Plain server-rendered HTML, phone-sized, no external assets: it must work offline and be driven by
 * Playwright through role and label locators (real <button>s whose text is their accessible name).
 */

export type ScanTestBuyer = 'ok' | 'insufficient_funds' | 'account_restricted';

/** The test buyers, in the order the page offers them, with the labels issue 13 fixes for wallets. */
const BUYER_BUTTONS: readonly { buyer: ScanTestBuyer; label: string }[] = [
  { buyer: 'ok', label: '确认付款 (pay)' },
  { buyer: 'insufficient_funds', label: '余额不足 (insufficient funds)' },
  { buyer: 'account_restricted', label: '账户受限 (account restricted)' },
];

export interface ScanTradeView {
  merchantName: string;
  mchid: string;
  description: string;
  /** fen */
  total: number;
  outTradeNo: string;
}

export type ScanPage =
  /** The order can be paid: the form, with the last attempt's failure above it when there was one. */
  | { kind: 'payable'; trade: ScanTradeView; codeUrl: string; failure?: string }
  | { kind: 'paid'; trade: ScanTradeView; transactionId: string }
  /** The code cannot be paid: unknown, expired, or its order is closed or paid already. */
  | { kind: 'refused'; reason: 'unknown' | 'expired' | 'closed' | 'paid'; trade?: ScanTradeView }
  | { kind: 'bad_request'; message: string };

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** ¥12.30: fen as yuan with two decimals, the way WeChat's payment sheet shows an amount. */
export function yuan(fen: number): string {
  return `¥${Math.floor(fen / 100)}.${String(fen % 100).padStart(2, '0')}`;
}

const REFUSALS: Readonly<Record<'unknown' | 'expired' | 'closed' | 'paid', { title: string; detail: string }>> = {
  unknown: { title: '二维码无效 (unknown code)', detail: '此二维码不是有效的微信支付收款码。(This is not a WeChat Pay code.)' },
  expired: {
    title: '二维码已过期 (code expired)',
    detail: '二维码已过期，请刷新二维码后重新扫码。(The code is older than 2 hours: ask the merchant for a new one.)',
  },
  closed: { title: '订单已关闭 (order closed)', detail: '该订单已关闭，无法支付。(The merchant closed this order: it cannot be paid.)' },
  paid: { title: '订单已支付 (already paid)', detail: '该订单已支付，请勿重复支付。(This order has been paid already.)' },
};

function tradeSummary(trade: ScanTradeView): string {
  return `<dl>
  <dt>商户 (merchant)</dt><dd>${escapeHtml(trade.merchantName)}</dd>
  <dt>商品 (description)</dt><dd>${escapeHtml(trade.description)}</dd>
  <dt>金额 (amount)</dt><dd class="amount">${yuan(trade.total)}</dd>
  <dt>商户订单号 (order no.)</dt><dd>${escapeHtml(trade.outTradeNo)}</dd>
</dl>`;
}

const STYLE = `
body{margin:0;font-family:-apple-system,"PingFang SC","Noto Sans CJK SC",sans-serif;background:#ededed;color:#111}
main{max-width:420px;margin:0 auto;padding:16px}
h1{font-size:20px;text-align:center}
section{background:#fff;border-radius:8px;padding:16px;margin-bottom:12px}
dl{display:grid;grid-template-columns:auto 1fr;gap:6px 12px;margin:0}
dt{color:#666}dd{margin:0;word-break:break-all}
.amount{font-size:28px;font-weight:600}
[role=alert]{background:#fde2e2;color:#a00;border-radius:8px;padding:12px;margin-bottom:12px}
[role=status]{background:#e1f5e1;color:#075e07;border-radius:8px;padding:12px;margin-bottom:12px}
button{display:block;width:100%;padding:14px;margin-top:10px;border:0;border-radius:6px;font-size:17px}
button[value=ok]{background:#07c160;color:#fff}
button:not([value=ok]){background:#f2f2f2;color:#333}
`;

function layout(title: string, body: string): string {
  return `<!doctype html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>${STYLE}</style>
</head>
<body>
<main>
<h1>${escapeHtml(title)}</h1>
${body}
<p><small>PayOnce 支付沙箱 (PSP sandbox) — 模拟微信扫码后的支付页 (what WeChat shows after scanning).</small></p>
</main>
</body>
</html>
`;
}

/** The page and its HTTP status: 200 payable or paid, 402 after a failed payment, 409 refused, 400. */
export function renderScanPage(page: ScanPage): { status: number; html: string } {
  switch (page.kind) {
    case 'payable': {
      const buttons = BUYER_BUTTONS.map(
        ({ buyer, label }) => `<button type="submit" name="buyer" value="${buyer}">${escapeHtml(label)}</button>`,
      ).join('\n');
      const failure = page.failure
        ? `<div role="alert"><strong>支付失败 (payment failed)</strong>：${escapeHtml(page.failure)}。订单仍可支付，可重试。(The order can still be paid: try again.)</div>`
        : '';
      const html = layout(
        '微信支付 (WeChat Pay)',
        `${failure}<section aria-label="订单 (order)">${tradeSummary(page.trade)}</section>
<form method="post" action="/sandbox/wechatpay/scan" aria-label="付款 (pay)">
<input type="hidden" name="code_url" value="${escapeHtml(page.codeUrl)}">
<fieldset><legend>沙箱测试买家 (sandbox test buyer)</legend>
${buttons}
</fieldset>
</form>`,
      );
      return { status: page.failure ? 402 : 200, html };
    }
    case 'paid':
      return {
        status: 200,
        html: layout(
          '支付成功 (paid)',
          `<div role="status">支付成功 (payment succeeded)。微信支付订单号 (transaction id)：${escapeHtml(page.transactionId)}</div>
<section aria-label="订单 (order)">${tradeSummary(page.trade)}</section>`,
        ),
      };
    case 'refused': {
      const refusal = REFUSALS[page.reason];
      return {
        status: 409,
        html: layout(
          refusal.title,
          `<div role="alert">${escapeHtml(refusal.detail)}</div>${page.trade ? `<section aria-label="订单 (order)">${tradeSummary(page.trade)}</section>` : ''}`,
        ),
      };
    }
    case 'bad_request':
      return { status: 400, html: layout('请求无效 (bad request)', `<div role="alert">${escapeHtml(page.message)}</div>`) };
    default: {
      const unreachable: never = page;
      throw new Error(`unhandled scan page ${JSON.stringify(unreachable)}`);
    }
  }
}
