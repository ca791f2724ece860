/**
 * The PSP sandbox's Alipay gateway, driven the way a merchant would drive the real one: with the
 * official alipay-sdk (only `gateway` pointed at the sandbox) and plain HTTP. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/alipay-sandbox.test.ts
 */
import assert from 'node:assert/strict';
import { createVerify, generateKeyPairSync, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { AlipaySdk } from 'alipay-sdk';
import { ALIPAY_TEST_BUYERS } from '@/sandbox/alipay';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { waitFor, readLedger } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  appId: string;
  appPrivateKey: string;
  alipayPublicKey: string;
  gateway: string;
  testBuyers: { ok: string; insufficient_funds: string; account_restricted: string };
}

type Response = Record<string, unknown>;

let sandbox: RunningSandbox;
let creds: Credentials;
let sdk: AlipaySdk;

function newOutTradeNo(): string {
  return `T${Date.now().toString(36)}${randomBytes(6).toString('hex')}`;
}

function makeSdk(overrides: Partial<{ appId: string; privateKey: string; alipayPublicKey: string }> = {}): AlipaySdk {
  return new AlipaySdk({
    appId: overrides.appId ?? creds.appId,
    privateKey: overrides.privateKey ?? creds.appPrivateKey,
    alipayPublicKey: overrides.alipayPublicKey ?? creds.alipayPublicKey,
    gateway: creds.gateway,
    camelcase: false,
  });
}

async function exec(
  method: string,
  bizContent: Record<string, unknown>,
  extra: Record<string, string> = {},
  client = sdk,
): Promise<Response> {
  // validateSign: every answer, errors included, must carry a platform signature the SDK accepts.
  return (await client.exec(method, { ...extra, bizContent }, { validateSign: true })) as unknown as Response;
}

function pay(outTradeNo: string, authCode: string, totalAmount = '12.30', extra: Record<string, string> = {}, subject = 'PayOnce 订单') {
  return exec(
    'alipay.trade.pay',
    { out_trade_no: outTradeNo, scene: 'bar_code', auth_code: authCode, total_amount: totalAmount, subject },
    extra,
  );
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

/** A merchant's notify_url: records every delivery, answers from a per-path script. */
interface Receiver {
  url: string;
  received: Map<string, Record<string, string>[]>;
  script(path: string, replies: string[]): void;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const received = new Map<string, Record<string, string>[]>();
  const scripts = new Map<string, string[]>();
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const path = req.url ?? '/';
      const list = received.get(path) ?? [];
      list.push(Object.fromEntries(new URLSearchParams(body)));
      received.set(path, list);
      const script = scripts.get(path) ?? [];
      const reply = script.length > 1 ? (script.shift() ?? 'success') : (script[0] ?? 'success');
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(reply);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    script: (path, replies) => scripts.set(path, [...replies]),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001 });
  const res = await fetch(`${sandbox.url}/sandbox/credentials`);
  creds = ((await res.json()) as { alipay: Credentials }).alipay;
  sdk = makeSdk();
});

after(async () => {
  await sandbox.close();
});

describe('developer console endpoints', () => {
  it('serves health and credentials', async () => {
    const health = await fetch(`${sandbox.url}/health`);
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { ok: true });
    assert.match(creds.appId, /^\d{16}$/);
    assert.equal(creds.gateway, `${sandbox.url}/gateway.do`);
    assert.match(creds.appPrivateKey, /^-----BEGIN RSA PRIVATE KEY-----\n[\s\S]+\n-----END RSA PRIVATE KEY-----$/);
    assert.match(creds.alipayPublicKey, /^-----BEGIN PUBLIC KEY-----\n[\s\S]+\n-----END PUBLIC KEY-----$/);
    assert.deepEqual(creds.testBuyers, {
      ok: '280000000000000001',
      insufficient_funds: '280000000000000002',
      account_restricted: '280000000000000003',
    });
  });

  it('answers unknown routes and bad tool requests with JSON 4xx', async () => {
    const notFound = await fetch(`${sandbox.url}/nope`);
    assert.equal(notFound.status, 404);
    assert.equal(((await notFound.json()) as { error: { code: string } }).error.code, 'NOT_FOUND');

    const post = (body: string, type = 'application/json') =>
      fetch(`${sandbox.url}/sandbox/alipay/notify`, { method: 'POST', headers: { 'content-type': type }, body });
    const badJson = await post('{');
    assert.equal(badJson.status, 400);
    assert.equal(((await badJson.json()) as { error: { code: string } }).error.code, 'INVALID_JSON');
    const badCopies = await post(JSON.stringify({ outTradeNo: 'X1', copies: 0 }));
    assert.equal(badCopies.status, 400);
    assert.equal(((await badCopies.json()) as { error: { code: string } }).error.code, 'INVALID_REQUEST');
    const unknownTrade = await post(JSON.stringify({ outTradeNo: newOutTradeNo() }));
    assert.equal(unknownTrade.status, 404);
    assert.equal(((await unknownTrade.json()) as { error: { code: string } }).error.code, 'TRADE_NOT_FOUND');
    assert.equal((await post('x', 'text/plain')).status, 415);
    assert.equal((await fetch(`${sandbox.url}/ledger?outTradeNo=`)).status, 400);
  });
});

describe('alipay.trade.pay', () => {
  it('charges the ok buyer and records it in the ledger in fen', async () => {
    const outTradeNo = newOutTradeNo();
    const res = await pay(outTradeNo, creds.testBuyers.ok, '1999.99');
    assert.equal(res.code, '10000');
    assert.equal(res.msg, 'Success');
    assert.equal(res.out_trade_no, outTradeNo);
    assert.equal(res.total_amount, '1999.99');
    assert.equal(res.receipt_amount, '1999.99');
    assert.match(String(res.trade_no), /^\d{28}$/);
    assert.match(String(res.gmt_payment), /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);
    assert.equal(typeof res.buyer_logon_id, 'string');

    const { charges, notifications } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map(({ createdAt, ...rest }) => (assert.ok(!Number.isNaN(Date.parse(createdAt))), rest)),
      [{ gateway: 'alipay', outTradeNo, amountMinor: 199999, currency: 'CNY', status: 'succeeded', gatewayTradeNo: res.trade_no }],
    );
    assert.deepEqual(notifications, []); // no notify_url, no notification
  });

  it('declines both test buyers, keeps the trade open, then charges the ok buyer once', async () => {
    const outTradeNo = newOutTradeNo();
    const poor = await pay(outTradeNo, creds.testBuyers.insufficient_funds);
    assert.equal(poor.code, '40004');
    assert.equal(poor.sub_code, 'ACQ.BUYER_BALANCE_NOT_ENOUGH');
    const restricted = await pay(outTradeNo, creds.testBuyers.account_restricted);
    assert.equal(restricted.sub_code, 'ACQ.BUYER_ENABLE_STATUS_FORBID');
    const unknown = await pay(outTradeNo, '289999999999999999');
    assert.equal(unknown.sub_code, 'ACQ.PAYMENT_AUTH_CODE_INVALID');

    const open = await exec('alipay.trade.query', { out_trade_no: outTradeNo });
    assert.equal(open.trade_status, 'WAIT_BUYER_PAY');

    const ok = await pay(outTradeNo, creds.testBuyers.ok);
    assert.equal(ok.code, '10000');
    assert.equal(ok.trade_no, open.trade_no); // the same trade, reopened
    const again = await pay(outTradeNo, creds.testBuyers.ok);
    assert.equal(again.sub_code, 'ACQ.TRADE_HAS_SUCCESS');

    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['declined', 'declined', 'declined', 'succeeded'],
    );
  });

  it('refuses a changed amount or subject for the same out_trade_no', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await pay(outTradeNo, creds.testBuyers.insufficient_funds, '10.00')).sub_code, 'ACQ.BUYER_BALANCE_NOT_ENOUGH');
    assert.equal((await pay(outTradeNo, creds.testBuyers.ok, '10.01')).sub_code, 'ACQ.CONTEXT_INCONSISTENT');
    assert.equal((await pay(outTradeNo, creds.testBuyers.ok, '10.00', {}, 'another subject')).sub_code, 'ACQ.CONTEXT_INCONSISTENT');
    // "10" is the same amount as "10.00": amounts are compared in fen, not as text.
    assert.equal((await pay(outTradeNo, creds.testBuyers.ok, '10')).code, '10000');
  });

  it('enforces the out_trade_no and amount formats with the gateway parameter error', async () => {
    const hyphenated = `ORDER-${newOutTradeNo()}`; // the seed's format
    for (const [outTradeNo, amount] of [
      [hyphenated, '1.00'],
      ['A'.repeat(65), '1.00'],
      [newOutTradeNo(), '1.001'],
      [newOutTradeNo(), '0.00'],
      [newOutTradeNo(), '100000000.01'],
      [newOutTradeNo(), '-1'],
    ] as const) {
      const res = await pay(outTradeNo, creds.testBuyers.ok, amount);
      assert.equal(res.code, '40004', `${outTradeNo} ${amount}`);
      assert.equal(res.sub_code, 'ACQ.INVALID_PARAMETER', `${outTradeNo} ${amount}`);
    }
    const max = await pay(newOutTradeNo(), creds.testBuyers.ok, '100000000');
    assert.equal(max.code, '10000');
    assert.deepEqual((await ledger(hyphenated)).charges, []);
  });

  it('serializes 50 concurrent payments of one out_trade_no into exactly one charge', async () => {
    const outTradeNo = newOutTradeNo();
    const results = await Promise.all(Array.from({ length: 50 }, () => pay(outTradeNo, creds.testBuyers.ok, '88.88')));
    assert.equal(results.filter((r) => r.code === '10000').length, 1);
    assert.equal(results.filter((r) => r.sub_code === 'ACQ.TRADE_HAS_SUCCESS').length, 49);
    const { charges } = await ledger(outTradeNo);
    assert.equal(charges.length, 1);
    assert.equal(charges[0]?.status, 'succeeded');
  });
});

describe('gateway public checks', () => {
  it('refuses a request signed with the wrong key (and signs the refusal)', async () => {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const forger = makeSdk({ privateKey: privateKey.export({ type: 'pkcs1', format: 'pem' }).toString().trim() });
    const outTradeNo = newOutTradeNo();
    const res = await exec(
      'alipay.trade.pay',
      { out_trade_no: outTradeNo, scene: 'bar_code', auth_code: creds.testBuyers.ok, total_amount: '1.00', subject: 's' },
      {},
      forger,
    );
    assert.equal(res.code, '40002');
    assert.equal(res.sub_code, 'isv.invalid-signature');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('refuses an unknown app_id', async () => {
    const res = await exec('alipay.trade.query', { out_trade_no: 'X1' }, {}, makeSdk({ appId: '2021000000000000' }));
    assert.equal(res.code, '40002');
    assert.equal(res.sub_code, 'isv.invalid-app-id');
  });

  it('refuses missing public parameters and unknown methods', async () => {
    const raw = await fetch(
      `${creds.gateway}?method=alipay.trade.query&app_id=${creds.appId}&charset=utf-8&version=1.0&sign_type=RSA2&timestamp=2024-01-01%2000:00:00`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'biz_content=%7B%7D',
      },
    );
    const text = await raw.text();
    const body = JSON.parse(text) as { alipay_trade_query_response: Response; sign: string };
    assert.equal(body.alipay_trade_query_response.code, '40001');
    assert.equal(body.alipay_trade_query_response.sub_code, 'isv.missing-signature');
    // The signature covers the exact inner JSON text of the body.
    const inner = text.slice(text.indexOf(':') + 1, text.lastIndexOf(',"sign"'));
    assert.ok(
      createVerify('RSA-SHA256').update(inner).verify(creds.alipayPublicKey, body.sign, 'base64'),
      "createVerify('RSA-SHA256').update(inner).verify(creds.alipayPublicKey, body.sign, 'base64')",
    );

    const unknown = await exec('alipay.trade.nonexistent', {});
    assert.equal(unknown.code, '40002');
    assert.equal(unknown.sub_code, 'isv.invalid-method');
  });
});

describe('trade.create, trade.query, trade.close', () => {
  it('creates, reopens, closes, and refuses a closed or unknown trade', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).sub_code, 'ACQ.TRADE_NOT_EXIST');

    const created = await exec('alipay.trade.create', { out_trade_no: outTradeNo, total_amount: '5.00', subject: 's' });
    assert.equal(created.code, '10000');
    const reopened = await exec('alipay.trade.create', { out_trade_no: outTradeNo, total_amount: '5.00', subject: 's' });
    assert.equal(reopened.trade_no, created.trade_no);
    const changed = await exec('alipay.trade.create', { out_trade_no: outTradeNo, total_amount: '5.01', subject: 's' });
    assert.equal(changed.sub_code, 'ACQ.CONTEXT_INCONSISTENT');

    const byTradeNo = await exec('alipay.trade.query', { trade_no: created.trade_no });
    assert.equal(byTradeNo.out_trade_no, outTradeNo);
    assert.equal(byTradeNo.trade_status, 'WAIT_BUYER_PAY');
    assert.equal(byTradeNo.total_amount, '5.00');

    assert.equal((await exec('alipay.trade.close', { out_trade_no: outTradeNo })).code, '10000');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).trade_status, 'TRADE_CLOSED');
    assert.equal((await pay(outTradeNo, creds.testBuyers.ok, '5.00', {}, 's')).sub_code, 'ACQ.TRADE_HAS_CLOSE');
    assert.equal(
      (await exec('alipay.trade.create', { out_trade_no: outTradeNo, total_amount: '5.00', subject: 's' })).sub_code,
      'ACQ.TRADE_HAS_CLOSE',
    );
  });

  it('binds a trade to the buyer it was created for', async () => {
    const outTradeNo = newOutTradeNo();
    const poorBuyerId = ALIPAY_TEST_BUYERS[creds.testBuyers.insufficient_funds]?.buyerId;
    assert.ok(poorBuyerId, 'poorBuyerId');
    await exec('alipay.trade.create', { out_trade_no: outTradeNo, total_amount: '3.00', subject: 's', buyer_id: poorBuyerId });
    const other = await pay(outTradeNo, creds.testBuyers.ok, '3.00', {}, 's');
    assert.equal(other.sub_code, 'ACQ.TRADE_BUYER_NOT_MATCH');
    const rebind = await exec('alipay.trade.create', {
      out_trade_no: outTradeNo,
      total_amount: '3.00',
      subject: 's',
      buyer_id: '2088102000000001',
    });
    assert.equal(rebind.sub_code, 'ACQ.TRADE_BUYER_NOT_MATCH');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).trade_status, 'WAIT_BUYER_PAY');
  });

  it('refuses to close a paid trade', async () => {
    const outTradeNo = newOutTradeNo();
    await pay(outTradeNo, creds.testBuyers.ok);
    assert.equal((await exec('alipay.trade.close', { out_trade_no: outTradeNo })).sub_code, 'ACQ.TRADE_STATUS_ERROR');
  });
});

describe('asynchronous notifications', () => {
  let receiver: Receiver;
  before(async () => {
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
  });

  it('sends Alipay fields, signed so that checkNotifySignV2 (and V1) verify, and retries until `success`', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/notify/${outTradeNo}`;
    receiver.script(path, ['fail', 'success']);
    const res = await pay(outTradeNo, creds.testBuyers.ok, '20.00', { notify_url: `${receiver.url}${path}` });
    assert.equal(res.code, '10000');

    const deliveries = await waitFor('two deliveries', async () => {
      const list = receiver.received.get(path) ?? [];
      return list.length >= 2 ? list : undefined;
    });
    const [first, second] = deliveries;
    assert.ok(first && second, 'first && second');
    assert.deepEqual(Object.keys(first).sort(), [
      'app_id',
      'auth_app_id',
      'buyer_id',
      'buyer_pay_amount',
      'charset',
      'fund_bill_list',
      'gmt_create',
      'gmt_payment',
      'invoice_amount',
      'notify_id',
      'notify_time',
      'notify_type',
      'out_trade_no',
      'point_amount',
      'receipt_amount',
      'seller_id',
      'sign',
      'sign_type',
      'subject',
      'total_amount',
      'trade_no',
      'trade_status',
      'version',
    ]);
    for (const [key, value] of Object.entries(first)) assert.notEqual(value, '', `${key} is empty`);
    assert.equal(first.notify_type, 'trade_status_sync');
    assert.equal(first.trade_status, 'TRADE_SUCCESS');
    assert.equal(first.total_amount, '20.00');
    assert.equal(first.app_id, creds.appId);
    assert.equal(first.trade_no, res.trade_no);
    assert.equal(first.subject, 'PayOnce 订单');
    // Like Alipay's own: the authorised app, the amounts the buyer's funds made up, and the funds.
    assert.equal(first.auth_app_id, creds.appId);
    assert.equal(first.invoice_amount, '20.00');
    assert.equal(first.point_amount, '0.00');
    assert.deepEqual(JSON.parse(first.fund_bill_list ?? ''), [{ amount: '20.00', fundChannel: 'ALIPAYACCOUNT' }]);
    assert.equal(second.notify_id, first.notify_id); // one notification, retried
    assert.ok(sdk.checkNotifySignV2(first), 'sdk.checkNotifySignV2(first)');
    assert.ok(sdk.checkNotifySign(first), 'sdk.checkNotifySign(first)');

    const { notifications } = await waitFor('the ack in the ledger', async () => {
      const l = await ledger(outTradeNo);
      return l.notifications.some((n) => n.acknowledged) ? l : undefined;
    });
    assert.deepEqual(
      notifications.map((n) => [n.attempt, n.acknowledged]),
      [
        [1, false],
        [2, true],
      ],
    );
    await new Promise((resolve) => setTimeout(resolve, 400)); // past the next retry: none comes
    assert.equal((receiver.received.get(path) ?? []).length, 2);
  });

  it('only checkNotifySignV2 survives a `%` in a field (V1 URI-decodes the values)', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/notify/${outTradeNo}`;
    await pay(outTradeNo, creds.testBuyers.ok, '1.00', { notify_url: `${receiver.url}${path}` });
    const tool = await fetch(`${sandbox.url}/sandbox/alipay/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo, overrides: { subject: '满100减5% 优惠' } }),
    });
    assert.equal(tool.status, 200);
    const fields = await waitFor('the tool delivery', async () =>
      (receiver.received.get(path) ?? []).find((f) => f.subject === '满100减5% 优惠'),
    );
    assert.ok(sdk.checkNotifySignV2(fields), 'sdk.checkNotifySignV2(fields)');
    assert.throws(() => sdk.checkNotifySign(fields), URIError);
  });

  it('keeps the schedule across a restart of the sandbox', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/notify/${outTradeNo}`;
    receiver.script(path, ['fail', 'fail', 'success']);
    await pay(outTradeNo, creds.testBuyers.ok, '7.00', { notify_url: `${receiver.url}${path}` });
    await waitFor('the first delivery', async () => ((await ledger(outTradeNo)).notifications.length >= 1 ? true : undefined));

    const appId = creds.appId;
    await sandbox.close();
    await assert.rejects(fetch(`${sandbox.url}/health`));
    // Longer than the next retry interval (4 min × 0.001): the retry is due while no sandbox runs here.
    await new Promise((resolve) => setTimeout(resolve, 300));
    sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001 });

    const restartedCreds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { alipay: Credentials }).alipay;
    assert.equal(restartedCreds.appId, appId); // keys survive the restart too
    const { notifications } = await waitFor('the acknowledgement after the restart', async () => {
      const l = await ledger(outTradeNo);
      return l.notifications.some((n) => n.acknowledged) ? l : undefined;
    });
    assert.deepEqual(
      notifications.map((n) => [n.attempt, n.acknowledged]),
      [
        [1, false],
        [2, false],
        [3, true],
      ],
    );
    // The trade survived as well.
    creds = restartedCreds;
    sdk = makeSdk();
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).trade_status, 'TRADE_SUCCESS');
  });
});

// ---------------------------------------------------------------------------------------------
// Closing, cancelling, refunding and the buyer tool

function refund(outTradeNo: string, amount: string, outRequestNo?: string, extra: Record<string, unknown> = {}) {
  return exec('alipay.trade.refund', {
    out_trade_no: outTradeNo,
    refund_amount: amount,
    ...(outRequestNo ? { out_request_no: outRequestNo } : {}),
    refund_reason: '订单已在别处支付',
    ...extra,
  });
}

function refundQuery(outTradeNo: string, outRequestNo: string) {
  return exec('alipay.trade.fastpay.refund.query', { out_trade_no: outTradeNo, out_request_no: outRequestNo });
}

function newRefundId(): string {
  return `R${randomBytes(8).toString('hex')}`;
}

async function buyerPays(body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${sandbox.url}/sandbox/alipay/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function armFault(spec: Record<string, unknown>): Promise<void> {
  const res = await fetch(`${sandbox.url}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ gateway: 'alipay', ...spec }),
  });
  assert.equal(res.status, 201);
}

describe('alipay.trade.close', () => {
  it('closes an open trade after a decline; closing it again is ACQ.TRADE_STATUS_ERROR; the closed trade takes no payment', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await pay(outTradeNo, creds.testBuyers.insufficient_funds)).sub_code, 'ACQ.BUYER_BALANCE_NOT_ENOUGH');
    // 1. Close: success, TRADE_CLOSED. 2. Close again: ACQ.TRADE_STATUS_ERROR, as Alipay's trade.close
    // error table answers for a trade that is not WAIT_BUYER_PAY (closed or paid alike).
    const first = await exec('alipay.trade.close', { out_trade_no: outTradeNo });
    assert.equal(first.code, '10000');
    assert.equal(first.out_trade_no, outTradeNo);
    const again = await exec('alipay.trade.close', { out_trade_no: outTradeNo });
    assert.equal(again.code, '40004');
    assert.equal(again.sub_code, 'ACQ.TRADE_STATUS_ERROR');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).trade_status, 'TRADE_CLOSED');
    // 3. Neither the buyer nor the merchant can pay it any more.
    const late = await buyerPays({ outTradeNo, buyer: 'ok' });
    assert.equal(late.status, 409);
    assert.equal(late.body.code, 'TRADE_NOT_PAYABLE');
    assert.equal((await pay(outTradeNo, creds.testBuyers.ok)).sub_code, 'ACQ.TRADE_HAS_CLOSE');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('refuses a paid trade with ACQ.TRADE_STATUS_ERROR and an unknown one with ACQ.TRADE_NOT_EXIST', async () => {
    const outTradeNo = newOutTradeNo();
    await pay(outTradeNo, creds.testBuyers.ok);
    const paid = await exec('alipay.trade.close', { out_trade_no: outTradeNo });
    assert.equal(paid.code, '40004');
    assert.equal(paid.sub_code, 'ACQ.TRADE_STATUS_ERROR');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).trade_status, 'TRADE_SUCCESS');
    assert.equal((await exec('alipay.trade.close', { out_trade_no: newOutTradeNo() })).sub_code, 'ACQ.TRADE_NOT_EXIST');
  });

  it('answers a signed 20000 Service Currently Unavailable (HTTP 200) and closes nothing under fail_before_charge', async () => {
    const outTradeNo = newOutTradeNo();
    await pay(outTradeNo, creds.testBuyers.insufficient_funds);
    await armFault({ operation: 'close', action: 'fail_before_charge' });
    const failed = await exec('alipay.trade.close', { out_trade_no: outTradeNo });
    assert.equal(failed.code, '20000');
    assert.equal(failed.subCode ?? failed.sub_code, 'isp.unknow-error');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).trade_status, 'WAIT_BUYER_PAY');
  });
});

describe('alipay.trade.cancel', () => {
  it('blocks an out_trade_no that has no trade yet, so a late trade.pay cannot create or charge it', async () => {
    const outTradeNo = newOutTradeNo();
    const cancelled = await exec('alipay.trade.cancel', { out_trade_no: outTradeNo });
    assert.equal(cancelled.code, '10000');
    assert.equal(cancelled.action, 'close');
    assert.equal(cancelled.retry_flag, 'N');
    assert.equal((await exec('alipay.trade.cancel', { out_trade_no: outTradeNo })).action, 'close'); // idempotent
    assert.equal((await pay(outTradeNo, creds.testBuyers.ok)).sub_code, 'ACQ.TRADE_HAS_CLOSE');
    assert.equal(
      (await exec('alipay.trade.create', { out_trade_no: outTradeNo, total_amount: '12.30', subject: 's' })).sub_code,
      'ACQ.TRADE_HAS_CLOSE',
    );
    assert.equal((await buyerPays({ outTradeNo })).status, 409);
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('closes an unpaid trade (action close) and refunds a paid one in full (action refund)', async () => {
    const open = newOutTradeNo();
    await pay(open, creds.testBuyers.account_restricted);
    const closed = await exec('alipay.trade.cancel', { out_trade_no: open });
    assert.equal(closed.action, 'close');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: open })).trade_status, 'TRADE_CLOSED');

    const paid = newOutTradeNo();
    const charge = await pay(paid, creds.testBuyers.ok, '8.00');
    const refunded = await exec('alipay.trade.cancel', { out_trade_no: paid });
    assert.equal(refunded.code, '10000');
    assert.equal(refunded.action, 'refund');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: paid })).trade_status, 'TRADE_CLOSED');
    assert.equal((await exec('alipay.trade.cancel', { out_trade_no: paid })).action, 'refund'); // answered again, no second refund
    const { refunds } = await ledger(paid);
    assert.deepEqual(
      refunds.map((r) => [r.amountMinor, r.status, r.refundId, r.gatewayTradeNo]),
      [[800, 'succeeded', paid, charge.trade_no]],
    );
  });
});

describe('alipay.trade.refund', () => {
  it('refunds in parts, answers a repeated out_request_no with fund_change N, and closes the trade when all is back', async () => {
    const outTradeNo = newOutTradeNo();
    const charge = await pay(outTradeNo, creds.testBuyers.ok, '10.00');
    const r1 = newRefundId();
    // 1. A first partial refund moves money.
    const first = await refund(outTradeNo, '3.00', r1);
    assert.equal(first.code, '10000');
    assert.equal(first.fund_change, 'Y');
    assert.equal(first.refund_fee, '3.00');
    assert.equal(first.trade_no, charge.trade_no);
    // 2. The same out_request_no again: the same refund, no money moves.
    const again = await refund(outTradeNo, '3.00', r1);
    assert.equal(again.code, '10000');
    assert.equal(again.fund_change, 'N');
    assert.equal(again.refund_fee, '3.00');
    // 3. The same id with another amount is a discordant repeat.
    assert.equal((await refund(outTradeNo, '4.00', r1)).sub_code, 'ACQ.DISCORDANT_REPEAT_REQUEST');
    // 4. More than what is left is refused, nothing recorded.
    const tooMuch = await refund(outTradeNo, '7.01', newRefundId());
    assert.equal(tooMuch.code, '40004');
    assert.equal(tooMuch.sub_code, 'ACQ.REASON_TRADE_REFUND_FEE_ERR');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).trade_status, 'TRADE_SUCCESS');
    // 5. The rest: the trade is closed, as Alipay closes a fully refunded trade.
    const r2 = newRefundId();
    const rest = await refund(outTradeNo, '7.00', r2);
    assert.equal(rest.fund_change, 'Y');
    assert.equal(rest.refund_fee, '10.00');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).trade_status, 'TRADE_CLOSED');
    // 6. A repeat still answers the refund; a new one is refused by the trade's state.
    assert.equal((await refund(outTradeNo, '7.00', r2)).fund_change, 'N');
    assert.equal((await refund(outTradeNo, '0.01', newRefundId())).sub_code, 'ACQ.TRADE_STATUS_ERROR');

    const { refunds } = await ledger(outTradeNo);
    assert.deepEqual(
      refunds.map((r) => [r.refundId, r.amountMinor, r.status, r.gatewayRefundId]),
      [
        [r1, 300, 'succeeded', `${charge.trade_no}:${r1}`],
        [r2, 700, 'succeeded', `${charge.trade_no}:${r2}`],
      ],
    );
  });

  it('refuses an unpaid, a closed-unpaid and an unknown trade, and a partial refund without out_request_no', async () => {
    const open = newOutTradeNo();
    await pay(open, creds.testBuyers.insufficient_funds);
    assert.equal((await refund(open, '12.30', newRefundId())).sub_code, 'ACQ.TRADE_STATUS_ERROR');
    await exec('alipay.trade.close', { out_trade_no: open });
    assert.equal((await refund(open, '12.30', newRefundId())).sub_code, 'ACQ.TRADE_STATUS_ERROR');
    const unknown = await refund(newOutTradeNo(), '1.00', newRefundId());
    assert.equal(unknown.code, '40004');
    assert.equal(unknown.sub_code, 'ACQ.TRADE_NOT_EXIST');

    const paid = newOutTradeNo();
    await pay(paid, creds.testBuyers.ok, '5.00');
    assert.equal((await refund(paid, '1.00')).sub_code, 'ACQ.REFUND_AMT_NOT_EQUAL_TOTAL');
    assert.equal((await refund(paid, '1.001', newRefundId())).sub_code, 'ACQ.INVALID_PARAMETER');
    // trade_no and out_trade_no must name the same trade.
    assert.equal((await refund(paid, '1.00', newRefundId(), { trade_no: '2024010122000000000000000000' })).sub_code, 'ACQ.TRADE_NOT_EXIST');
    assert.deepEqual((await ledger(open)).refunds, []);
    assert.deepEqual((await ledger(paid)).refunds, []);
  });

  it('lets exactly one of 20 concurrent full refunds through, and 20 copies of one refund refund once', async () => {
    const outTradeNo = newOutTradeNo();
    await pay(outTradeNo, creds.testBuyers.ok, '9.99');
    const distinct = await Promise.all(Array.from({ length: 20 }, () => refund(outTradeNo, '9.99', newRefundId())));
    assert.equal(distinct.filter((r) => r.fund_change === 'Y').length, 1);
    assert.equal(distinct.filter((r) => r.code === '40004').length, 19);

    const other = newOutTradeNo();
    await pay(other, creds.testBuyers.ok, '9.99');
    const id = newRefundId();
    const copies = await Promise.all(Array.from({ length: 20 }, () => refund(other, '4.00', id)));
    assert.deepEqual(
      copies.map((r) => r.code),
      Array.from({ length: 20 }, () => '10000'),
    );
    assert.equal(copies.filter((r) => r.fund_change === 'Y').length, 1);
    assert.equal((await ledger(outTradeNo)).refunds.length, 1);
    assert.equal((await ledger(other)).refunds.length, 1);
  });

  it('processes the refund and hangs up under drop_after_charge: the refund query then finds it', async () => {
    const outTradeNo = newOutTradeNo();
    await pay(outTradeNo, creds.testBuyers.ok, '6.00');
    const id = newRefundId();
    // Two drops: the SDK's HTTP client re-sends a POST once after a dropped connection.
    await armFault({ operation: 'refund', action: 'drop_after_charge', times: 2 });
    await assert.rejects(refund(outTradeNo, '6.00', id));
    const found = await refundQuery(outTradeNo, id);
    assert.equal(found.refund_status, 'REFUND_SUCCESS');
    assert.equal(found.refund_amount, '6.00');
    assert.equal((await refund(outTradeNo, '6.00', id)).fund_change, 'N');
    assert.equal((await ledger(outTradeNo)).refunds.length, 1);
  });
});

describe('alipay.trade.fastpay.refund.query', () => {
  it('finds a refund by out_request_no, answers 10000 without refund data for an unknown one, and refuses an unknown trade', async () => {
    const outTradeNo = newOutTradeNo();
    const charge = await pay(outTradeNo, creds.testBuyers.ok, '2.50');
    const id = newRefundId();
    await refund(outTradeNo, '1.50', id);
    const found = await exec('alipay.trade.fastpay.refund.query', {
      trade_no: charge.trade_no,
      out_request_no: id,
      query_options: ['gmt_refund_pay'],
    });
    assert.equal(found.code, '10000');
    assert.equal(found.out_request_no, id);
    assert.equal(found.out_trade_no, outTradeNo);
    assert.equal(found.refund_amount, '1.50');
    assert.equal(found.total_amount, '2.50');
    assert.equal(found.refund_status, 'REFUND_SUCCESS');
    assert.match(String(found.gmt_refund_pay), /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/);

    const missing = await refundQuery(outTradeNo, newRefundId());
    assert.equal(missing.code, '10000');
    assert.equal(missing.refund_amount, undefined);
    assert.equal(missing.refund_status, undefined);
    assert.equal((await refundQuery(newOutTradeNo(), id)).sub_code, 'ACQ.TRADE_NOT_EXIST');
    assert.equal((await exec('alipay.trade.fastpay.refund.query', { out_trade_no: outTradeNo })).sub_code, 'ACQ.INVALID_PARAMETER');
  });
});

describe('POST /sandbox/alipay/buyer-pays', () => {
  let receiver: Receiver;
  before(async () => {
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
  });

  it('pays a trade left open by a decline and sends the usual TRADE_SUCCESS notification', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/notify/${outTradeNo}`;
    await pay(outTradeNo, creds.testBuyers.insufficient_funds, '15.00', { notify_url: `${receiver.url}${path}` });
    // 1. A declined buyer leaves the trade open.
    const declined = await buyerPays({ outTradeNo, buyer: 'insufficient_funds' });
    assert.equal(declined.status, 200);
    assert.equal(declined.body.status, 'declined');
    assert.equal((await exec('alipay.trade.query', { out_trade_no: outTradeNo })).trade_status, 'WAIT_BUYER_PAY');
    // 2. The ok buyer (the default) pays it.
    const paid = await buyerPays({ outTradeNo });
    assert.equal(paid.status, 200);
    const query = await exec('alipay.trade.query', { out_trade_no: outTradeNo });
    assert.deepEqual(paid.body, { gateway: 'alipay', outTradeNo, status: 'succeeded', gatewayTradeNo: query.trade_no });
    assert.equal(query.trade_status, 'TRADE_SUCCESS');
    const [notification] = await waitFor('the notification', async () => {
      const list = receiver.received.get(path) ?? [];
      return list.length >= 1 ? list : undefined;
    });
    assert.ok(notification, 'notification');
    assert.equal(notification.trade_status, 'TRADE_SUCCESS');
    assert.equal(notification.total_amount, '15.00');
    assert.equal(notification.out_biz_no, undefined);
    assert.ok(sdk.checkNotifySignV2(notification), 'sdk.checkNotifySignV2(notification)');
    // 3. Paid: not payable again.
    assert.equal((await buyerPays({ outTradeNo })).status, 409);
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['declined', 'declined', 'succeeded'],
    );
  });

  it('answers 409 for an unknown trade and 400 for bad input', async () => {
    const unknown = await buyerPays({ outTradeNo: newOutTradeNo() });
    assert.equal(unknown.status, 409);
    assert.equal(unknown.body.code, 'TRADE_NOT_PAYABLE');
    assert.equal(typeof unknown.body.message, 'string');
    for (const bad of ['{', { buyer: 'ok' }, { outTradeNo: 'X1', buyer: 'rich' }, { outTradeNo: '' }]) {
      const res = await buyerPays(bad);
      assert.equal(res.status, 400, JSON.stringify(bad));
      assert.equal(res.body.code, 'BAD_REQUEST');
    }
  });
});

describe('refund notifications', () => {
  let receiver: Receiver;
  before(async () => {
    receiver = await startReceiver();
  });
  after(async () => {
    await receiver.close();
  });

  it('notifies each refund to the payment’s notify_url: TRADE_SUCCESS while money is left, TRADE_CLOSED after the last', async () => {
    const outTradeNo = newOutTradeNo();
    const path = `/notify/${outTradeNo}`;
    const charge = await pay(outTradeNo, creds.testBuyers.ok, '10.00', { notify_url: `${receiver.url}${path}` });
    await waitFor('the payment notification', async () => ((receiver.received.get(path) ?? []).length >= 1 ? true : undefined));
    const r1 = newRefundId();
    const r2 = newRefundId();
    await refund(outTradeNo, '4.00', r1);
    await waitFor('the first refund notification', async () => ((receiver.received.get(path) ?? []).length >= 2 ? true : undefined));
    await refund(outTradeNo, '6.00', r2);
    await refund(outTradeNo, '6.00', r2); // a repeat moves no money and notifies nothing
    const all = await waitFor('the second refund notification', async () => {
      const list = receiver.received.get(path) ?? [];
      return list.length >= 3 ? list : undefined;
    });
    const [payment, partial, full] = all;
    assert.ok(payment && partial && full, 'payment && partial && full');
    assert.equal(payment.refund_fee, undefined);
    assert.equal(partial.trade_status, 'TRADE_SUCCESS');
    assert.equal(partial.refund_fee, '4.00');
    assert.equal(partial.out_biz_no, r1);
    assert.match(partial.gmt_refund ?? '', /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$/);
    assert.equal(partial.trade_no, charge.trade_no);
    assert.equal(partial.total_amount, '10.00');
    assert.notEqual(partial.notify_id, payment.notify_id);
    assert.equal(full.trade_status, 'TRADE_CLOSED');
    assert.equal(full.refund_fee, '10.00');
    assert.equal(full.out_biz_no, r2);
    for (const fields of [partial, full]) {
      assert.equal(fields.notify_type, 'trade_status_sync');
      assert.ok(sdk.checkNotifySignV2(fields), 'sdk.checkNotifySignV2(fields)');
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal((receiver.received.get(path) ?? []).length, 3);
  });
});
