/**
 * The PSP sandbox's 2C2P PGW v4.3, driven the way a merchant would drive the real one: plain HTTP and
 * HS256 JWTs made with jose (2C2P publishes no Node SDK). Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/twoc2p-sandbox.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { decodeJwt, jwtVerify, SignJWT, UnsecuredJWT } from 'jose';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { twoC2pModule, TWOC2P_TEST_CARDS } from '@/sandbox/twoc2p';
import { waitFor, readLedger, startServer } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  merchantId: string;
  secretKey: string;
  baseUrl: string;
  testBuyers: { ok: string; insufficient_funds: string; account_restricted: string };
}

type Claims = Record<string, unknown>;
/** What an API answered: the verified claims of a JWT answer, or the plain JSON body. */
type Answer = { signed: true; claims: Claims; raw: string } | { signed: false; body: Claims };

let sandbox: RunningSandbox;
let creds: Credentials;

function newInvoiceNo(): string {
  return `S${Date.now().toString(36).toUpperCase()}${randomBytes(5).toString('hex').toUpperCase()}`;
}

function key(secret = creds.secretKey): Uint8Array {
  return new TextEncoder().encode(secret);
}

async function jwt(claims: Claims, secret = creds.secretKey): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(key(secret));
}

async function postRaw(api: string, body: unknown): Promise<{ status: number; body: Claims }> {
  const res = await fetch(`${creds.baseUrl}/${api}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Claims };
}

/** Posts `{"payload": JWT(claims)}`; a JWT answer must verify with the merchant's secret. */
async function call(api: string, claims: Claims, secret?: string): Promise<Answer> {
  const { status, body } = await postRaw(api, { payload: await jwt(claims, secret) });
  assert.equal(status, 200);
  if (typeof body.payload === 'string') {
    const { payload } = await jwtVerify(body.payload, key(), { algorithms: ['HS256'] });
    return { signed: true, claims: payload as Claims, raw: body.payload };
  }
  return { signed: false, body };
}

function claimsOf(answer: Answer): Claims {
  assert.ok(answer.signed, `expected a signed answer, got ${JSON.stringify(answer)}`);
  return answer.claims;
}

function plainOf(answer: Answer): Claims {
  assert.ok(!answer.signed, `expected a plain answer, got ${JSON.stringify(answer)}`);
  return answer.body;
}

function tokenClaims(invoiceNo: string, extra: Claims = {}): Claims {
  return {
    merchantID: creds.merchantId,
    invoiceNo,
    description: 'PayOnce 订单',
    amount: 168.0,
    currencyCode: 'CNY',
    paymentChannel: ['CC'],
    ...extra,
  };
}

async function paymentToken(invoiceNo: string, extra: Claims = {}): Promise<string> {
  const claims = claimsOf(await call('paymentToken', tokenClaims(invoiceNo, extra)));
  assert.equal(claims.respCode, '0000');
  assert.equal(typeof claims.paymentToken, 'string');
  return claims.paymentToken as string;
}

function doPaymentBody(token: string, cardNo: string, data: Claims = {}): Claims {
  return { paymentToken: token, locale: 'en', payment: { code: { channelCode: 'CC' }, data: { name: 'Test Buyer', cardNo, ...data } } };
}

/** Do Payment in 2C2P's documented plain form. */
async function pay(token: string, cardNo: string, data: Claims = {}): Promise<Claims> {
  const { status, body } = await postRaw('payment', doPaymentBody(token, cardNo, data));
  assert.equal(status, 200);
  return body;
}

async function inquiry(claims: Claims): Promise<Answer> {
  return call('paymentInquiry', { merchantID: creds.merchantId, locale: 'en', ...claims });
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [twoC2pModule] });
  const res = await fetch(`${sandbox.url}/sandbox/credentials`);
  creds = ((await res.json()) as { '2c2p': Credentials })['2c2p'];
});

after(async () => {
  await sandbox.close();
});

describe('merchant portal', () => {
  it('serves the credentials the adapter needs', () => {
    assert.deepEqual(Object.keys(creds).sort(), [
      'baseUrl',
      'feeContract',
      'maintenanceUrl',
      'merchantId',
      'merchantPrivateKey',
      'secretKey',
      'testBuyers',
      'twoc2pPublicKey',
    ]);
    assert.match(creds.merchantId, /^764\d{12}$/);
    assert.match(creds.secretKey, /^[0-9A-F]{64}$/);
    assert.equal(creds.baseUrl, `${sandbox.url}/payment/4.3`);
    assert.deepEqual(creds.testBuyers, {
      ok: '4111111111111111',
      insufficient_funds: '4000000000024051',
      account_restricted: '4000000000094062',
    });
    assert.deepEqual(creds.testBuyers, TWOC2P_TEST_CARDS);
  });

  it('answers unknown API paths and other methods in 2C2P’s format', async () => {
    const unknown = await postRaw('settle', {});
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.respCode, '9004');
    const get = await fetch(`${creds.baseUrl}/paymentToken`);
    assert.equal(get.status, 405);
    assert.equal(((await get.json()) as Claims).respCode, '9004');
  });
});

describe('paymentToken', () => {
  it('issues a signed token, with a webPaymentUrl to the hosted payment page', async () => {
    const invoiceNo = newInvoiceNo();
    const answer = await call('paymentToken', tokenClaims(invoiceNo));
    const claims = claimsOf(answer);
    assert.deepEqual(Object.keys(claims).sort(), ['paymentToken', 'respCode', 'respDesc', 'webPaymentUrl']);
    assert.equal(claims.respCode, '0000');
    assert.equal(claims.respDesc, 'Success');
    assert.match(String(claims.paymentToken), /^kSA[A-Za-z0-9+/=]{60,}$/);
    assert.equal(String(claims.webPaymentUrl), `${creds.baseUrl}/hosted/${encodeURIComponent(String(claims.paymentToken))}`);
    const page = await fetch(String(claims.webPaymentUrl));
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    const text = await page.text();
    for (const shown of [invoiceNo, 'PayOnce 订单', 'CNY 168.00']) assert.ok(text.includes(shown), shown);
  });

  it('refuses a JWT signed with another secret (9042), a non-JWT (6103), alg none (6103) and an unknown merchant', async () => {
    const invoiceNo = newInvoiceNo();
    const forged = plainOf(await call('paymentToken', tokenClaims(invoiceNo), 'A'.repeat(64)));
    assert.deepEqual(forged, { respCode: '9042', respDesc: 'Hash value mismatch' });
    assert.deepEqual((await postRaw('paymentToken', { payload: 'not-a-jwt' })).body, { respCode: '6103', respDesc: 'Invalid JWT' });
    const unsigned = new UnsecuredJWT(tokenClaims(invoiceNo)).encode();
    assert.equal((await postRaw('paymentToken', { payload: unsigned })).body.respCode, '6103');
    const unknown = plainOf(await call('paymentToken', tokenClaims(invoiceNo, { merchantID: '764000000000000' })));
    assert.equal(unknown.respCode, '9007');
    assert.equal((await postRaw('paymentToken', '{')).body.respCode, '9004');
    assert.equal((await postRaw('paymentToken', {})).body.respCode, '9005');
    assert.equal(plainOf(await call('paymentToken', tokenClaims(invoiceNo, { merchantID: undefined }))).respCode, '9005');
    // None of them created the invoice.
    const notFound = claimsOf(await inquiry({ invoiceNo }));
    assert.equal(notFound.respCode, '2002');
  });

  it('enforces invoiceNo, amount and currency formats with 2C2P’s validation codes', async () => {
    const cases: [Claims, string][] = [
      [{ invoiceNo: `ORDER-${newInvoiceNo()}` }, '9004'], // the seed's format
      [{ invoiceNo: 'A'.repeat(51) }, '9006'],
      [{ invoiceNo: `Q${'1'.repeat(20)}`, paymentChannel: ['CC', 'QR'] }, '9006'], // QR: ≤ 20
      [{ invoiceNo: undefined }, '9005'],
      [{ amount: '1.001' }, '9009'], // finer than a fen
      [{ amount: 0 }, '9009'],
      [{ amount: -5 }, '9009'],
      [{ amount: '1e3' }, '9009'],
      [{ amount: '1234567890123' }, '9009'], // 13 integer digits
      [{ currencyCode: 'XXX' }, '9010'],
      [{ description: undefined }, '9005'],
      [{ backendReturnUrl: 'ftp://example.com/x' }, '9004'],
      [{ paymentExpiry: '2030-01-01T00:00:00' }, '9008'],
      [{ idempotencyID: 'x'.repeat(101) }, '9006'],
    ];
    for (const [extra, code] of cases) {
      const answer = plainOf(await call('paymentToken', { ...tokenClaims(newInvoiceNo()), ...extra }));
      assert.equal(answer.respCode, code, JSON.stringify(extra));
    }
    // The limits themselves pass: 50 characters, 20 for QR, 12 integer digits, 5 decimals of zeros.
    await paymentToken(newInvoiceNo().padEnd(50, '0'));
    await paymentToken(newInvoiceNo().padEnd(20, '7'), { paymentChannel: ['QR'] });
    await paymentToken(newInvoiceNo(), { amount: '000000002500.90000' });
    await paymentToken(newInvoiceNo(), { amount: '999999999999.99' });
    await paymentToken(newInvoiceNo(), { amount: 1500, currencyCode: 'JPY' });
    assert.equal(
      plainOf(await call('paymentToken', tokenClaims(newInvoiceNo(), { amount: 1500.5, currencyCode: 'JPY' }))).respCode,
      '9009',
    );
  });

  it('reopens an open invoice for the same amount, refuses another amount (9015) and a paid invoice (9015)', async () => {
    const invoiceNo = newInvoiceNo();
    const first = await paymentToken(invoiceNo, { amount: 168 });
    const second = await paymentToken(invoiceNo, { amount: '168.00000' }); // the same amount, written otherwise
    assert.notEqual(second, first);
    const other = plainOf(await call('paymentToken', tokenClaims(invoiceNo, { amount: 169 })));
    assert.equal(other.respCode, '9015');
    assert.match(String(other.respDesc), /^Existing invoice number/);
    const otherCurrency = plainOf(await call('paymentToken', tokenClaims(invoiceNo, { currencyCode: 'THB' })));
    assert.equal(otherCurrency.respCode, '9015');

    assert.equal((await pay(first, TWOC2P_TEST_CARDS.ok)).respCode, '2000'); // an older token still pays
    const paid = plainOf(await call('paymentToken', tokenClaims(invoiceNo)));
    assert.equal(paid.respCode, '9015');
  });

  it('replays the same answer for the same idempotencyID and refuses it for another request', async () => {
    const invoiceNo = newInvoiceNo();
    const claims = tokenClaims(invoiceNo, { idempotencyID: `${invoiceNo}-1` });
    const first = await call('paymentToken', claims);
    const again = await call('paymentToken', { ...claims, amount: '168.00' }); // same request, amount spelled otherwise
    assert.ok(first.signed && again.signed);
    assert.equal(again.raw, first.raw); // byte for byte
    const changed = plainOf(await call('paymentToken', { ...claims, description: 'something else' }));
    assert.equal(changed.respCode, '9004');
    assert.match(String(changed.respDesc), /idempotencyID/);
    // Another idempotencyID for the same open invoice: a new token (a new attempt).
    const next = claimsOf(await call('paymentToken', { ...claims, idempotencyID: `${invoiceNo}-2` }));
    assert.notEqual(next.paymentToken, first.claims.paymentToken);

    // After the invoice is paid, the first attempt's retry still replays (and Do Payment then refuses).
    assert.equal((await pay(String(next.paymentToken), TWOC2P_TEST_CARDS.ok)).respCode, '2000');
    const replay = await call('paymentToken', claims);
    assert.ok(replay.signed);
    assert.equal(replay.raw, first.raw);
    assert.equal((await pay(String(first.claims.paymentToken), TWOC2P_TEST_CARDS.ok)).respCode, '9015');
  });
});

describe('Do Payment and paymentInquiry', () => {
  it('charges the ok card: 2000, then a signed inquiry with the full result, and the ledger in fen', async () => {
    const invoiceNo = newInvoiceNo();
    const token = await paymentToken(invoiceNo, { amount: '1999.99' });
    assert.deepEqual(await pay(token, TWOC2P_TEST_CARDS.ok, { expiryMonth: '12', expiryYear: '2099', securityCode: '123' }), {
      channelCode: 'CC',
      invoiceNo,
      respCode: '2000',
      respDesc: 'Transaction is completed, please do payment inquiry request for full payment information.',
    });
    const answer = await inquiry({ invoiceNo });
    const result = claimsOf(answer);
    assert.ok(answer.signed);
    // The amount is a JSON number literal with the currency's decimals.
    assert.match(Buffer.from(answer.raw.split('.')[1] ?? '', 'base64url').toString(), /"amount":1999\.99,/);
    assert.equal(result.respCode, '0000');
    assert.equal(result.respDesc, 'Success');
    assert.equal(result.merchantID, creds.merchantId);
    assert.equal(result.invoiceNo, invoiceNo);
    assert.equal(result.amount, 1999.99);
    assert.equal(result.currencyCode, 'CNY');
    assert.equal(result.channelCode, 'CC');
    assert.equal(result.accountNo, '411111XXXXXX1111');
    assert.match(String(result.tranRef), /^\d{7,}$/);
    assert.match(String(result.referenceNo), /^\d{12}$/);
    assert.match(String(result.approvalCode), /^\d{6}$/);
    assert.match(String(result.transactionDateTime), /^20\d{12}$/);
    // By payment token too.
    assert.deepEqual(claimsOf(await inquiry({ paymentToken: token })), result);

    const { charges } = await ledger(invoiceNo);
    assert.deepEqual(
      charges.map(({ gateway, outTradeNo, amountMinor, currency, status, gatewayTradeNo }) => ({
        gateway,
        outTradeNo,
        amountMinor,
        currency,
        status,
        gatewayTradeNo,
      })),
      [
        {
          gateway: '2c2p',
          outTradeNo: invoiceNo,
          amountMinor: 199999,
          currency: 'CNY',
          status: 'succeeded',
          gatewayTradeNo: result.tranRef,
        },
      ],
    );
  });

  it('declines both test cards, keeps the invoice payable, then charges the ok card once', async () => {
    const invoiceNo = newInvoiceNo();
    const token = await paymentToken(invoiceNo);
    assert.equal(claimsOf(await inquiry({ invoiceNo })).respCode, '0001'); // nobody paid yet

    assert.deepEqual(await pay(token, TWOC2P_TEST_CARDS.insufficient_funds), {
      channelCode: 'CC',
      invoiceNo,
      respCode: '4051',
      respDesc: 'Insufficient funds',
    });
    const afterDecline = claimsOf(await inquiry({ invoiceNo }));
    assert.equal(afterDecline.respCode, '4051');
    assert.equal(afterDecline.accountNo, '400000XXXXXX4051');
    assert.equal((await pay(token, TWOC2P_TEST_CARDS.account_restricted)).respCode, '4062');
    assert.equal((await pay(token, '4242424242424242')).respCode, '4005'); // unknown card
    assert.equal((await pay(token, '4111111111111112')).respCode, '4014'); // Luhn
    assert.equal((await pay(token, TWOC2P_TEST_CARDS.ok, { expiryMonth: '1', expiryYear: '2020' })).respCode, '4054');

    // A new attempt: a new token for the same invoice, then the ok card.
    const next = await paymentToken(invoiceNo);
    assert.equal((await pay(next, TWOC2P_TEST_CARDS.ok)).respCode, '2000');
    const paid = claimsOf(await inquiry({ invoiceNo }));
    assert.equal(paid.respCode, '0000');
    // Paid is final: no card and no token pays it again, and nothing more is recorded.
    assert.equal((await pay(token, TWOC2P_TEST_CARDS.ok)).respCode, '9015');
    assert.equal((await pay(next, TWOC2P_TEST_CARDS.insufficient_funds)).respCode, '9015');
    assert.equal(claimsOf(await inquiry({ invoiceNo })).tranRef, paid.tranRef);

    const { charges } = await ledger(invoiceNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.amountMinor]),
      [
        ['declined', 16800],
        ['declined', 16800],
        ['declined', 16800],
        ['declined', 16800],
        ['declined', 16800],
        ['succeeded', 16800],
      ],
    );
    assert.equal(new Set(charges.map((c) => c.gatewayTradeNo)).size, 6); // one tranRef per transaction
  });

  it('answers the JWT form of Do Payment with a signed full result', async () => {
    const invoiceNo = newInvoiceNo();
    const token = await paymentToken(invoiceNo, { amount: 25 });
    const declined = claimsOf(await call('payment', doPaymentBody(token, TWOC2P_TEST_CARDS.account_restricted)));
    assert.equal(declined.respCode, '4062');
    assert.equal(declined.respDesc, 'Restricted card');
    const approved = claimsOf(await call('payment', doPaymentBody(token, TWOC2P_TEST_CARDS.ok)));
    assert.equal(approved.respCode, '0000');
    assert.equal(approved.invoiceNo, invoiceNo);
    assert.equal(approved.amount, 25);
    for (const field of ['tranRef', 'referenceNo', 'approvalCode', 'transactionDateTime'])
      assert.equal(typeof approved[field], 'string', field);
    // The JWT form is verified like any other: another secret is 9042.
    const other = await paymentToken(newInvoiceNo());
    assert.equal(plainOf(await call('payment', doPaymentBody(other, TWOC2P_TEST_CARDS.ok), 'B'.repeat(64))).respCode, '9042');
    assert.equal(claimsOf(await inquiry({ paymentToken: other })).respCode, '0001');
  });

  it('refuses bad Do Payment requests without recording a charge', async () => {
    const invoiceNo = newInvoiceNo();
    const token = await paymentToken(invoiceNo);
    assert.equal((await postRaw('payment', doPaymentBody('kSAnope', TWOC2P_TEST_CARDS.ok))).body.respCode, '9040');
    assert.equal((await postRaw('payment', { payment: {} })).body.respCode, '9005');
    assert.equal(
      (await postRaw('payment', { paymentToken: token, payment: { code: { channelCode: 'QR' }, data: { name: 'x' } } })).body.respCode,
      '9004',
    );
    assert.equal(
      (
        await postRaw('payment', {
          paymentToken: token,
          payment: { code: { channelCode: 'CC' }, data: { name: 'x', securePayToken: 'abc' } },
        })
      ).body.respCode,
      '9005',
    );
    assert.equal((await pay(token, '4111-1111')).respCode, '9004');
    assert.deepEqual((await ledger(invoiceNo)).charges, []);
  });

  it('refuses inquiries it cannot authenticate or read', async () => {
    assert.equal(plainOf(await call('paymentInquiry', { merchantID: creds.merchantId, invoiceNo: 'X1' }, 'C'.repeat(64))).respCode, '9042');
    assert.equal(plainOf(await inquiry({})).respCode, '9005');
    assert.equal(plainOf(await inquiry({ paymentToken: 'kSAnope' })).respCode, '9040');
    const notFound = claimsOf(await inquiry({ invoiceNo: newInvoiceNo() }));
    assert.equal(notFound.respCode, '2002');
  });

  it('serializes 50 concurrent payments of one invoice into exactly one charge', async () => {
    const invoiceNo = newInvoiceNo();
    const token = await paymentToken(invoiceNo, { amount: '88.88' });
    const results = await Promise.all(Array.from({ length: 50 }, () => pay(token, TWOC2P_TEST_CARDS.ok)));
    assert.equal(results.filter((r) => r.respCode === '2000').length, 1);
    assert.equal(results.filter((r) => r.respCode === '9015').length, 49);
    const { charges } = await ledger(invoiceNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.amountMinor]),
      [['succeeded', 8888]],
    );
  });

  it('issues one token for 20 concurrent paymentToken calls with one idempotencyID', async () => {
    const invoiceNo = newInvoiceNo();
    const claims = tokenClaims(invoiceNo, { idempotencyID: `${invoiceNo}-1` });
    const answers = await Promise.all(Array.from({ length: 20 }, () => call('paymentToken', claims)));
    assert.equal(new Set(answers.map((a) => (a.signed ? a.raw : 'plain'))).size, 1);
  });
});

describe('backend notifications', () => {
  /** A merchant's backendReturnUrl: records every delivery, answers from a per-path script of statuses. */
  const received = new Map<string, { payload: string; claims: Claims }[]>();
  const scripts = new Map<string, number[]>();
  let receiver: http.Server;
  let receiverUrl: string;

  before(async () => {
    receiver = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        const path = req.url ?? '/';
        const { payload } = JSON.parse(body) as { payload: string };
        let claims: Claims = {};
        try {
          claims = decodeJwt(payload) as Claims;
        } catch {
          // a forged payload: recorded as is
        }
        received.set(path, [...(received.get(path) ?? []), { payload, claims }]);
        const script = scripts.get(path) ?? [];
        const status = script.length > 1 ? (script.shift() ?? 200) : (script[0] ?? 200);
        res.writeHead(status, { 'content-type': 'text/plain' });
        res.end(status === 200 ? '' : 'retry');
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  });
  after(async () => {
    receiver.closeAllConnections();
    await new Promise<void>((resolve) => receiver.close(() => resolve()));
  });

  it('posts {"payload": JWT} signed with the merchant secret, and retries until HTTP 200', async () => {
    const invoiceNo = newInvoiceNo();
    const path = `/notify/${invoiceNo}`;
    scripts.set(path, [500, 204, 200]); // 204 is not 2C2P's ack either
    const token = await paymentToken(invoiceNo, { amount: 20, backendReturnUrl: `${receiverUrl}${path}` });
    assert.equal((await pay(token, TWOC2P_TEST_CARDS.ok)).respCode, '2000');
    const paid = claimsOf(await inquiry({ invoiceNo }));

    const deliveries = await waitFor('three deliveries', async () => {
      const list = received.get(path) ?? [];
      return list.length >= 3 ? list : undefined;
    });
    for (const delivery of deliveries) {
      const { payload } = await jwtVerify(delivery.payload, key(), { algorithms: ['HS256'] });
      assert.deepEqual(payload, {
        merchantID: creds.merchantId,
        invoiceNo,
        cardNo: '411111XXXXXX1111',
        amount: 20,
        currencyCode: 'CNY',
        tranRef: paid.tranRef,
        referenceNo: paid.referenceNo,
        approvalCode: paid.approvalCode,
        eci: '07',
        transactionDateTime: paid.transactionDateTime,
        agentCode: 'SANDBOX',
        channelCode: 'CC',
        respCode: '0000',
        respDesc: 'Success',
      });
    }
    const { notifications } = await waitFor('the ack in the ledger', async () => {
      const l = await ledger(invoiceNo);
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
    await new Promise((resolve) => setTimeout(resolve, 400)); // past the next retry (5 min × 0.001): none comes
    assert.equal((received.get(path) ?? []).length, 3);
  });

  it('sends nothing for a declined payment or without a backendReturnUrl', async () => {
    const invoiceNo = newInvoiceNo();
    const token = await paymentToken(invoiceNo, { backendReturnUrl: `${receiverUrl}/notify/${invoiceNo}` });
    await pay(token, TWOC2P_TEST_CARDS.insufficient_funds);
    const silent = newInvoiceNo();
    await pay(await paymentToken(silent), TWOC2P_TEST_CARDS.ok);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(received.get(`/notify/${invoiceNo}`), undefined);
    assert.deepEqual((await ledger(invoiceNo)).notifications, []);
    assert.deepEqual((await ledger(silent)).notifications, []);
  });

  it('has a tool that sends validly signed copies at once, with overrides applied before signing', async () => {
    const invoiceNo = newInvoiceNo();
    const path = `/notify/${invoiceNo}`;
    const token = await paymentToken(invoiceNo, { backendReturnUrl: `${receiverUrl}${path}` });
    await pay(token, TWOC2P_TEST_CARDS.ok);
    await waitFor('the scheduled delivery', async () => ((received.get(path) ?? []).length >= 1 ? true : undefined));

    const tool = (body: unknown, type = 'application/json') =>
      fetch(`${sandbox.url}/sandbox/2c2p/notify`, {
        method: 'POST',
        headers: { 'content-type': type },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
    const res = await tool({ outTradeNo: invoiceNo, copies: 5, overrides: { amount: '0.01', approvalCode: '' } });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { deliveries: Array.from({ length: 5 }, () => ({ status: 200, body: '' })) });
    const copies = (received.get(path) ?? []).slice(1);
    assert.equal(copies.length, 5);
    for (const copy of copies) {
      const { payload } = await jwtVerify(copy.payload, key(), { algorithms: ['HS256'] });
      assert.equal(payload.amount, 0.01);
      assert.equal(payload.approvalCode, undefined);
    }
    assert.equal((await tool({ outTradeNo: invoiceNo, overrides: { payload: 'forged' } })).status, 200);
    assert.equal((received.get(path) ?? []).at(-1)?.payload, 'forged');
    const { notifications } = await ledger(invoiceNo);
    assert.deepEqual(
      notifications.map((n) => n.attempt),
      [1, 2, 3, 4, 5, 6, 7],
    );

    // Errors.
    assert.equal((await tool('{')).status, 400);
    assert.equal((await tool({ outTradeNo: invoiceNo, copies: 101 })).status, 400);
    assert.equal((await tool('x', 'text/plain')).status, 415);
    const unknown = await tool({ outTradeNo: newInvoiceNo() });
    assert.equal(unknown.status, 404);
    assert.equal(((await unknown.json()) as { error: { code: string } }).error.code, 'TRADE_NOT_FOUND');
    const open = newInvoiceNo();
    await paymentToken(open, { backendReturnUrl: `${receiverUrl}/notify/${open}` });
    assert.equal((await tool({ outTradeNo: open })).status, 409);
  });

  it('keeps the schedule and the merchant across a restart of the sandbox', async () => {
    const invoiceNo = newInvoiceNo();
    const path = `/notify/${invoiceNo}`;
    scripts.set(path, [503, 200]);
    const token = await paymentToken(invoiceNo, { backendReturnUrl: `${receiverUrl}${path}` });
    await pay(token, TWOC2P_TEST_CARDS.ok);
    await waitFor('the first delivery', async () => ((await ledger(invoiceNo)).notifications.length >= 1 ? true : undefined));

    const merchantId = creds.merchantId;
    await sandbox.close();
    await new Promise((resolve) => setTimeout(resolve, 100)); // the 1-minute retry (× 0.001) falls due meanwhile
    sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [twoC2pModule] });
    creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { '2c2p': Credentials })['2c2p'];
    assert.equal(creds.merchantId, merchantId);

    const { notifications } = await waitFor('the ack after the restart', async () => {
      const l = await ledger(invoiceNo);
      return l.notifications.some((n) => n.acknowledged) ? l : undefined;
    });
    assert.deepEqual(
      notifications.map((n) => [n.attempt, n.acknowledged]),
      [
        [1, false],
        [2, true],
      ],
    );
    assert.equal(claimsOf(await inquiry({ invoiceNo })).respCode, '0000');
  });
});

// ---------------------------------------------------------------------------------------------
// Close, refund and the buyer tool

/** cancelTransaction in its JWT form: the merchant names the invoice. */
async function cancel(invoiceNo: string, secret?: string): Promise<Answer> {
  return call('cancelTransaction', { merchantID: creds.merchantId, invoiceNo }, secret);
}

async function buyerPays(body: unknown): Promise<{ status: number; body: Claims }> {
  const res = await fetch(`${sandbox.url}/sandbox/2c2p/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Claims };
}

async function arm(fault: Claims): Promise<void> {
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

/** A paid invoice of `amount`, and its approval's tranRef. */
async function paidInvoice(amount: unknown = 168): Promise<{ invoiceNo: string; tranRef: string }> {
  const invoiceNo = newInvoiceNo();
  assert.equal((await pay(await paymentToken(invoiceNo, { amount }), TWOC2P_TEST_CARDS.ok)).respCode, '2000');
  const paid = claimsOf(await inquiry({ invoiceNo }));
  assert.equal(paid.respCode, '0000');
  return { invoiceNo, tranRef: String(paid.tranRef) };
}

describe('cancelTransaction', () => {
  it('cancels an invoice left open by a decline: every token dies, the invoice number stays taken', async () => {
    const invoiceNo = newInvoiceNo();
    const first = await paymentToken(invoiceNo);
    assert.equal((await pay(first, TWOC2P_TEST_CARDS.insufficient_funds)).respCode, '4051');
    const second = await paymentToken(invoiceNo); // the buyer's next attempt, not used

    // 1. Cancel: signed 0000, for this invoice.
    const cancelled = claimsOf(await cancel(invoiceNo));
    assert.deepEqual(cancelled, { merchantID: creds.merchantId, invoiceNo, respCode: '0000', respDesc: 'Success' });
    // 2. The inquiry reports the cancel, not the earlier decline.
    const after = claimsOf(await inquiry({ invoiceNo }));
    assert.equal(after.respCode, '0003');
    assert.equal(after.respDesc, 'Transaction is cancelled');
    assert.equal(after.amount, 168);
    // 3. No token pays it, no new token is issued for it, the buyer tool cannot pay it.
    for (const token of [first, second]) {
      assert.deepEqual(await pay(token, TWOC2P_TEST_CARDS.ok), { respCode: '0003', respDesc: 'Transaction is cancelled' });
    }
    const reopen = plainOf(await call('paymentToken', tokenClaims(invoiceNo)));
    assert.equal(reopen.respCode, '9015');
    assert.match(String(reopen.respDesc), /cancelled/);
    const tool = await buyerPays({ outTradeNo: invoiceNo });
    assert.equal(tool.status, 409);
    assert.equal(tool.body.code, 'TRADE_NOT_PAYABLE');
    // 4. Cancelling again succeeds again.
    assert.equal(claimsOf(await cancel(invoiceNo)).respCode, '0000');

    const { charges } = await ledger(invoiceNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('refuses to cancel a paid invoice (9015, signed) and answers 2002 for an unknown one', async () => {
    const { invoiceNo, tranRef } = await paidInvoice();
    const refused = claimsOf(await cancel(invoiceNo));
    assert.equal(refused.respCode, '9015');
    assert.match(String(refused.respDesc), /already paid/);
    const still = claimsOf(await inquiry({ invoiceNo }));
    assert.deepEqual([still.respCode, still.tranRef], ['0000', tranRef]);

    const unknown = newInvoiceNo();
    assert.deepEqual(claimsOf(await cancel(unknown)), {
      merchantID: creds.merchantId,
      invoiceNo: unknown,
      respCode: '2002',
      respDesc: 'Transaction not found',
    });
  });

  it('takes the documented plain form with a payment token (2000, then inquire) and refuses what it cannot authenticate', async () => {
    const invoiceNo = newInvoiceNo();
    const token = await paymentToken(invoiceNo);
    const answer = await postRaw('cancelTransaction', { paymentToken: token, clientID: 'E380BEC2BFD727A4B6845133519F3AD7', locale: 'en' });
    assert.deepEqual(answer.body, {
      invoiceNo,
      respCode: '2000',
      respDesc: 'Transaction is completed, please do payment inquiry request for full payment information.',
    });
    assert.equal(claimsOf(await inquiry({ invoiceNo })).respCode, '0003');
    assert.equal((await postRaw('cancelTransaction', { paymentToken: 'kSAnope' })).body.respCode, '9040');
    assert.equal((await postRaw('cancelTransaction', {})).body.respCode, '9005');

    const open = newInvoiceNo();
    await paymentToken(open);
    assert.equal(plainOf(await cancel(open, 'D'.repeat(64))).respCode, '9042');
    assert.equal((await postRaw('cancelTransaction', { payload: 'not-a-jwt' })).body.respCode, '6103');
    assert.equal(claimsOf(await inquiry({ invoiceNo: open })).respCode, '0001'); // still open

    // A paid invoice's token: refused, and the payment stands.
    const paidNo = newInvoiceNo();
    const paidToken = await paymentToken(paidNo);
    assert.equal((await pay(paidToken, TWOC2P_TEST_CARDS.ok)).respCode, '2000');
    const refused = await postRaw('cancelTransaction', { paymentToken: paidToken });
    assert.equal(refused.body.respCode, '9015');
    assert.equal(claimsOf(await inquiry({ invoiceNo: paidNo })).respCode, '0000');
  });

  it('answers 0999 System error in an HTTP 200, as 2C2P does, without cancelling when fail_before_charge is armed for close', async () => {
    const invoiceNo = newInvoiceNo();
    await paymentToken(invoiceNo);
    await arm({ operation: 'close', action: 'fail_before_charge' });
    try {
      const res = await postRaw('cancelTransaction', { payload: await jwt({ merchantID: creds.merchantId, invoiceNo }) });
      assert.equal(res.status, 200);
      assert.equal(res.body.respCode, '0999');
    } finally {
      await disarm();
    }
    assert.equal(claimsOf(await inquiry({ invoiceNo })).respCode, '0001'); // not cancelled
    assert.equal(claimsOf(await cancel(invoiceNo)).respCode, '0000');
    assert.equal(claimsOf(await inquiry({ invoiceNo })).respCode, '0003');
  });

  it('orders 20 concurrent payments and a cancel: either paid or cancelled, never both', async () => {
    for (let round = 0; round < 5; round += 1) {
      const invoiceNo = newInvoiceNo();
      const token = await paymentToken(invoiceNo);
      const [cancelAnswer, ...payments] = await Promise.all([
        cancel(invoiceNo),
        ...Array.from({ length: 20 }, () => pay(token, TWOC2P_TEST_CARDS.ok)),
      ]);
      const cancelCode = claimsOf(cancelAnswer as Answer).respCode;
      const paidCount = (payments as Claims[]).filter((p) => p.respCode === '2000').length;
      const { charges } = await ledger(invoiceNo);
      if (cancelCode === '0000') {
        assert.equal(paidCount, 0);
        assert.deepEqual(charges, []);
        assert.equal(claimsOf(await inquiry({ invoiceNo })).respCode, '0003');
      } else {
        assert.equal(cancelCode, '9015');
        assert.equal(paidCount, 1);
        assert.deepEqual(
          charges.map((c) => c.status),
          ['succeeded'],
        );
      }
    }
  });
});

describe('paths', () => {
  it('ignore case, as 2C2P’s do: /paymenttoken (its OpenAPI clients) and /PAYMENTINQUIRY reach the APIs', async () => {
    const invoiceNo = newInvoiceNo();
    const token = claimsOf(await call('paymenttoken', tokenClaims(invoiceNo)));
    assert.equal(token.respCode, '0000');
    assert.equal(claimsOf(await call('PAYMENTINQUIRY', { merchantID: creds.merchantId, invoiceNo, locale: 'en' })).invoiceNo, invoiceNo);
    assert.equal((await postRaw('nosuchapi', {})).status, 404);
  });
});

describe('buyer-pays tool', () => {
  let receiver: { url: string; close(): Promise<void> };
  const bodies: string[] = [];
  before(async () => {
    receiver = await startServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        bodies.push(body);
        res.writeHead(200).end();
      });
    });
  });
  after(async () => {
    await receiver.close();
  });

  it('pays the open invoice as the hosted page would: ledger row and the signed backend notification', async () => {
    const invoiceNo = newInvoiceNo();
    await paymentToken(invoiceNo, { backendReturnUrl: `${receiver.url}/notify` });
    const answer = await buyerPays({ outTradeNo: invoiceNo });
    assert.equal(answer.status, 200);
    const paid = claimsOf(await inquiry({ invoiceNo }));
    assert.deepEqual(answer.body, { gateway: '2c2p', outTradeNo: invoiceNo, status: 'succeeded', gatewayTradeNo: paid.tranRef });
    const { charges } = await ledger(invoiceNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.gatewayTradeNo]),
      [['succeeded', paid.tranRef]],
    );
    const notification = await waitFor('the notification', async () => {
      for (const body of bodies) {
        const { payload } = await jwtVerify((JSON.parse(body) as { payload: string }).payload, key(), { algorithms: ['HS256'] });
        if (payload.invoiceNo === invoiceNo) return payload;
      }
      return undefined;
    });
    assert.deepEqual([notification.respCode, notification.tranRef], ['0000', paid.tranRef]);
    // Paid: the buyer cannot pay it again.
    const again = await buyerPays({ outTradeNo: invoiceNo, buyer: 'ok' });
    assert.deepEqual([again.status, again.body.code], [409, 'TRADE_NOT_PAYABLE']);
  });

  it('declines with the declining buyers and leaves the invoice payable', async () => {
    const invoiceNo = newInvoiceNo();
    await paymentToken(invoiceNo);
    assert.deepEqual((await buyerPays({ outTradeNo: invoiceNo, buyer: 'insufficient_funds' })).body, {
      gateway: '2c2p',
      outTradeNo: invoiceNo,
      status: 'declined',
      gatewayTradeNo: null,
    });
    assert.equal((await buyerPays({ outTradeNo: invoiceNo, buyer: 'account_restricted' })).body.status, 'declined');
    assert.equal((await buyerPays({ outTradeNo: invoiceNo })).body.status, 'succeeded');
    assert.deepEqual(
      (await ledger(invoiceNo)).charges.map((c) => c.status),
      ['declined', 'declined', 'succeeded'],
    );
  });

  it('answers 409 for an unknown invoice and 400 for bad input', async () => {
    const unknown = await buyerPays({ outTradeNo: newInvoiceNo() });
    assert.deepEqual([unknown.status, unknown.body.code], [409, 'TRADE_NOT_PAYABLE']);
    for (const bad of ['{', { outTradeNo: '' }, { outTradeNo: 'X1', buyer: 'rich' }, {}]) {
      const res = await buyerPays(bad);
      assert.deepEqual([res.status, res.body.code], [400, 'BAD_REQUEST'], JSON.stringify(bad));
    }
  });
});
