/**
 * The sandbox's WeChat Pay buyer step and platform certificates, over plain HTTP:
 *  - Native下单 without a test buyer hands out a weixin://wxpay/bizpayurl?pr=… code_url, and the scan
 *    page (what WeChat shows after scanning it) lets a test buyer pay, fail, or be refused;
 *  - GET /v3/certificates serves the platform certificate encrypted with the APIv3 key, and answers
 *    are signed with it unless the request names the WeChat Pay public key.
 * Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/wechatpay-scan.test.ts
 */
import assert from 'node:assert/strict';
import { createDecipheriv, createSign, createVerify, randomBytes, X509Certificate } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { wechatpayModule } from '@/sandbox/wechatpay';
import type { Ledger } from '@/soak/invariants';
import { readLedger, startServer, waitFor } from '@/test/support/harness';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  mchid: string;
  appid: string;
  merchantSerialNo: string;
  merchantPrivateKey: string;
  apiV3Key: string;
  platformPublicKey: string;
  platformSerialNo: string;
  platformCertificateSerialNo: string;
  platformCertificate: string;
  baseUrl: string;
}

type Json = Record<string, any>;

let sandbox: RunningSandbox;
let creds: Credentials;

function newOutTradeNo(): string {
  return `S${Date.now().toString(36)}${randomBytes(5).toString('hex')}`.toUpperCase();
}

/** A merchant's signed request; `serial` is the Wechatpay-Serial header it sends (none: omitted). */
async function api(method: 'GET' | 'POST', pathAndQuery: string, payload?: unknown, serial?: string) {
  const body = payload === undefined ? '' : JSON.stringify(payload);
  const ts = String(Math.floor(Date.now() / 1000));
  const nonce = randomBytes(16).toString('hex');
  const signature = createSign('RSA-SHA256')
    .update(`${method}\n${pathAndQuery}\n${ts}\n${nonce}\n${body}\n`)
    .sign(creds.merchantPrivateKey, 'base64');
  const headers: Record<string, string> = {
    accept: 'application/json',
    authorization: `WECHATPAY2-SHA256-RSA2048 mchid="${creds.mchid}",nonce_str="${nonce}",timestamp="${ts}",serial_no="${creds.merchantSerialNo}",signature="${signature}"`,
  };
  if (serial !== undefined) headers['wechatpay-serial'] = serial;
  if (method === 'POST') headers['content-type'] = 'application/json';
  const res = await fetch(`${creds.baseUrl}${pathAndQuery}`, { method, headers, ...(method === 'POST' ? { body } : {}) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: text ? (JSON.parse(text) as Json) : null };
}

function signedBy(headers: Headers, body: string, publicKey: string | X509Certificate['publicKey']): boolean {
  const ts = headers.get('wechatpay-timestamp') ?? '';
  const nonce = headers.get('wechatpay-nonce') ?? '';
  const signature = headers.get('wechatpay-signature') ?? '';
  return createVerify('RSA-SHA256').update(`${ts}\n${nonce}\n${body}\n`).verify(publicKey, signature, 'base64');
}

function nativeOrder(outTradeNo: string, notifyUrl = 'http://127.0.0.1:9/unused', total = 1230): Json {
  // No attach: no sandbox test buyer pays at once; the buyer scans the code_url.
  return {
    appid: creds.appid,
    mchid: creds.mchid,
    description: 'PayOnce 订单 <扫码测试>',
    out_trade_no: outTradeNo,
    notify_url: notifyUrl,
    amount: { total, currency: 'CNY' },
  };
}

const createNative = (order: Json) => api('POST', '/v3/pay/transactions/native', order, creds.platformSerialNo);
const queryOrder = (outTradeNo: string) =>
  api('GET', `/v3/pay/transactions/out-trade-no/${outTradeNo}?mchid=${creds.mchid}`, undefined, creds.platformSerialNo);
const closeOrder = (outTradeNo: string) =>
  api('POST', `/v3/pay/transactions/out-trade-no/${outTradeNo}/close`, { mchid: creds.mchid }, creds.platformSerialNo);

/** The scan page, as WeChat's in-app browser opens it after scanning. */
async function openScanPage(codeUrl: string): Promise<{ status: number; html: string }> {
  const res = await fetch(`${sandbox.url}/sandbox/wechatpay/scan?code_url=${encodeURIComponent(codeUrl)}`);
  assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
  return { status: res.status, html: await res.text() };
}

/** What the page's form posts when the buyer presses one of its buttons (a browser's form submission). */
async function pressButton(codeUrl: string, buyer: string): Promise<{ status: number; html: string }> {
  const res = await fetch(`${sandbox.url}/sandbox/wechatpay/scan`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ code_url: codeUrl, buyer }).toString(),
  });
  return { status: res.status, html: await res.text() };
}

/** The form's fields as the page renders them: the hidden code_url and the buttons' values. */
function formOf(html: string): { action: string | undefined; codeUrl: string | undefined; buttons: string[] } {
  const action = /<form method="post" action="([^"]+)"/.exec(html)?.[1];
  const codeUrl = /<input type="hidden" name="code_url" value="([^"]+)">/.exec(html)?.[1]?.replaceAll('&#38;', '&');
  const buttons = [...html.matchAll(/<button type="submit" name="buyer" value="([a-z_]+)">([^<]+)<\/button>/g)].map(
    (m) => `${m[1]}:${m[2]}`,
  );
  return { action, codeUrl, buttons };
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [wechatpayModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { wechatpay: Credentials }).wechatpay;
});

after(async () => {
  await sandbox.close();
});

describe('the buyer scans a Native pay code_url', () => {
  it('hands out a weixin://wxpay/bizpayurl?pr= code_url, a new one for each create with the same parameters, and the order stays NOTPAY', async () => {
    const outTradeNo = newOutTradeNo();
    const first = await createNative(nativeOrder(outTradeNo));
    assert.equal(first.status, 200);
    assert.match(String(first.body?.code_url), /^weixin:\/\/wxpay\/bizpayurl\?pr=[0-9A-Za-z]{7}$/);
    // The same parameters again (before time_expire): a new code_url for the same order.
    const second = await createNative(nativeOrder(outTradeNo));
    assert.equal(second.status, 200);
    assert.notEqual(second.body?.code_url, first.body?.code_url);
    // Both codes show the same order; showing the page changes nothing (no USERPAYING for Native).
    for (const codeUrl of [String(first.body?.code_url), String(second.body?.code_url)]) {
      const page = await openScanPage(codeUrl);
      assert.equal(page.status, 200);
      assert.match(page.html, /<meta name="viewport" content="width=device-width/);
      assert.match(page.html, new RegExp(`PayOnce 沙箱商户 \\(sandbox merchant ${creds.mchid}\\)`));
      assert.match(page.html, /PayOnce 订单 &#60;扫码测试&#62;/, 'the description, escaped');
      assert.match(page.html, /¥12\.30/);
      assert.doesNotMatch(page.html, /<script|<link|https?:\/\/(?!127\.0\.0\.1)/, 'no scripts and no external assets');
      assert.deepEqual(formOf(page.html), {
        action: '/sandbox/wechatpay/scan',
        codeUrl,
        buttons: [
          'ok:确认付款 (pay)',
          'insufficient_funds:余额不足 (insufficient funds)',
          'account_restricted:账户受限 (account restricted)',
        ],
      });
    }
    assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'NOTPAY');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('a decline on the page shows the failure and leaves the order payable (PAYERROR); the ok buyer then pays once, notified as TRANSACTION.SUCCESS', async () => {
    const received: { path: string; body: string }[] = [];
    const receiver = await startServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        received.push({ path: req.url ?? '', body });
        res.writeHead(204).end();
      });
    });
    try {
      const outTradeNo = newOutTradeNo();
      const created = await createNative(nativeOrder(outTradeNo, `${receiver.url}/notify`));
      const codeUrl = String(created.body?.code_url);
      // 1. Two declining buyers: the page says why, offers the buttons again, the order stays payable.
      const poor = await pressButton(codeUrl, 'insufficient_funds');
      assert.equal(poor.status, 402);
      assert.match(poor.html, /<div role="alert"><strong>支付失败 \(payment failed\)<\/strong>：支付失败，用户余额不足/);
      assert.equal(formOf(poor.html).buttons.length, 3);
      assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'PAYERROR');
      const restricted = await pressButton(codeUrl, 'account_restricted');
      assert.equal(restricted.status, 402);
      assert.match(restricted.html, /用户账户异常/);
      // 2. The ok buyer pays.
      const ok = await pressButton(codeUrl, 'ok');
      assert.equal(ok.status, 200);
      assert.match(ok.html, /<div role="status">支付成功 \(payment succeeded\)/);
      const paid = (await queryOrder(outTradeNo)).body ?? {};
      assert.equal(paid.trade_state, 'SUCCESS');
      assert.ok(ok.html.includes(String(paid.transaction_id)));
      // 3. TRANSACTION.SUCCESS, signed with the public key and decrypting to this payment.
      await waitFor('the notification', async () => (received.length > 0 ? true : undefined));
      const envelope = JSON.parse(received[0]?.body ?? '{}') as Json;
      assert.equal(envelope.event_type, 'TRANSACTION.SUCCESS');
      const r = envelope.resource as Json;
      const raw = Buffer.from(String(r.ciphertext), 'base64');
      const decipher = createDecipheriv('aes-256-gcm', Buffer.from(creds.apiV3Key), Buffer.from(String(r.nonce)));
      decipher.setAAD(Buffer.from(String(r.associated_data)));
      decipher.setAuthTag(raw.subarray(raw.length - 16));
      const transaction = JSON.parse(
        Buffer.concat([decipher.update(raw.subarray(0, raw.length - 16)), decipher.final()]).toString(),
      ) as Json;
      assert.equal(transaction.transaction_id, paid.transaction_id);
      assert.equal(transaction.trade_type, 'NATIVE');
      // 4. The code cannot be paid twice: the page and its form both say it is paid (409).
      const again = await openScanPage(codeUrl);
      assert.equal(again.status, 409);
      assert.match(again.html, /订单已支付 \(already paid\)/);
      assert.equal(formOf(again.html).buttons.length, 0);
      assert.equal((await pressButton(codeUrl, 'ok')).status, 409);
      assert.deepEqual(
        (await ledger(outTradeNo)).charges.map((c) => c.status),
        ['declined', 'declined', 'succeeded'],
      );
    } finally {
      await receiver.close();
    }
  });

  it('refuses a closed order’s code (409 订单已关闭), an unknown code and an expired one, charging nothing', async () => {
    const outTradeNo = newOutTradeNo();
    const codeUrl = String((await createNative(nativeOrder(outTradeNo))).body?.code_url);
    assert.equal((await closeOrder(outTradeNo)).status, 204);
    const closed = await openScanPage(codeUrl);
    assert.equal(closed.status, 409);
    assert.match(closed.html, /订单已关闭 \(order closed\)/);
    const pressed = await pressButton(codeUrl, 'ok');
    assert.equal(pressed.status, 409);
    assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'CLOSED');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);

    const unknown = await openScanPage('weixin://wxpay/bizpayurl?pr=Nowhere');
    assert.equal(unknown.status, 409);
    assert.match(unknown.html, /二维码无效 \(unknown code\)/);

    // "code_url有效期为2小时，过期后扫码不能再发起支付": age a fresh code past it.
    const open = newOutTradeNo();
    const stale = String((await createNative(nativeOrder(open))).body?.code_url);
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    try {
      await sql`UPDATE psp_sandbox.wechatpay_code_urls SET expires_at = now() - interval '1 second' WHERE code_url = ${stale}`;
    } finally {
      await sql.end();
    }
    const expired = await openScanPage(stale);
    assert.equal(expired.status, 409);
    assert.match(expired.html, /二维码已过期 \(code expired\)/);
    assert.equal((await pressButton(stale, 'ok')).status, 409);
    // The order itself is still open: a new create hands out a code that works.
    const fresh = String((await createNative(nativeOrder(open))).body?.code_url);
    assert.equal((await pressButton(fresh, 'ok')).status, 200);

    const missing = await fetch(`${sandbox.url}/sandbox/wechatpay/scan`);
    assert.equal(missing.status, 400);
    assert.equal((await pressButton(fresh, 'rich')).status, 400);
  });
});

describe('platform certificates (GET /v3/certificates)', () => {
  it('serves the platform certificate encrypted with the APIv3 key, signed with that certificate’s key', async () => {
    // No Wechatpay-Serial in the request: "不指定则默认平台证书".
    const answer = await api('GET', '/v3/certificates');
    assert.equal(answer.status, 200);
    const items = answer.body?.data as Json[];
    assert.equal(items.length, 1);
    const item = items[0] ?? {};
    assert.match(String(item.serial_no), /^[0-9A-F]{40}$/);
    assert.match(String(item.effective_time), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00$/);
    const enc = item.encrypt_certificate as Json;
    assert.equal(enc.algorithm, 'AEAD_AES_256_GCM');
    assert.equal(enc.associated_data, 'certificate');
    const raw = Buffer.from(String(enc.ciphertext), 'base64');
    const decipher = createDecipheriv('aes-256-gcm', Buffer.from(creds.apiV3Key), Buffer.from(String(enc.nonce)));
    decipher.setAAD(Buffer.from('certificate'));
    decipher.setAuthTag(raw.subarray(raw.length - 16));
    const pem = Buffer.concat([decipher.update(raw.subarray(0, raw.length - 16)), decipher.final()]).toString();
    const certificate = new X509Certificate(pem);
    assert.equal(certificate.serialNumber.toUpperCase(), item.serial_no);
    assert.equal(pem, creds.platformCertificate);
    assert.equal(item.serial_no, creds.platformCertificateSerialNo);
    // Signed by the certificate's key and naming it; the WeChat Pay public key is another key.
    assert.equal(answer.headers.get('wechatpay-serial'), item.serial_no);
    assert.ok(signedBy(answer.headers, answer.text, certificate.publicKey));
    assert.ok(!signedBy(answer.headers, answer.text, creds.platformPublicKey));
  });

  it('signs an answer with the WeChat Pay public key only when the request names it in Wechatpay-Serial', async () => {
    const outTradeNo = newOutTradeNo();
    const byCertificate = await api('POST', '/v3/pay/transactions/native', nativeOrder(outTradeNo));
    assert.equal(byCertificate.headers.get('wechatpay-serial'), creds.platformCertificateSerialNo);
    assert.ok(signedBy(byCertificate.headers, byCertificate.text, new X509Certificate(creds.platformCertificate).publicKey));
    const byPublicKey = await api('POST', '/v3/pay/transactions/native', nativeOrder(outTradeNo), creds.platformSerialNo);
    assert.equal(byPublicKey.headers.get('wechatpay-serial'), creds.platformSerialNo);
    assert.ok(signedBy(byPublicKey.headers, byPublicKey.text, creds.platformPublicKey));
    // GET only, like WeChat.
    const post = await api('POST', '/v3/certificates', {});
    assert.equal(post.status, 400);
  });

  it('keeps the same certificate across a restart', async () => {
    const before = creds.platformCertificateSerialNo;
    await sandbox.close();
    sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [wechatpayModule] });
    creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { wechatpay: Credentials }).wechatpay;
    assert.equal(creds.platformCertificateSerialNo, before);
    const answer = await api('GET', '/v3/certificates');
    assert.equal((answer.body?.data as Json[])[0]?.serial_no, before);
  });
});
