/**
 * The Alipay adapter against the PSP sandbox over HTTP (real PostgreSQL behind it), plus a few
 * misbehaving local HTTP servers for the transport failures a healthy sandbox never produces.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/alipay-adapter.test.ts
 */
import assert from 'node:assert/strict';
import { createSign, generateKeyPairSync, randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { createAlipayGateway, type AlipayGatewayConfig } from '@/server/payments/alipay';
import type { ChargeRequest, NotificationVerdict, PaymentGateway, RefundRequest } from '@/server/payments/gateway';
import { decimalToMinor, minorToDecimal } from '@/server/payments/money';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { waitFor, startServer, readLedger } from '@/test/support/harness';

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

interface Ledger {
  charges: { outTradeNo: string; amountMinor: number; status: string; gatewayTradeNo: string | null }[];
  notifications: { outTradeNo: string; attempt: number; acknowledged: boolean }[];
  refunds: { outTradeNo: string; amountMinor: number; status: string; refundId: string; gatewayRefundId: string; gatewayTradeNo: string }[];
}

let sandbox: RunningSandbox;
let creds: Credentials;
let gateway: PaymentGateway;

function config(overrides: Partial<AlipayGatewayConfig> = {}): AlipayGatewayConfig {
  return {
    appId: creds.appId,
    appPrivateKey: creds.appPrivateKey,
    alipayPublicKey: creds.alipayPublicKey,
    gatewayUrl: creds.gateway,
    testBuyerAuthCodes: creds.testBuyers,
    ...overrides,
  };
}

function newOutTradeNo(): string {
  return `A${Date.now().toString(36)}${randomBytes(6).toString('hex')}`;
}

function chargeRequest(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo,
    amountMinor: 1230,
    currency: 'CNY',
    subject: 'PayOnce 订单 测试',
    attempt: 1,
    // A test buyer keeps the charge synchronous (a barcode payment); buyer-step tests remove it.
    buyer: 'ok',
    notifyUrl: 'http://127.0.0.1:9/unused', // discard port: deliveries fail fast, nothing listens
    ...overrides,
  };
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001 });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { alipay: Credentials }).alipay;
  gateway = createAlipayGateway(config());
});

after(async () => {
  await sandbox.close();
});

describe('money', () => {
  it('converts without floating point', () => {
    assert.equal(minorToDecimal(1999), '19.99');
    assert.equal(minorToDecimal(5), '0.05');
    assert.equal(minorToDecimal(10_000_000_000), '100000000.00');
    assert.throws(() => minorToDecimal(1.5), RangeError);
    assert.equal(decimalToMinor('19.99'), 1999);
    assert.equal(decimalToMinor('0.3'), 30);
    assert.equal(decimalToMinor('20'), 2000);
    assert.equal(decimalToMinor('0.30000000000000004'), null);
    assert.equal(decimalToMinor('-1.00'), null);
    assert.equal(decimalToMinor('1e3'), null);
  });
});

describe('charge', () => {
  it('succeeds with the ok buyer', async () => {
    const outTradeNo = newOutTradeNo();
    const outcome = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 1999 }));
    assert.equal(outcome.kind, 'succeeded');
    assert.ok(outcome.kind === 'succeeded', "outcome.kind === 'succeeded'");
    assert.equal(outcome.amountMinor, 1999);
    assert.equal(outcome.currency, 'CNY');
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.amountMinor, c.gatewayTradeNo]),
      [['succeeded', 1999, outcome.gatewayTradeNo]],
    );
  });

  it('declines both test buyers, then succeeds with the ok buyer on the same out_trade_no', async () => {
    const outTradeNo = newOutTradeNo();
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' })), {
      kind: 'declined',
      code: 'ACQ.BUYER_BALANCE_NOT_ENOUGH',
      message: '买家余额不足',
    });
    const restricted = await gateway.charge(chargeRequest(outTradeNo, { buyer: 'account_restricted', attempt: 2 }));
    assert.equal(restricted.kind, 'declined');
    assert.ok(restricted.kind === 'declined', "restricted.kind === 'declined'");
    assert.equal(restricted.code, 'ACQ.BUYER_ENABLE_STATUS_FORBID');
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });

    const ok = await gateway.charge(chargeRequest(outTradeNo, { buyer: 'ok', attempt: 3 }));
    assert.equal(ok.kind, 'succeeded');
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['declined', 'declined', 'succeeded'],
    );
  });

  it('reports a repeated charge of a paid order as succeeded (TRADE_HAS_SUCCESS + query), charging once', async () => {
    const outTradeNo = newOutTradeNo();
    const first = await gateway.charge(chargeRequest(outTradeNo));
    const second = await gateway.charge(chargeRequest(outTradeNo));
    assert.equal(first.kind, 'succeeded');
    assert.deepEqual(second, first);
    const { charges } = await ledger(outTradeNo);
    assert.equal(charges.filter((c) => c.status === 'succeeded').length, 1);
    assert.equal(charges.length, 1);
  });

  it('does not call a paid order succeeded for another amount', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await gateway.charge(chargeRequest(outTradeNo))).kind, 'succeeded');
    const other = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 1231 }));
    assert.equal(other.kind, 'indeterminate');
    assert.ok(other.kind === 'indeterminate', "other.kind === 'indeterminate'");
    assert.equal(other.code, 'ACQ.TRADE_HAS_SUCCESS');
  });

  it('declines a changed amount on an open trade with ACQ.CONTEXT_INCONSISTENT', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }))).kind, 'declined');
    const changed = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 1300, attempt: 2 }));
    assert.equal(changed.kind, 'declined');
    assert.ok(changed.kind === 'declined', "changed.kind === 'declined'");
    assert.equal(changed.code, 'ACQ.CONTEXT_INCONSISTENT');
  });

  it('has a hyphenated out_trade_no refused by the gateway', async () => {
    const outTradeNo = `ORDER-${newOutTradeNo()}`;
    const outcome = await gateway.charge(chargeRequest(outTradeNo));
    assert.equal(outcome.kind, 'declined');
    assert.ok(outcome.kind === 'declined', "outcome.kind === 'declined'");
    assert.equal(outcome.code, 'ACQ.INVALID_PARAMETER');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('accepts keys as bare base64, the way Alipay’s key tool prints them', async () => {
    const bare = (pem: string) =>
      pem
        .split('\n')
        .filter((l) => !l.startsWith('-----'))
        .join('');
    const g = createAlipayGateway(config({ appPrivateKey: bare(creds.appPrivateKey), alipayPublicKey: bare(creds.alipayPublicKey) }));
    assert.equal((await g.charge(chargeRequest(newOutTradeNo()))).kind, 'succeeded');
    assert.throws(() => createAlipayGateway(config({ appPrivateKey: 'not a key' })), /appPrivateKey/);
  });
});

describe('charge transport failures', () => {
  it('sends a charge twice when the connection drops after sending: urllib re-sends the POST once', async () => {
    let requests = 0;
    const server = await startServer((req) => {
      requests += 1;
      req.socket.destroy();
    });
    try {
      await createAlipayGateway(config({ gatewayUrl: `${server.url}/gateway.do` })).charge(chargeRequest(newOutTradeNo()));
      assert.equal(requests, 2);
    } finally {
      await server.close();
    }
  });

  it('is indeterminate when the response signature does not verify, even for a success', async () => {
    const { publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const g = createAlipayGateway(config({ alipayPublicKey: publicKey.export({ type: 'spki', format: 'pem' }).toString() }));
    const outTradeNo = newOutTradeNo();
    const outcome = await g.charge(chargeRequest(outTradeNo));
    assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
    assert.equal(outcome.code, 'INVALID_RESPONSE_SIGNATURE');
    // It did charge: exactly the case that must be settled by a query, never by guessing.
    assert.equal((await ledger(outTradeNo)).charges[0]?.status, 'succeeded');
    const settled = await gateway.query(outTradeNo);
    assert.ok(
      settled.kind === 'answered' && settled.trade.kind === 'succeeded',
      "settled.kind === 'answered' && settled.trade.kind === 'succeeded'",
    );
  });
});

describe('notifications', () => {
  /** The merchant's webhook: verifies with the adapter, answers from a per-trade script. */
  const verdicts = new Map<string, NotificationVerdict[]>();
  const scripts = new Map<string, string[]>();
  let receiver: { url: string; close(): Promise<void> };

  before(async () => {
    receiver = await startServer((req, res) => {
      let rawBody = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (rawBody += chunk));
      req.on('end', () => {
        const key = (req.url ?? '/').split('/').pop() ?? '';
        void gateway.verifyNotification({ headers: new Headers(), rawBody }).then((verdict) => {
          verdicts.set(key, [...(verdicts.get(key) ?? []), verdict]);
          const script = scripts.get(key) ?? [];
          const next = script.length > 1 ? script.shift() : script[0];
          const reply =
            next === undefined || next === 'success'
              ? gateway.notificationReply(verdict.kind === 'verified')
              : { status: 200, headers: {}, body: next };
          res.writeHead(reply.status, reply.headers);
          res.end(reply.body);
        });
      });
    });
  });
  after(async () => {
    await receiver.close();
  });

  it('verifies the sandbox’s notification and is retried until it answers `success`', async () => {
    const outTradeNo = newOutTradeNo();
    scripts.set(outTradeNo, ['fail', 'fail', 'success']);
    const paid = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 5000, notifyUrl: `${receiver.url}/alipay/${outTradeNo}` }));
    assert.ok(paid.kind === 'succeeded', "paid.kind === 'succeeded'");

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
          gateway: 'alipay',
          eventId: outTradeNo,
          merchantId: creds.appId,
          outTradeNo,
          status: 'succeeded',
          gatewayTradeNo: paid.gatewayTradeNo,
          amountMinor: 5000,
          currency: 'CNY',
        },
      });
    }
  });

  it('verifies a validly signed tampered amount (the app’s amount check must catch it) and sends copies at once', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { notifyUrl: `${receiver.url}/alipay/${outTradeNo}` }));
    await waitFor('the scheduled delivery', async () => ((verdicts.get(outTradeNo) ?? []).length >= 1 ? true : undefined));
    const res = await fetch(`${sandbox.url}/sandbox/alipay/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo, copies: 5, overrides: { total_amount: '0.01' } }),
    });
    assert.equal(res.status, 200);
    const { deliveries } = (await res.json()) as { deliveries: { status: number; body: string }[] };
    assert.deepEqual(
      deliveries,
      Array.from({ length: 5 }, () => ({ status: 200, body: 'success' })),
    );
    const tampered = (verdicts.get(outTradeNo) ?? []).slice(1);
    assert.equal(tampered.length, 5);
    for (const verdict of tampered) {
      assert.ok(verdict.kind === 'verified', "verdict.kind === 'verified'");
      assert.equal(verdict.notification.amountMinor, 1);
    }
    const { notifications } = await ledger(outTradeNo);
    assert.deepEqual(
      notifications.map((n) => n.attempt),
      [1, 2, 3, 4, 5, 6],
    );
  });

  it('rejects a notification signed by another key, a tampered one and one missing a field', async () => {
    const outTradeNo = newOutTradeNo();
    const fields: Record<string, string> = {
      notify_time: '2024-01-01 12:00:00',
      notify_type: 'trade_status_sync',
      notify_id: 'abc',
      app_id: creds.appId,
      charset: 'utf-8',
      version: '1.0',
      trade_no: '2024010122000000000000000001',
      out_trade_no: outTradeNo,
      trade_status: 'TRADE_SUCCESS',
      total_amount: '12.30',
      subject: 'x',
    };
    const sign = (data: Record<string, string>, privateKeyPem: string) => {
      const content = Object.keys(data)
        .sort()
        .map((k) => `${k}=${data[k]}`)
        .join('&');
      return createSign('RSA-SHA256').update(content, 'utf8').sign(privateKeyPem, 'base64');
    };
    const body = (data: Record<string, string>) => new URLSearchParams(data).toString();
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const forgerPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

    const forged = await gateway.verifyNotification({
      headers: new Headers(),
      rawBody: body({ ...fields, sign_type: 'RSA2', sign: sign(fields, forgerPem) }),
    });
    assert.deepEqual(forged, { kind: 'rejected', reason: 'invalid signature' });
    const unsigned = await gateway.verifyNotification({ headers: new Headers(), rawBody: body(fields) });
    assert.deepEqual(unsigned, { kind: 'rejected', reason: 'missing sign' });

    // Real ones from the sandbox's tool: a field removed before signing, a bad signature, RSA (SHA-1).
    await gateway.charge(chargeRequest(outTradeNo, { notifyUrl: `${receiver.url}/alipay/${outTradeNo}` }));
    // Let the scheduled delivery land (and be acknowledged) so the verdicts below are the tool's.
    await waitFor('the scheduled delivery', async () => ((verdicts.get(outTradeNo) ?? []).length >= 1 ? true : undefined));
    const tool = async (overrides: Record<string, string>) => {
      const res = await fetch(`${sandbox.url}/sandbox/alipay/notify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ outTradeNo, overrides }),
      });
      assert.equal(res.status, 200);
      return (verdicts.get(outTradeNo) ?? []).at(-1) as NotificationVerdict;
    };
    assert.deepEqual(await tool({ trade_no: '' }), { kind: 'rejected', reason: 'missing trade_no' });
    assert.deepEqual(await tool({ sign: 'AAAA' }), { kind: 'rejected', reason: 'invalid signature' });
    assert.deepEqual(await tool({ sign_type: 'RSA' }), { kind: 'rejected', reason: 'unsupported sign_type RSA' });
    assert.deepEqual(await tool({ total_amount: '1.001' }), { kind: 'rejected', reason: 'invalid total_amount 1.001' });
  });
});

// ---------------------------------------------------------------------------------------------
// close, refund, queryRefund

function newRefundId(): string {
  return `R${randomBytes(8).toString('hex')}`;
}

function refundRequest(outTradeNo: string, gatewayTradeNo: string, overrides: Partial<RefundRequest> = {}): RefundRequest {
  return {
    outTradeNo,
    gatewayTradeNo,
    refundId: newRefundId(),
    amountMinor: 1230,
    chargeAmountMinor: 1230,
    currency: 'CNY',
    reason: '订单已在别处支付',
    ...overrides,
  };
}

async function paidTrade(amountMinor = 1230): Promise<{ outTradeNo: string; gatewayTradeNo: string }> {
  const outTradeNo = newOutTradeNo();
  const paid = await gateway.charge(chargeRequest(outTradeNo, { amountMinor }));
  assert.ok(paid.kind === 'succeeded', JSON.stringify(paid));
  return { outTradeNo, gatewayTradeNo: paid.gatewayTradeNo };
}

async function armFault(spec: Record<string, unknown>): Promise<void> {
  const res = await fetch(`${sandbox.url}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ gateway: 'alipay', ...spec }),
  });
  assert.equal(res.status, 201);
}

function buyerPays(outTradeNo: string, buyer = 'ok'): Promise<Response> {
  return fetch(`${sandbox.url}/sandbox/alipay/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ outTradeNo, buyer }),
  });
}

describe('close', () => {
  it('keeps one trade per order', () => {
    assert.equal(gateway.oneTradePerOrder, true);
  });

  it('closes the trade a decline left open, twice, and the buyer can no longer pay it', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }))).kind, 'declined');
    // 1. Close; 2. close again (idempotent).
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
    // 3. The abandoned trade is dead: the buyer tool and a new charge are both refused.
    const late = await buyerPays(outTradeNo);
    assert.equal(late.status, 409);
    assert.equal(((await late.json()) as { code: string }).code, 'TRADE_NOT_PAYABLE');
    const again = await gateway.charge(chargeRequest(outTradeNo, { attempt: 2 }));
    assert.ok(again.kind === 'declined', "again.kind === 'declined'");
    assert.equal(again.code, 'ACQ.TRADE_HAS_CLOSE');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('blocks an out_trade_no that has no trade yet (trade.cancel), so a late charge cannot land', async () => {
    const outTradeNo = newOutTradeNo();
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
    const late = await gateway.charge(chargeRequest(outTradeNo));
    assert.ok(late.kind === 'declined', JSON.stringify(late));
    assert.equal(late.code, 'ACQ.TRADE_HAS_CLOSE');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('answers already_paid for a paid trade and never cancels (refunds) it', async () => {
    const { outTradeNo, gatewayTradeNo } = await paidTrade(2500);
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 2500, currency: 'CNY' }), {
      kind: 'already_paid',
      charges: [{ gatewayTradeNo, amountMinor: 2500, currency: 'CNY' }],
    });
    const { refunds } = await ledger(outTradeNo);
    assert.deepEqual(refunds, []);
    assert.deepEqual(await gateway.query(outTradeNo), {
      kind: 'answered',
      trade: { kind: 'succeeded', gatewayTradeNo, amountMinor: 2500, currency: 'CNY' },
    });
  });

  it('answers already_paid when the buyer pays between the query and trade.close (ACQ.TRADE_STATUS_ERROR)', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    // 1. trade.close is held in the sandbox for a while after it arrives (the query before it is not).
    await armFault({ operation: 'close', action: 'slow', delayMs: 600 });
    const closing = gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' });
    await waitFor('trade.close to arrive (its fault is spent)', async () => {
      const { faults } = (await (await fetch(`${sandbox.url}/sandbox/faults`)).json()) as { faults: unknown[] };
      return faults.length === 0 ? true : undefined;
    });
    // 2. Meanwhile the buyer pays the open trade.
    assert.equal((await buyerPays(outTradeNo)).status, 200);
    // 3. The close is refused; the adapter asks again and reports the payment.
    const outcome = await closing;
    await fetch(`${sandbox.url}/sandbox/faults`, { method: 'DELETE' });
    assert.ok(outcome.kind === 'already_paid', JSON.stringify(outcome));
    assert.equal(outcome.charges.length, 1);
    assert.equal(outcome.charges[0]?.amountMinor, 1230);
  });

  it('is indeterminate and closes nothing under fail_before_charge; a later close closes', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'account_restricted' }));
    await armFault({ operation: 'close', action: 'fail_before_charge' });
    const outcome = await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' });
    assert.deepEqual(outcome.kind, 'indeterminate');
    assert.ok(outcome.kind === 'indeterminate', "outcome.kind === 'indeterminate'");
    // Alipay's own failure shape: a signed 20000 isp.unknow-error in an HTTP 200.
    assert.equal(outcome.code, 'isp.unknow-error');
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
  });
});

describe('refund', () => {
  it('refunds once per refundId: the same refundId twice is one refund in the ledger', async () => {
    const { outTradeNo, gatewayTradeNo } = await paidTrade();
    const request = refundRequest(outTradeNo, gatewayTradeNo);
    const expected = { kind: 'succeeded', gatewayRefundId: `${gatewayTradeNo}:${request.refundId}`, amountMinor: 1230 };
    assert.deepEqual(await gateway.refund(request), expected);
    // The repeat is answered with fund_change "N" and confirmed by the refund query.
    assert.deepEqual(await gateway.refund(request), expected);
    const { refunds } = await ledger(outTradeNo);
    assert.deepEqual(
      refunds.map((r) => [r.refundId, r.amountMinor, r.status, r.gatewayRefundId]),
      [[request.refundId, 1230, 'succeeded', expected.gatewayRefundId]],
    );
    // Fully refunded: Alipay closes the trade, and query reports `closed`.
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'closed' } });
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 1230, currency: 'CNY' }), { kind: 'closed' });
  });

  it('fails the same refundId sent again with another amount (ACQ.DISCORDANT_REPEAT_REQUEST)', async () => {
    const { outTradeNo, gatewayTradeNo } = await paidTrade();
    const request = refundRequest(outTradeNo, gatewayTradeNo, { amountMinor: 100 });
    assert.equal((await gateway.refund(request)).kind, 'succeeded');
    const changed = await gateway.refund({ ...request, amountMinor: 200 });
    assert.ok(changed.kind === 'failed', "changed.kind === 'failed'");
    assert.equal(changed.code, 'ACQ.DISCORDANT_REPEAT_REQUEST');
    assert.equal((await ledger(outTradeNo)).refunds.length, 1);
  });

  it('absorbs the HTTP client’s silent re-send after one dropped answer: succeeded, one refund', async () => {
    const { outTradeNo, gatewayTradeNo } = await paidTrade();
    const request = refundRequest(outTradeNo, gatewayTradeNo);
    await armFault({ operation: 'refund', action: 'drop_after_charge' });
    assert.equal((await gateway.refund(request)).kind, 'succeeded');
    assert.equal((await ledger(outTradeNo)).refunds.length, 1);
  });
});

describe('queryRefund', () => {
  it('answers not_found for a refundId Alipay never saw and for an unknown trade', async () => {
    const { outTradeNo, gatewayTradeNo } = await paidTrade();
    const request = refundRequest(outTradeNo, gatewayTradeNo);
    assert.deepEqual(await gateway.queryRefund(request), { kind: 'answered', refund: { kind: 'not_found' } });
    assert.deepEqual(await gateway.queryRefund({ outTradeNo: newOutTradeNo(), gatewayTradeNo: '', refundId: request.refundId }), {
      kind: 'answered',
      refund: { kind: 'not_found' },
    });
  });
});

describe('refund notifications', () => {
  const verdicts = new Map<string, NotificationVerdict[]>();
  let receiver: { url: string; close(): Promise<void> };

  before(async () => {
    receiver = await startServer((req, res) => {
      let rawBody = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (rawBody += chunk));
      req.on('end', () => {
        const key = (req.url ?? '/').split('/').pop() ?? '';
        void gateway.verifyNotification({ headers: new Headers(), rawBody }).then((verdict) => {
          verdicts.set(key, [...(verdicts.get(key) ?? []), verdict]);
          const reply = gateway.notificationReply(verdict.kind !== 'rejected');
          res.writeHead(reply.status, reply.headers);
          res.end(reply.body);
        });
      });
    });
  });
  after(async () => {
    await receiver.close();
  });

  it('reads a refund’s notification as kind refund, never as a second payment', async () => {
    const outTradeNo = newOutTradeNo();
    const paid = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 3000, notifyUrl: `${receiver.url}/alipay/${outTradeNo}` }));
    assert.ok(paid.kind === 'succeeded', "paid.kind === 'succeeded'");
    const { gatewayTradeNo } = paid;
    await waitFor('the payment notification', async () => ((verdicts.get(outTradeNo) ?? []).length >= 1 ? true : undefined));
    const partial = refundRequest(outTradeNo, gatewayTradeNo, { amountMinor: 1000, chargeAmountMinor: 3000 });
    const rest = refundRequest(outTradeNo, gatewayTradeNo, { amountMinor: 2000, chargeAmountMinor: 3000 });
    assert.equal((await gateway.refund(partial)).kind, 'succeeded');
    await waitFor('the first refund notification', async () => ((verdicts.get(outTradeNo) ?? []).length >= 2 ? true : undefined));
    assert.equal((await gateway.refund(rest)).kind, 'succeeded');
    const received = await waitFor('the second refund notification', async () => {
      const list = verdicts.get(outTradeNo) ?? [];
      return list.length >= 3 ? list : undefined;
    });
    const [payment, first, second] = received;
    assert.ok(payment?.kind === 'verified', "payment?.kind === 'verified'");
    assert.equal(payment.notification.status, 'succeeded');
    assert.deepEqual(first, {
      kind: 'refund',
      notification: {
        gateway: 'alipay',
        eventId: `${outTradeNo}:refund:${partial.refundId}`,
        merchantId: creds.appId,
        outTradeNo,
        refundId: partial.refundId,
        gatewayRefundId: `${gatewayTradeNo}:${partial.refundId}`,
        status: 'succeeded',
        amountMinor: 1000,
        currency: 'CNY',
      },
    });
    // After the last refund Alipay's trade_status is TRADE_CLOSED; refund_fee is the running total.
    assert.ok(second?.kind === 'refund', "second?.kind === 'refund'");
    assert.equal(second.notification.refundId, rest.refundId);
    assert.equal(second.notification.amountMinor, 3000);
    // The sandbox records a delivery once the receiver has answered it: wait for the third record.
    const notifications = await waitFor('three recorded deliveries', async () => {
      const list = (await ledger(outTradeNo)).notifications;
      return list.length >= 3 ? list : undefined;
    });
    assert.deepEqual(
      notifications.map((n) => n.acknowledged),
      [true, true, true],
    );
  });
});
