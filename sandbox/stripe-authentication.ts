/**
 * The sandbox's 3-D Secure challenge: the page a card's issuer shows when a payment needs strong
 * customer authentication (Stripe's test "authentication page", https://docs.stripe.com/testing#regulatory-cards).
 *
 *   GET  /stripe/3ds/{id}              the challenge, for a buyer sent by next_action.redirect_to_url
 *   GET  /stripe/3ds/{id}?embedded=1   the same inside Stripe.js's modal (next_action.use_stripe_sdk)
 *   POST /stripe/3ds/{id}              outcome=complete | fail | cancel
 *
 * Complete charges the card (which may still be declined); fail and cancel (the buyer closed the
 * window or went back) leave the PaymentIntent payable again with `payment_intent_authentication_failure`.
 * A redirected buyer goes back to the return_url with `payment_intent`, `payment_intent_client_secret`
 * and `redirect_status`, as Stripe sends them; in the modal the page tells Stripe.js it is done and
 * Stripe.js reads the PaymentIntent. Only the newest pending challenge of a PaymentIntent still in
 * requires_action settles it: a window left open after another confirm, a cancel or a payment
 * elsewhere changes nothing (409).
 *
 * The id in the URL is the only credential, as with Stripe's hooks URLs: 24 random base62 characters.
 */
import type { SandboxRequest, SandboxResponse } from './gateway-module';
import type { PaymentIntentObject } from './stripe-objects';
import { base62 } from './stripe-objects';

export const CHALLENGE_PATH = '/stripe/3ds/';
const CHALLENGE_ID = /^payatt_[A-Za-z0-9]{24}$/;
const TAG = 'payonce-stripe-sandbox';

export type ChallengeOutcome = 'complete' | 'fail' | 'cancel';
const OUTCOMES: readonly ChallengeOutcome[] = ['complete', 'fail', 'cancel'];

export interface ChallengeView {
  /** The challenge can still settle the PaymentIntent. */
  pending: boolean;
  intent: PaymentIntentObject;
  amountText: string;
  last4: string | null;
}

export interface ChallengeResult {
  /** This answer settled the PaymentIntent; false for a stale window. */
  settled: boolean;
  intent: PaymentIntentObject;
  returnUrl: string | null;
}

export interface ChallengeStore {
  read(id: string): Promise<ChallengeView | undefined>;
  settle(id: string, outcome: ChallengeOutcome): Promise<ChallengeResult | undefined>;
}

export interface NewChallenge {
  id: string;
  /** next_action.use_stripe_sdk.source: an id Stripe.js carries; the sandbox does not read it back. */
  sourceId: string;
  pageUrl: string;
  embeddedUrl: string;
}

export function newChallenge(baseUrl: string): NewChallenge {
  const id = `payatt_${base62(24)}`;
  const pageUrl = `${baseUrl}${CHALLENGE_PATH}${id}`;
  return { id, sourceId: `src_${base62(24)}`, pageUrl, embeddedUrl: `${pageUrl}?embedded=1` };
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch] ?? ch);
}

function html(status: number, body: string): SandboxResponse {
  return {
    status,
    headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'referrer-policy': 'no-referrer' },
    body: `<!doctype html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>3D Secure 验证 — PayOnce PSP sandbox</title>
<style>
  body { font: 15px/1.5 system-ui, "Noto Sans CJK SC", sans-serif; margin: 0; padding: 24px 20px; color: #1a1f36; }
  h1 { font-size: 18px; margin: 0 0 12px; }
  dl { display: grid; grid-template-columns: auto 1fr; gap: 4px 12px; margin: 0 0 20px; }
  dt { color: #697386; }
  dd { margin: 0; }
  button { display: block; width: 100%; font: inherit; padding: 10px; margin: 8px 0; border-radius: 6px; border: 1px solid #c1c9d2; background: #fff; cursor: pointer; }
  button.primary { background: #635bff; color: #fff; border-color: #635bff; }
  .note { color: #697386; font-size: 13px; }
</style>
</head>
<body>
${body}
</body>
</html>
`,
  };
}

/** In the modal: tell Stripe.js (the page that opened it) that this challenge is over. */
function tellStripeJs(id: string): string {
  return `<script>
  window.parent.postMessage(${JSON.stringify({ tag: TAG, type: 'challenge-done', challengeId: id })}, '*');
</script>`;
}

function challengePage(id: string, view: ChallengeView, embedded: boolean): SandboxResponse {
  const facts = `<dl>
  <dt>金额 (Amount)</dt><dd>${escapeHtml(view.amountText)}</dd>
  <dt>银行卡 (Card)</dt><dd>${view.last4 ? `•••• ${escapeHtml(view.last4)}` : '—'}</dd>
</dl>`;
  if (!view.pending) {
    return html(
      409,
      `<h1>这次验证已经结束</h1>
${facts}
<p role="alert">这笔付款已完成、已取消，或已开始了新的验证：这个窗口不会再扣款。(This challenge is over: the payment was completed, canceled or started again.)</p>
${embedded ? tellStripeJs(id) : ''}`,
    );
  }
  const action = `${CHALLENGE_PATH}${id}${embedded ? '?embedded=1' : ''}`;
  return html(
    200,
    `<h1>3D Secure 验证 (3D Secure authentication)</h1>
${facts}
<p class="note">PayOnce 沙箱的发卡行验证页：选择这次验证的结果。(The sandbox's issuer page: choose how this authentication ends.)</p>
<form method="post" action="${escapeHtml(action)}" id="challenge">
  <button class="primary" type="submit" name="outcome" value="complete">完成验证 (Complete authentication)</button>
  <button type="submit" name="outcome" value="fail">验证失败 (Fail authentication)</button>
  ${embedded ? '' : '<button type="submit" name="outcome" value="cancel">取消，返回商家 (Cancel and return)</button>'}
</form>
${
  embedded
    ? `<script>
  // Stripe.js's close button abandons the challenge: answer it as a cancel.
  window.addEventListener('message', function (event) {
    if (event.source !== window.parent) return;
    var data = event.data;
    if (!data || data.tag !== ${JSON.stringify(TAG)} || data.type !== 'abandon') return;
    var form = document.getElementById('challenge');
    var input = document.createElement('input');
    input.type = 'hidden';
    input.name = 'outcome';
    input.value = 'cancel';
    form.appendChild(input);
    form.submit();
  });
</script>`
    : ''
}`,
  );
}

/** Where a redirected buyer goes back to: the merchant's return_url with Stripe's query parameters. */
function returnTo(result: ChallengeResult): string | null {
  if (result.returnUrl === null) return null;
  const url = new URL(result.returnUrl);
  url.searchParams.set('payment_intent', result.intent.id);
  url.searchParams.set('payment_intent_client_secret', String(result.intent.client_secret ?? ''));
  url.searchParams.set('redirect_status', result.intent.status === 'succeeded' ? 'succeeded' : 'failed');
  return url.toString();
}

function settledPage(id: string, result: ChallengeResult, embedded: boolean): SandboxResponse {
  if (embedded) {
    const text = result.settled
      ? '验证结果已提交，正在返回商户页面… (Returning to the merchant…)'
      : '这次验证已经结束。(This challenge is over.)';
    return html(result.settled ? 200 : 409, `<p>${text}</p>\n${tellStripeJs(id)}`);
  }
  const back = returnTo(result);
  if (result.settled && back) return { status: 303, headers: { location: back, 'cache-control': 'no-store' }, body: '' };
  const link = back ? `<p><a href="${escapeHtml(back)}">返回商家 (Back to the merchant)</a></p>` : '';
  return html(
    result.settled ? 200 : 409,
    result.settled
      ? `<h1>验证结果已提交</h1>${link}`
      : `<h1>这次验证已经结束</h1><p role="alert">这个窗口不会再扣款。(This challenge is over; nothing was charged from this window.)</p>${link}`,
  );
}

/** Answers the challenge paths; undefined for every other path. */
export async function handleChallenge(request: SandboxRequest, store: ChallengeStore): Promise<SandboxResponse | undefined> {
  const path = request.url.pathname;
  if (!path.startsWith(CHALLENGE_PATH)) return undefined;
  const id = path.slice(CHALLENGE_PATH.length);
  const embedded = request.url.searchParams.get('embedded') === '1';
  const missing = () => html(404, '<h1>没有这个验证 (No such authentication)</h1>');
  if (!CHALLENGE_ID.test(id)) return missing();
  if (request.method === 'GET' || request.method === 'HEAD') {
    const view = await store.read(id);
    return view ? challengePage(id, view, embedded) : missing();
  }
  if (request.method !== 'POST') {
    return { status: 405, headers: { 'content-type': 'text/plain; charset=utf-8', allow: 'GET, POST' }, body: 'use GET or POST' };
  }
  const outcome = new URLSearchParams(request.body).get('outcome');
  if (!OUTCOMES.includes(outcome as ChallengeOutcome)) {
    return html(400, `<h1>outcome must be one of ${OUTCOMES.join(', ')}</h1>`);
  }
  const result = await store.settle(id, outcome as ChallengeOutcome);
  return result ? settledPage(id, result, embedded) : missing();
}
