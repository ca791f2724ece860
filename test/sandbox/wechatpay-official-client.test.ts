/**
 * A judge from outside: the npm WeChat Pay API v3 client `wechatpay-node-v3` (2.2.1) drives the
 * sandbox as a merchant would — Native下单 → code_url, query, close, refund, refund query — and
 * verifies answer signatures the way it is built to, through the platform certificates it downloads
 * from GET /v3/certificates and decrypts with the APIv3 key. Only the host is rewritten: the client's
 * URLs are hard-coded to https://api.mch.weixin.qq.com, and its createHttp() hook lets a merchant
 * supply the HTTP layer; the one given here sends exactly what the client built to the sandbox
 * instead, and hands back the answer's headers so signatures can be checked.
 *
 * The client has no "微信支付公钥" mode. Notifications (signed with the public key, PUB_KEY_ID_…) are
 * verified the way a switched merchant using it must: by registering the public key under its id in
 * the client's certificate table.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/wechatpay-official-client.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import WxPay from 'wechatpay-node-v3';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { wechatpayModule } from '@/sandbox/wechatpay';
import { startServer, waitFor } from '@/test/support/harness';

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
  baseUrl: string;
}

/** What one call gave back: the client's Output plus the raw answer (headers, exact body text). */
interface Answer {
  status: number;
  data?: any;
  headers: Headers;
  text: string;
}

const WECHAT_HOST = 'https://api.mch.weixin.qq.com';

let sandbox: RunningSandbox;
let creds: Credentials;
let pay: WxPay;
let last: Answer | undefined;

/** The client's HTTP layer with one change: the host. The body is what the client signed. */
function sandboxHttp() {
  async function send(url: string, init: RequestInit): Promise<Answer> {
    assert.ok(url.startsWith(WECHAT_HOST), url);
    const res = await fetch(`${creds.baseUrl}${url.slice(WECHAT_HOST.length)}`, init);
    const text = await res.text();
    const answer: Answer = { status: res.status, headers: res.headers, text, ...(text ? { data: JSON.parse(text) } : {}) };
    last = answer;
    return answer;
  }
  return {
    post: (url: string, params: Record<string, any>, headers: Record<string, any>) =>
      send(url, { method: 'POST', headers, body: JSON.stringify(params) }),
    get: (url: string, headers: Record<string, any>) => send(url, { method: 'GET', headers }),
    upload: () => Promise.reject(new Error('not used')),
  };
}

/** The client's own check of an answer's Wechatpay-* signature (fetching certificates as needed). */
function verify(answer: Answer): Promise<boolean> {
  return pay.verifySign({
    timestamp: answer.headers.get('wechatpay-timestamp') ?? '',
    nonce: answer.headers.get('wechatpay-nonce') ?? '',
    body: answer.text,
    serial: answer.headers.get('wechatpay-serial') ?? '',
    signature: answer.headers.get('wechatpay-signature') ?? '',
    apiSecret: creds.apiV3Key,
  });
}

function newOutTradeNo(): string {
  return `OC${randomBytes(9).toString('hex').toUpperCase()}`;
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [wechatpayModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { wechatpay: Credentials }).wechatpay;
  pay = new WxPay({
    appid: creds.appid,
    mchid: creds.mchid,
    // The merchant API certificate's serial is given, so the client does not read it out of a
    // certificate file (its `publicKey`, which it then never uses).
    serial_no: creds.merchantSerialNo,
    publicKey: Buffer.from(creds.platformPublicKey),
    privateKey: Buffer.from(creds.merchantPrivateKey),
    key: creds.apiV3Key,
  });
  pay.createHttp(sandboxHttp());
});

after(async () => {
  await sandbox.close();
});

describe('wechatpay-node-v3 against the sandbox', () => {
  it('downloads and decrypts the platform certificate (get_certificates)', async () => {
    const certificates = await pay.get_certificates(creds.apiV3Key);
    assert.equal(certificates.length, 1);
    assert.equal(certificates[0]?.serial_no, creds.platformCertificateSerialNo);
    assert.match(String(certificates[0]?.publicKey), /^-----BEGIN PUBLIC KEY-----/);
  });

  it('Native下单 → code_url; query NOTPAY; close 204; close again 400 ORDER_CLOSED — every answer verified through /v3/certificates', async () => {
    const outTradeNo = newOutTradeNo();
    const created = await pay.transactions_native({
      description: 'PayOnce 官方客户端',
      out_trade_no: outTradeNo,
      notify_url: 'http://127.0.0.1:9/unused',
      amount: { total: 321, currency: 'CNY' },
    });
    assert.equal(created.status, 200, JSON.stringify(created));
    assert.match(String(created.data?.code_url), /^weixin:\/\/wxpay\/bizpayurl\?pr=/);
    assert.ok(last && (await verify(last)), 'create answer verifies with the downloaded certificate');
    assert.equal(last?.headers.get('wechatpay-serial'), creds.platformCertificateSerialNo);

    const queried = await pay.query({ out_trade_no: outTradeNo });
    assert.equal(queried.status, 200);
    assert.equal(queried.data?.trade_state, 'NOTPAY');
    assert.equal(queried.data?.amount?.total, 321);
    assert.ok(last && (await verify(last)));

    const closed = await pay.close(outTradeNo);
    assert.equal(closed.status, 204);
    assert.ok(last && (await verify(last)), 'the empty 204 is signed over "TS\\nNONCE\\n\\n"');
    const closedAgain = await pay.close(outTradeNo);
    assert.equal(closedAgain.status, 400);
    assert.equal(closedAgain.data?.code, 'ORDER_CLOSED');
    assert.ok(last && (await verify(last)));
    assert.equal((await pay.query({ out_trade_no: outTradeNo })).data?.trade_state, 'CLOSED');

    // A tampered body no longer verifies: the check is real.
    assert.ok(last);
    assert.equal(await verify({ ...last, text: last.text.replace('CLOSED', 'SUCCESS') }), false);
  });

  it('pays by the scan page, refunds (PROCESSING → SUCCESS, one refund per out_refund_no), and verifies + decrypts TRANSACTION.SUCCESS', async () => {
    const deliveries: { headers: Headers; body: string }[] = [];
    const receiver = await startServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        const headers = new Headers();
        for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers.set(k, v);
        deliveries.push({ headers, body });
        res.writeHead(204).end();
      });
    });
    try {
      const outTradeNo = newOutTradeNo();
      const created = await pay.transactions_native({
        description: 'PayOnce 官方客户端 退款',
        out_trade_no: outTradeNo,
        notify_url: `${receiver.url}/notify`,
        amount: { total: 500, currency: 'CNY' },
      });
      const codeUrl = String(created.data?.code_url);
      const pressed = await fetch(`${sandbox.url}/sandbox/wechatpay/scan`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ code_url: codeUrl, buyer: 'ok' }).toString(),
      });
      assert.equal(pressed.status, 200);
      const paid = await pay.query({ out_trade_no: outTradeNo });
      assert.equal(paid.data?.trade_state, 'SUCCESS');
      const transactionId = String(paid.data?.transaction_id);

      // The notification: signed with the WeChat Pay public key, which this client can only use once
      // registered under its id (it has no public-key mode of its own).
      await waitFor('TRANSACTION.SUCCESS', async () => (deliveries.length > 0 ? true : undefined));
      const delivery = deliveries[0];
      assert.ok(delivery);
      const serial = delivery.headers.get('wechatpay-serial') ?? '';
      assert.equal(serial, creds.platformSerialNo);
      (WxPay as unknown as { certificates: Record<string, string> }).certificates[serial] = creds.platformPublicKey;
      assert.ok(await verify({ status: 200, headers: delivery.headers, text: delivery.body }));
      const resource = (JSON.parse(delivery.body) as { resource: { ciphertext: string; associated_data: string; nonce: string } }).resource;
      const transaction = pay.decipher_gcm<{ transaction_id: string; trade_state: string }>(
        resource.ciphertext,
        resource.associated_data,
        resource.nonce,
        creds.apiV3Key,
      );
      assert.equal(transaction.transaction_id, transactionId);
      assert.equal(transaction.trade_state, 'SUCCESS');

      // 申请退款 twice with one out_refund_no: one refund.
      const outRefundNo = `RF${randomBytes(8).toString('hex').toUpperCase()}`;
      const refundParams = {
        transaction_id: transactionId,
        out_refund_no: outRefundNo,
        amount: { refund: 200, total: 500, currency: 'CNY' },
      };
      const first = await pay.refunds(refundParams);
      assert.equal(first.status, 200, JSON.stringify(first));
      assert.equal(first.data?.status, 'PROCESSING');
      assert.ok(last && (await verify(last)));
      const second = await pay.refunds(refundParams);
      assert.equal(second.data?.refund_id, first.data?.refund_id);
      const settled = await waitFor('the refund to land', async () => {
        const found = await pay.find_refunds(outRefundNo);
        return found.data?.status === 'SUCCESS' ? found : undefined;
      });
      assert.equal(settled.data?.amount?.refund, 200);
      assert.ok(last && (await verify(last)));
    } finally {
      await receiver.close();
    }
  });
});
