/**
 * The PSP sandbox's WeChat Pay API v3, driven over plain HTTP the way WeChat's documentation
 * describes the protocol (requests signed here with node:crypto, answers and notifications verified
 * and decrypted here too). Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/wechatpay-sandbox.test.ts
 */
import assert from 'node:assert/strict';
import { createDecipheriv, createSign, createVerify, generateKeyPairSync, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { wechatpayModule } from '@/sandbox/wechatpay';
import { waitFor, readLedger } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/wechatpay_dev)');
}
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  mchid: string;
  appid: string;
  merchantSerialNo: string;
  merchantPrivateKey: string;
  apiV3Key: string;
  platformPublicKey: string;
  platformSerialNo: string;
  baseUrl: string;
  testBuyers: { ok: string; insufficient_funds: string; account_restricted: string };
  platformCertificateSerialNo: string;
  platformCertificate: string;
}

type Json = Record<string, any>;

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  body: Json | null;
}

let sandbox: RunningSandbox;
let creds: Credentials;

function newOutTradeNo(): string {
  return `W${Date.now().toString(36)}${randomBytes(5).toString('hex')}`.toUpperCase();
}

function start() {
  return startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [wechatpayModule] });
}

/** Signs like a merchant: "METHOD\nPATH?QUERY\nTS\nNONCE\nBODY\n", SHA256withRSA, base64. */
function authorization(
  method: string,
  pathAndQuery: string,
  body: string,
  options: { privateKey?: string; serialNo?: string; mchid?: string; timestamp?: number } = {},
): string {
  const timestamp = String(options.timestamp ?? Math.floor(Date.now() / 1000));
  const nonce = randomBytes(16).toString('hex');
  const signature = createSign('RSA-SHA256')
    .update(`${method}\n${pathAndQuery}\n${timestamp}\n${nonce}\n${body}\n`)
    .sign(options.privateKey ?? creds.merchantPrivateKey, 'base64');
  return `WECHATPAY2-SHA256-RSA2048 mchid="${options.mchid ?? creds.mchid}",nonce_str="${nonce}",timestamp="${timestamp}",serial_no="${options.serialNo ?? creds.merchantSerialNo}",signature="${signature}"`;
}

async function api(
  method: 'GET' | 'POST',
  pathAndQuery: string,
  payload?: unknown,
  options: Parameters<typeof authorization>[3] & { rawBody?: string; contentType?: string; noAuth?: boolean } = {},
): Promise<Answer> {
  const body = options.rawBody ?? (payload === undefined ? '' : JSON.stringify(payload));
  // Names the public key, so answers are signed with it (without it: the platform certificate).
  const headers: Record<string, string> = { accept: 'application/json', 'wechatpay-serial': creds.platformSerialNo };
  if (!options.noAuth) headers.authorization = authorization(method, pathAndQuery, body, options);
  if (method === 'POST') headers['content-type'] = options.contentType ?? 'application/json';
  const res = await fetch(`${creds.baseUrl}${pathAndQuery}`, { method, headers, ...(method === 'POST' ? { body } : {}) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: text ? (JSON.parse(text) as Json) : null };
}

/** WeChat's answer signature: "TS\nNONCE\nBODY\n" by the platform key. */
function platformSigned(headers: Headers, body: string): boolean {
  const ts = headers.get('wechatpay-timestamp');
  const nonce = headers.get('wechatpay-nonce');
  const signature = headers.get('wechatpay-signature');
  if (!ts || !nonce || !signature || headers.get('wechatpay-serial') !== creds.platformSerialNo) return false;
  return createVerify('RSA-SHA256').update(`${ts}\n${nonce}\n${body}\n`).verify(creds.platformPublicKey, signature, 'base64');
}

function nativeOrder(outTradeNo: string, overrides: Json = {}): Json {
  return {
    appid: creds.appid,
    mchid: creds.mchid,
    description: 'PayOnce 订单',
    out_trade_no: outTradeNo,
    notify_url: 'http://127.0.0.1:9/unused',
    amount: { total: 1230, currency: 'CNY' },
    attach: creds.testBuyers.ok,
    ...overrides,
  };
}

const createNative = (order: Json) => api('POST', '/v3/pay/transactions/native', order);
const queryOrder = (outTradeNo: string, mchid = creds.mchid) =>
  api('GET', `/v3/pay/transactions/out-trade-no/${encodeURIComponent(outTradeNo)}?mchid=${mchid}`);
const closeOrder = (outTradeNo: string) =>
  api('POST', `/v3/pay/transactions/out-trade-no/${encodeURIComponent(outTradeNo)}/close`, { mchid: creds.mchid });
const requestRefund = (refund: Json) => api('POST', '/v3/refund/domestic/refunds', refund);
const queryRefund = (outRefundNo: string) => api('GET', `/v3/refund/domestic/refunds/${encodeURIComponent(outRefundNo)}`);

function newOutRefundNo(): string {
  return `R${randomBytes(12).toString('hex').toUpperCase()}`;
}

/** A paid Native order of `total` fen: its transaction_id. */
async function paidOrder(outTradeNo: string, total = 1230, overrides: Json = {}): Promise<string> {
  const created = await createNative(nativeOrder(outTradeNo, { amount: { total, currency: 'CNY' }, ...overrides }));
  assert.equal(created.status, 200);
  const paid = (await queryOrder(outTradeNo)).body ?? {};
  assert.equal(paid.trade_state, 'SUCCESS');
  return String(paid.transaction_id);
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

function tool(path: 'notify' | 'scan' | 'buyer-pays', body: unknown, contentType = 'application/json') {
  return fetch(`${sandbox.url}/sandbox/wechatpay/${path}`, {
    method: 'POST',
    headers: { 'content-type': contentType },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

before(async () => {
  sandbox = await start();
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { wechatpay: Credentials }).wechatpay;
});

after(async () => {
  await sandbox.close();
});

describe('credentials', () => {
  it('hands out exactly what the adapter needs', () => {
    assert.deepEqual(Object.keys(creds).sort(), [
      'apiV3Key',
      'appid',
      'baseUrl',
      'feeContract',
      'mchid',
      'merchantPrivateKey',
      'merchantSerialNo',
      'platformCertificate',
      'platformCertificateSerialNo',
      'platformPublicKey',
      'platformSerialNo',
      'testBuyers',
    ]);
    assert.match(creds.mchid, /^\d{10}$/);
    assert.match(creds.appid, /^wx[0-9a-f]{16}$/);
    assert.match(creds.merchantSerialNo, /^[0-9A-F]{40}$/);
    assert.match(creds.platformSerialNo, /^PUB_KEY_ID_\d+$/);
    assert.equal(Buffer.byteLength(creds.apiV3Key), 32);
    assert.match(creds.merchantPrivateKey, /^-----BEGIN PRIVATE KEY-----\n[\s\S]+\n-----END PRIVATE KEY-----$/);
    assert.match(creds.platformPublicKey, /^-----BEGIN PUBLIC KEY-----\n[\s\S]+\n-----END PUBLIC KEY-----$/);
    assert.equal(creds.baseUrl, sandbox.url);
    assert.deepEqual(creds.testBuyers, {
      ok: 'sandbox_buyer=ok',
      insufficient_funds: 'sandbox_buyer=insufficient_funds',
      account_restricted: 'sandbox_buyer=account_restricted',
    });
  });
});

describe('request authentication', () => {
  it('refuses a missing, forged, mis-serialled, stale or foreign Authorization with an unsigned 401 SIGN_ERROR', async () => {
    const outTradeNo = newOutTradeNo();
    const order = nativeOrder(outTradeNo);
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const forger = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const attempts = [
      await api('POST', '/v3/pay/transactions/native', order, { noAuth: true }),
      await api('POST', '/v3/pay/transactions/native', order, { privateKey: forger }),
      await api('POST', '/v3/pay/transactions/native', order, { serialNo: '0'.repeat(40) }),
      // A few seconds past the 5-minute window either way: +301 could land inside it once the request
      // crosses into the next second on its way.
      await api('POST', '/v3/pay/transactions/native', order, { timestamp: Math.floor(Date.now() / 1000) - 305 }),
      await api('POST', '/v3/pay/transactions/native', order, { timestamp: Math.floor(Date.now() / 1000) + 305 }),
      await api('POST', '/v3/pay/transactions/native', order, { mchid: '1900000000' }),
    ];
    for (const [i, res] of attempts.entries()) {
      assert.equal(res.status, 401, `attempt ${i}`);
      assert.equal(res.body?.code, 'SIGN_ERROR', `attempt ${i}`);
      assert.equal(typeof res.body?.message, 'string');
      assert.equal(res.headers.get('wechatpay-signature'), null, `attempt ${i} must be unsigned`);
    }
    // The signature covers the body: the same header over another body fails.
    const body = JSON.stringify(order);
    const tampered = await fetch(`${creds.baseUrl}/v3/pay/transactions/native`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: authorization('POST', '/v3/pay/transactions/native', body) },
      body: body.replace('1230', '1'),
    });
    assert.equal(tampered.status, 401);
    // …and the query string.
    const path = `/v3/pay/transactions/out-trade-no/${outTradeNo}?mchid=${creds.mchid}`;
    const moved = await fetch(`${creds.baseUrl}${path}&x=1`, { headers: { authorization: authorization('GET', path, '') } });
    assert.equal(moved.status, 401);
    // A timestamp just inside the 5-minute window is fine.
    const fresh = await api('GET', `/v3/pay/transactions/out-trade-no/${outTradeNo}?mchid=${creds.mchid}`, undefined, {
      timestamp: Math.floor(Date.now() / 1000) - 280,
    });
    assert.equal(fresh.status, 404);
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('answers unknown paths and wrong methods with JSON errors', async () => {
    const unknown = await api('GET', '/v3/pay/nothing-here');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body?.code, 'NOT_FOUND');
    const wrongMethod = await api('GET', '/v3/pay/transactions/native');
    assert.equal(wrongMethod.status, 400);
    assert.equal(wrongMethod.body?.code, 'INVALID_REQUEST');
    const notJson = await api('POST', '/v3/pay/transactions/native', undefined, {
      rawBody: 'a=b',
      contentType: 'application/x-www-form-urlencoded',
    });
    assert.equal(notJson.status, 400);
    assert.equal(notJson.body?.code, 'INVALID_REQUEST');
    assert.ok(platformSigned(notJson.headers, notJson.text)); // authenticated, so signed
  });
});

describe('Native下单 and the test buyers', () => {
  it('charges the ok buyer: signed 200 { code_url }, trade SUCCESS, a succeeded charge in the ledger', async () => {
    const outTradeNo = newOutTradeNo();
    const created = await createNative(nativeOrder(outTradeNo, { amount: { total: 199999, currency: 'CNY' } }));
    assert.equal(created.status, 200);
    assert.deepEqual(Object.keys(created.body ?? {}), ['code_url']);
    assert.match(String(created.body?.code_url), /^weixin:\/\/wxpay\/bizpayurl\?pr=[0-9A-Za-z]{7}$/);
    assert.ok(platformSigned(created.headers, created.text));
    assert.equal(created.headers.get('wechatpay-signature-type'), 'WECHATPAY2-SHA256-RSA2048');

    const found = await queryOrder(outTradeNo);
    assert.equal(found.status, 200);
    assert.ok(platformSigned(found.headers, found.text));
    const t = found.body ?? {};
    assert.equal(t.trade_state, 'SUCCESS');
    assert.equal(t.trade_state_desc, '支付成功');
    assert.equal(t.trade_type, 'NATIVE');
    assert.equal(t.appid, creds.appid);
    assert.equal(t.mchid, creds.mchid);
    assert.equal(t.out_trade_no, outTradeNo);
    assert.equal(t.attach, creds.testBuyers.ok);
    assert.match(String(t.transaction_id), /^\d{28,32}$/);
    assert.match(String(t.success_time), /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+08:00$/);
    assert.match(String(t.payer?.openid), /^o[\w-]{27}$/);
    assert.deepEqual(t.amount, { total: 199999, payer_total: 199999, currency: 'CNY', payer_currency: 'CNY' });

    const byId = await api('GET', `/v3/pay/transactions/id/${t.transaction_id}?mchid=${creds.mchid}`);
    assert.deepEqual(byId.body, t);

    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map(({ createdAt, ...rest }) => (assert.ok(!Number.isNaN(Date.parse(createdAt))), rest)),
      [{ gateway: 'wechatpay', outTradeNo, amountMinor: 199999, currency: 'CNY', status: 'succeeded', gatewayTradeNo: t.transaction_id }],
    );
  });

  it('fails both declining buyers with PAYERROR, keeps the trade payable, then the ok buyer pays it once', async () => {
    const outTradeNo = newOutTradeNo();
    const poor = await createNative(nativeOrder(outTradeNo, { attach: creds.testBuyers.insufficient_funds }));
    assert.equal(poor.status, 200); // create succeeds; the payment fails when the buyer pays
    const afterPoor = (await queryOrder(outTradeNo)).body ?? {};
    assert.equal(afterPoor.trade_state, 'PAYERROR');
    assert.equal(afterPoor.trade_state_desc, '支付失败，用户余额不足');
    assert.equal(afterPoor.transaction_id, undefined);
    assert.equal(afterPoor.amount.payer_total, undefined);
    // Reopened without a buyer: a fresh code_url nobody has scanned yet is NOTPAY again.
    assert.equal((await createNative(nativeOrder(outTradeNo, { attach: undefined }))).status, 200);
    assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'NOTPAY');

    // Another buyer in attach is not a parameter change: the trade reopens.
    const restricted = await createNative(nativeOrder(outTradeNo, { attach: creds.testBuyers.account_restricted }));
    assert.equal(restricted.status, 200);
    assert.notEqual(restricted.body?.code_url, poor.body?.code_url);
    assert.match(String((await queryOrder(outTradeNo)).body?.trade_state_desc), /账户异常/);

    const ok = await createNative(nativeOrder(outTradeNo, { attach: creds.testBuyers.ok }));
    assert.equal(ok.status, 200);
    assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'SUCCESS');

    const again = await createNative(nativeOrder(outTradeNo));
    assert.equal(again.status, 403);
    assert.equal(again.body?.code, 'OUT_TRADE_NO_USED');
    assert.ok(platformSigned(again.headers, again.text));

    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['declined', 'declined', 'succeeded'],
    );
  });

  it('reopens an unpaid trade for identical parameters and refuses changed ones with 403 OUT_TRADE_NO_USED', async () => {
    const outTradeNo = newOutTradeNo();
    // No sandbox_buyer: nobody scans, the trade waits.
    const first = await createNative(nativeOrder(outTradeNo, { attach: undefined }));
    assert.equal(first.status, 200);
    const waiting = (await queryOrder(outTradeNo)).body ?? {};
    assert.equal(waiting.trade_state, 'NOTPAY');
    assert.equal(waiting.payer, undefined);
    const reopened = await createNative(nativeOrder(outTradeNo, { attach: 'merchant-data' }));
    assert.equal(reopened.status, 200);
    assert.equal((await queryOrder(outTradeNo)).body?.attach, 'merchant-data');

    for (const changed of [{ amount: { total: 1231, currency: 'CNY' } }, { description: 'another description' }]) {
      const res = await createNative(nativeOrder(outTradeNo, changed));
      assert.equal(res.status, 403, JSON.stringify(changed));
      assert.equal(res.body?.code, 'OUT_TRADE_NO_USED');
    }
    const asJsapi = await api('POST', '/v3/pay/transactions/jsapi', { ...nativeOrder(outTradeNo), payer: { openid: 'oAbc' } });
    assert.equal(asJsapi.status, 403);
    // Currency omitted means CNY: the same parameters.
    assert.equal((await createNative(nativeOrder(outTradeNo, { amount: { total: 1230 }, attach: undefined }))).status, 200);
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('enforces WeChat’s formats with 400 PARAM_ERROR (and nothing is recorded)', async () => {
    const cases: [string, Json][] = [
      ['five chars', { out_trade_no: 'ABCDE' }],
      ['33 chars', { out_trade_no: 'A'.repeat(33) }],
      ['a dot', { out_trade_no: 'ORDER.123456' }],
      ['a space', { out_trade_no: 'ORDER 123456' }],
      ['zero amount', { amount: { total: 0, currency: 'CNY' } }],
      ['fractional amount', { amount: { total: 12.5, currency: 'CNY' } }],
      ['string amount', { amount: { total: '1230', currency: 'CNY' } }],
      ['above int', { amount: { total: 2_147_483_648, currency: 'CNY' } }],
      ['USD', { amount: { total: 100, currency: 'USD' } }],
      ['no amount', { amount: undefined }],
      ['no description', { description: undefined }],
      ['128-char description', { description: '订'.repeat(128) }],
      ['notify_url with a query', { notify_url: 'http://127.0.0.1:9/n?order=1' }],
      ['relative notify_url', { notify_url: '/notify' }],
      ['129-char attach', { attach: 'x'.repeat(129) }],
      ['unknown test buyer', { attach: 'sandbox_buyer=rich' }],
      ['mchid of another merchant', { mchid: '1900000000' }],
    ];
    const outTradeNos: string[] = [];
    for (const [what, change] of cases) {
      const order = nativeOrder(newOutTradeNo(), change);
      outTradeNos.push(String(order.out_trade_no));
      const res = await createNative(order);
      assert.equal(res.status, 400, what);
      assert.equal(res.body?.code, 'PARAM_ERROR', what);
      assert.ok(platformSigned(res.headers, res.text), what);
    }
    const appid = await createNative(nativeOrder(newOutTradeNo(), { appid: 'wx0000000000000000' }));
    assert.equal(appid.status, 400);
    assert.equal(appid.body?.code, 'APPID_MCHID_NOT_MATCH');
    const badJson = await api('POST', '/v3/pay/transactions/native', undefined, { rawBody: '{"appid":' });
    assert.equal(badJson.body?.code, 'PARAM_ERROR');
    // The detail names the field, as WeChat's does.
    const detail = await createNative(nativeOrder('ABCDE'));
    assert.deepEqual(detail.body?.detail?.field, '/out_trade_no');

    // All of WeChat's allowed characters, at both length limits, and the app's PO + 18 format.
    const hex = (bytes: number) => randomBytes(bytes).toString('hex');
    for (const ok of [`A_-|*${hex(3)}`, hex(3), `${hex(15)}*a`, `PO${hex(9).toUpperCase()}`]) {
      const res = await createNative(nativeOrder(ok));
      assert.equal(res.status, 200, ok);
    }
    for (const outTradeNo of outTradeNos) assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('serializes 50 concurrent creates of one out_trade_no into exactly one charge', async () => {
    const outTradeNo = newOutTradeNo();
    const results = await Promise.all(
      Array.from({ length: 50 }, () => createNative(nativeOrder(outTradeNo, { amount: { total: 8888, currency: 'CNY' } }))),
    );
    assert.equal(results.filter((r) => r.status === 200).length, 1);
    assert.equal(results.filter((r) => r.status === 403 && r.body?.code === 'OUT_TRADE_NO_USED').length, 49);
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.amountMinor]),
      [['succeeded', 8888]],
    );
  });

  it('injects 429 FREQUENCY_LIMITED and 500 SYSTEM_ERROR through attach, before anything happens', async () => {
    const outTradeNo = newOutTradeNo();
    const limited = await createNative(nativeOrder(outTradeNo, { attach: 'sandbox_buyer=ok&sandbox_fault=FREQUENCY_LIMITED' }));
    assert.equal(limited.status, 429);
    assert.equal(limited.body?.code, 'FREQUENCY_LIMITED');
    const failed = await createNative(nativeOrder(outTradeNo, { attach: 'sandbox_fault=SYSTEM_ERROR&sandbox_buyer=ok' }));
    assert.equal(failed.status, 500);
    assert.equal(failed.body?.code, 'SYSTEM_ERROR');
    assert.equal((await queryOrder(outTradeNo)).status, 404);
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });
});

describe('JSAPI下单', () => {
  it('answers a prepay_id, requires payer.openid and pays as that payer', async () => {
    const outTradeNo = newOutTradeNo();
    const missing = await api('POST', '/v3/pay/transactions/jsapi', nativeOrder(outTradeNo));
    assert.equal(missing.status, 400);
    assert.equal(missing.body?.detail?.field, '/payer');
    const openid = 'oUpF8uMuAJO_M2pxb1Q9zNjWeS6o';
    const created = await api('POST', '/v3/pay/transactions/jsapi', { ...nativeOrder(outTradeNo), payer: { openid } });
    assert.equal(created.status, 200);
    assert.match(String(created.body?.prepay_id), /^wx\d{14}[0-9a-f]{20}$/);
    const t = (await queryOrder(outTradeNo)).body ?? {};
    assert.equal(t.trade_type, 'JSAPI');
    assert.equal(t.trade_state, 'SUCCESS');
    assert.deepEqual(t.payer, { openid });
    const otherPayer = await api('POST', '/v3/pay/transactions/jsapi', { ...nativeOrder(newOutTradeNo()), payer: { openid: '' } });
    assert.equal(otherPayer.body?.detail?.field, '/payer/openid');
  });
});

describe('query and close', () => {
  it('answers 404 ORDER_NOT_EXIST (signed) for an unknown order and PARAM_ERROR for a bad query', async () => {
    const unknown = await queryOrder(newOutTradeNo());
    assert.equal(unknown.status, 404);
    assert.deepEqual(unknown.body, { code: 'ORDER_NOT_EXIST', message: '订单不存在' });
    assert.ok(platformSigned(unknown.headers, unknown.text));
    const noMchid = await api('GET', `/v3/pay/transactions/out-trade-no/${newOutTradeNo()}`);
    assert.equal(noMchid.status, 400);
    assert.equal(noMchid.body?.code, 'PARAM_ERROR');
    const otherMchid = await queryOrder(newOutTradeNo(), '1900000000');
    assert.equal(otherMchid.body?.code, 'PARAM_ERROR');
  });

  it('closes an open trade with a signed empty 204; a closed one answers 400 ORDER_CLOSED to close and create alike; refuses a paid or unknown one', async () => {
    const outTradeNo = newOutTradeNo();
    await createNative(nativeOrder(outTradeNo, { attach: creds.testBuyers.insufficient_funds }));
    const closed = await closeOrder(outTradeNo);
    assert.equal(closed.status, 204);
    assert.equal(closed.text, '');
    assert.ok(platformSigned(closed.headers, '')); // "TS\nNONCE\n\n"
    // Closing it again: "400 ORDER_CLOSED 订单已关闭" from 关闭订单's error table, signed like any answer.
    const again = await closeOrder(outTradeNo);
    assert.equal(again.status, 400);
    assert.equal(again.body?.code, 'ORDER_CLOSED');
    assert.ok(platformSigned(again.headers, again.text));
    const t = (await queryOrder(outTradeNo)).body ?? {};
    assert.equal(t.trade_state, 'CLOSED');
    assert.equal(t.trade_state_desc, '订单已关闭');
    // Creating it again: the same code from Native下单's table, never a reopened order.
    const reuse = await createNative(nativeOrder(outTradeNo));
    assert.equal(reuse.status, 400);
    assert.equal(reuse.body?.code, 'ORDER_CLOSED');
    assert.ok(platformSigned(reuse.headers, reuse.text));

    const paid = newOutTradeNo();
    await createNative(nativeOrder(paid));
    const refused = await closeOrder(paid);
    assert.equal(refused.status, 400);
    assert.equal(refused.body?.code, 'ORDERPAID');
    assert.ok(platformSigned(refused.headers, refused.text));
    assert.equal((await queryOrder(paid)).body?.trade_state, 'SUCCESS');
    const unknown = await closeOrder(newOutTradeNo());
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body?.code, 'ORDER_NOT_EXIST');

    const bodyMchid = await api('POST', `/v3/pay/transactions/out-trade-no/${outTradeNo}/close`, { mchid: '1900000000' });
    assert.equal(bodyMchid.body?.code, 'PARAM_ERROR');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Notifications

interface Delivery {
  headers: http.IncomingHttpHeaders;
  body: string;
  envelope: Json;
  transaction: Json;
  signed: boolean;
}

/** Node's incoming headers as a standard Headers, the way a route handler receives them. */
function toHeaders(incoming: http.IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [key, value] of Object.entries(incoming)) {
    if (value !== undefined) headers.set(key, Array.isArray(value) ? value.join(', ') : value);
  }
  return headers;
}

function decrypt(resource: Json): Json {
  const data = Buffer.from(String(resource.ciphertext), 'base64');
  const decipher = createDecipheriv('aes-256-gcm', Buffer.from(creds.apiV3Key), Buffer.from(String(resource.nonce)));
  decipher.setAAD(Buffer.from(String(resource.associated_data)));
  decipher.setAuthTag(data.subarray(-16));
  return JSON.parse(Buffer.concat([decipher.update(data.subarray(0, -16)), decipher.final()]).toString()) as Json;
}

/** A merchant's notify_url: decrypts and records every delivery, answers from a per-path script of statuses. */
async function startReceiver() {
  const received = new Map<string, Delivery[]>();
  const scripts = new Map<string, number[]>();
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const path = req.url ?? '/';
      const envelope = JSON.parse(body) as Json;
      const h = toHeaders(req.headers);
      const delivery: Delivery = { headers: req.headers, body, envelope, transaction: {}, signed: platformSigned(h, body) };
      try {
        delivery.transaction = decrypt(envelope.resource as Json);
      } catch {
        delivery.transaction = { undecryptable: true };
      }
      received.set(path, [...(received.get(path) ?? []), delivery]);
      const script = scripts.get(path) ?? [];
      const status = script.length > 1 ? (script.shift() ?? 204) : (script[0] ?? 204);
      res.writeHead(status, status === 204 ? {} : { 'content-type': 'application/json' });
      res.end(status === 204 ? undefined : status === 200 ? '' : JSON.stringify({ code: 'FAIL', message: 'no' }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    script: (path: string, statuses: number[]) => scripts.set(path, [...statuses]),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('notifications', () => {
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  before(async () => {
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
  });

  it('sends a signed, encrypted TRANSACTION.SUCCESS and retries until a 200/204, with one constant id', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/notify/${outTradeNo}`;
    receiver.script(path, [500, 201, 404, 204]);
    await createNative(nativeOrder(outTradeNo, { notify_url: `${receiver.url}${path}`, amount: { total: 2000, currency: 'CNY' } }));
    const paid = (await queryOrder(outTradeNo)).body ?? {};

    const deliveries = await waitFor('four deliveries', async () => {
      const list = receiver.received.get(path) ?? [];
      return list.length >= 4 ? list : undefined;
    });
    const [first] = deliveries;
    assert.ok(first);
    assert.ok(
      deliveries.every((d) => d.signed),
      'every delivery verifies with the platform key',
    );
    assert.equal(first.headers['wechatpay-serial'], creds.platformSerialNo);
    assert.equal(first.headers['content-type'], 'application/json');
    assert.deepEqual(Object.keys(first.envelope).sort(), ['create_time', 'event_type', 'id', 'resource', 'resource_type', 'summary']);
    assert.equal(first.envelope.event_type, 'TRANSACTION.SUCCESS');
    assert.equal(first.envelope.resource_type, 'encrypt-resource');
    assert.match(String(first.envelope.create_time), /\+08:00$/);
    const resource = first.envelope.resource as Json;
    assert.equal(resource.original_type, 'transaction');
    assert.equal(resource.algorithm, 'AEAD_AES_256_GCM');
    assert.equal(resource.associated_data, 'transaction');
    assert.match(String(resource.nonce), /^[0-9A-Za-z]{12}$/);
    assert.deepEqual(first.transaction, paid); // the decrypted resource is the transaction as queried
    assert.deepEqual(new Set(deliveries.map((d) => d.envelope.id)).size, 1);

    const { notifications } = await waitFor('the ack in the ledger', async () => {
      const l = await ledger(outTradeNo);
      return l.notifications.some((n) => n.acknowledged) ? l : undefined;
    });
    // 500, 201 and 404 are not acknowledgements; 204 is.
    assert.deepEqual(
      notifications.map((n) => [n.attempt, n.acknowledged]),
      [
        [1, false],
        [2, false],
        [3, false],
        [4, true],
      ],
    );
    await new Promise((resolve) => setTimeout(resolve, 300)); // past the next retry (3 min × 0.001): none comes
    assert.equal((receiver.received.get(path) ?? []).length, 4);
  });

  it('the notification tool sends concurrent copies with overrides applied before encrypting and signing', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/notify/${outTradeNo}`;
    receiver.script(path, [200]);
    await createNative(nativeOrder(outTradeNo, { notify_url: `${receiver.url}${path}` }));
    await waitFor('the scheduled delivery', async () => ((receiver.received.get(path) ?? []).length >= 1 ? true : undefined));
    const scheduledId = receiver.received.get(path)?.[0]?.envelope.id;

    const res = await tool('notify', { outTradeNo, copies: 5, overrides: { 'amount.total': '1', out_trade_no: 'PO000000000000000000' } });
    assert.equal(res.status, 200);
    const { deliveries } = (await res.json()) as { deliveries: { status: number; body: string }[] };
    assert.deepEqual(
      deliveries,
      Array.from({ length: 5 }, () => ({ status: 200, body: '' })),
    );
    const copies = (receiver.received.get(path) ?? []).slice(1);
    assert.equal(copies.length, 5);
    for (const copy of copies) {
      assert.ok(copy.signed);
      assert.equal(copy.envelope.id, scheduledId); // the same notification again
      assert.equal(copy.transaction.amount.total, 1);
      assert.equal(copy.transaction.out_trade_no, 'PO000000000000000000');
    }
    const { notifications } = await ledger(outTradeNo);
    assert.deepEqual(
      notifications.map((n) => n.attempt),
      [1, 2, 3, 4, 5, 6],
    );

    // Header overrides: a forged signature, and a stale timestamp that is validly signed.
    await tool('notify', { outTradeNo, overrides: { 'Wechatpay-Signature': 'AAAA' } });
    assert.equal(receiver.received.get(path)?.at(-1)?.signed, false);
    const stale = String(Math.floor(Date.now() / 1000) - 600);
    await tool('notify', { outTradeNo, overrides: { 'Wechatpay-Timestamp': stale } });
    const last = receiver.received.get(path)?.at(-1);
    assert.equal(last?.headers['wechatpay-timestamp'], stale);
    assert.equal(last?.signed, true);
    await tool('notify', { outTradeNo, overrides: { transaction_id: '' } });
    assert.equal(receiver.received.get(path)?.at(-1)?.transaction.transaction_id, undefined);
  });

  it('answers bad tool requests with JSON 4xx', async () => {
    assert.equal((await tool('notify', '{')).status, 400);
    assert.equal((await tool('notify', { outTradeNo: 'X', copies: 101 })).status, 400);
    assert.equal((await tool('notify', 'x', 'text/plain')).status, 415);
    const unknown = await tool('notify', { outTradeNo: newOutTradeNo() });
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { error: { code: string } }).error.code, 'TRADE_NOT_FOUND');
    const unpaid = newOutTradeNo();
    await createNative(nativeOrder(unpaid, { attach: undefined }));
    const notPaid = await tool('notify', { outTradeNo: unpaid });
    assert.equal(notPaid.status, 409);
    assert.equal(((await notPaid.json()) as { error: { code: string } }).error.code, 'TRADE_NOT_PAID');
  });

  it('buyer-pays lets a test buyer pay a waiting order later, which notifies; /scan is the same tool', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/notify/${outTradeNo}`;
    await createNative(nativeOrder(outTradeNo, { attach: undefined, notify_url: `${receiver.url}${path}` }));
    // 1. A declined buyer leaves the order payable.
    const poor = await tool('buyer-pays', { outTradeNo, buyer: 'insufficient_funds' });
    assert.equal(poor.status, 200);
    assert.deepEqual(await poor.json(), { gateway: 'wechatpay', outTradeNo, status: 'declined', gatewayTradeNo: null });
    assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'PAYERROR');
    // 2. The default buyer pays it, through the old name.
    const ok = await tool('scan', { outTradeNo });
    assert.equal(ok.status, 200);
    const paid = (await ok.json()) as Json;
    assert.equal(paid.status, 'succeeded');
    assert.equal(paid.gatewayTradeNo, (await queryOrder(outTradeNo)).body?.transaction_id);
    await waitFor('the notification', async () => ((receiver.received.get(path) ?? []).length >= 1 ? true : undefined));
    assert.equal(receiver.received.get(path)?.[0]?.transaction.transaction_id, paid.gatewayTradeNo);
    // 3. Paid, unknown: not payable (409); bad input: 400.
    for (const [name, body] of [
      ['paid', { outTradeNo, buyer: 'ok' }],
      ['unknown', { outTradeNo: newOutTradeNo() }],
    ] as const) {
      const refused = await tool('buyer-pays', body);
      assert.equal(refused.status, 409, name);
      assert.equal(((await refused.json()) as Json).code, 'TRADE_NOT_PAYABLE', name);
    }
    for (const bad of [
      await tool('buyer-pays', { outTradeNo, buyer: 'rich' }),
      await tool('buyer-pays', '{'),
      await tool('buyer-pays', {}),
      await tool('buyer-pays', 'x', 'text/plain'),
    ]) {
      assert.equal(bad.status, 400);
      assert.equal(((await bad.json()) as Json).code, 'BAD_REQUEST');
    }
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'succeeded'],
    );
  });

  it('buyer-pays cannot pay a trade closed after a decline, nor can a new create reopen it', async () => {
    const outTradeNo = newOutTradeNo();
    await createNative(nativeOrder(outTradeNo, { attach: creds.testBuyers.account_restricted }));
    assert.equal((await closeOrder(outTradeNo)).status, 204);
    const refused = await tool('buyer-pays', { outTradeNo, buyer: 'ok' });
    assert.equal(refused.status, 409);
    assert.equal(((await refused.json()) as Json).code, 'TRADE_NOT_PAYABLE');
    const reopen = await createNative(nativeOrder(outTradeNo));
    assert.equal(reopen.status, 400);
    assert.equal(reopen.body?.code, 'ORDER_CLOSED');
    assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'CLOSED');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('sends REFUND.SUCCESS (signed, resource original_type refund) when the refund lands, the ledger settled first', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/refund-notify/${outTradeNo}`;
    const payPath = `/pay-notify/${outTradeNo}`;
    const transactionId = await paidOrder(outTradeNo, 3000, { notify_url: `${receiver.url}${payPath}` });
    const outRefundNo = newOutRefundNo();
    const created = await requestRefund({
      transaction_id: transactionId,
      out_refund_no: outRefundNo,
      reason: '重复支付',
      notify_url: `${receiver.url}${path}`,
      amount: { refund: 3000, total: 3000, currency: 'CNY' },
    });
    assert.equal(created.status, 200);
    assert.equal(created.body?.status, 'PROCESSING');
    const [delivery] = await waitFor('the refund notification', async () => {
      const list = receiver.received.get(path) ?? [];
      return list.length >= 1 ? list : undefined;
    });
    assert.ok(delivery);
    assert.ok(delivery.signed);
    assert.equal(delivery.envelope.event_type, 'REFUND.SUCCESS');
    assert.equal(delivery.envelope.resource_type, 'encrypt-resource');
    const resource = delivery.envelope.resource as Json;
    assert.equal(resource.original_type, 'refund');
    assert.equal(resource.associated_data, 'refund');
    // Settled by the notification's own schedule, before anyone queried the refund.
    const l = await ledger(outTradeNo);
    assert.deepEqual(
      l.refunds.map((r) => [r.status, r.amountMinor, r.refundId]),
      [['succeeded', 3000, outRefundNo]],
    );
    const landed = (await queryRefund(outRefundNo)).body ?? {};
    assert.deepEqual(delivery.transaction, {
      mchid: creds.mchid,
      out_trade_no: outTradeNo,
      transaction_id: transactionId,
      out_refund_no: outRefundNo,
      refund_id: created.body?.refund_id,
      refund_status: 'SUCCESS',
      success_time: landed.success_time,
      user_received_account: '支付用户零钱',
      amount: { total: 3000, refund: 3000, payer_total: 3000, payer_refund: 3000 },
    });
    // The payment notification tool still finds the payment's own notification, not the refund's.
    const copy = await tool('notify', { outTradeNo });
    assert.equal(copy.status, 200);
    const resent = receiver.received.get(payPath)?.at(-1);
    assert.equal(resent?.envelope.event_type, 'TRANSACTION.SUCCESS');
    assert.equal(resent?.envelope.id, receiver.received.get(payPath)?.[0]?.envelope.id);
    assert.equal(resent?.transaction.trade_state, 'SUCCESS');
  });
});

describe('refunds (申请退款 and 查询单笔退款)', () => {
  it('answers PROCESSING (signed), then SUCCESS; the same out_refund_no is the same refund, never a second', async () => {
    const outTradeNo = newOutTradeNo();
    const transactionId = await paidOrder(outTradeNo);
    const outRefundNo = newOutRefundNo();
    const refund = {
      transaction_id: transactionId,
      out_refund_no: outRefundNo,
      reason: '订单已在别处支付',
      amount: { refund: 1230, total: 1230, currency: 'CNY' },
    };
    // 1. Accepted, not final.
    const first = await requestRefund(refund);
    assert.equal(first.status, 200);
    assert.ok(platformSigned(first.headers, first.text));
    const body = first.body ?? {};
    assert.equal(body.status, 'PROCESSING');
    assert.equal(body.out_refund_no, outRefundNo);
    assert.equal(body.out_trade_no, outTradeNo);
    assert.equal(body.transaction_id, transactionId);
    assert.equal(body.channel, 'ORIGINAL');
    assert.match(String(body.refund_id), /^50\d{27}$/);
    assert.match(String(body.create_time), /\+08:00$/);
    assert.equal(body.success_time, undefined);
    assert.deepEqual([body.amount.total, body.amount.refund, body.amount.payer_refund, body.amount.currency], [1230, 1230, 1230, 'CNY']);
    assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'REFUND');
    // 2. Lands after the (time-scaled) processing delay.
    const landed = await waitFor('SUCCESS', async () => {
      const q = await queryRefund(outRefundNo);
      return q.body?.status === 'SUCCESS' ? q : undefined;
    });
    assert.ok(platformSigned(landed.headers, landed.text));
    assert.equal(landed.body?.refund_id, body.refund_id);
    assert.match(String(landed.body?.success_time), /\+08:00$/);
    // 3. The same out_refund_no again, by out_trade_no this time: the same refund, as it is now.
    const again = await requestRefund({ ...refund, transaction_id: undefined, out_trade_no: outTradeNo });
    assert.equal(again.status, 200);
    assert.equal(again.body?.refund_id, body.refund_id);
    assert.equal(again.body?.status, 'SUCCESS');
    const { refunds } = await ledger(outTradeNo);
    assert.deepEqual(
      refunds.map((r) => [r.gateway, r.status, r.amountMinor, r.currency, r.refundId, r.gatewayRefundId, r.gatewayTradeNo]),
      [['wechatpay', 'succeeded', 1230, 'CNY', outRefundNo, body.refund_id, transactionId]],
    );
  });

  it('refuses more than the order’s refundable amount, a changed repeat and a wrong total with 400 INVALID_REQUEST', async () => {
    const outTradeNo = newOutTradeNo();
    const transactionId = await paidOrder(outTradeNo, 1000);
    const part = newOutRefundNo();
    assert.equal(
      (await requestRefund({ transaction_id: transactionId, out_refund_no: part, amount: { refund: 600, total: 1000, currency: 'CNY' } }))
        .status,
      200,
    );
    const exceeding = await requestRefund({
      transaction_id: transactionId,
      out_refund_no: newOutRefundNo(),
      amount: { refund: 401, total: 1000, currency: 'CNY' },
    });
    assert.equal(exceeding.status, 400);
    assert.deepEqual(exceeding.body, { code: 'INVALID_REQUEST', message: '申请退款金额超过订单可退金额' });
    assert.ok(platformSigned(exceeding.headers, exceeding.text));
    const changed = await requestRefund({
      transaction_id: transactionId,
      out_refund_no: part,
      amount: { refund: 500, total: 1000, currency: 'CNY' },
    });
    assert.equal(changed.status, 400);
    assert.equal(changed.body?.code, 'INVALID_REQUEST');
    const wrongTotal = await requestRefund({
      transaction_id: transactionId,
      out_refund_no: newOutRefundNo(),
      amount: { refund: 100, total: 999, currency: 'CNY' },
    });
    assert.equal(wrongTotal.status, 400);
    assert.equal(wrongTotal.body?.code, 'INVALID_REQUEST');
    // The rest of the order is still refundable.
    assert.equal(
      (
        await requestRefund({
          out_trade_no: outTradeNo,
          out_refund_no: newOutRefundNo(),
          amount: { refund: 400, total: 1000, currency: 'CNY' },
        })
      ).status,
      200,
    );
    assert.deepEqual(
      (await ledger(outTradeNo)).refunds.map((r) => r.amountMinor),
      [600, 400],
    );
  });

  it('lets only as many of 8 concurrent refunds of one order through as the order can cover', async () => {
    const outTradeNo = newOutTradeNo();
    const transactionId = await paidOrder(outTradeNo, 1000);
    const answers = await Promise.all(
      Array.from({ length: 8 }, () =>
        requestRefund({
          transaction_id: transactionId,
          out_refund_no: newOutRefundNo(),
          amount: { refund: 300, total: 1000, currency: 'CNY' },
        }),
      ),
    );
    assert.deepEqual(answers.map((a) => a.status).sort(), [200, 200, 200, 400, 400, 400, 400, 400]);
    assert.equal((await ledger(outTradeNo)).refunds.length, 3);
  });

  it('refuses an unknown or unpaid order with 404 RESOURCE_NOT_EXISTS, and bad input with PARAM_ERROR, recording nothing', async () => {
    const unknown = await requestRefund({
      out_trade_no: newOutTradeNo(),
      out_refund_no: newOutRefundNo(),
      amount: { refund: 1, total: 1, currency: 'CNY' },
    });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body?.code, 'RESOURCE_NOT_EXISTS');
    const unknownId = await requestRefund({
      transaction_id: '4200000000202401010000000000',
      out_refund_no: newOutRefundNo(),
      amount: { refund: 1, total: 1, currency: 'CNY' },
    });
    assert.equal(unknownId.status, 404);
    const unpaid = newOutTradeNo();
    await createNative(nativeOrder(unpaid, { attach: creds.testBuyers.insufficient_funds }));
    const notPaid = await requestRefund({
      out_trade_no: unpaid,
      out_refund_no: newOutRefundNo(),
      amount: { refund: 1230, total: 1230, currency: 'CNY' },
    });
    assert.equal(notPaid.status, 404);
    assert.equal(notPaid.body?.code, 'RESOURCE_NOT_EXISTS');
    const paid = newOutTradeNo();
    await paidOrder(paid);
    for (const bad of [
      { out_refund_no: newOutRefundNo(), amount: { refund: 1, total: 1230, currency: 'CNY' } },
      { out_trade_no: paid, amount: { refund: 1, total: 1230, currency: 'CNY' } },
      { out_trade_no: paid, out_refund_no: 'has space', amount: { refund: 1, total: 1230, currency: 'CNY' } },
      { out_trade_no: paid, out_refund_no: newOutRefundNo(), amount: { refund: 0, total: 1230, currency: 'CNY' } },
      { out_trade_no: paid, out_refund_no: newOutRefundNo(), amount: { refund: 1, total: 1230, currency: 'USD' } },
      {
        out_trade_no: paid,
        out_refund_no: newOutRefundNo(),
        notify_url: 'http://x/?a=1',
        amount: { refund: 1, total: 1230, currency: 'CNY' },
      },
    ]) {
      const answer = await requestRefund(bad);
      assert.equal(answer.status, 400, JSON.stringify(bad));
      assert.equal(answer.body?.code, 'PARAM_ERROR', JSON.stringify(bad));
    }
    const missing = await queryRefund(newOutRefundNo());
    assert.equal(missing.status, 404);
    assert.equal(missing.body?.code, 'RESOURCE_NOT_EXISTS');
    assert.ok(platformSigned(missing.headers, missing.text));
    assert.deepEqual((await ledger(unpaid)).refunds, []);
    assert.deepEqual((await ledger(paid)).refunds, []);
  });

  it('processes a refund whose answer is dropped (drop_after_charge) exactly once: the query and a repeat find it', async () => {
    const outTradeNo = newOutTradeNo();
    const transactionId = await paidOrder(outTradeNo);
    const armed = await fetch(`${sandbox.url}/sandbox/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ gateway: 'wechatpay', operation: 'refund', action: 'drop_after_charge' }),
    });
    assert.equal(armed.status, 201);
    const outRefundNo = newOutRefundNo();
    const refund = { transaction_id: transactionId, out_refund_no: outRefundNo, amount: { refund: 1230, total: 1230, currency: 'CNY' } };
    await assert.rejects(requestRefund(refund));
    assert.equal((await queryRefund(outRefundNo)).status, 200);
    assert.equal((await requestRefund(refund)).status, 200);
    assert.equal((await ledger(outTradeNo)).refunds.length, 1);
  });
});

describe('faults and restarts', () => {
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  before(async () => {
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
  });

  it('closes nothing when the close fails before processing (fail_before_charge), and the order stays payable', async () => {
    const outTradeNo = newOutTradeNo();
    await createNative(nativeOrder(outTradeNo, { attach: undefined }));
    await fetch(`${sandbox.url}/sandbox/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ gateway: 'wechatpay', operation: 'close', action: 'fail_before_charge' }),
    });
    const failed = await closeOrder(outTradeNo);
    // v3's own failure: 500 SYSTEM_ERROR, signed like every answer.
    assert.equal(failed.status, 500);
    assert.equal((failed.body as { code?: string }).code, 'SYSTEM_ERROR');
    assert.ok(platformSigned(failed.headers, failed.text), 'the system error is signed');
    assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'NOTPAY');
    assert.equal((await closeOrder(outTradeNo)).status, 204);
  });

  it('keeps the merchant, the trades and the schedule across a restart', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/notify/${outTradeNo}`;
    // Deliveries at 0, 15, 30 and 60 ms (15 s, 15 s, 30 s × 0.001) fail; the fifth is due 180 ms
    // (3 min × 0.001) after the fourth, while no sandbox runs.
    receiver.script(path, [500, 500, 500, 500, 204]);
    await createNative(nativeOrder(outTradeNo, { notify_url: `${receiver.url}${path}` }));
    await waitFor('four deliveries', async () => ((await ledger(outTradeNo)).notifications.length >= 4 ? true : undefined));
    const mchid = creds.mchid;
    await sandbox.close();
    await new Promise((resolve) => setTimeout(resolve, 250));
    assert.equal((receiver.received.get(path) ?? []).length, 4);
    sandbox = await start();
    creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { wechatpay: Credentials }).wechatpay;
    assert.equal(creds.mchid, mchid);
    const { notifications } = await waitFor('the acknowledgement after the restart', async () => {
      const l = await ledger(outTradeNo);
      return l.notifications.some((n) => n.acknowledged) ? l : undefined;
    });
    assert.deepEqual(
      notifications.map((n) => n.acknowledged),
      [false, false, false, false, true],
    );
    assert.equal((await queryOrder(outTradeNo)).body?.trade_state, 'SUCCESS');
  });
});
