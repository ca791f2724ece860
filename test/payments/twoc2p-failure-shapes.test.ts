/**
 * How the 2C2P adapter reads 2C2P's own failure shapes at each point the drills inject faults (charge =
 * Do Payment, close = cancelTransaction, refund): 2C2P answers failures with HTTP 200 and an error body
 * — a plain {respCode, respDesc}, or the same inside a JWT signed with the merchant secret — rather than
 * an HTTP 5xx. A proxy of the test's own stands in front of the sandbox and either forwards the request
 * (the sandbox really processes it) and replaces the answer, or answers without forwarding.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/twoc2p-failure-shapes.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type http from 'node:http';
import { after, before, describe, it } from 'node:test';
import { SignJWT } from 'jose';
import type { ChargeRequest, PaymentGateway } from '@/server/payments/gateway';
import { createTwoC2pGateway, type TwoC2pGatewayConfig } from '@/server/payments/twoc2p';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { twoC2pModule } from '@/sandbox/twoc2p';
import type { Ledger } from '@/soak/invariants';
import { readLedger, startServer } from '@/test/support/harness';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  merchantId: string;
  secretKey: string;
  baseUrl: string;
  maintenanceUrl: string;
  merchantPrivateKey: string;
  twoc2pPublicKey: string;
  testBuyers: { ok: string; insufficient_funds: string; account_restricted: string };
}

let sandbox: RunningSandbox;
let creds: Credentials;
let gateway: PaymentGateway;

type Forward = () => Promise<{ status: number; body: string }>;
type Handler = (res: http.ServerResponse, forward: Forward) => unknown;

function config(overrides: Partial<TwoC2pGatewayConfig> = {}): TwoC2pGatewayConfig {
  const { merchantId, secretKey, baseUrl, maintenanceUrl, merchantPrivateKey, twoc2pPublicKey, testBuyers } = creds;
  return { merchantId, secretKey, baseUrl, maintenanceUrl, merchantPrivateKey, twoc2pPublicKey, testBuyers, ...overrides };
}

function newOutTradeNo(): string {
  return `PO${Date.now().toString(36).toUpperCase()}${randomBytes(5).toString('hex').toUpperCase()}`.slice(0, 20);
}

function charge(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo,
    amountMinor: 16800,
    currency: 'CNY',
    subject: 'PayOnce 订单',
    attempt: 1,
    buyer: 'ok',
    notifyUrl: 'http://127.0.0.1:9/unused',
    ...overrides,
  };
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

/** HTTP 200 with 2C2P's plain error body. */
function plain(respCode: string, respDesc: string): Handler {
  return (res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ respCode, respDesc }));
}

/** HTTP 200 with the error inside a JWT signed with the merchant secret (a genuine 2C2P answer). */
function signed(claims: Record<string, unknown>): Handler {
  return async (res) => {
    const payload = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .sign(new TextEncoder().encode(creds.secretKey));
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ payload }));
  };
}

/** HTTP 200 with the Maintenance API's unsealed XML: what 2C2P says when it cannot tell who asked. */
function plainXml(respCode: string, respDesc: string): Handler {
  return (res) =>
    res
      .writeHead(200, { 'content-type': 'text/plain' })
      .end(
        `<PaymentProcessResponse><version>3.8</version><respCode>${respCode}</respCode><respDesc>${respDesc}</respDesc></PaymentProcessResponse>`,
      );
}

/** The sandbox processes the request; the caller gets `then`'s answer instead of the sandbox's. */
function afterProcessing(then: Handler): Handler {
  return async (res, forward) => {
    await forward();
    await then(res, forward);
  };
}

async function withProxy<T>(misbehave: Record<string, Handler>, body: (g: PaymentGateway) => Promise<T>): Promise<T> {
  const server = await startServer((req, res) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (text += chunk));
    req.on('end', () => {
      const api = (req.url ?? '').split('/').pop() ?? '';
      const forward: Forward = async () => {
        // "action": the Payment Maintenance API, its own URL and a text/plain JWS.
        const upstream = await fetch(api === 'action' ? creds.maintenanceUrl : `${creds.baseUrl}/${api}`, {
          method: 'POST',
          headers: { 'content-type': api === 'action' ? 'text/plain' : 'application/json' },
          body: text,
        });
        return { status: upstream.status, body: await upstream.text() };
      };
      const handler = misbehave[api];
      if (handler) {
        void handler(res, forward);
        return;
      }
      void forward().then(({ status, body: answer }) => res.writeHead(status, { 'content-type': 'application/json' }).end(answer));
    });
  });
  try {
    return await body(
      createTwoC2pGateway(config({ baseUrl: `${server.url}/payment/4.3`, maintenanceUrl: `${server.url}/PaymentAction/2.0/action` })),
    );
  } finally {
    await server.close();
  }
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [twoC2pModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { '2c2p': Credentials })['2c2p'];
  gateway = createTwoC2pGateway(config());
});

after(async () => {
  await sandbox.close();
});

describe('charge (Do Payment) failing in 2C2P’s shapes', () => {
  it('is retryable when Do Payment answers 0999 (plain or signed) and the signed inquiry finds no payment attempt; the retry charges once', async () => {
    for (const answer of [plain('0999', 'System error'), signed({ respCode: '0999', respDesc: 'System error' })]) {
      const outTradeNo = newOutTradeNo();
      const outcome = await withProxy({ payment: answer }, (g) => g.charge(charge(outTradeNo)));
      assert.deepEqual([outcome.kind, 'code' in outcome ? outcome.code : ''], ['retryable', '0999'], JSON.stringify(outcome));
      assert.deepEqual((await ledger(outTradeNo)).charges, []);
      assert.equal((await gateway.charge(charge(outTradeNo))).kind, 'succeeded');
      assert.equal((await ledger(outTradeNo)).charges.length, 1);
    }
  });

  it('is retryable, not an earlier attempt’s decline, when a new attempt’s Do Payment answers 0999', async () => {
    const outTradeNo = newOutTradeNo();
    assert.equal((await gateway.charge(charge(outTradeNo, { buyer: 'insufficient_funds' }))).kind, 'declined');
    const outcome = await withProxy({ payment: plain('0999', 'System error') }, (g) => g.charge(charge(outTradeNo, { attempt: 2 })));
    assert.equal(outcome.kind, 'retryable', JSON.stringify(outcome));
    assert.equal((await gateway.charge(charge(outTradeNo, { attempt: 2 }))).kind, 'succeeded');
  });

  it('is succeeded when Do Payment charged but answered 0999: the signed inquiry decides', async () => {
    const outTradeNo = newOutTradeNo();
    const outcome = await withProxy({ payment: afterProcessing(plain('0999', 'System error')) }, (g) => g.charge(charge(outTradeNo)));
    assert.equal(outcome.kind, 'succeeded', JSON.stringify(outcome));
    assert.equal((await ledger(outTradeNo)).charges[0]?.status, 'succeeded');
  });

  it('is indeterminate when Do Payment answers 0999 and the inquiry cannot be read (0999 too)', async () => {
    const outTradeNo = newOutTradeNo();
    const outcome = await withProxy(
      { payment: afterProcessing(plain('0999', 'System error')), paymentInquiry: plain('0999', 'System error') },
      (g) => g.charge(charge(outTradeNo)),
    );
    assert.equal(outcome.kind, 'indeterminate', JSON.stringify(outcome));
    const settled = await gateway.query(outTradeNo);
    assert.ok(settled.kind === 'answered' && settled.trade.kind === 'succeeded');
  });

  it('query() is unavailable on a plain or signed 0999 inquiry answer', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(charge(outTradeNo));
    for (const answer of [plain('0999', 'System error'), signed({ invoiceNo: outTradeNo, respCode: '0999', respDesc: 'System error' })]) {
      const outcome = await withProxy({ paymentInquiry: answer }, (g) => g.query(outTradeNo));
      assert.deepEqual([outcome.kind, 'code' in outcome ? outcome.code : ''], ['unavailable', '0999']);
    }
  });
});

describe('close (cancelTransaction) failing in 2C2P’s shapes', () => {
  it('is indeterminate on a plain or signed 0999 that cancelled nothing; a later close closes', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(charge(outTradeNo, { buyer: 'insufficient_funds' }));
    for (const answer of [
      plain('0999', 'System error'),
      signed({ merchantID: creds.merchantId, invoiceNo: outTradeNo, respCode: '0999', respDesc: 'System error' }),
    ]) {
      const outcome = await withProxy({ cancelTransaction: answer }, (g) => g.close({ outTradeNo, amountMinor: 16800, currency: 'CNY' }));
      assert.equal(outcome.kind, 'indeterminate', JSON.stringify(outcome));
      assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    }
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 16800, currency: 'CNY' }), { kind: 'closed' });
  });

  it('is closed when the cancel went through but answered a signed 0999: the second inquiry finds it cancelled', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(charge(outTradeNo, { buyer: 'insufficient_funds' }));
    const outcome = await withProxy(
      {
        cancelTransaction: afterProcessing(
          signed({ merchantID: creds.merchantId, invoiceNo: outTradeNo, respCode: '0999', respDesc: 'System error' }),
        ),
      },
      (g) => g.close({ outTradeNo, amountMinor: 16800, currency: 'CNY' }),
    );
    assert.deepEqual(outcome, { kind: 'closed' });
  });
});

describe('refund failing in 2C2P’s shapes', () => {
  it('is indeterminate on a plain or a sealed 99; queryRefund settles it and the same refundId refunds once', async () => {
    const outTradeNo = newOutTradeNo();
    const paid = await gateway.charge(charge(outTradeNo));
    assert.ok(paid.kind === 'succeeded');
    const refund = {
      outTradeNo,
      gatewayTradeNo: paid.gatewayTradeNo,
      refundId: `RF${randomBytes(8).toString('hex').toUpperCase()}`,
      amountMinor: 16800,
      chargeAmountMinor: 16800,
      currency: 'CNY',
      reason: 'PayOnce 重复支付退款',
    };
    // 1. Unsealed 99 (from something in 2C2P's place), then 2C2P's own sealed 99 (the sandbox's
    //    fail_before_charge answer on this API): neither proves that nothing was refunded.
    const plainOutcome = await withProxy({ action: plainXml('99', 'Unable to complete the request.') }, (g) => g.refund(refund));
    assert.deepEqual(plainOutcome, { kind: 'indeterminate', code: '99', message: 'Unable to complete the request.' });
    await armFault({ gateway: '2c2p', operation: 'refund', action: 'fail_before_charge' });
    const sealedOutcome = await gateway.refund(refund);
    assert.deepEqual(sealedOutcome, { kind: 'indeterminate', code: '99', message: 'Unable to complete the request.' });
    assert.deepEqual(await gateway.queryRefund(refund), { kind: 'answered', refund: { kind: 'not_found' } });
    // 2. Processed, then the answer replaced: the status inquiry finds it; the repeat refunds nothing more.
    const lost = await withProxy({ action: afterProcessing(plainXml('99', 'Unable to complete the request.')) }, (g) => g.refund(refund));
    assert.equal(lost.kind, 'indeterminate');
    const found = await gateway.queryRefund(refund);
    assert.ok(found.kind === 'answered' && found.refund.kind === 'succeeded', JSON.stringify(found));
    assert.equal((await gateway.refund(refund)).kind, 'succeeded');
    assert.equal((await ledger(outTradeNo)).refunds.length, 1);
  });
});

async function armFault(fault: Record<string, unknown>): Promise<void> {
  const res = await fetch(`${sandbox.url}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(fault),
  });
  assert.equal(res.status, 201);
}
