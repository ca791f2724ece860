/**
 * The sandbox's 2C2P hosted payment page (webPaymentUrl), driven the way the buyer's browser drives it:
 * GET the page, POST its card form (application/x-www-form-urlencoded), follow the front-end return
 * form to the merchant. The merchant side speaks PGW v4.3 with jose-made HS256 JWTs. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/twoc2p-hosted.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { jwtVerify, SignJWT } from 'jose';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { twoC2pModule, TWOC2P_TEST_CARDS } from '@/sandbox/twoc2p';
import type { Ledger } from '@/soak/invariants';
import { readLedger, startServer, waitFor } from '@/test/support/harness';
import { formsOf, frontendReturnOf, labelsOf, payOnHostedPage, submitForm } from './twoc2p-hosted-page';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  merchantId: string;
  secretKey: string;
  baseUrl: string;
}
type Claims = Record<string, unknown>;

let sandbox: RunningSandbox;
let creds: Credentials;
/** The merchant's two return addresses: backendReturnUrl (JSON JWT) and frontendReturnUrl (form POST). */
let merchant: { url: string; close(): Promise<void> };
const backend: Claims[] = [];
const frontend: { contentType: string; body: string }[] = [];

function newInvoiceNo(): string {
  return `H${Date.now().toString(36).toUpperCase()}${randomBytes(5).toString('hex').toUpperCase()}`;
}

function key(): Uint8Array {
  return new TextEncoder().encode(creds.secretKey);
}

async function call(api: string, claims: Claims): Promise<{ signed: boolean; claims: Claims }> {
  const payload = await new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(key());
  const res = await fetch(`${creds.baseUrl}/${api}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ payload }),
  });
  assert.equal(res.status, 200);
  const body = (await res.json()) as Claims;
  if (typeof body.payload !== 'string') return { signed: false, claims: body };
  return { signed: true, claims: (await jwtVerify(body.payload, key(), { algorithms: ['HS256'] })).payload as Claims };
}

/** A payment token for the hosted page, with both return addresses pointing at the merchant. */
async function openPage(invoiceNo: string, extra: Claims = {}): Promise<{ paymentToken: string; webPaymentUrl: string }> {
  const { signed, claims } = await call('paymentToken', {
    merchantID: creds.merchantId,
    invoiceNo,
    description: 'PayOnce 订单 <测试>',
    amount: 168.0,
    currencyCode: 'CNY',
    paymentChannel: ['CC'],
    frontendReturnUrl: `${merchant.url}/return?orderId=o1&step=redirect`,
    backendReturnUrl: `${merchant.url}/notify`,
    ...extra,
  });
  assert.ok(signed, JSON.stringify(claims));
  assert.equal(claims.respCode, '0000');
  return { paymentToken: String(claims.paymentToken), webPaymentUrl: String(claims.webPaymentUrl) };
}

async function inquiry(invoiceNo: string): Promise<Claims> {
  const { signed, claims } = await call('paymentInquiry', { merchantID: creds.merchantId, invoiceNo, locale: 'en' });
  assert.ok(signed);
  return claims;
}

function ledger(invoiceNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, invoiceNo);
}

/** paymentExpiry as 2C2P writes it, read by the sandbox in UTC+8. */
function paymentExpiry(at: Date): string {
  return new Date(at.getTime() + 8 * 3_600_000).toISOString().slice(0, 19).replace('T', ' ');
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [twoC2pModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { '2c2p': Credentials })['2c2p'];
  merchant = await startServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      if ((req.url ?? '').startsWith('/notify')) {
        void jwtVerify((JSON.parse(body) as { payload: string }).payload, key(), { algorithms: ['HS256'] }).then(({ payload }) => {
          backend.push(payload as Claims);
        });
      } else {
        frontend.push({ contentType: req.headers['content-type'] ?? '', body });
      }
      res.writeHead(200, { 'content-type': 'text/plain' }).end('');
    });
  });
});

after(async () => {
  await merchant.close();
  await sandbox.close();
});

describe('the hosted payment page (webPaymentUrl)', () => {
  it('shows the merchant, the invoice, the amount, a labelled card form and the test cards', async () => {
    const invoiceNo = newInvoiceNo();
    const { webPaymentUrl } = await openPage(invoiceNo);
    const res = await fetch(webPaymentUrl);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/html; charset=utf-8/);
    const html = await res.text();
    for (const shown of [creds.merchantId, invoiceNo, 'PayOnce 订单 &#60;测试&#62;', 'CNY 168.00', 'name="viewport"']) {
      assert.ok(html.includes(shown), shown);
    }
    assert.ok(!html.includes('<测试>'), 'the description is escaped');
    assert.deepEqual(labelsOf(html), {
      cardNo: '卡号 (Card number)',
      expiry: '有效期 (Expiry, MM/YY)',
      securityCode: '安全码 (CVV)',
      name: '持卡人姓名 (Name on card)',
    });
    assert.match(html, /<button type="submit">确认付款 \(Pay\) CNY 168\.00<\/button>/);
    assert.match(html, new RegExp(`<code>${TWOC2P_TEST_CARDS.ok}</code> — 确认付款 / pay \\(ok\\)`));
    assert.match(html, new RegExp(`<code>${TWOC2P_TEST_CARDS.insufficient_funds}</code> — 余额不足 \\(insufficient_funds\\)`));
    assert.match(html, new RegExp(`<code>${TWOC2P_TEST_CARDS.account_restricted}</code> — 账户受限 \\(account_restricted\\)`));
    assert.ok(!/<(script|link|img)\b[^>]*\b(src|href)="https?:/.test(html), 'no external assets');
    const [form] = formsOf(html, webPaymentUrl);
    assert.deepEqual([form?.method, form?.action], ['post', webPaymentUrl]);
  });

  it('pays with the ok card: 0000 and one ledger charge, the signed backend notification, then the front-end return POST of paymentResponse', async () => {
    const invoiceNo = newInvoiceNo();
    const { webPaymentUrl } = await openPage(invoiceNo);

    // 1. The buyer submits the card form.
    const paid = await payOnHostedPage(webPaymentUrl, TWOC2P_TEST_CARDS.ok);
    assert.equal(paid.status, 200, paid.html);
    assert.ok(paid.html.includes('支付成功 (Payment successful)'));
    const approval = await inquiry(invoiceNo);
    assert.equal(approval.respCode, '0000');
    assert.deepEqual(
      (await ledger(invoiceNo)).charges.map((c) => [c.status, c.amountMinor, c.gatewayTradeNo]),
      [['succeeded', 16800, approval.tranRef]],
    );

    // 2. The backend notification, signed with the merchant secret (as any Do Payment's).
    const notification = await waitFor('the backend notification', async () => backend.find((n) => n.invoiceNo === invoiceNo));
    assert.deepEqual([notification.respCode, notification.tranRef, notification.amount], ['0000', approval.tranRef, 168]);

    // 3. The browser goes back by an auto-submitting form POST: paymentResponse = base64 JSON, with
    // 2C2P's documented front-end respCode 2000 ("completed, please do payment inquiry").
    assert.match(paid.html, /<script>document\.getElementById\('return'\)\.submit\(\);<\/script>/);
    const { form, response } = frontendReturnOf(paid.html, paid.url);
    assert.equal(form.action, `${merchant.url}/return?orderId=o1&step=redirect`);
    assert.deepEqual(response, {
      invoiceNo,
      channelCode: 'CC',
      respCode: '2000',
      respDesc: 'Transaction is completed, please do payment inquiry request for full payment information.',
    });
    const before = frontend.length;
    assert.equal((await submitForm(form)).status, 200);
    const received = frontend[before];
    assert.ok(received);
    assert.equal(received.contentType, 'application/x-www-form-urlencoded');
    const decoded = Buffer.from(new URLSearchParams(received.body).get('paymentResponse') ?? '', 'base64url').toString('utf8');
    assert.equal((JSON.parse(decoded) as Claims).invoiceNo, invoiceNo, 'base64url decoders read it too');

    // 4. The page of a paid invoice takes nothing more.
    const again = await fetch(webPaymentUrl);
    assert.equal(again.status, 409);
    assert.ok((await again.text()).includes('订单已支付 (Already paid)'));
    assert.equal((await ledger(invoiceNo)).charges.length, 1);
  });

  it('shows a decline (4051, then 4062) with the form again and keeps the invoice payable; the ok card then pays once', async () => {
    const invoiceNo = newInvoiceNo();
    const { webPaymentUrl } = await openPage(invoiceNo);
    const poor = await payOnHostedPage(webPaymentUrl, TWOC2P_TEST_CARDS.insufficient_funds, { name: 'Li Lei' });
    assert.equal(poor.status, 402);
    assert.match(poor.html, /<p role="alert">支付失败 \(Payment declined\): 4051 Insufficient funds<\/p>/);
    assert.ok(formsOf(poor.html, poor.url)[0], 'the form is shown again');
    assert.ok(poor.html.includes('value="Li Lei"'), 'the name is kept, the card is not');
    assert.equal((await inquiry(invoiceNo)).respCode, '4051');

    const restricted = await payOnHostedPage(webPaymentUrl, TWOC2P_TEST_CARDS.account_restricted);
    assert.equal(restricted.status, 402);
    assert.ok(restricted.html.includes('4062 Restricted card'));
    assert.equal(backend.filter((n) => n.invoiceNo === invoiceNo).length, 0, 'no notification for a decline');

    const paid = await payOnHostedPage(webPaymentUrl, TWOC2P_TEST_CARDS.ok);
    assert.equal(paid.status, 200);
    assert.equal(frontendReturnOf(paid.html, paid.url).response.respCode, '2000');
    assert.deepEqual(
      (await ledger(invoiceNo)).charges.map((c) => c.status),
      ['declined', 'declined', 'succeeded'],
    );
  });

  it('asks again for a missing or malformed field (HTTP 400), recording nothing', async () => {
    const invoiceNo = newInvoiceNo();
    const { webPaymentUrl } = await openPage(invoiceNo);
    for (const [values, message] of [
      [{ cardNo: '' }, /卡号/],
      [{ cardNo: '4111 1111 1111 1111', expiry: '13/30' }, /有效期/],
      [{ securityCode: '12' }, /安全码/],
      [{ name: ' ' }, /持卡人姓名/],
    ] as const) {
      const res = await payOnHostedPage(webPaymentUrl, TWOC2P_TEST_CARDS.ok, values);
      assert.equal(res.status, 400, JSON.stringify(values));
      assert.match(res.html, new RegExp(`<p role="alert">[^<]*${message.source}`));
    }
    assert.deepEqual((await ledger(invoiceNo)).charges, []);
    // Spaces in the card number are what buyers type: accepted.
    assert.equal((await payOnHostedPage(webPaymentUrl, '4111 1111 1111 1111')).status, 200);
  });

  it('refuses with HTTP 409 the page of a cancelled invoice, before and after the buyer opened it', async () => {
    const invoiceNo = newInvoiceNo();
    const { webPaymentUrl } = await openPage(invoiceNo);
    const opened = await (await fetch(webPaymentUrl)).text();
    const cancelled = await call('cancelTransaction', { merchantID: creds.merchantId, invoiceNo });
    assert.equal(cancelled.claims.respCode, '0000');

    const page = await fetch(webPaymentUrl);
    assert.equal(page.status, 409);
    assert.ok((await page.text()).includes('订单已取消 (Cancelled)'));
    // A form loaded before the cancel, submitted after it: refused under the invoice lock.
    const [form] = formsOf(opened, webPaymentUrl);
    assert.ok(form);
    const late = await submitForm(form, { cardNo: TWOC2P_TEST_CARDS.ok, expiry: '12/30', securityCode: '123', name: 'Late' });
    assert.equal(late.status, 409);
    assert.ok(late.html.includes('Transaction is cancelled'));
    assert.deepEqual((await ledger(invoiceNo)).charges, []);
  });

  it('refuses with HTTP 409 a token past its paymentExpiry (Do Payment too: 9040); a new token still pays the invoice', async () => {
    const invoiceNo = newInvoiceNo();
    const { webPaymentUrl, paymentToken } = await openPage(invoiceNo, { paymentExpiry: paymentExpiry(new Date(Date.now() + 2000)) });
    assert.equal((await fetch(webPaymentUrl)).status, 200);
    await new Promise((resolve) => setTimeout(resolve, 2100));

    const page = await fetch(webPaymentUrl);
    assert.equal(page.status, 409);
    assert.ok((await page.text()).includes('支付页面已过期 (Expired)'));
    const doPayment = await fetch(`${creds.baseUrl}/payment`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ paymentToken, payment: { code: { channelCode: 'CC' }, data: { name: 'X', cardNo: TWOC2P_TEST_CARDS.ok } } }),
    });
    assert.equal(((await doPayment.json()) as Claims).respCode, '9040');
    assert.equal((await inquiry(invoiceNo)).respCode, '0001', 'the invoice itself is still open');

    // A past expiry is refused when the token is asked for.
    const past = await call('paymentToken', {
      merchantID: creds.merchantId,
      invoiceNo,
      description: 'PayOnce 订单',
      amount: 168,
      currencyCode: 'CNY',
      paymentExpiry: paymentExpiry(new Date(Date.now() - 60_000)),
    });
    assert.deepEqual([past.signed, past.claims.respCode], [false, '9008']);

    const fresh = await openPage(invoiceNo, { idempotencyID: `${invoiceNo}-2` });
    assert.equal((await payOnHostedPage(fresh.webPaymentUrl, TWOC2P_TEST_CARDS.ok)).status, 200);
  });

  it('answers 404 for an unknown token and redirects the older /sandbox/2c2p/pay address to the page', async () => {
    const unknown = await fetch(`${creds.baseUrl}/hosted/${encodeURIComponent('kSA' + 'x'.repeat(80))}`);
    assert.equal(unknown.status, 404);
    assert.ok((await unknown.text()).includes('找不到支付页面'));
    const { paymentToken, webPaymentUrl } = await openPage(newInvoiceNo());
    const old = await fetch(`${sandbox.url}/sandbox/2c2p/pay?paymentToken=${encodeURIComponent(paymentToken)}`, { redirect: 'manual' });
    assert.deepEqual([old.status, old.headers.get('location')], [302, webPaymentUrl]);
  });
});
