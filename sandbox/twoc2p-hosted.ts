/**
 * The sandbox's 2C2P hosted payment page, as HTML: what the buyer sees at webPaymentUrl, and the page
 * that carries them back to the merchant's frontendReturnUrl.
 *
 * Plain server-rendered pages (no external assets, nothing fetched from the internet), phone-sized, in
 * Chinese with English in brackets, built from real <label>ed inputs and <button>s so that a browser
 * test finds them by role and label. The behaviour behind them (which card pays, what a token allows)
 * lives in sandbox/twoc2p.ts; this file only renders.
 */

export interface HostedTestCard {
  cardNo: string;
  /** The test buyer's label, as every buyer page of the sandbox shows it. */
  label: string;
}

/** The sandbox's test cards in the order the page lists them, with the common buyer-page labels. */
export function hostedTestCards(cards: { ok: string; insufficient_funds: string; account_restricted: string }): HostedTestCard[] {
  return [
    { cardNo: cards.ok, label: '确认付款 / pay (ok)' },
    { cardNo: cards.insufficient_funds, label: '余额不足 (insufficient_funds)' },
    { cardNo: cards.account_restricted, label: '账户受限 (account_restricted)' },
  ];
}

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const STYLE = `
  body { font-family: system-ui, -apple-system, "PingFang SC", "Microsoft YaHei", sans-serif; margin: 0; background: #f4f6f8; color: #1c2430; }
  main { max-width: 420px; margin: 0 auto; padding: 16px; }
  h1 { font-size: 1.25rem; margin: 8px 0 16px; }
  h2 { font-size: 1rem; margin: 16px 0 8px; }
  dl { display: grid; grid-template-columns: auto 1fr; gap: 4px 12px; background: #fff; padding: 12px; border-radius: 8px; }
  dt { color: #5b6675; } dd { margin: 0; word-break: break-all; }
  .amount { font-size: 1.5rem; font-weight: 600; }
  form { background: #fff; padding: 12px; border-radius: 8px; margin-top: 12px; }
  label { display: block; margin: 12px 0 4px; font-size: 0.9rem; }
  input { box-sizing: border-box; width: 100%; padding: 10px; font-size: 1rem; border: 1px solid #c3cad3; border-radius: 6px; }
  button { width: 100%; margin-top: 16px; padding: 12px; font-size: 1rem; border: 0; border-radius: 6px; background: #0b5fff; color: #fff; }
  [role="alert"] { background: #fdecec; color: #8a1111; padding: 12px; border-radius: 8px; margin: 12px 0; }
  [role="status"] { background: #e8f6ec; color: #11602b; padding: 12px; border-radius: 8px; margin: 12px 0; }
  ul { padding-left: 20px; } code { font-size: 0.95rem; }
  .note { color: #5b6675; font-size: 0.85rem; }
`;

function page(title: string, body: string, extraHead = ''): string {
  return `<!doctype html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>${STYLE}</style>${extraHead}
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`;
}

export interface HostedInvoice {
  merchantId: string;
  invoiceNo: string;
  description: string;
  /** The amount as 2C2P shows it, in major units ("168.00"). */
  amount: string;
  currencyCode: string;
}

function invoiceSummary(invoice: HostedInvoice): string {
  return `<dl aria-label="订单 (Order)">
  <dt>商户 (Merchant)</dt><dd>${escapeHtml(invoice.merchantId)}</dd>
  <dt>订单号 (Invoice)</dt><dd>${escapeHtml(invoice.invoiceNo)}</dd>
  <dt>商品 (Description)</dt><dd>${escapeHtml(invoice.description)}</dd>
  <dt>金额 (Amount)</dt><dd class="amount">${escapeHtml(invoice.currencyCode)} ${escapeHtml(invoice.amount)}</dd>
</dl>`;
}

/**
 * The card form. `error` is what went wrong with the previous submission (a decline, a field the buyer
 * must correct); `name` is kept across submissions, card data never is.
 */
export function renderPaymentPage(options: {
  invoice: HostedInvoice;
  action: string;
  testCards: HostedTestCard[];
  error?: string;
  name?: string;
}): string {
  const { invoice } = options;
  const alert = options.error ? `<p role="alert">${escapeHtml(options.error)}</p>` : '';
  const cards = options.testCards
    .map((card) => `<li><code>${escapeHtml(card.cardNo)}</code> — ${escapeHtml(card.label)}</li>`)
    .join('\n    ');
  const body = `<h1>2C2P 收银台 (2C2P payment page)</h1>
${invoiceSummary(invoice)}
${alert}
<form method="post" action="${escapeHtml(options.action)}" aria-label="银行卡支付 (Card payment)">
  <label for="cardNo">卡号 (Card number)</label>
  <input id="cardNo" name="cardNo" inputmode="numeric" autocomplete="cc-number" required>
  <label for="expiry">有效期 (Expiry, MM/YY)</label>
  <input id="expiry" name="expiry" placeholder="MM/YY" autocomplete="cc-exp" required>
  <label for="securityCode">安全码 (CVV)</label>
  <input id="securityCode" name="securityCode" inputmode="numeric" autocomplete="cc-csc" required>
  <label for="name">持卡人姓名 (Name on card)</label>
  <input id="name" name="name" autocomplete="cc-name" value="${escapeHtml(options.name ?? '')}" required>
  <button type="submit">确认付款 (Pay) ${escapeHtml(invoice.currencyCode)} ${escapeHtml(invoice.amount)}</button>
</form>
<section aria-labelledby="test-cards">
  <h2 id="test-cards">测试卡 (Test cards)</h2>
  <ul>
    ${cards}
  </ul>
  <p class="note">任意未来有效期与任意 CVV 均可 (any future expiry and any CVV). 其他卡号会被拒绝 (other numbers are declined).</p>
</section>`;
  return page(`支付 ${invoice.currencyCode} ${invoice.amount} (Pay)`, body);
}

/** A page that can no longer take a payment: paid, cancelled, expired or unknown. */
export function renderClosedPage(options: { title: string; detail: string; invoice?: HostedInvoice }): string {
  const summary = options.invoice ? invoiceSummary(options.invoice) : '';
  const body = `<h1>${escapeHtml(options.title)}</h1>
${summary}
<p role="alert">${escapeHtml(options.detail)}</p>`;
  return page(options.title, body);
}

/**
 * After an approval: the browser goes back to the merchant's frontendReturnUrl by an HTTP POST,
 * form-urlencoded, with `paymentResponse` (2C2P's "Payment Response (Frontend)"). The form submits
 * itself; the button is there for a browser without scripts.
 */
export function renderReturnPage(options: { invoice: HostedInvoice; frontendReturnUrl?: string; paymentResponse: string }): string {
  const returnForm = options.frontendReturnUrl
    ? `<form id="return" method="post" action="${escapeHtml(options.frontendReturnUrl)}">
  <input type="hidden" name="paymentResponse" value="${escapeHtml(options.paymentResponse)}">
  <button type="submit">返回商户 (Return to merchant)</button>
</form>
<script>document.getElementById('return').submit();</script>`
    : '<p class="note">商户未提供返回地址 (the merchant gave no frontendReturnUrl).</p>';
  const body = `<h1>支付成功 (Payment successful)</h1>
${invoiceSummary(options.invoice)}
<p role="status">正在返回商户 (Returning to the merchant)…</p>
${returnForm}`;
  return page('支付成功 (Payment successful)', body);
}
