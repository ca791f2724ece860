/**
 * The WeChat Pay adapter against the PSP sandbox over HTTP (real PostgreSQL behind it), plus a few
 * misbehaving local HTTP servers for the transport failures a healthy sandbox never produces.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/wechatpay-adapter.test.ts
 */
import assert from 'node:assert/strict';
import { createCipheriv, createSign, generateKeyPairSync, randomBytes } from 'node:crypto';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import type { ChargeRequest, NotificationVerdict, PaymentGateway, RefundRequest } from '@/server/payments/gateway';
import { createWechatPayGateway, type WechatPayGatewayConfig } from '@/server/payments/wechatpay';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { wechatpayModule } from '@/sandbox/wechatpay';
import { waitFor, startServer, readLedger } from '@/test/support/harness';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/wechatpay_dev)');
}
const databaseUrl: string = DATABASE_URL;

type Credentials = Omit<WechatPayGatewayConfig, 'timeoutMs' | 'pollWindowMs'>;

interface Ledger {
  charges: { outTradeNo: string; amountMinor: number; status: string; gatewayTradeNo: string | null }[];
  notifications: { outTradeNo: string; attempt: number; acknowledged: boolean }[];
  refunds: { outTradeNo: string; amountMinor: number; status: string; refundId: string; gatewayRefundId: string; gatewayTradeNo: string }[];
}

let sandbox: RunningSandbox;
let creds: Credentials;
let gateway: PaymentGateway;

function config(overrides: Partial<WechatPayGatewayConfig> = {}): WechatPayGatewayConfig {
  return { ...creds, ...overrides };
}

function newOutTradeNo(): string {
  // The app's shape: PO + 18 characters [0-9A-Z].
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

function chargeRequest(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo,
    amountMinor: 1230,
    currency: 'CNY',
    subject: 'PayOnce 订单 测试',
    attempt: 1,
    notifyUrl: 'http://127.0.0.1:9/unused', // discard port: deliveries fail fast, nothing listens
    // The sandbox's synchronous test buyer unless a test says otherwise (scanRequest: none).
    buyer: 'ok',
    ...overrides,
  };
}

/** A charge without a test buyer: the buyer's own step (Native pay's QR code). */
function scanRequest(outTradeNo: string, overrides: Partial<Omit<ChargeRequest, 'buyer'>> = {}): ChargeRequest {
  const { buyer: _none, ...request } = chargeRequest(outTradeNo, overrides);
  return request;
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

/** Node's incoming headers as a standard Headers, the way a route handler receives them. */
function toHeaders(incoming: http.IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [key, value] of Object.entries(incoming)) {
    if (value !== undefined) headers.set(key, Array.isArray(value) ? value.join(', ') : value);
  }
  return headers;
}

/** Closes an order the way a merchant would (the adapter itself never closes). */
async function closeOrder(outTradeNo: string): Promise<number> {
  const path = `/v3/pay/transactions/out-trade-no/${outTradeNo}/close`;
  const body = JSON.stringify({ mchid: creds.mchid });
  const ts = String(Math.floor(Date.now() / 1000));
  const nonce = randomBytes(16).toString('hex');
  const signature = createSign('RSA-SHA256').update(`POST\n${path}\n${ts}\n${nonce}\n${body}\n`).sign(creds.merchantPrivateKey, 'base64');
  const res = await fetch(`${creds.baseUrl}${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: `WECHATPAY2-SHA256-RSA2048 mchid="${creds.mchid}",nonce_str="${nonce}",timestamp="${ts}",serial_no="${creds.merchantSerialNo}",signature="${signature}"`,
    },
    body,
  });
  return res.status;
}

/** The uniform sandbox buyer tool: the buyer pays the open trade now. */
async function buyerPays(outTradeNo: string, buyer = 'ok'): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${sandbox.url}/sandbox/wechatpay/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ outTradeNo, buyer }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function armFault(operation: 'charge' | 'close' | 'refund', action: string): Promise<void> {
  const res = await fetch(`${sandbox.url}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ gateway: 'wechatpay', operation, action }),
  });
  assert.equal(res.status, 201);
}

function newRefundId(): string {
  return `RF${randomBytes(12).toString('hex').toUpperCase()}`;
}

function refundRequest(outTradeNo: string, gatewayTradeNo: string, overrides: Partial<RefundRequest> = {}): RefundRequest {
  return {
    outTradeNo,
    gatewayTradeNo,
    refundId: newRefundId(),
    amountMinor: 1230,
    chargeAmountMinor: 1230,
    currency: 'CNY',
    reason: 'PayOnce 重复支付退款',
    ...overrides,
  };
}

/** A charge the ok buyer paid: its transaction_id. */
async function paidCharge(outTradeNo: string, amountMinor = 1230): Promise<string> {
  const paid = await gateway.charge(chargeRequest(outTradeNo, { amountMinor }));
  assert.ok(paid.kind === 'succeeded', JSON.stringify(paid));
  return paid.gatewayTradeNo;
}

function pem(kind: 'private' | 'public') {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return kind === 'private'
    ? privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()
    : publicKey.export({ type: 'spki', format: 'pem' }).toString();
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [wechatpayModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { wechatpay: Credentials }).wechatpay;
  gateway = createWechatPayGateway(config());
});

after(async () => {
  await sandbox.close();
});

describe('charge', () => {
  it('succeeds with the ok buyer', async () => {
    const outTradeNo = newOutTradeNo();
    const outcome = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 1999 }));
    assert.ok(outcome.kind === 'succeeded', JSON.stringify(outcome));
    assert.equal(outcome.amountMinor, 1999);
    assert.equal(outcome.currency, 'CNY');
    assert.match(outcome.gatewayTradeNo, /^\d{28,32}$/);
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.amountMinor, c.gatewayTradeNo]),
      [['succeeded', 1999, outcome.gatewayTradeNo]],
    );
    assert.equal(gateway.id, 'wechatpay');
    assert.equal(gateway.merchantId, creds.mchid);
  });

  it('declines both test buyers (PAYERROR), then succeeds with the ok buyer on the same out_trade_no', async () => {
    const outTradeNo = newOutTradeNo();
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' })), {
      kind: 'declined',
      code: 'PAYERROR',
      message: '支付失败，用户余额不足',
    });
    const restricted = await gateway.charge(chargeRequest(outTradeNo, { buyer: 'account_restricted', attempt: 2 }));
    assert.ok(restricted.kind === 'declined');
    assert.equal(restricted.code, 'PAYERROR');
    assert.match(restricted.message, /账户异常/);
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });

    const ok = await gateway.charge(chargeRequest(outTradeNo, { buyer: 'ok', attempt: 3 }));
    assert.equal(ok.kind, 'succeeded');
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['declined', 'declined', 'succeeded'],
    );
  });

  it('reports a repeated charge of a paid order as succeeded (OUT_TRADE_NO_USED + query), charging once', async () => {
    const outTradeNo = newOutTradeNo();
    const first = await gateway.charge(chargeRequest(outTradeNo));
    const second = await gateway.charge(chargeRequest(outTradeNo));
    const third = await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds', attempt: 2 }));
    assert.equal(first.kind, 'succeeded');
    assert.deepEqual(second, first);
    assert.deepEqual(third, first);
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['succeeded'],
    );
  });

  it('does not call a paid order succeeded for another amount', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await gateway.charge(chargeRequest(outTradeNo))).kind, 'succeeded');
    const other = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 1231 }));
    assert.ok(other.kind === 'indeterminate', JSON.stringify(other));
    assert.equal(other.code, 'AMOUNT_MISMATCH');
  });

  it('declines changed parameters on an open order (403 OUT_TRADE_NO_USED) and a charge of a closed one (400 ORDER_CLOSED)', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }))).kind, 'declined');
    const changed = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 1300, attempt: 2 }));
    assert.ok(changed.kind === 'declined', JSON.stringify(changed));
    assert.equal(changed.code, 'OUT_TRADE_NO_USED');
    assert.equal(await closeOrder(outTradeNo), 204);
    // "400 ORDER_CLOSED 当前订单已关闭，请重新下单" (Native下单's error table): terminal for this gateway.
    const closed = await gateway.charge(chargeRequest(outTradeNo, { attempt: 3 }));
    assert.ok(closed.kind === 'declined', JSON.stringify(closed));
    assert.equal(closed.code, 'ORDER_CLOSED');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('has an out_trade_no WeChat refuses declined with PARAM_ERROR, recording nothing', async () => {
    for (const outTradeNo of ['ORDER.1234', 'SHORT', `ORDER-${'0'.repeat(27)}`]) {
      const outcome = await gateway.charge(chargeRequest(outTradeNo));
      assert.ok(outcome.kind === 'declined', outTradeNo);
      assert.equal(outcome.code, 'PARAM_ERROR');
      assert.deepEqual((await ledger(outTradeNo)).charges, []);
    }
  });

  it('is indeterminate while nobody has paid, and the order can still be paid and found later', async () => {
    // Against the real gateway no attach is sent: the buyer has to scan the code.
    const realistic = createWechatPayGateway(
      config({ testBuyers: { ok: '', insufficient_funds: '', account_restricted: '' }, pollWindowMs: 300 }),
    );
    const outTradeNo = newOutTradeNo();
    const started = Date.now();
    const outcome = await realistic.charge(chargeRequest(outTradeNo));
    assert.deepEqual(outcome, { kind: 'indeterminate', code: 'NOTPAY', message: '订单未支付' });
    assert.ok(Date.now() - started >= 250, 'it polled for the window');
    assert.deepEqual(await realistic.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });

    const scan = await fetch(`${sandbox.url}/sandbox/wechatpay/scan`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo, buyer: 'ok' }),
    });
    assert.equal(scan.status, 200);
    const settled = await realistic.query(outTradeNo);
    assert.ok(settled.kind === 'answered' && settled.trade.kind === 'succeeded');
    assert.equal(settled.trade.amountMinor, 1230);
    // The next attempt finds it paid.
    assert.equal((await realistic.charge(chargeRequest(outTradeNo, { attempt: 2 }))).kind, 'succeeded');
  });

  it('accepts keys as bare base64 or with escaped newlines; refuses bad configuration at construction', async () => {
    const bare = (text: string) =>
      text
        .split('\n')
        .filter((l) => !l.startsWith('-----'))
        .join('');
    const g = createWechatPayGateway(
      config({ merchantPrivateKey: bare(creds.merchantPrivateKey), platformPublicKey: creds.platformPublicKey.replaceAll('\n', '\\n') }),
    );
    assert.equal((await g.charge(chargeRequest(newOutTradeNo()))).kind, 'succeeded');
    assert.throws(() => createWechatPayGateway(config({ merchantPrivateKey: 'not a key' })), /merchantPrivateKey/);
    assert.throws(() => createWechatPayGateway(config({ platformPublicKey: 'not a key' })), /platformPublicKey/);
    assert.throws(() => createWechatPayGateway(config({ apiV3Key: 'short' })), /apiV3Key/);
  });

  it('passes other currencies to WeChat to refuse (PARAM_ERROR), and cuts a long subject the same way on every attempt', async () => {
    const usd = await gateway.charge(chargeRequest(newOutTradeNo(), { currency: 'USD' }));
    assert.ok(usd.kind === 'declined');
    assert.equal(usd.code, 'PARAM_ERROR');
    // A long subject is cut to WeChat's 127 characters, the same way on every attempt.
    const outTradeNo = newOutTradeNo();
    const subject = '订'.repeat(200);
    assert.equal((await gateway.charge(chargeRequest(outTradeNo, { subject, buyer: 'insufficient_funds' }))).kind, 'declined');
    assert.equal((await gateway.charge(chargeRequest(outTradeNo, { subject, attempt: 2 }))).kind, 'succeeded');
  });
});

describe('charge transport and trust failures', () => {
  it('is retryable on 429 FREQUENCY_LIMITED and 500 SYSTEM_ERROR from the gateway; the retry then goes through', async () => {
    const outTradeNo = newOutTradeNo();
    const limited = createWechatPayGateway(
      config({ testBuyers: { ...creds.testBuyers, ok: 'sandbox_buyer=ok&sandbox_fault=FREQUENCY_LIMITED' } }),
    );
    assert.deepEqual(await limited.charge(chargeRequest(outTradeNo)), {
      kind: 'retryable',
      code: 'FREQUENCY_LIMITED',
      message: '频率超限，请降低请求频率',
    });
    const failing = createWechatPayGateway(
      config({ testBuyers: { ...creds.testBuyers, ok: 'sandbox_buyer=ok&sandbox_fault=SYSTEM_ERROR' } }),
    );
    const failed = await failing.charge(chargeRequest(outTradeNo));
    assert.ok(failed.kind === 'retryable');
    assert.equal(failed.code, 'SYSTEM_ERROR');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
    // The retry of the same attempt then goes through.
    assert.equal((await gateway.charge(chargeRequest(outTradeNo))).kind, 'succeeded');
  });

  it('sends a charge once when the connection drops after sending: fetch never re-sends a POST', async () => {
    let requests = 0;
    const server = await startServer((req) => {
      requests += 1;
      req.socket.destroy();
    });
    try {
      await createWechatPayGateway(config({ baseUrl: server.url })).charge(chargeRequest(newOutTradeNo()));
      assert.equal(requests, 1);
    } finally {
      await server.close();
    }
  });

  it('is indeterminate when the answer’s signature does not verify, even for a success', async () => {
    const g = createWechatPayGateway(config({ platformPublicKey: pem('public') }));
    const outTradeNo = newOutTradeNo();
    const outcome = await g.charge(chargeRequest(outTradeNo));
    assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
    assert.equal(outcome.code, 'INVALID_RESPONSE_SIGNATURE');
    // It did charge: exactly the case that must be settled by a query, never by guessing.
    assert.equal((await ledger(outTradeNo)).charges[0]?.status, 'succeeded');
    const settled = await gateway.query(outTradeNo);
    assert.ok(settled.kind === 'answered' && settled.trade.kind === 'succeeded');

    const otherSerial = await createWechatPayGateway(config({ platformSerialNo: 'PUB_KEY_ID_0000' })).charge(
      chargeRequest(newOutTradeNo()),
    );
    assert.ok(otherSerial.kind === 'indeterminate');
    assert.match(otherSerial.message, /unknown platform key/);
  });

  it('is indeterminate for an unsigned or stale 200 and an undocumented error code', async () => {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    let mode: 'unsigned' | 'stale' | 'odd' = 'unsigned';
    const fake = await startServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const body =
          mode === 'odd'
            ? JSON.stringify({ code: 'SOMETHING_NEW', message: '?' })
            : JSON.stringify({ code_url: 'weixin://wxpay/bizpayurl?pr=abcdefg' });
        const ts = String(Math.floor(Date.now() / 1000) - (mode === 'stale' ? 600 : 0));
        const nonce = 'n'.repeat(32);
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        if (mode !== 'unsigned') {
          headers['wechatpay-timestamp'] = ts;
          headers['wechatpay-nonce'] = nonce;
          headers['wechatpay-serial'] = 'FAKE';
          headers['wechatpay-signature'] = createSign('RSA-SHA256').update(`${ts}\n${nonce}\n${body}\n`).sign(privateKey, 'base64');
        }
        res.writeHead(mode === 'odd' ? 403 : 200, headers);
        res.end(body);
      });
    });
    try {
      const g = createWechatPayGateway(
        config({
          baseUrl: fake.url,
          platformSerialNo: 'FAKE',
          platformPublicKey: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
        }),
      );
      const unsigned = await g.charge(chargeRequest(newOutTradeNo()));
      assert.ok(unsigned.kind === 'indeterminate');
      assert.match(unsigned.message, /missing Wechatpay-\* signature headers/);
      mode = 'stale';
      const stale = await g.charge(chargeRequest(newOutTradeNo()));
      assert.ok(stale.kind === 'indeterminate');
      assert.match(stale.message, /more than 300 s/);
      mode = 'odd';
      const odd = await g.charge(chargeRequest(newOutTradeNo()));
      assert.deepEqual(odd, { kind: 'indeterminate', code: 'SOMETHING_NEW', message: '?' });
    } finally {
      await fake.close();
    }
  });
});

describe('query', () => {
  it('is unavailable when the answer cannot be trusted (INVALID_RESPONSE_SIGNATURE)', async () => {
    const untrusted = await createWechatPayGateway(config({ platformPublicKey: pem('public') })).query(newOutTradeNo());
    assert.ok(untrusted.kind === 'unavailable');
    assert.equal(untrusted.code, 'INVALID_RESPONSE_SIGNATURE');
  });
});

describe('notifications', () => {
  /** The merchant's webhook: verifies with the adapter, answers its reply or a scripted status. */
  const verdicts = new Map<string, NotificationVerdict[]>();
  const scripts = new Map<string, (number | 'reply')[]>();
  let receiver: { url: string; close(): Promise<void> };

  before(async () => {
    receiver = await startServer((req, res) => {
      let rawBody = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (rawBody += chunk));
      req.on('end', () => {
        const key = (req.url ?? '/').split('/').pop() ?? '';
        const headers = toHeaders(req.headers);
        void gateway.verifyNotification({ headers, rawBody }).then((verdict) => {
          verdicts.set(key, [...(verdicts.get(key) ?? []), verdict]);
          const script = scripts.get(key) ?? [];
          const next = script.length > 1 ? script.shift() : script[0];
          const reply =
            next === undefined || next === 'reply'
              ? gateway.notificationReply(verdict.kind !== 'rejected')
              : { status: next, headers: {}, body: '' };
          res.writeHead(reply.status, reply.headers);
          res.end(reply.body);
        });
      });
    });
  });
  after(async () => {
    await receiver.close();
  });

  const tool = async (outTradeNo: string, overrides: Record<string, string>) => {
    const res = await fetch(`${sandbox.url}/sandbox/wechatpay/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo, overrides }),
    });
    assert.equal(res.status, 200);
    return (verdicts.get(outTradeNo) ?? []).at(-1) as NotificationVerdict;
  };

  it('verifies and decrypts the sandbox’s notification, which is retried until the adapter acknowledges it', async () => {
    const outTradeNo = newOutTradeNo();
    scripts.set(outTradeNo, [500, 503, 'reply']);
    const paid = await gateway.charge(
      chargeRequest(outTradeNo, { amountMinor: 5000, notifyUrl: `${receiver.url}/wechatpay/${outTradeNo}` }),
    );
    assert.ok(paid.kind === 'succeeded');

    const { notifications } = await waitFor('the acknowledgement', async () => {
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
    const received = verdicts.get(outTradeNo) ?? [];
    assert.equal(received.length, 3);
    for (const verdict of received) {
      assert.deepEqual(verdict, {
        kind: 'verified',
        notification: {
          gateway: 'wechatpay',
          eventId: paid.gatewayTradeNo,
          merchantId: creds.mchid,
          outTradeNo,
          status: 'succeeded',
          gatewayTradeNo: paid.gatewayTradeNo,
          amountMinor: 5000,
          currency: 'CNY',
        },
      });
    }
  });

  it('verifies a validly signed tampered amount (the app’s amount check must catch it)', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { notifyUrl: `${receiver.url}/wechatpay/${outTradeNo}` }));
    await waitFor('the scheduled delivery', async () => ((verdicts.get(outTradeNo) ?? []).length >= 1 ? true : undefined));
    const tampered = await tool(outTradeNo, { 'amount.total': '1' });
    assert.ok(tampered.kind === 'verified');
    assert.equal(tampered.notification.amountMinor, 1);
    const refunded = await tool(outTradeNo, { trade_state: 'REFUND' });
    assert.ok(refunded.kind === 'verified');
    assert.equal(refunded.notification.status, 'other');
    const otherEvent = await tool(outTradeNo, { event_type: 'TRANSACTION.CLOSED' });
    assert.ok(otherEvent.kind === 'verified');
    assert.equal(otherEvent.notification.status, 'other');
  });

  it('rejects forgeries, stale deliveries, foreign keys and unreadable resources', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { notifyUrl: `${receiver.url}/wechatpay/${outTradeNo}` }));
    await waitFor('the scheduled delivery', async () => ((verdicts.get(outTradeNo) ?? []).length >= 1 ? true : undefined));

    assert.deepEqual(await tool(outTradeNo, { 'Wechatpay-Signature': 'WECHATPAY/SIGNTEST/AAAA' }), {
      kind: 'rejected',
      reason: 'invalid signature',
    });
    const stale = await tool(outTradeNo, { 'Wechatpay-Timestamp': String(Math.floor(Date.now() / 1000) - 301) });
    assert.ok(stale.kind === 'rejected');
    assert.match(stale.reason, /more than 300 s/);
    assert.deepEqual(await tool(outTradeNo, { 'Wechatpay-Serial': 'PUB_KEY_ID_OTHER' }), {
      kind: 'rejected',
      reason: 'unknown platform key PUB_KEY_ID_OTHER',
    });
    assert.deepEqual(await tool(outTradeNo, { 'resource.algorithm': 'AES_128' }), {
      kind: 'rejected',
      reason: 'unsupported algorithm AES_128',
    });
    assert.deepEqual(await tool(outTradeNo, { 'resource.nonce': 'short' }), {
      kind: 'rejected',
      reason: 'malformed resource ciphertext or nonce',
    });
    assert.deepEqual(await tool(outTradeNo, { transaction_id: '' }), { kind: 'rejected', reason: 'SUCCESS without transaction_id' });
    assert.deepEqual(await tool(outTradeNo, { 'amount.total': '' }), { kind: 'rejected', reason: 'invalid amount.total undefined' });

    // Hand-made: a body encrypted with the right APIv3 key but signed by someone else, and a body
    // signed by nobody.
    const transaction = JSON.stringify({
      mchid: creds.mchid,
      out_trade_no: outTradeNo,
      transaction_id: '4200000000000000000000000001',
      trade_state: 'SUCCESS',
      amount: { total: 1230, currency: 'CNY' },
    });
    const nonce = 'abcdefghijkl';
    const cipher = createCipheriv('aes-256-gcm', Buffer.from(creds.apiV3Key), Buffer.from(nonce));
    cipher.setAAD(Buffer.from('transaction'));
    const ciphertext = Buffer.concat([cipher.update(transaction), cipher.final(), cipher.getAuthTag()]).toString('base64');
    const rawBody = JSON.stringify({
      id: 'x',
      create_time: '2024-01-01T00:00:00+08:00',
      resource_type: 'encrypt-resource',
      event_type: 'TRANSACTION.SUCCESS',
      summary: '支付成功',
      resource: { original_type: 'transaction', algorithm: 'AEAD_AES_256_GCM', ciphertext, associated_data: 'transaction', nonce },
    });
    const ts = String(Math.floor(Date.now() / 1000));
    const forgedSignature = createSign('RSA-SHA256')
      .update(`${ts}\n${'n'.repeat(32)}\n${rawBody}\n`)
      .sign(pem('private'), 'base64');
    const forgedHeaders = new Headers({
      'wechatpay-timestamp': ts,
      'wechatpay-nonce': 'n'.repeat(32),
      'wechatpay-serial': creds.platformSerialNo,
      'wechatpay-signature': forgedSignature,
    });
    assert.deepEqual(await gateway.verifyNotification({ headers: forgedHeaders, rawBody }), {
      kind: 'rejected',
      reason: 'invalid signature',
    });
    assert.deepEqual(await gateway.verifyNotification({ headers: new Headers(), rawBody }), {
      kind: 'rejected',
      reason: 'missing Wechatpay-* signature headers',
    });

    // A genuine delivery is verified by a merchant holding another APIv3 key only as far as the signature.
    const otherKey = createWechatPayGateway(config({ apiV3Key: 'K'.repeat(32) }));
    const scheduled = verdicts.get(outTradeNo)?.[0];
    assert.ok(scheduled?.kind === 'verified');
    let captured: { headers: Headers; rawBody: string } | undefined;
    const capture = await startServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        captured = { headers: toHeaders(req.headers), rawBody: body };
        res.writeHead(204);
        res.end();
      });
    });
    try {
      const replay = await gateway.charge(chargeRequest(newOutTradeNo(), { notifyUrl: `${capture.url}/n` }));
      assert.equal(replay.kind, 'succeeded');
      const delivery = await waitFor('a captured delivery', async () => captured);
      assert.equal((await gateway.verifyNotification(delivery)).kind, 'verified');
      assert.deepEqual(await otherKey.verifyNotification(delivery), {
        kind: 'rejected',
        reason: 'resource does not decrypt with the APIv3 key',
      });
      // One changed byte of the body breaks the signature.
      const altered = { headers: delivery.headers, rawBody: delivery.rawBody.replace('"TRANSACTION.SUCCESS"', '"TRANSACTION.SUCCESs"') };
      assert.deepEqual(await gateway.verifyNotification(altered), { kind: 'rejected', reason: 'invalid signature' });
    } finally {
      await capture.close();
    }
  });

  it('verifies REFUND.SUCCESS into a refund notification (eventId = notification id, refundId = out_refund_no)', async () => {
    const outTradeNo = newOutTradeNo();
    const transactionId = await paidCharge(outTradeNo, 2100);
    const request = refundRequest(outTradeNo, transactionId, {
      amountMinor: 2100,
      chargeAmountMinor: 2100,
      notifyUrl: `${receiver.url}/wechatpay-refund/${outTradeNo}`,
    });
    const outcome = await gateway.refund(request);
    assert.ok(outcome.kind === 'pending' && outcome.gatewayRefundId, JSON.stringify(outcome));
    const [verdict] = await waitFor('the refund notification', async () => {
      const list = verdicts.get(outTradeNo) ?? [];
      return list.length >= 1 ? list : undefined;
    });
    assert.ok(verdict?.kind === 'refund', JSON.stringify(verdict));
    const { eventId, ...rest } = verdict.notification;
    assert.match(eventId, /^[0-9a-f-]{36}$/); // WeChat's notification id, not the refund's
    assert.deepEqual(rest, {
      gateway: 'wechatpay',
      merchantId: creds.mchid,
      outTradeNo,
      refundId: request.refundId,
      gatewayRefundId: outcome.gatewayRefundId,
      status: 'succeeded',
      amountMinor: 2100,
      currency: 'CNY',
    });
    // Acknowledged by the adapter's reply: delivered once, and the ledger says the money went back.
    const l = await waitFor('the ack', async () => {
      const current = await ledger(outTradeNo);
      return current.notifications.some((n) => n.acknowledged) ? current : undefined;
    });
    assert.deepEqual(
      l.refunds.map((r) => [r.status, r.refundId]),
      [['succeeded', request.refundId]],
    );
  });
});

describe('close', () => {
  /** Without a test buyer nobody pays: the order waits (NOTPAY), as after the buyer walked away. */
  const waiting = () =>
    createWechatPayGateway(config({ testBuyers: { ok: '', insufficient_funds: '', account_restricted: '' }, pollWindowMs: 0 }));

  it('closes a waiting order, idempotently: buyer-pays is then refused and a new charge declined', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await waiting().charge(chargeRequest(outTradeNo))).kind, 'indeterminate');
    // 1. Closed, and closed again.
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'closed' } });
    // 2. Nothing can take the buyer's money under it any more.
    const late = await buyerPays(outTradeNo);
    assert.equal(late.status, 409);
    assert.equal(late.body.code, 'TRADE_NOT_PAYABLE');
    const again = await gateway.charge(chargeRequest(outTradeNo, { attempt: 2 }));
    assert.ok(again.kind === 'declined' && again.code === 'ORDER_CLOSED', JSON.stringify(again));
    const scanAgain = await gateway.charge(scanRequest(outTradeNo, { attempt: 3 }));
    assert.ok(scanAgain.kind === 'declined' && scanAgain.code === 'ORDER_CLOSED', JSON.stringify(scanAgain));
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('closes an order left payable by a decline, after which buyer-pays is refused (409)', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }))).kind, 'declined');
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
    assert.equal((await buyerPays(outTradeNo, 'ok')).status, 409);
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('answers already_paid with the charge for an order the buyer paid first, closing nothing', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await waiting().charge(chargeRequest(outTradeNo, { amountMinor: 888 }))).kind, 'indeterminate');
    const paid = await buyerPays(outTradeNo);
    assert.equal(paid.body.status, 'succeeded');
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 888, currency: 'CNY' }), {
      kind: 'already_paid',
      charges: [{ gatewayTradeNo: paid.body.gatewayTradeNo, amountMinor: 888, currency: 'CNY' }],
    });
    const after = await gateway.query(outTradeNo);
    assert.ok(after.kind === 'answered' && after.trade.kind === 'succeeded');
  });

  it('answers closed for an order WeChat never saw', async () => {
    assert.deepEqual(await gateway.close({ outTradeNo: newOutTradeNo(), amountMinor: 1, currency: 'CNY' }), { kind: 'closed' });
  });

  it('is indeterminate, closing nothing, when the close fails before processing (fail_before_charge)', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await waiting().charge(chargeRequest(outTradeNo))).kind, 'indeterminate');
    await armFault('close', 'fail_before_charge');
    const outcome = await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' });
    assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
    assert.equal(outcome.code, 'SYSTEM_ERROR');
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    // The next close settles it.
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
  });

  it('is indeterminate while the buyer is paying (USERPAYING), and closes nothing', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await waiting().charge(chargeRequest(outTradeNo))).kind, 'indeterminate');
    // The sandbox's buyers pay at once; put the order where a real buyer entering a password leaves it.
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    try {
      await sql`UPDATE psp_sandbox.wechatpay_trades SET trade_state = 'USERPAYING', trade_state_desc = '用户支付中'
                 WHERE out_trade_no = ${outTradeNo}`;
    } finally {
      await sql.end();
    }
    const paying = await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' });
    assert.ok(paying.kind === 'indeterminate' && paying.code === 'USERPAYING', JSON.stringify(paying));
    assert.equal((await buyerPays(outTradeNo)).status, 200, 'the close was not sent: the payment goes through');
  });

  it('is one trade per order', () => {
    assert.equal(gateway.oneTradePerOrder, true);
  });
});

describe('refund and queryRefund', () => {
  it('is pending (PROCESSING) and then succeeded; the same refundId twice refunds once', async () => {
    const outTradeNo = newOutTradeNo();
    const transactionId = await paidCharge(outTradeNo);
    const request = refundRequest(outTradeNo, transactionId);
    // 1. Accepted, not final.
    const first = await gateway.refund(request);
    assert.ok(first.kind === 'pending' && first.gatewayRefundId, JSON.stringify(first));
    // 2. Settled by query.
    const settled = await waitFor('succeeded', async () => {
      const q = await gateway.queryRefund({ outTradeNo, gatewayTradeNo: transactionId, refundId: request.refundId });
      return q.kind === 'answered' && q.refund.kind === 'succeeded' ? q.refund : undefined;
    });
    assert.deepEqual(settled, { kind: 'succeeded', gatewayRefundId: first.gatewayRefundId, amountMinor: 1230 });
    // 3. The same refundId again: the same refund.
    assert.deepEqual(await gateway.refund(request), { kind: 'succeeded', gatewayRefundId: first.gatewayRefundId, amountMinor: 1230 });
    const { refunds } = await ledger(outTradeNo);
    assert.deepEqual(
      refunds.map((r) => [r.status, r.amountMinor, r.refundId, r.gatewayRefundId, r.gatewayTradeNo]),
      [['succeeded', 1230, request.refundId, first.gatewayRefundId, transactionId]],
    );
  });

  it('queryRefund: not_found for an unknown refundId, unavailable when the answer cannot be trusted; such a refund is indeterminate', async () => {
    const q = { outTradeNo: newOutTradeNo(), gatewayTradeNo: '', refundId: newRefundId() };
    assert.deepEqual(await gateway.queryRefund(q), { kind: 'answered', refund: { kind: 'not_found' } });
    const untrusted = await createWechatPayGateway(config({ platformPublicKey: pem('public') })).queryRefund(q);
    assert.ok(untrusted.kind === 'unavailable' && untrusted.code === 'INVALID_RESPONSE_SIGNATURE');
    // A refund whose answer cannot be trusted is indeterminate.
    const outTradeNo = newOutTradeNo();
    const transactionId = await paidCharge(outTradeNo);
    const forged = await createWechatPayGateway(config({ platformPublicKey: pem('public') })).refund(
      refundRequest(outTradeNo, transactionId),
    );
    assert.ok(forged.kind === 'indeterminate' && forged.code === 'INVALID_RESPONSE_SIGNATURE');
  });
});
