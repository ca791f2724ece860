/**
 * The sandbox's Alipay for the buyer's own step (issue 13): alipay.trade.precreate and the scan page
 * the Alipay app shows, alipay.trade.page.pay and its cashier (收银台), and the gaps of §5 (10003,
 * TRADE_CLOSED notifications, the timestamp window). Driven with the official alipay-sdk, plain HTTP
 * and plain fetches of the HTML forms, the way a buyer's browser submits them. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/alipay-buyer-steps.test.ts
 */
import assert from 'node:assert/strict';
import { createSign, randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { AlipaySdk } from 'alipay-sdk';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { readLedger, startServer, waitFor } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  appId: string;
  appPrivateKey: string;
  alipayPublicKey: string;
  gateway: string;
  testBuyers: { ok: string; insufficient_funds: string; account_restricted: string };
  userPayingAuthCode: string;
}

type Response = Record<string, unknown>;

let sandbox: RunningSandbox;
let creds: Credentials;
let sdk: AlipaySdk;
/** The merchant's notify_url: every delivery, by path; always answers `success`. */
const received = new Map<string, Record<string, string>[]>();
let receiver: { url: string; close(): Promise<void> };

function newOutTradeNo(): string {
  return `B${Date.now().toString(36)}${randomBytes(6).toString('hex')}`;
}

async function exec(method: string, bizContent: Record<string, unknown>, extra: Record<string, string> = {}): Promise<Response> {
  return (await sdk.exec(method, { ...extra, bizContent }, { validateSign: true })) as unknown as Response;
}

function precreate(outTradeNo: string, totalAmount = '12.30', extra: Record<string, string> = {}, subject = 'PayOnce 订单') {
  return exec('alipay.trade.precreate', { out_trade_no: outTradeNo, total_amount: totalAmount, subject }, extra);
}

function query(outTradeNo: string) {
  return exec('alipay.trade.query', { out_trade_no: outTradeNo });
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

function notifyUrl(outTradeNo: string): string {
  return `${receiver.url}/notify/${outTradeNo}`;
}

function deliveries(outTradeNo: string): Record<string, string>[] {
  return received.get(`/notify/${outTradeNo}`) ?? [];
}

interface Page {
  status: number;
  html: string;
  location: string | null;
}

async function open(url: string, init: RequestInit = {}): Promise<Page> {
  const res = await fetch(url, { redirect: 'manual', ...init });
  return { status: res.status, html: await res.text(), location: res.headers.get('location') };
}

/** What a browser does with the page's form: POST its fields (hidden ones included) and the pressed button. */
async function submit(page: Page, buyer: string): Promise<Page> {
  const action = /<form method="post" action="([^"]+)"/.exec(page.html)?.[1];
  assert.ok(action, 'the page has a form');
  assert.match(page.html, new RegExp(`<button type="submit" name="buyer" value="${buyer}">`));
  const form = new URLSearchParams();
  for (const [, name, value] of page.html.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) {
    form.append(unescape(name ?? ''), unescape(value ?? ''));
  }
  form.append('buyer', buyer);
  return open(new URL(unescape(action), sandbox.url).toString(), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: form.toString(),
  });
}

function unescape(html: string): string {
  return html.replace(/&#(\d+);/g, (_, code: string) => String.fromCharCode(Number(code)));
}

function pagePayUrl(outTradeNo: string, totalAmount = '12.30', returnUrl = 'https://shop.example/return', client = sdk): string {
  return client.pageExecute('alipay.trade.page.pay', 'GET', {
    bizContent: { out_trade_no: outTradeNo, total_amount: totalAmount, subject: 'PayOnce 订单', product_code: 'FAST_INSTANT_TRADE_PAY' },
    notifyUrl: notifyUrl(outTradeNo),
    returnUrl,
  });
}

async function buyerPays(outTradeNo: string, buyer = 'ok'): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${sandbox.url}/sandbox/alipay/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ outTradeNo, buyer }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001 });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { alipay: Credentials }).alipay;
  sdk = new AlipaySdk({
    appId: creds.appId,
    privateKey: creds.appPrivateKey,
    alipayPublicKey: creds.alipayPublicKey,
    gateway: creds.gateway,
    camelcase: false,
  });
  receiver = await startServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const path = req.url ?? '/';
      received.set(path, [...(received.get(path) ?? []), Object.fromEntries(new URLSearchParams(body))]);
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('success');
    });
  });
});

after(async () => {
  await receiver.close();
  await sandbox.close();
});

describe('alipay.trade.precreate and the scan page', () => {
  it('creates no trade until the buyer scans (ACQ.TRADE_NOT_EXIST, as alipay.trade.precreate documents); the scan makes it WAIT_BUYER_PAY', async () => {
    const outTradeNo = newOutTradeNo();
    const created = await precreate(outTradeNo, '12.30', { notify_url: notifyUrl(outTradeNo) });
    assert.equal(created.code, '10000');
    assert.equal(created.out_trade_no, outTradeNo);
    const qrCode = String(created.qr_code);
    assert.match(qrCode, new RegExp(`^${sandbox.url}/sandbox/alipay/qr/[0-9a-f]{32}$`));
    // Before the scan: no trade to query, close or pay by the merchant's means.
    assert.equal((await query(outTradeNo)).sub_code, 'ACQ.TRADE_NOT_EXIST');
    assert.equal((await exec('alipay.trade.close', { out_trade_no: outTradeNo })).sub_code, 'ACQ.TRADE_NOT_EXIST');

    const scanned = await open(qrCode);
    assert.equal(scanned.status, 200);
    assert.match(scanned.html, /¥12\.30/);
    assert.match(scanned.html, /PayOnce 订单/);
    assert.match(scanned.html, /确认付款 \(pay\)/);
    assert.match(scanned.html, /余额不足/);
    assert.match(scanned.html, /账户受限/);
    const trade = await query(outTradeNo);
    assert.equal(trade.trade_status, 'WAIT_BUYER_PAY');
    assert.equal(trade.total_amount, '12.30');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('answers a repeat by the trade rules: identical → the same qr_code (before and after the scan), another amount → ACQ.CONTEXT_INCONSISTENT, paid → ACQ.TRADE_HAS_SUCCESS', async () => {
    const outTradeNo = newOutTradeNo();
    const first = await precreate(outTradeNo);
    assert.equal((await precreate(outTradeNo)).qr_code, first.qr_code);
    assert.equal((await precreate(outTradeNo, '12.31')).sub_code, 'ACQ.CONTEXT_INCONSISTENT');
    assert.equal((await precreate(outTradeNo, '12.30', {}, 'another subject')).sub_code, 'ACQ.CONTEXT_INCONSISTENT');
    await open(String(first.qr_code));
    assert.equal((await precreate(outTradeNo)).qr_code, first.qr_code);
    assert.equal((await precreate(outTradeNo, '99.00')).sub_code, 'ACQ.CONTEXT_INCONSISTENT');
    assert.equal((await buyerPays(outTradeNo)).status, 200);
    const paid = await precreate(outTradeNo);
    assert.equal(paid.code, '40004');
    assert.equal(paid.sub_code, 'ACQ.TRADE_HAS_SUCCESS');
  });

  it('answers ACQ.TRADE_HAS_CLOSE for a closed trade, and the scan page says it is closed (409)', async () => {
    const outTradeNo = newOutTradeNo();
    const { qr_code: qrCode } = await precreate(outTradeNo);
    await open(String(qrCode));
    assert.equal((await exec('alipay.trade.close', { out_trade_no: outTradeNo })).code, '10000');
    assert.equal((await precreate(outTradeNo)).sub_code, 'ACQ.TRADE_HAS_CLOSE');
    const page = await open(String(qrCode));
    assert.equal(page.status, 409);
    assert.match(page.html, /交易已关闭/);
    assert.match(page.html, /ACQ\.TRADE_HAS_CLOSE/);
  });

  it('pays on the scan page: a decline shows trade.pay’s sub_code and message and keeps WAIT_BUYER_PAY; ok → TRADE_SUCCESS, ledger, notification; then the page says paid (409)', async () => {
    const outTradeNo = newOutTradeNo();
    const { qr_code: qrCode } = await precreate(outTradeNo, '15.00', { notify_url: notifyUrl(outTradeNo) });
    const scanned = await open(String(qrCode));

    const poor = await submit(scanned, 'insufficient_funds');
    assert.equal(poor.status, 200);
    assert.match(poor.html, /role="alert"[^]*买家余额不足[^]*ACQ\.BUYER_BALANCE_NOT_ENOUGH/);
    assert.equal((await query(outTradeNo)).trade_status, 'WAIT_BUYER_PAY');
    const restricted = await submit(poor, 'account_restricted');
    assert.match(restricted.html, /ACQ\.BUYER_ENABLE_STATUS_FORBID/);
    assert.equal((await query(outTradeNo)).trade_status, 'WAIT_BUYER_PAY');

    const paid = await submit(restricted, 'ok');
    assert.equal(paid.status, 200);
    assert.match(paid.html, /支付成功/);
    const trade = await query(outTradeNo);
    assert.equal(trade.trade_status, 'TRADE_SUCCESS');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => [c.status, c.amountMinor]),
      [
        ['declined', 1500],
        ['declined', 1500],
        ['succeeded', 1500],
      ],
    );
    const [notification] = await waitFor('the notification', async () =>
      deliveries(outTradeNo).length > 0 ? deliveries(outTradeNo) : undefined,
    );
    assert.ok(notification);
    assert.equal(notification.trade_status, 'TRADE_SUCCESS');
    assert.equal(notification.trade_no, trade.trade_no);
    assert.ok(sdk.checkNotifySignV2(notification));

    const again = await open(String(qrCode));
    assert.equal(again.status, 409);
    assert.match(again.html, /交易已支付/);
    assert.equal((await submit(scanned, 'ok')).status, 409);
    assert.equal((await ledger(outTradeNo)).charges.length, 3);
  });

  it('stays unpayable after alipay.trade.cancel of a code nobody scanned: the scan page refuses (409), precreate answers ACQ.TRADE_HAS_CLOSE', async () => {
    const outTradeNo = newOutTradeNo();
    const { qr_code: qrCode } = await precreate(outTradeNo);
    const cancelled = await exec('alipay.trade.cancel', { out_trade_no: outTradeNo });
    assert.equal(cancelled.code, '10000');
    assert.equal(cancelled.action, 'close');
    const page = await open(String(qrCode));
    assert.equal(page.status, 409);
    assert.match(page.html, /交易已关闭/);
    assert.equal((await precreate(outTradeNo)).sub_code, 'ACQ.TRADE_HAS_CLOSE');
    assert.equal((await buyerPays(outTradeNo)).status, 409);
    assert.equal((await query(outTradeNo)).sub_code, 'ACQ.TRADE_NOT_EXIST');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('lets POST /sandbox/alipay/buyer-pays scan and pay a precreated trade', async () => {
    const outTradeNo = newOutTradeNo();
    await precreate(outTradeNo, '3.00');
    const declined = await buyerPays(outTradeNo, 'insufficient_funds');
    assert.equal(declined.status, 200);
    assert.equal(declined.body.status, 'declined');
    assert.equal((await query(outTradeNo)).trade_status, 'WAIT_BUYER_PAY');
    const paid = await buyerPays(outTradeNo);
    assert.equal(paid.body.status, 'succeeded');
    assert.equal((await query(outTradeNo)).trade_status, 'TRADE_SUCCESS');
  });

  it('answers an unknown code with a 409 page', async () => {
    const page = await open(`${sandbox.url}/sandbox/alipay/qr/${randomBytes(16).toString('hex')}`);
    assert.equal(page.status, 409);
    assert.match(page.html, /交易不存在/);
  });
});

describe('alipay.trade.page.pay and the cashier', () => {
  it('refuses a bad signature with an error page (HTTP 400) and creates nothing', async () => {
    const outTradeNo = newOutTradeNo();
    const url = new URL(pagePayUrl(outTradeNo));
    url.searchParams.set('sign', Buffer.from(randomBytes(256)).toString('base64'));
    const page = await open(url.toString());
    assert.equal(page.status, 400);
    assert.match(page.html, /isv\.invalid-signature/);
    // A tampered amount under the original signature is refused the same way.
    const tampered = new URL(pagePayUrl(outTradeNo));
    tampered.searchParams.set('biz_content', String(tampered.searchParams.get('biz_content')).replace('12.30', '0.01'));
    assert.equal((await open(tampered.toString())).status, 400);
    assert.equal((await query(outTradeNo)).sub_code, 'ACQ.TRADE_NOT_EXIST');
  });

  it('opens the cashier on a WAIT_BUYER_PAY trade; a decline stays on it; ok → TRADE_SUCCESS, notification, 302 to return_url with the signed synchronous return', async () => {
    const outTradeNo = newOutTradeNo();
    const cashier = await open(pagePayUrl(outTradeNo, '21.50', 'https://shop.example/api/return?orderId=o1'));
    assert.equal(cashier.status, 200);
    assert.match(cashier.html, /收银台/);
    assert.match(cashier.html, /¥21\.50/);
    const trade = await query(outTradeNo);
    assert.equal(trade.trade_status, 'WAIT_BUYER_PAY');

    const declined = await submit(cashier, 'account_restricted');
    assert.equal(declined.status, 200);
    assert.match(declined.html, /收银台/);
    assert.match(declined.html, /role="alert"[^]*买家状态非法[^]*ACQ\.BUYER_ENABLE_STATUS_FORBID/);
    assert.equal((await query(outTradeNo)).trade_status, 'WAIT_BUYER_PAY');

    const paid = await submit(declined, 'ok');
    assert.equal(paid.status, 302);
    assert.ok(paid.location);
    const back = new URL(paid.location);
    assert.equal(`${back.origin}${back.pathname}`, 'https://shop.example/api/return');
    const returned = Object.fromEntries(back.searchParams);
    assert.equal(returned.orderId, 'o1');
    delete returned.orderId; // the merchant's own, not Alipay's
    assert.deepEqual(Object.keys(returned).sort(), [
      'app_id',
      'auth_app_id',
      'charset',
      'method',
      'out_trade_no',
      'seller_id',
      'sign',
      'sign_type',
      'timestamp',
      'total_amount',
      'trade_no',
      'version',
    ]);
    assert.equal(returned.method, 'alipay.trade.page.pay.return');
    assert.equal(returned.out_trade_no, outTradeNo);
    assert.equal(returned.trade_no, trade.trade_no);
    assert.equal(returned.total_amount, '21.50');
    // The return is signed like a notification: alipay-sdk's checkNotifySign verifies it with the
    // Alipay public key, and a changed amount does not verify.
    assert.ok(sdk.checkNotifySign(returned), 'checkNotifySign(return)');
    assert.equal(sdk.checkNotifySign({ ...returned, total_amount: '0.01' }), false);

    assert.equal((await query(outTradeNo)).trade_status, 'TRADE_SUCCESS');
    const [notification] = await waitFor('the notification', async () =>
      deliveries(outTradeNo).length > 0 ? deliveries(outTradeNo) : undefined,
    );
    assert.equal(notification?.trade_status, 'TRADE_SUCCESS');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'succeeded'],
    );
    // Paid: the cashier and the link refuse (ACQ.TRADE_HAS_SUCCESS), nothing is charged again.
    assert.equal((await submit(declined, 'ok')).status, 409);
    const link = await open(pagePayUrl(outTradeNo, '21.50'));
    assert.equal(link.status, 409);
    assert.match(link.html, /ACQ\.TRADE_HAS_SUCCESS/);
  });

  it('applies the trade rules to a repeat: identical reopens the same trade, another amount is ACQ.CONTEXT_INCONSISTENT, a closed trade ACQ.TRADE_HAS_CLOSE', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await open(pagePayUrl(outTradeNo))).status, 200);
    const { trade_no: tradeNo } = await query(outTradeNo);
    assert.equal((await open(pagePayUrl(outTradeNo))).status, 200);
    assert.equal((await query(outTradeNo)).trade_no, tradeNo);
    const changed = await open(pagePayUrl(outTradeNo, '12.31'));
    assert.equal(changed.status, 409);
    assert.match(changed.html, /ACQ\.CONTEXT_INCONSISTENT/);
    // The QR code of the same order is the same trade too.
    assert.equal((await precreate(outTradeNo)).code, '10000');

    const cashier = await open(pagePayUrl(outTradeNo));
    assert.equal((await exec('alipay.trade.close', { out_trade_no: outTradeNo })).code, '10000');
    const closed = await open(pagePayUrl(outTradeNo));
    assert.equal(closed.status, 409);
    assert.match(closed.html, /ACQ\.TRADE_HAS_CLOSE/);
    assert.equal((await submit(cashier, 'ok')).status, 409);
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });
});

describe('the gaps of issue 13 §5', () => {
  it('answers alipay.trade.pay with 10003 (WAIT_BUYER_PAY) for a buyer who must confirm in the app; the trade waits and the buyer completes it', async () => {
    const outTradeNo = newOutTradeNo();
    const pending = await exec('alipay.trade.pay', {
      out_trade_no: outTradeNo,
      scene: 'bar_code',
      auth_code: creds.userPayingAuthCode,
      total_amount: '9.00',
      subject: 'PayOnce 订单',
    });
    assert.equal(pending.code, '10003');
    assert.equal(pending.sub_code, undefined);
    assert.equal(pending.out_trade_no, outTradeNo);
    assert.equal((await query(outTradeNo)).trade_status, 'WAIT_BUYER_PAY');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
    assert.equal((await buyerPays(outTradeNo)).body.status, 'succeeded');
    assert.equal((await query(outTradeNo)).trade_status, 'TRADE_SUCCESS');
  });

  it('sends a TRADE_CLOSED notification when alipay.trade.close closes a trade (trade_status_sync, signed, no paid amounts)', async () => {
    const outTradeNo = newOutTradeNo();
    await open(pagePayUrl(outTradeNo, '4.00'));
    assert.equal((await exec('alipay.trade.close', { out_trade_no: outTradeNo })).code, '10000');
    const [closed] = await waitFor('the TRADE_CLOSED notification', async () =>
      deliveries(outTradeNo).length > 0 ? deliveries(outTradeNo) : undefined,
    );
    assert.ok(closed);
    assert.equal(closed.notify_type, 'trade_status_sync');
    assert.equal(closed.trade_status, 'TRADE_CLOSED');
    assert.equal(closed.total_amount, '4.00');
    assert.equal(closed.receipt_amount, undefined);
    assert.ok(closed.gmt_close);
    assert.ok(sdk.checkNotifySignV2(closed));
  });

  it('refuses a request whose timestamp is far from the gateway’s clock with isv.invalid-timestamp', async () => {
    const beijing = (ms: number) => new Date(ms + 8 * 3_600_000).toISOString().slice(0, 19).replace('T', ' ');
    const send = async (timestamp: string) => {
      const params: Record<string, string> = {
        app_id: creds.appId,
        method: 'alipay.trade.query',
        charset: 'utf-8',
        sign_type: 'RSA2',
        version: '1.0',
        timestamp,
        biz_content: JSON.stringify({ out_trade_no: newOutTradeNo() }),
      };
      const content = Object.keys(params)
        .sort()
        .map((k) => `${k}=${params[k]}`)
        .join('&');
      params.sign = createSign('RSA-SHA256').update(content, 'utf8').sign(creds.appPrivateKey, 'base64');
      const res = await fetch(creds.gateway, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded;charset=utf-8' },
        body: new URLSearchParams(params).toString(),
      });
      return ((await res.json()) as Record<string, Response>).alipay_trade_query_response ?? {};
    };
    // Now, in Beijing time: processed (the trade does not exist).
    assert.equal((await send(beijing(Date.now()))).sub_code, 'ACQ.TRADE_NOT_EXIST');
    // A day old, or a day ahead: refused before anything else.
    for (const offset of [-24 * 3_600_000, 24 * 3_600_000]) {
      const stale = await send(beijing(Date.now() + offset));
      assert.equal(stale.code, '40002');
      assert.equal(stale.sub_code, 'isv.invalid-timestamp');
    }
  });
});
