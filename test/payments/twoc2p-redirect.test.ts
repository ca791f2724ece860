/**
 * The 2C2P adapter's buyer step — the hosted payment page by redirect and return — against the PSP
 * sandbox over HTTP (real PostgreSQL behind it). The buyer is played the way a browser plays it: GET
 * webPaymentUrl, POST the card form, follow the front-end return form. Misbehaving answers come from a
 * small proxy or server of the test's own, in the shapes 2C2P uses (HTTP 200 with an error body).
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/twoc2p-redirect.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { decodeJwt, SignJWT } from 'jose';
import type { ChargeRequest, NotificationVerdict, PaymentGateway } from '@/server/payments/gateway';
import { createTwoC2pGateway, type TwoC2pGatewayConfig } from '@/server/payments/twoc2p';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { twoC2pModule, TWOC2P_TEST_CARDS } from '@/sandbox/twoc2p';
import type { Ledger } from '@/soak/invariants';
import { readLedger, startServer, waitFor } from '@/test/support/harness';
import { formsOf, frontendReturnOf, payOnHostedPage, submitForm } from '@/test/sandbox/twoc2p-hosted-page';

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
type Claims = Record<string, unknown>;

let sandbox: RunningSandbox;
let creds: Credentials;
let gateway: PaymentGateway;
/** The app's two ends: the webhook (verified by the adapter, acknowledged as it says) and the return page. */
let app: { url: string; close(): Promise<void> };
const verdicts: NotificationVerdict[] = [];
const returns: { method: string; contentType: string; body: string }[] = [];

function config(overrides: Partial<TwoC2pGatewayConfig> = {}): TwoC2pGatewayConfig {
  const { merchantId, secretKey, baseUrl, maintenanceUrl, merchantPrivateKey, twoc2pPublicKey, testBuyers } = creds;
  return { merchantId, secretKey, baseUrl, maintenanceUrl, merchantPrivateKey, twoc2pPublicKey, testBuyers, ...overrides };
}

function newOutTradeNo(): string {
  return `PO${Date.now().toString(36).toUpperCase()}${randomBytes(5).toString('hex').toUpperCase()}`.slice(0, 20);
}

/** What checkout.pay sends without a test buyer: the buyer's step and where they come back to. */
function redirectCharge(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo,
    amountMinor: 16800,
    currency: 'CNY',
    subject: `PayOnce 订单 ${outTradeNo}`,
    attempt: 1,
    buyerStep: 'redirect',
    notifyUrl: `${app.url}/api/webhooks/2c2p`,
    returnUrl: `${app.url}/api/return?orderId=${outTradeNo}`,
    ...overrides,
  };
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

function redirectUrlOf(outcome: Awaited<ReturnType<PaymentGateway['charge']>>): string {
  assert.ok(outcome.kind === 'awaiting_buyer' && outcome.action.kind === 'redirect', JSON.stringify(outcome));
  return outcome.action.url;
}

/**
 * A proxy in front of the sandbox's API that records each call (API name and the JWT claims or plain
 * body) and lets `misbehave[api]` answer instead of the sandbox.
 */
async function startRecordingProxy(
  misbehave: Record<
    string,
    (res: import('node:http').ServerResponse, forward: () => Promise<{ status: number; body: string }>) => unknown
  > = {},
): Promise<{ baseUrl: string; calls: { api: string; claims: Claims }[]; close(): Promise<void> }> {
  const calls: { api: string; claims: Claims }[] = [];
  const server = await startServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const api = (req.url ?? '').split('/').pop() ?? '';
      const parsed = JSON.parse(body) as Claims;
      calls.push({ api, claims: typeof parsed.payload === 'string' ? (decodeJwt(parsed.payload) as Claims) : parsed });
      const forward = async () => {
        const upstream = await fetch(`${creds.baseUrl}/${api}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        return { status: upstream.status, body: await upstream.text() };
      };
      const handler = misbehave[api];
      if (handler) {
        void handler(res, forward);
        return;
      }
      void forward().then(({ status, body: text }) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(text);
      });
    });
  });
  return { baseUrl: `${server.url}/payment/4.3`, calls, close: server.close };
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [twoC2pModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { '2c2p': Credentials })['2c2p'];
  gateway = createTwoC2pGateway(config());
  app = await startServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      if ((req.url ?? '').startsWith('/api/webhooks/2c2p')) {
        void gateway.verifyNotification({ headers: new Headers(), rawBody: body }).then((verdict) => {
          verdicts.push(verdict);
          const reply = gateway.notificationReply(verdict.kind === 'verified');
          res.writeHead(reply.status, reply.headers).end(reply.body);
        });
        return;
      }
      returns.push({ method: req.method ?? '', contentType: req.headers['content-type'] ?? '', body });
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<p>PayOnce</p>');
    });
  });
});

after(async () => {
  await app.close();
  await sandbox.close();
});

describe('the hosted payment page (redirect)', () => {
  it('offers the redirect step, and test buyers only against the sandbox configuration', () => {
    assert.deepEqual(gateway.buyerSteps, ['redirect']);
    assert.equal(gateway.hasTestBuyers, true);
    const real = createTwoC2pGateway(config({ testBuyers: {} as Credentials['testBuyers'] }));
    assert.deepEqual([real.buyerSteps, real.hasTestBuyers], [['redirect'], false]);
  });

  it('opens the hosted page without a buyer: awaiting_buyer redirect to webPaymentUrl, no Do Payment, both return URLs sent', async () => {
    const proxy = await startRecordingProxy();
    try {
      const outTradeNo = newOutTradeNo();
      const request = redirectCharge(outTradeNo);
      const url = redirectUrlOf(await createTwoC2pGateway(config({ baseUrl: proxy.baseUrl })).charge(request));
      assert.ok(url.startsWith(`${creds.baseUrl}/hosted/`), url);
      // paymentToken, then the inquiry that checks a replayed token's invoice is still open: no Do Payment.
      assert.deepEqual(
        proxy.calls.map((c) => c.api),
        ['paymentToken', 'paymentInquiry'],
      );
      assert.deepEqual(proxy.calls[0]?.claims, {
        merchantID: creds.merchantId,
        invoiceNo: outTradeNo,
        description: request.subject,
        amount: 168,
        currencyCode: 'CNY',
        idempotencyID: `${outTradeNo}-1W`,
        paymentChannel: ['CC'],
        frontendReturnUrl: request.returnUrl,
        backendReturnUrl: request.notifyUrl,
      });
      assert.deepEqual((await ledger(outTradeNo)).charges, []);
      assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    } finally {
      await proxy.close();
    }
  });

  it('is paid by the buyer on the page: the notification verifies, query() succeeds, the return POST carries a decodable paymentResponse', async () => {
    const outTradeNo = newOutTradeNo();
    const url = redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo)));

    // 1. The buyer's browser: the page, its card form, the approval.
    const paid = await payOnHostedPage(url, TWOC2P_TEST_CARDS.ok);
    assert.equal(paid.status, 200, paid.html);

    // 2. The signed backend notification reaches the app's webhook and is acknowledged (HTTP 200).
    const verdict = await waitFor('the notification', async () =>
      verdicts.find((v) => v.kind === 'verified' && v.notification.outTradeNo === outTradeNo),
    );
    assert.ok(verdict.kind === 'verified');
    assert.equal(verdict.notification.status, 'succeeded');
    await waitFor('the acknowledgement', async () =>
      (await ledger(outTradeNo)).notifications.some((n) => n.acknowledged) ? true : undefined,
    );

    // 3. query() settles it the same way.
    assert.deepEqual(await gateway.query(outTradeNo), {
      kind: 'answered',
      trade: { kind: 'succeeded', gatewayTradeNo: verdict.notification.gatewayTradeNo, amountMinor: 16800, currency: 'CNY' },
    });

    // 4. The browser goes back to returnUrl by a form POST of paymentResponse (base64 JSON).
    const { form, response } = frontendReturnOf(paid.html, paid.url);
    assert.equal(form.action, `${app.url}/api/return?orderId=${outTradeNo}`);
    assert.deepEqual([response.invoiceNo, response.channelCode, response.respCode], [outTradeNo, 'CC', '2000']);
    const before = returns.length;
    await submitForm(form);
    const back = returns[before];
    assert.deepEqual([back?.method, back?.contentType], ['POST', 'application/x-www-form-urlencoded']);
    const posted = new URLSearchParams(back?.body ?? '').get('paymentResponse') ?? '';
    assert.equal((JSON.parse(Buffer.from(posted, 'base64').toString('utf8')) as Claims).invoiceNo, outTradeNo);

    // 5. A retry of the same attempt now answers succeeded (not a page that would only say "paid").
    assert.deepEqual(await gateway.charge(redirectCharge(outTradeNo)), {
      kind: 'succeeded',
      gatewayTradeNo: verdict.notification.gatewayTradeNo,
      amountMinor: 16800,
      currency: 'CNY',
    });
    assert.equal((await ledger(outTradeNo)).charges.length, 1);
  });

  it('gives a retry of the same attempt the same usable page (idempotencyID replay, never 9015), and a new attempt a new page on the same invoice', async () => {
    const outTradeNo = newOutTradeNo();
    const first = redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo)));
    const retry = redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo)));
    assert.equal(retry, first);
    // A decline on the page leaves the invoice payable: the same page is still usable.
    assert.equal((await payOnHostedPage(first, TWOC2P_TEST_CARDS.insufficient_funds)).status, 402);
    assert.equal(redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo))), first);
    // A new attempt (after the buyer gave up, or after a test-buyer decline) reopens the invoice.
    const next = redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo, { attempt: 2 })));
    assert.notEqual(next, first);
    assert.equal((await fetch(first)).status, 200, 'the older page still pays the same invoice');
    assert.equal((await payOnHostedPage(next, TWOC2P_TEST_CARDS.ok)).status, 200);
    assert.equal((await fetch(first)).status, 409, 'one approval per invoice: every page of it is done');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'succeeded'],
    );
  });

  it('keeps the page after a test-buyer decline of the same order (its own idempotencyID, not a changed request)', async () => {
    const outTradeNo = newOutTradeNo();
    const declined = await gateway.charge(redirectCharge(outTradeNo, { buyer: 'insufficient_funds', buyerStep: undefined }));
    assert.equal(declined.kind, 'declined');
    // Same attempt number, the buyer's own step: not taken for a changed paymentToken request (9004).
    const url = redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo)));
    assert.equal((await payOnHostedPage(url, TWOC2P_TEST_CARDS.ok)).status, 200);
  });

  it('declines then succeeds on the page: query() says pending after the decline, succeeded after the approval', async () => {
    const outTradeNo = newOutTradeNo();
    const url = redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo)));
    const declined = await payOnHostedPage(url, TWOC2P_TEST_CARDS.account_restricted);
    assert.equal(declined.status, 402);
    assert.ok(declined.html.includes('4062'));
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    assert.equal((await payOnHostedPage(url, TWOC2P_TEST_CARDS.ok)).status, 200);
    const settled = await gateway.query(outTradeNo);
    assert.ok(settled.kind === 'answered' && settled.trade.kind === 'succeeded', JSON.stringify(settled));
  });

  it('close() cancels the invoice: the page refuses (409), a form loaded before is refused, a retry of the charge is declined (0003)', async () => {
    const outTradeNo = newOutTradeNo();
    const url = redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo)));
    const loaded = await (await fetch(url)).text();
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 16800, currency: 'CNY' }), { kind: 'closed' });

    const page = await fetch(url);
    assert.equal(page.status, 409);
    assert.ok((await page.text()).includes('订单已取消 (Cancelled)'));
    const [form] = formsOf(loaded, url);
    assert.ok(form);
    const late = await submitForm(form, { cardNo: TWOC2P_TEST_CARDS.ok, expiry: '12/30', securityCode: '123', name: 'Late' });
    assert.equal(late.status, 409);
    assert.deepEqual((await ledger(outTradeNo)).charges, []);

    assert.deepEqual(await gateway.charge(redirectCharge(outTradeNo)), {
      kind: 'declined',
      code: '0003',
      message: 'Transaction is cancelled',
    });
    assert.equal((await gateway.charge(redirectCharge(outTradeNo, { attempt: 2 }))).kind, 'declined');
  });

  it('refuses a buyer step 2C2P does not offer, before any call', async () => {
    const proxy = await startRecordingProxy();
    try {
      const g = createTwoC2pGateway(config({ baseUrl: proxy.baseUrl }));
      for (const buyerStep of ['qr', 'card'] as const) {
        const outcome = await g.charge(redirectCharge(newOutTradeNo(), { buyerStep }));
        assert.deepEqual([outcome.kind, 'code' in outcome ? outcome.code : ''], ['declined', 'UNSUPPORTED_BUYER_STEP']);
      }
      assert.deepEqual(proxy.calls, []);
    } finally {
      await proxy.close();
    }
  });
});

describe('the hosted payment page: failure shapes', () => {
  it('is retryable when paymentToken answers 2C2P’s plain error body (HTTP 200, 0999) or HTTP 5xx, and when its answer is lost; the retry gives the page', async () => {
    const outTradeNo = newOutTradeNo();
    const shapes: [
      string,
      (res: import('node:http').ServerResponse, forward: () => Promise<{ status: number; body: string }>) => unknown,
    ][] = [
      [
        '0999 plain',
        (res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"respCode":"0999","respDesc":"System error"}'),
      ],
      ['HTTP 500', (res) => res.writeHead(500, { 'content-type': 'application/json' }).end('{"code":"SYSTEM_ERROR"}')],
      // Processed (the token exists), answer lost: a token moves no money.
      ['lost answer', async (res, forward) => (await forward(), res.socket?.destroy())],
    ];
    for (const [shape, handler] of shapes) {
      const proxy = await startRecordingProxy({ paymentToken: handler });
      try {
        const outcome = await createTwoC2pGateway(config({ baseUrl: proxy.baseUrl })).charge(redirectCharge(outTradeNo));
        assert.equal(outcome.kind, 'retryable', `${shape}: ${JSON.stringify(outcome)}`);
      } finally {
        await proxy.close();
      }
    }
    // The retry of the same attempt: the page of the token the lost answer carried.
    const url = redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo)));
    assert.equal((await payOnHostedPage(url, TWOC2P_TEST_CARDS.ok)).status, 200);
    assert.equal((await ledger(outTradeNo)).charges.length, 1);
  });

  it('is retryable, never a terminal decline, when paymentToken answers 9015 for an invoice open for this very amount; the retry gives the page', async () => {
    const outTradeNo = newOutTradeNo();
    const url = redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo)));
    const existing = '{"respCode":"9015","respDesc":"Existing invoice number"}';
    const proxy = await startRecordingProxy({
      paymentToken: (res) => res.writeHead(200, { 'content-type': 'application/json' }).end(existing),
    });
    try {
      const g = createTwoC2pGateway(config({ baseUrl: proxy.baseUrl }));
      const outcome = await g.charge(redirectCharge(outTradeNo));
      assert.deepEqual([outcome.kind, 'code' in outcome ? outcome.code : ''], ['retryable', '9015'], JSON.stringify(outcome));
      // Another amount: the documented reason for 9015, a decline for this attempt.
      assert.equal((await g.charge(redirectCharge(outTradeNo, { amountMinor: 16900 }))).kind, 'declined');
    } finally {
      await proxy.close();
    }
    assert.equal(redirectUrlOf(await gateway.charge(redirectCharge(outTradeNo))), url);
  });

  it('never redirects on an answer it cannot authenticate (another secret, or a plain 0000): indeterminate', async () => {
    const forged = await new SignJWT({
      webPaymentUrl: 'https://evil.example/pay',
      paymentToken: 'kSAx',
      respCode: '0000',
      respDesc: 'Success',
    })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .sign(new TextEncoder().encode('F'.repeat(64)));
    for (const body of [
      JSON.stringify({ payload: forged }),
      '{"webPaymentUrl":"https://evil.example/pay","paymentToken":"kSAx","respCode":"0000"}',
    ]) {
      const proxy = await startRecordingProxy({
        paymentToken: (res) => res.writeHead(200, { 'content-type': 'application/json' }).end(body),
      });
      try {
        const outcome = await createTwoC2pGateway(config({ baseUrl: proxy.baseUrl })).charge(redirectCharge(newOutTradeNo()));
        assert.equal(outcome.kind, 'indeterminate', JSON.stringify(outcome));
      } finally {
        await proxy.close();
      }
    }
  });

  it('still opens the page when the inquiry after paymentToken fails (0999, timeout): the page and the notification settle it', async () => {
    for (const handler of [
      (res: import('node:http').ServerResponse) =>
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"respCode":"0999","respDesc":"System error"}'),
      () => undefined, // never answers: the adapter's timeout
    ]) {
      const proxy = await startRecordingProxy({ paymentInquiry: handler });
      try {
        const outcome = await createTwoC2pGateway(config({ baseUrl: proxy.baseUrl, timeoutMs: 300 })).charge(
          redirectCharge(newOutTradeNo()),
        );
        assert.equal(outcome.kind, 'awaiting_buyer', JSON.stringify(outcome));
      } finally {
        await proxy.close();
      }
    }
  });
});
