/**
 * The Alipay adapter's buyer steps (issue 13) against the PSP sandbox over HTTP, real PostgreSQL:
 * charge without a test buyer opens the trade for the buyer (qr: precreate; redirect: page.pay's
 * signed URL), the buyer pays on the sandbox's pages with plain fetches of their HTML forms, and
 * query(), the notification and close() tell the rest. Plus close()'s cancel race and 10003.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/alipay-buyer-steps.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import { AlipaySdk } from 'alipay-sdk';
import { createAlipayGateway, type AlipayGatewayConfig } from '@/server/payments/alipay';
import type { ChargeOutcome, ChargeRequest, NotificationVerdict, PaymentGateway } from '@/server/payments/gateway';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { readLedger, startServer, waitFor } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  appId: string;
  appPrivateKey: string;
  alipayPublicKey: string;
  gateway: string;
  testBuyers: { ok: string; insufficient_funds: string; account_restricted: string };
  userPayingAuthCode: string;
}

let sandbox: RunningSandbox;
let creds: Credentials;
let gateway: PaymentGateway;
/** The merchant's webhook: every verdict of the adapter, by out_trade_no; acknowledges what verifies. */
const verdicts = new Map<string, NotificationVerdict[]>();
let webhook: { url: string; close(): Promise<void> };

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
  return `S${Date.now().toString(36)}${randomBytes(6).toString('hex')}`;
}

function chargeRequest(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo,
    amountMinor: 2480,
    currency: 'CNY',
    subject: 'PayOnce 订单 测试',
    attempt: 1,
    notifyUrl: `${webhook.url}/${outTradeNo}`,
    returnUrl: `https://shop.example/api/return?orderId=${outTradeNo}`,
    ...overrides,
  };
}

function verdictsFor(outTradeNo: string): Promise<NotificationVerdict[]> {
  return waitFor(`a notification for ${outTradeNo}`, async () => {
    const list = verdicts.get(outTradeNo) ?? [];
    return list.length > 0 ? list : undefined;
  });
}

interface Page {
  status: number;
  html: string;
  location: string | null;
}

async function open(url: string, init: RequestInit = {}): Promise<Page> {
  const res = await fetch(url, { redirect: 'manual', ...init });
  return { status: res.status, html: await res.text(), location: res.headers.get('location') };
}

function unescape(html: string): string {
  return html.replace(/&#(\d+);/g, (_, code: string) => String.fromCharCode(Number(code)));
}

/** A buyer's browser submitting the page's form with one of its buttons. */
async function submit(page: Page, buyer: string): Promise<Page> {
  const action = /<form method="post" action="([^"]+)"/.exec(page.html)?.[1];
  assert.ok(action, `the page has a form (HTTP ${page.status})`);
  const form = new URLSearchParams();
  for (const [, name, value] of page.html.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) {
    form.append(unescape(name ?? ''), unescape(value ?? ''));
  }
  form.append('buyer', buyer);
  return open(new URL(unescape(action), sandbox.url).toString(), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: form.toString(),
  });
}

function qrOf(outcome: ChargeOutcome): string {
  assert.equal(outcome.kind, 'awaiting_buyer', JSON.stringify(outcome));
  assert.ok(outcome.kind === 'awaiting_buyer' && outcome.action.kind === 'qr', JSON.stringify(outcome));
  return outcome.action.qrCode;
}

function redirectOf(outcome: ChargeOutcome): string {
  assert.equal(outcome.kind, 'awaiting_buyer', JSON.stringify(outcome));
  assert.ok(outcome.kind === 'awaiting_buyer' && outcome.action.kind === 'redirect', JSON.stringify(outcome));
  return outcome.action.url;
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001 });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { alipay: Credentials }).alipay;
  gateway = createAlipayGateway(config());
  webhook = await startServer((req, res) => {
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
  await webhook.close();
  await sandbox.close();
});

describe('buyer steps', () => {
  it('offers the QR code first, then the redirect', () => {
    assert.deepEqual(gateway.buyerSteps, ['qr', 'redirect']);
    assert.equal(gateway.hasTestBuyers, true);
  });
});

describe('qr (alipay.trade.precreate)', () => {
  it('answers awaiting_buyer with the qr_code, the same one to a retry; not_found until the scan; paid on the scan page → succeeded and a notification', async () => {
    const outTradeNo = newOutTradeNo();
    const qrCode = qrOf(await gateway.charge(chargeRequest(outTradeNo)));
    assert.match(qrCode, /\/sandbox\/alipay\/qr\/[0-9a-f]{32}$/);
    assert.equal(qrOf(await gateway.charge(chargeRequest(outTradeNo, { buyerStep: 'qr' }))), qrCode);
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'not_found' } });

    const scanned = await open(qrCode);
    assert.equal(scanned.status, 200);
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    const paid = await submit(scanned, 'ok');
    assert.equal(paid.status, 200);

    const found = await gateway.query(outTradeNo);
    assert.ok(found.kind === 'answered' && found.trade.kind === 'succeeded', JSON.stringify(found));
    assert.equal(found.trade.amountMinor, 2480);
    const [verdict] = await verdictsFor(outTradeNo);
    assert.ok(verdict?.kind === 'verified', JSON.stringify(verdict));
    assert.equal(verdict.notification.status, 'succeeded');
    assert.equal(verdict.notification.gatewayTradeNo, found.trade.gatewayTradeNo);
    // Charging again now answers the payment (ACQ.TRADE_HAS_SUCCESS, confirmed by query).
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo)), {
      kind: 'succeeded',
      gatewayTradeNo: found.trade.gatewayTradeNo,
      amountMinor: 2480,
      currency: 'CNY',
    });
  });

  it('stays pending after a decline on the scan page; close() closes it, the page refuses, and a TRADE_CLOSED notification is read as other', async () => {
    const outTradeNo = newOutTradeNo();
    const qrCode = qrOf(await gateway.charge(chargeRequest(outTradeNo)));
    const declined = await submit(await open(qrCode), 'insufficient_funds');
    assert.match(declined.html, /ACQ\.BUYER_BALANCE_NOT_ENOUGH/);
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });

    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 2480, currency: 'CNY' }), { kind: 'closed' });
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 2480, currency: 'CNY' }), { kind: 'closed' });
    const refused = await open(qrCode);
    assert.equal(refused.status, 409);
    assert.match(refused.html, /交易已关闭/);
    assert.equal((await submit(declined, 'ok')).status, 409);
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo)), {
      kind: 'declined',
      code: 'ACQ.TRADE_HAS_CLOSE',
      message: '交易已经关闭',
    });

    const [closed] = await verdictsFor(outTradeNo);
    assert.ok(closed?.kind === 'verified', JSON.stringify(closed));
    assert.equal(closed.notification.status, 'other');
    assert.deepEqual(
      (await readLedger<Ledger>(sandbox.url, outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('closes a code nobody scanned (trade.close cannot: ACQ.TRADE_NOT_EXIST; trade.cancel blocks it): closed, and the scan page refuses', async () => {
    const outTradeNo = newOutTradeNo();
    const qrCode = qrOf(await gateway.charge(chargeRequest(outTradeNo)));
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 2480, currency: 'CNY' }), { kind: 'closed' });
    const refused = await open(qrCode);
    assert.equal(refused.status, 409);
    assert.match(refused.html, /交易已关闭/);
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo)), {
      kind: 'declined',
      code: 'ACQ.TRADE_HAS_CLOSE',
      message: '交易已经关闭',
    });
    assert.deepEqual((await readLedger<Ledger>(sandbox.url, outTradeNo)).charges, []);
  });
});

describe('redirect (alipay.trade.page.pay)', () => {
  it('answers awaiting_buyer with pageExecute’s signed GET URL; the cashier declines then pays; 302 to returnUrl verified with the Alipay public key; succeeded and notified', async () => {
    const outTradeNo = newOutTradeNo();
    const url = new URL(redirectOf(await gateway.charge(chargeRequest(outTradeNo, { buyerStep: 'redirect' }))));
    assert.equal(`${url.origin}${url.pathname}`, creds.gateway);
    assert.equal(url.searchParams.get('method'), 'alipay.trade.page.pay');
    assert.equal(url.searchParams.get('app_id'), creds.appId);
    assert.equal(url.searchParams.get('return_url'), `https://shop.example/api/return?orderId=${outTradeNo}`);
    assert.equal(url.searchParams.get('notify_url'), `${webhook.url}/${outTradeNo}`);
    assert.deepEqual(JSON.parse(url.searchParams.get('biz_content') ?? ''), {
      out_trade_no: outTradeNo,
      total_amount: '24.80',
      subject: 'PayOnce 订单 测试',
      product_code: 'FAST_INSTANT_TRADE_PAY',
    });
    for (const name of ['charset', 'sign_type', 'timestamp', 'version', 'sign']) assert.ok(url.searchParams.get(name), name);
    // No HTTP call was made: nothing exists until the buyer's browser opens the URL.
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'not_found' } });

    const cashier = await open(url.toString());
    assert.equal(cashier.status, 200);
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    const declined = await submit(cashier, 'account_restricted');
    assert.equal(declined.status, 200);
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    const paid = await submit(declined, 'ok');
    assert.equal(paid.status, 302);
    const back = new URL(paid.location ?? '');
    assert.equal(back.searchParams.get('orderId'), outTradeNo);
    const returned = Object.fromEntries(back.searchParams);
    delete returned.orderId;
    // Verified independently of the adapter, with the Alipay public key through alipay-sdk.
    const verifier = new AlipaySdk({ appId: creds.appId, privateKey: creds.appPrivateKey, alipayPublicKey: creds.alipayPublicKey });
    assert.ok(verifier.checkNotifySign(returned), 'the synchronous return verifies');
    assert.equal(verifier.checkNotifySign({ ...returned, out_trade_no: newOutTradeNo() }), false);

    const found = await gateway.query(outTradeNo);
    assert.ok(found.kind === 'answered' && found.trade.kind === 'succeeded', JSON.stringify(found));
    assert.equal(returned.trade_no, found.trade.gatewayTradeNo);
    const [verdict] = await verdictsFor(outTradeNo);
    assert.ok(verdict?.kind === 'verified' && verdict.notification.status === 'succeeded', JSON.stringify(verdict));
    // A retry of the charge after the payment answers the payment instead of another URL.
    const again = await gateway.charge(chargeRequest(outTradeNo, { buyerStep: 'redirect' }));
    assert.equal(again.kind, 'succeeded');
  });

  it('closes the trade the cashier opened; the cashier then refuses, and a new redirect charge is declined', async () => {
    const outTradeNo = newOutTradeNo();
    const cashier = await open(redirectOf(await gateway.charge(chargeRequest(outTradeNo, { buyerStep: 'redirect' }))));
    assert.equal(cashier.status, 200);
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 2480, currency: 'CNY' }), { kind: 'closed' });
    assert.equal((await submit(cashier, 'ok')).status, 409);
    const charged = await gateway.charge(chargeRequest(outTradeNo, { buyerStep: 'redirect' }));
    assert.equal(charged.kind, 'declined');
    assert.deepEqual((await readLedger<Ledger>(sandbox.url, outTradeNo)).charges, []);
  });

  it('declines a redirect without a returnUrl before any call', async () => {
    const outcome = await gateway.charge({
      ...chargeRequest(newOutTradeNo(), { buyerStep: 'redirect' }),
      returnUrl: undefined,
    } as ChargeRequest);
    assert.equal(outcome.kind, 'declined');
  });
});

/**
 * A gateway in front of the sandbox that runs `meanwhile` just before forwarding the first request
 * for `method`: what another instance or the buyer did between the adapter's query and its call.
 */
async function raceBefore(
  method: string,
  meanwhile: () => Promise<void>,
): Promise<{ url: string; close(): Promise<void>; raced(): boolean }> {
  let raced = false;
  const server = await startServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      void (async () => {
        if (!raced && (req.url ?? '').includes(`method=${method}&`)) {
          raced = true;
          await meanwhile();
        }
        const forwarded = http.request(new URL(req.url ?? '/', sandbox.url), { method: req.method, headers: req.headers }, (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        });
        forwarded.end(Buffer.concat(chunks));
      })();
    });
  });
  return { ...server, raced: () => raced };
}

describe('close() and trade.cancel', () => {
  it('treats ACQ.TRADE_STATUS_ERROR from closing a trade that another close just closed as closed', async () => {
    const outTradeNo = newOutTradeNo();
    await open(qrOf(await gateway.charge(chargeRequest(outTradeNo))));
    const racing = await raceBefore('alipay.trade.close', async () => {
      assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 2480, currency: 'CNY' }), { kind: 'closed' });
    });
    try {
      const racingGateway = createAlipayGateway(config({ gatewayUrl: `${racing.url}/gateway.do` }));
      assert.deepEqual(await racingGateway.close({ outTradeNo, amountMinor: 2480, currency: 'CNY' }), { kind: 'closed' });
      assert.ok(racing.raced(), 'the other close ran between the query and trade.close');
    } finally {
      await racing.close();
    }
  });

  it('reports a cancel that refunded (the buyer paid between the query and the cancel) as payment_reversed; a later close answers closed', async () => {
    const outTradeNo = newOutTradeNo();
    qrOf(await gateway.charge(chargeRequest(outTradeNo)));
    // The buyer scans and pays just before trade.cancel lands.
    const racing = await raceBefore('alipay.trade.cancel', async () => {
      const paid = await fetch(`${sandbox.url}/sandbox/alipay/buyer-pays`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ outTradeNo, buyer: 'ok' }),
      });
      assert.equal(paid.status, 200);
    });
    try {
      const racingGateway = createAlipayGateway(config({ gatewayUrl: `${racing.url}/gateway.do` }));
      const outcome = await racingGateway.close({ outTradeNo, amountMinor: 2480, currency: 'CNY' });
      assert.equal(outcome.kind, 'payment_reversed');
    } finally {
      await racing.close();
    }
    const { charges, refunds } = await readLedger<Ledger>(sandbox.url, outTradeNo);
    assert.deepEqual(
      charges.map((c) => c.status),
      ['succeeded'],
    );
    assert.deepEqual(
      refunds.map((r) => [r.amountMinor, r.status]),
      [[2480, 'succeeded']],
    );
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 2480, currency: 'CNY' }), { kind: 'closed' });
  });
});

describe('10003 (the buyer confirms in the app)', () => {
  it('is indeterminate ACQ.USERPAYING; the trade waits (pending) and succeeds once the buyer confirms', async () => {
    const outTradeNo = newOutTradeNo();
    const waiting = createAlipayGateway(config({ testBuyerAuthCodes: { ...creds.testBuyers, ok: creds.userPayingAuthCode } }));
    const outcome = await waiting.charge(chargeRequest(outTradeNo, { buyer: 'ok' }));
    assert.equal(outcome.kind, 'indeterminate');
    assert.ok(outcome.kind === 'indeterminate');
    assert.equal(outcome.code, 'ACQ.USERPAYING');
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    const confirmed = await fetch(`${sandbox.url}/sandbox/alipay/buyer-pays`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo, buyer: 'ok' }),
    });
    assert.equal(confirmed.status, 200);
    const found = await gateway.query(outTradeNo);
    assert.ok(found.kind === 'answered' && found.trade.kind === 'succeeded', JSON.stringify(found));
  });
});
