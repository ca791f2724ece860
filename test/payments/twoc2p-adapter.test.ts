/**
 * The 2C2P adapter against the PSP sandbox over HTTP (real PostgreSQL behind it), plus a proxy in
 * front of the sandbox that misbehaves on one API at a time, for the transport failures a healthy
 * sandbox never produces.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/twoc2p-adapter.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { SignJWT, UnsecuredJWT } from 'jose';
import type { ChargeRequest, NotificationVerdict, PaymentGateway, RefundRequest } from '@/server/payments/gateway';
import { createTwoC2pGateway, type TwoC2pGatewayConfig } from '@/server/payments/twoc2p';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { twoC2pModule } from '@/sandbox/twoc2p';
import { strangerKey } from '@/test/support/contract-adapters';
import { waitFor, startServer, readLedger } from '@/test/support/harness';

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

interface Ledger {
  charges: { outTradeNo: string; amountMinor: number; currency: string; status: string; gatewayTradeNo: string | null }[];
  notifications: { outTradeNo: string; attempt: number; acknowledged: boolean }[];
  refunds: {
    outTradeNo: string;
    amountMinor: number;
    currency: string;
    status: string;
    refundId: string;
    gatewayRefundId: string;
    gatewayTradeNo: string;
  }[];
}

let sandbox: RunningSandbox;
let creds: Credentials;
let gateway: PaymentGateway;

function config(overrides: Partial<TwoC2pGatewayConfig> = {}): TwoC2pGatewayConfig {
  const { merchantId, secretKey, baseUrl, maintenanceUrl, merchantPrivateKey, twoc2pPublicKey, testBuyers } = creds;
  return { merchantId, secretKey, baseUrl, maintenanceUrl, merchantPrivateKey, twoc2pPublicKey, testBuyers, ...overrides };
}

/** Shaped like the app's out_trade_no: "PO" + 18 characters [0-9A-Z]. */
function newOutTradeNo(): string {
  return `PO${Date.now().toString(36).toUpperCase()}${randomBytes(5).toString('hex').toUpperCase()}`.slice(0, 20);
}

function chargeRequest(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo,
    amountMinor: 16800,
    currency: 'CNY',
    subject: 'PayOnce 订单 测试',
    attempt: 1,
    // The sandbox test buyer whose card pays: a synchronous charge (without a buyer the adapter opens
    // the hosted payment page instead, tested in 'the hosted payment page (redirect)').
    buyer: 'ok',
    notifyUrl: 'http://127.0.0.1:9/unused', // discard port: deliveries fail fast, nothing listens
    ...overrides,
  };
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

type Misbehaviour = (
  req: http.IncomingMessage,
  res: http.ServerResponse,
  forward: () => Promise<{ status: number; body: string }>,
) => void | Promise<void>;

/**
 * A proxy to the sandbox's API: `misbehave[api]` decides what happens to that API's requests (it may
 * forward first, so the sandbox really processes the request); the others pass through.
 */
async function startProxy(misbehave: Record<string, Misbehaviour>): Promise<{ baseUrl: string; close(): Promise<void> }> {
  const server = await startServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const api = (req.url ?? '').split('/').pop() ?? '';
      const forward = async () => {
        const upstream = await fetch(`${creds.baseUrl}/${api}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        return { status: upstream.status, body: await upstream.text() };
      };
      const handler = misbehave[api];
      if (handler) {
        void handler(req, res, forward);
        return;
      }
      void forward().then(({ status, body: text }) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(text);
      });
    });
  });
  return { baseUrl: `${server.url}/payment/4.3`, close: server.close };
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [twoC2pModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { '2c2p': Credentials })['2c2p'];
  gateway = createTwoC2pGateway(config());
});

after(async () => {
  await sandbox.close();
});

describe('charge', () => {
  it('succeeds with the ok buyer, in major units on the wire and fen in the ledger', async () => {
    const outTradeNo = newOutTradeNo();
    const outcome = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 1999 }));
    assert.ok(outcome.kind === 'succeeded', JSON.stringify(outcome));
    assert.equal(outcome.amountMinor, 1999);
    assert.equal(outcome.currency, 'CNY');
    assert.match(outcome.gatewayTradeNo, /^\d+$/);
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.amountMinor, c.currency, c.gatewayTradeNo]),
      [['succeeded', 1999, 'CNY', outcome.gatewayTradeNo]],
    );
  });

  it('charges other currencies with their own exponent (JPY has none)', async () => {
    const outTradeNo = newOutTradeNo();
    const outcome = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 1500, currency: 'JPY' }));
    assert.ok(outcome.kind === 'succeeded', JSON.stringify(outcome));
    assert.deepEqual([outcome.amountMinor, outcome.currency], [1500, 'JPY']);
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => [c.amountMinor, c.currency]),
      [[1500, 'JPY']],
    );
    const big = await gateway.charge(chargeRequest(newOutTradeNo(), { amountMinor: 99_999_999_999_999 }));
    assert.ok(big.kind === 'succeeded', JSON.stringify(big)); // 999,999,999,999.99: 12 integer digits
  });

  it('declines both test buyers, then succeeds with the ok buyer on the same out_trade_no', async () => {
    const outTradeNo = newOutTradeNo();
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' })), {
      kind: 'declined',
      code: '4051',
      message: 'Insufficient funds',
    });
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { buyer: 'account_restricted', attempt: 2 })), {
      kind: 'declined',
      code: '4062',
      message: 'Restricted card',
    });
    const ok = await gateway.charge(chargeRequest(outTradeNo, { buyer: 'ok', attempt: 3 }));
    assert.equal(ok.kind, 'succeeded');
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['declined', 'declined', 'succeeded'],
    );
  });

  it('reports a repeated charge of a paid order as succeeded, charging once (same attempt and a new one)', async () => {
    const outTradeNo = newOutTradeNo();
    const first = await gateway.charge(chargeRequest(outTradeNo));
    assert.equal(first.kind, 'succeeded');
    // The same attempt: idempotencyID replays the token, Do Payment says 9015, the inquiry settles it.
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo)), first);
    // A new attempt: paymentToken itself says 9015, the inquiry settles it.
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { attempt: 2, buyer: 'insufficient_funds' })), first);
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['succeeded'],
    );
  });

  it('does not call a paid order succeeded for another amount, and declines another amount on an open one', async () => {
    const paid = newOutTradeNo();
    assert.equal((await gateway.charge(chargeRequest(paid))).kind, 'succeeded');
    const other = await gateway.charge(chargeRequest(paid, { amountMinor: 16801, attempt: 2 }));
    assert.ok(other.kind === 'indeterminate', JSON.stringify(other));
    assert.equal(other.code, '9015');

    const open = newOutTradeNo();
    assert.equal((await gateway.charge(chargeRequest(open, { buyer: 'insufficient_funds' }))).kind, 'declined');
    const changed = await gateway.charge(chargeRequest(open, { amountMinor: 17000, attempt: 2 }));
    assert.ok(changed.kind === 'declined', JSON.stringify(changed));
    assert.equal(changed.code, '9015');
    assert.deepEqual(
      (await ledger(open)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('has a hyphenated invoice number refused by the gateway (nothing recorded)', async () => {
    const outTradeNo = `ORDER-${newOutTradeNo()}`;
    const outcome = await gateway.charge(chargeRequest(outTradeNo));
    assert.ok(outcome.kind === 'declined', JSON.stringify(outcome));
    assert.equal(outcome.code, '9004');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('sends what 2C2P documents: exact amount literals, a per-attempt idempotencyID, plain Do Payment', async () => {
    // A pass-through proxy that keeps every request body, per API.
    const seen: Record<string, string[]> = {};
    const proxy = await startServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        const api = (req.url ?? '').split('/').pop() ?? '';
        seen[api] = [...(seen[api] ?? []), body];
        void fetch(`${creds.baseUrl}/${api}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body }).then(
          async (upstream) => {
            res.writeHead(upstream.status, { 'content-type': 'application/json' });
            res.end(await upstream.text());
          },
        );
      });
    });
    try {
      const outTradeNo = newOutTradeNo();
      const g = createTwoC2pGateway(config({ baseUrl: `${proxy.url}/payment/4.3/` })); // a trailing slash is fine
      await g.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds', amountMinor: 1999 }));
      assert.equal((await g.charge(chargeRequest(outTradeNo, { attempt: 2, amountMinor: 1999 }))).kind, 'succeeded');

      const jwtText = (body: string) => {
        const { payload } = JSON.parse(body) as { payload: string };
        return Buffer.from(payload.split('.')[1] ?? '', 'base64url').toString('utf8');
      };
      const tokens = (seen.paymentToken ?? []).map(jwtText);
      assert.equal(tokens.length, 2);
      assert.match(tokens[0] ?? '', /"amount":19\.99,/); // a number literal, digit for digit
      assert.deepEqual(
        tokens.map((t) => JSON.parse(t) as Record<string, unknown>).map(({ amount: _amount, ...rest }) => rest),
        [1, 2].map((attempt) => ({
          merchantID: creds.merchantId,
          invoiceNo: outTradeNo,
          description: 'PayOnce 订单 测试',
          currencyCode: 'CNY',
          idempotencyID: `${outTradeNo}-${attempt}`,
          paymentChannel: ['CC'],
          request3DS: 'N',
          backendReturnUrl: 'http://127.0.0.1:9/unused',
        })),
      );
      const payments = (seen.payment ?? []).map(
        (body) => JSON.parse(body) as { paymentToken: string; payment: { code: unknown; data: Record<string, unknown> } },
      );
      assert.deepEqual(
        payments.map((p) => [p.payment.code, p.payment.data.cardNo]),
        [
          [{ channelCode: 'CC' }, creds.testBuyers.insufficient_funds],
          [{ channelCode: 'CC' }, creds.testBuyers.ok],
        ],
      );
      assert.ok(payments.every((p) => p.paymentToken.startsWith('kSA')));
      assert.deepEqual(
        (seen.paymentInquiry ?? []).map((body) => JSON.parse(jwtText(body)) as unknown),
        [
          { merchantID: creds.merchantId, invoiceNo: outTradeNo, locale: 'en' },
          { merchantID: creds.merchantId, invoiceNo: outTradeNo, locale: 'en' },
        ],
      );
    } finally {
      await proxy.close();
    }
  });

  it('declines a test buyer’s charge when no sandbox card is configured for it', async () => {
    const noCard = createTwoC2pGateway(config({ testBuyers: { ok: '', insufficient_funds: '', account_restricted: '' } }));
    assert.equal((await noCard.charge(chargeRequest(newOutTradeNo()))).kind, 'declined');
  });
});

describe('charge transport failures', () => {
  it('is retryable when Do Payment’s connection is refused (after a token was issued)', async () => {
    // A proxy that answers paymentToken, then stops listening: Do Payment's connection is refused.
    const server = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        void fetch(`${creds.baseUrl}/paymentToken`, { method: 'POST', headers: { 'content-type': 'application/json' }, body }).then(
          async (upstream) => {
            const text = await upstream.text();
            server.close();
            res.writeHead(upstream.status, { 'content-type': 'application/json', connection: 'close' });
            res.end(text);
          },
        );
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const outTradeNo = newOutTradeNo();
    const outcome = await createTwoC2pGateway(config({ baseUrl: `http://127.0.0.1:${port}/payment/4.3` })).charge(
      chargeRequest(outTradeNo),
    );
    assert.ok(outcome.kind === 'retryable', JSON.stringify(outcome));
    assert.equal(outcome.code, 'ECONNREFUSED');
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('is retryable when paymentToken times out: a token moves no money', async () => {
    const slowToken = await startProxy({ paymentToken: () => {} });
    try {
      const outcome = await createTwoC2pGateway(config({ baseUrl: slowToken.baseUrl, timeoutMs: 200 })).charge(
        chargeRequest(newOutTradeNo()),
      );
      assert.ok(outcome.kind === 'retryable', JSON.stringify(outcome));
      assert.equal(outcome.code, 'TIMEOUT');
    } finally {
      await slowToken.close();
    }
  });

  it('is indeterminate when a response JWT does not verify, even for a success', async () => {
    const forgedJwt = await new SignJWT({ respCode: '0000', respDesc: 'Success' })
      .setProtectedHeader({ alg: 'HS256' })
      .sign(new TextEncoder().encode('E'.repeat(64)));
    const resign =
      (payload: string) =>
      async (_req: http.IncomingMessage, res: http.ServerResponse, forward: () => Promise<{ status: number; body: string }>) => {
        await forward(); // the sandbox processes it; the answer is replaced on the way back
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ payload }));
      };
    for (const payload of [forgedJwt, new UnsecuredJWT({ respCode: '0000' }).encode(), 'garbage']) {
      const proxy = await startProxy({ paymentInquiry: resign(payload) });
      try {
        const outTradeNo = newOutTradeNo();
        const outcome = await createTwoC2pGateway(config({ baseUrl: proxy.baseUrl })).charge(chargeRequest(outTradeNo));
        assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
        assert.match(outcome.message, /INVALID_RESPONSE_SIGNATURE/);
        // It did charge: exactly the case that must be settled by a query.
        assert.equal((await ledger(outTradeNo)).charges[0]?.status, 'succeeded');
        const settled = await gateway.query(outTradeNo);
        assert.ok(settled.kind === 'answered' && settled.trade.kind === 'succeeded');
      } finally {
        await proxy.close();
      }
    }
    // On paymentToken, too: nothing was charged, but an answer that is not 2C2P's is never acted on.
    const proxy = await startProxy({ paymentToken: resign(forgedJwt) });
    try {
      const outTradeNo = newOutTradeNo();
      const outcome = await createTwoC2pGateway(config({ baseUrl: proxy.baseUrl })).charge(chargeRequest(outTradeNo));
      assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
      assert.equal(outcome.code, 'INVALID_RESPONSE_SIGNATURE');
      assert.deepEqual((await ledger(outTradeNo)).charges, []);
    } finally {
      await proxy.close();
    }
  });

  it('never believes an unsigned success, from Do Payment or from paymentInquiry', async () => {
    const proxy = await startProxy({
      payment: (_req, res) => {
        // Not forwarded: nothing was charged, whatever this says.
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ respCode: '0000', respDesc: 'Success', tranRef: '1', amount: 168 }));
      },
    });
    try {
      const outTradeNo = newOutTradeNo();
      const outcome = await createTwoC2pGateway(config({ baseUrl: proxy.baseUrl })).charge(chargeRequest(outTradeNo));
      assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
      assert.equal(outcome.code, '0001'); // the inquiry: token issued, nobody paid
      assert.deepEqual((await ledger(outTradeNo)).charges, []);
    } finally {
      await proxy.close();
    }
    // Nor an unsigned "paid" from paymentInquiry.
    const outTradeNo = newOutTradeNo();
    const plainInquiry = await startProxy({
      paymentInquiry: (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({ respCode: '0000', respDesc: 'Success', invoiceNo: outTradeNo, tranRef: '1', amount: 168, currencyCode: 'CNY' }),
        );
      },
    });
    try {
      const g = createTwoC2pGateway(config({ baseUrl: plainInquiry.baseUrl }));
      assert.deepEqual(await g.query(outTradeNo), { kind: 'unavailable', code: '0000', message: 'Success' });
      const outcome = await g.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
      assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
    } finally {
      await plainInquiry.close();
    }
  });
});

describe('query', () => {
  it('is unavailable when the secret is wrong (9042)', async () => {
    const wrongSecret = await createTwoC2pGateway(config({ secretKey: 'F'.repeat(64) })).query(newOutTradeNo());
    assert.deepEqual(wrongSecret, { kind: 'unavailable', code: '9042', message: 'Hash value mismatch' });
  });
});

describe('notifications', () => {
  /** The merchant's webhook: verifies with the adapter, answers from a per-trade script. */
  const verdicts = new Map<string, NotificationVerdict[]>();
  const scripts = new Map<string, number[]>();
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
            next === undefined || next === 200
              ? gateway.notificationReply(verdict.kind === 'verified')
              : { status: next, headers: {}, body: 'no' };
          res.writeHead(reply.status, reply.headers);
          res.end(reply.body);
        });
      });
    });
  });
  after(async () => {
    await receiver.close();
  });

  it('verifies the sandbox’s notification and is retried until it answers 200', async () => {
    const outTradeNo = newOutTradeNo();
    scripts.set(outTradeNo, [500, 500, 200]);
    const paid = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 5000, notifyUrl: `${receiver.url}/2c2p/${outTradeNo}` }));
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
          gateway: '2c2p',
          eventId: outTradeNo,
          merchantId: creds.merchantId,
          outTradeNo,
          status: 'succeeded',
          gatewayTradeNo: paid.gatewayTradeNo,
          amountMinor: 5000,
          currency: 'CNY',
        },
      });
    }
  });

  it('verifies a validly signed tampered amount or status (the app’s checks must catch them), sent as concurrent copies', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { notifyUrl: `${receiver.url}/2c2p/${outTradeNo}` }));
    await waitFor('the scheduled delivery', async () => ((verdicts.get(outTradeNo) ?? []).length >= 1 ? true : undefined));
    const tool = async (body: unknown) => {
      const res = await fetch(`${sandbox.url}/sandbox/2c2p/notify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      assert.equal(res.status, 200);
      return (await res.json()) as { deliveries: { status: number; body: string }[] };
    };
    const { deliveries } = await tool({ outTradeNo, copies: 5, overrides: { amount: '0.01' } });
    assert.deepEqual(
      deliveries,
      Array.from({ length: 5 }, () => ({ status: 200, body: '' })),
    );
    const tampered = (verdicts.get(outTradeNo) ?? []).slice(1);
    assert.equal(tampered.length, 5);
    for (const verdict of tampered) {
      assert.ok(verdict.kind === 'verified');
      assert.equal(verdict.notification.amountMinor, 1);
    }
    await tool({ outTradeNo, overrides: { respCode: '4051', respDesc: 'Insufficient funds' } });
    const failed = (verdicts.get(outTradeNo) ?? []).at(-1);
    assert.ok(failed?.kind === 'verified');
    assert.equal(failed.notification.status, 'other');
    assert.deepEqual(
      (await ledger(outTradeNo)).notifications.map((n) => n.attempt),
      [1, 2, 3, 4, 5, 6, 7],
    );
  });

  it('rejects every forgery and malformed notification, before reading it', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { notifyUrl: `${receiver.url}/2c2p/${outTradeNo}` }));
    await waitFor('the scheduled delivery', async () => ((verdicts.get(outTradeNo) ?? []).length >= 1 ? true : undefined));
    const claims = {
      merchantID: creds.merchantId,
      invoiceNo: outTradeNo,
      amount: 168,
      currencyCode: 'CNY',
      tranRef: '1',
      respCode: '0000',
      respDesc: 'Success',
    };
    const verifyBody = (body: string) => gateway.verifyNotification({ headers: new Headers(), rawBody: body });
    const signWith = (secret: string, alg: 'HS256' | 'HS512' = 'HS256', c: Record<string, unknown> = claims) =>
      new SignJWT(c).setProtectedHeader({ alg }).sign(new TextEncoder().encode(secret));

    assert.deepEqual(await verifyBody(JSON.stringify({ payload: await signWith('F'.repeat(64)) })), {
      kind: 'rejected',
      reason: 'invalid signature',
    });
    // The right secret, another algorithm: 2C2P only signs HS256.
    assert.deepEqual(await verifyBody(JSON.stringify({ payload: await signWith(creds.secretKey, 'HS512') })), {
      kind: 'rejected',
      reason: 'invalid signature',
    });
    assert.deepEqual(await verifyBody(JSON.stringify({ payload: new UnsecuredJWT(claims).encode() })), {
      kind: 'rejected',
      reason: 'invalid signature',
    });
    const genuine = await signWith(creds.secretKey);
    const [h, p, s] = genuine.split('.');
    const tamperedPayload = Buffer.from(JSON.stringify({ ...claims, amount: 1 })).toString('base64url');
    assert.deepEqual(await verifyBody(JSON.stringify({ payload: `${h}.${tamperedPayload}.${s}` })), {
      kind: 'rejected',
      reason: 'invalid signature',
    });
    assert.ok(p);
    assert.deepEqual(await verifyBody('payload=x'), { kind: 'rejected', reason: 'body is not JSON' });
    assert.deepEqual(await verifyBody('{}'), { kind: 'rejected', reason: 'missing payload' });
    assert.deepEqual(
      await verifyBody(JSON.stringify({ payload: await signWith(creds.secretKey, 'HS256', { ...claims, amount: 1.001 }) })),
      {
        kind: 'rejected',
        reason: 'invalid amount 1.001',
      },
    );
    assert.deepEqual(
      await verifyBody(JSON.stringify({ payload: await signWith(creds.secretKey, 'HS256', { ...claims, tranRef: undefined }) })),
      {
        kind: 'rejected',
        reason: 'missing tranRef',
      },
    );
    assert.equal((await verifyBody(JSON.stringify({ payload: genuine }))).kind, 'verified');

    // From the sandbox's tool: a field removed before signing, and a payload that is no JWT.
    const tool = async (overrides: Record<string, string>) => {
      const res = await fetch(`${sandbox.url}/sandbox/2c2p/notify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ outTradeNo, overrides }),
      });
      assert.equal(res.status, 200);
      const { deliveries } = (await res.json()) as { deliveries: { status: number }[] };
      return { verdict: (verdicts.get(outTradeNo) ?? []).at(-1), status: deliveries[0]?.status };
    };
    assert.deepEqual(await tool({ invoiceNo: '' }), { verdict: { kind: 'rejected', reason: 'missing invoiceNo' }, status: 500 });
    assert.deepEqual(await tool({ payload: 'not-a-jwt' }), { verdict: { kind: 'rejected', reason: 'invalid signature' }, status: 500 });
  });
});

// ---------------------------------------------------------------------------------------------
// Close, refund, refund status

async function arm(fault: Record<string, unknown>): Promise<void> {
  const res = await fetch(`${sandbox.url}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ gateway: '2c2p', ...fault }),
  });
  assert.equal(res.status, 201);
}

async function disarm(): Promise<void> {
  await fetch(`${sandbox.url}/sandbox/faults`, { method: 'DELETE' });
}

async function buyerPays(outTradeNo: string, buyer = 'ok'): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${sandbox.url}/sandbox/2c2p/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ outTradeNo, buyer }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

function closeRequest(outTradeNo: string) {
  return { outTradeNo, amountMinor: 16800, currency: 'CNY' };
}

/** A paid order and its charge. */
async function paidOrder(amountMinor = 16800): Promise<{ outTradeNo: string; gatewayTradeNo: string }> {
  const outTradeNo = newOutTradeNo();
  const outcome = await gateway.charge(chargeRequest(outTradeNo, { amountMinor }));
  assert.ok(outcome.kind === 'succeeded', JSON.stringify(outcome));
  return { outTradeNo, gatewayTradeNo: outcome.gatewayTradeNo };
}

function refundRequest(order: { outTradeNo: string; gatewayTradeNo: string }, overrides: Partial<RefundRequest> = {}): RefundRequest {
  return {
    outTradeNo: order.outTradeNo,
    gatewayTradeNo: order.gatewayTradeNo,
    refundId: `RF${randomBytes(10).toString('hex').toUpperCase()}`,
    amountMinor: 16800,
    chargeAmountMinor: 16800,
    currency: 'CNY',
    reason: 'PayOnce 重复支付退款',
    ...overrides,
  };
}

describe('close', () => {
  it('is one trade per order: a new attempt reopens the same invoice', () => {
    assert.equal(gateway.oneTradePerOrder, true);
  });

  it('closes an invoice left open by a decline; afterwards the buyer tool, a new charge and its Do Payment are refused', async () => {
    const outTradeNo = newOutTradeNo();
    // 1. Declined: the invoice stays payable, as 2C2P's hosted page lets the buyer try another card.
    assert.equal((await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }))).kind, 'declined');
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    // 2. Closed.
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), { kind: 'closed' });
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'closed' } });
    // 3. Nothing takes money for it any more.
    const tool = await buyerPays(outTradeNo);
    assert.deepEqual([tool.status, tool.body.code], [409, 'TRADE_NOT_PAYABLE']);
    const again = await gateway.charge(chargeRequest(outTradeNo, { attempt: 2 }));
    assert.deepEqual(again, { kind: 'declined', code: '9015', message: 'Existing invoice number: the invoice is cancelled' });
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('is idempotent: a closed invoice and one never created answer closed', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'account_restricted' }));
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), { kind: 'closed' });
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), { kind: 'closed' });
    assert.deepEqual(await gateway.close(closeRequest(newOutTradeNo())), { kind: 'closed' });
  });

  it('answers already_paid with the charge for a paid invoice, which stays paid', async () => {
    const order = await paidOrder();
    assert.deepEqual(await gateway.close(closeRequest(order.outTradeNo)), {
      kind: 'already_paid',
      charges: [{ gatewayTradeNo: order.gatewayTradeNo, amountMinor: 16800, currency: 'CNY' }],
    });
    assert.equal((await gateway.query(order.outTradeNo)).kind, 'answered');
    assert.deepEqual(
      (await ledger(order.outTradeNo)).charges.map((c) => c.status),
      ['succeeded'],
    );
    assert.deepEqual((await ledger(order.outTradeNo)).refunds, []); // close never refunds
  });

  it('answers already_paid when the buyer pays between its inquiry and its cancel (9015, then a second inquiry)', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    const proxy = await startProxy({
      cancelTransaction: async (_req, res, forward) => {
        assert.equal((await buyerPays(outTradeNo)).status, 200); // the buyer submits the page just now
        const { status, body } = await forward();
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(body);
      },
    });
    try {
      const outcome = await createTwoC2pGateway(config({ baseUrl: proxy.baseUrl })).close(closeRequest(outTradeNo));
      assert.ok(outcome.kind === 'already_paid', JSON.stringify(outcome));
      const { charges } = await ledger(outTradeNo);
      assert.deepEqual(outcome.charges, [{ gatewayTradeNo: charges.at(-1)?.gatewayTradeNo, amountMinor: 16800, currency: 'CNY' }]);
    } finally {
      await proxy.close();
    }
  });

  it('is indeterminate and cancels nothing when the cancel fails before processing (fail_before_charge)', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    await arm({ operation: 'close', action: 'fail_before_charge' });
    try {
      const outcome = await gateway.close(closeRequest(outTradeNo));
      // 2C2P's own shape: 0999 "System error" in an HTTP 200, which cannot say whether the cancel ran.
      assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
      assert.equal(outcome.code, '0999');
    } finally {
      await disarm();
    }
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } }); // nothing closed
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), { kind: 'closed' }); // the later close settles it
  });

  it('is indeterminate when the cancel’s answer is lost (drop_after_charge); the next close answers closed', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    await arm({ operation: 'close', action: 'drop_after_charge' });
    try {
      assert.equal((await gateway.close(closeRequest(outTradeNo))).kind, 'indeterminate');
    } finally {
      await disarm();
    }
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), { kind: 'closed' });
    assert.equal((await buyerPays(outTradeNo)).status, 409);
  });

  it('is indeterminate when it cannot authenticate or the cancel times out, and closes nothing', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    const wrongSecret = await createTwoC2pGateway(config({ secretKey: 'F'.repeat(64) })).close(closeRequest(outTradeNo));
    assert.deepEqual(wrongSecret, { kind: 'indeterminate', code: '9042', message: 'paymentInquiry: Hash value mismatch' });
    // A cancel that times out after a successful inquiry.
    const slow = await startProxy({ cancelTransaction: () => {} });
    try {
      const outcome = await createTwoC2pGateway(config({ baseUrl: slow.baseUrl, timeoutMs: 200 })).close(closeRequest(outTradeNo));
      assert.ok(outcome.kind === 'indeterminate' && outcome.code === 'TIMEOUT', JSON.stringify(outcome));
    } finally {
      await slow.close();
    }
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
  });
});

describe('refund', () => {
  it('refunds a paid charge once per refundId: the repeat answers the first refund', async () => {
    const order = await paidOrder();
    const request = refundRequest(order);
    const first = await gateway.refund(request);
    assert.ok(first.kind === 'succeeded', JSON.stringify(first));
    assert.equal(first.amountMinor, 16800);
    assert.match(first.gatewayRefundId, /^\d+$/);
    assert.deepEqual(await gateway.refund(request), first);
    const { refunds } = await ledger(order.outTradeNo);
    assert.deepEqual(
      refunds.map((r) => [r.amountMinor, r.currency, r.status, r.refundId, r.gatewayRefundId, r.gatewayTradeNo]),
      [[16800, 'CNY', 'succeeded', request.refundId, first.gatewayRefundId, order.gatewayTradeNo]],
    );
    assert.deepEqual(
      await gateway.queryRefund({ outTradeNo: order.outTradeNo, gatewayTradeNo: order.gatewayTradeNo, refundId: request.refundId }),
      {
        kind: 'answered',
        refund: { kind: 'succeeded', gatewayRefundId: first.gatewayRefundId, amountMinor: 16800 },
      },
    );
  });

  it('refunds in parts up to the whole charge, after which a refund fails with 49', async () => {
    const order = await paidOrder(1000);
    const part = await gateway.refund(refundRequest(order, { amountMinor: 999, chargeAmountMinor: 1000 }));
    assert.equal(part.kind, 'succeeded');
    assert.equal((await gateway.refund(refundRequest(order, { amountMinor: 1, chargeAmountMinor: 1000 }))).kind, 'succeeded');
    const full = await gateway.refund(refundRequest(order, { amountMinor: 1, chargeAmountMinor: 1000 }));
    assert.ok(full.kind === 'failed' && full.code === '49', JSON.stringify(full));
    assert.deepEqual(
      (await ledger(order.outTradeNo)).refunds.map((r) => r.amountMinor),
      [999, 1],
    );
  });

  it('is indeterminate on a timeout or an answer not sealed by 2C2P’s key, retryable on a plain 13, refunding nothing', async () => {
    const order = await paidOrder();
    // 1. Nothing answers in time: it may have been processed.
    const silent = await startServer(() => {});
    try {
      const maintenanceUrl = `${silent.url}/PaymentAction/2.0/action`;
      const outcome = await createTwoC2pGateway(config({ maintenanceUrl, timeoutMs: 200 })).refund(refundRequest(order));
      assert.ok(outcome.kind === 'indeterminate' && outcome.code === 'TIMEOUT', JSON.stringify(outcome));
    } finally {
      await silent.close();
    }
    // 2. Signed with a key 2C2P does not know: plain 13, nobody to encrypt for.
    const unsigned = await createTwoC2pGateway(config({ merchantPrivateKey: strangerKey('private') })).refund(refundRequest(order));
    assert.ok(unsigned.kind === 'retryable' && unsigned.code === '13', JSON.stringify(unsigned));
    // 3. Configured with a key that is not 2C2P's: the request cannot be opened (2C2P seals a 96 for the
    //    merchant) and the answer does not verify with that key, so it is nobody's word.
    const sealedWrong = await createTwoC2pGateway(config({ twoc2pPublicKey: strangerKey('public') })).refund(refundRequest(order));
    assert.deepEqual(sealedWrong.kind === 'indeterminate' ? sealedWrong.code : sealedWrong.kind, 'INVALID_RESPONSE_SIGNATURE');
    assert.deepEqual((await ledger(order.outTradeNo)).refunds, []);
  });

  it('queryRefund: not_found only when 2C2P says so; unavailable when the key is wrong', async () => {
    const order = await paidOrder();
    const query = { outTradeNo: order.outTradeNo, gatewayTradeNo: order.gatewayTradeNo, refundId: 'RFNEVERSENT' };
    assert.deepEqual(await gateway.queryRefund(query), { kind: 'answered', refund: { kind: 'not_found' } });
    const wrongKey = await createTwoC2pGateway(config({ merchantPrivateKey: strangerKey('private') })).queryRefund(query);
    assert.deepEqual([wrongKey.kind, wrongKey.kind === 'unavailable' ? wrongKey.code : ''], ['unavailable', '13']);
    assert.deepEqual(await gateway.queryRefund({ ...query, outTradeNo: newOutTradeNo() }), {
      kind: 'answered',
      refund: { kind: 'not_found' },
    });
  });
});
