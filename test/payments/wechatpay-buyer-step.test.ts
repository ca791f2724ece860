/**
 * The WeChat Pay adapter's buyer step (Native pay's QR code) against the PSP sandbox over HTTP: a
 * charge without a test buyer opens the order and hands back its code_url; the buyer scans it and
 * confirms on the sandbox's scan page (a plain form POST, as a browser sends it); the order completes
 * by TRANSACTION.SUCCESS or a query. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/wechatpay-buyer-step.test.ts
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type http from 'node:http';
import { after, before, describe, it } from 'node:test';
import type { ChargeRequest, NotificationVerdict, PaymentGateway } from '@/server/payments/gateway';
import { createWechatPayGateway, type WechatPayGatewayConfig } from '@/server/payments/wechatpay';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { wechatpayModule } from '@/sandbox/wechatpay';
import type { Ledger } from '@/soak/invariants';
import { readLedger, startServer, waitFor } from '@/test/support/harness';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');
const databaseUrl: string = DATABASE_URL;

let sandbox: RunningSandbox;
let gateway: PaymentGateway;
/** What the app's webhook route would do: verify, and acknowledge only what verified. */
let verdicts: NotificationVerdict[] = [];
let receiver: Awaited<ReturnType<typeof startServer>>;

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

/** A charge with no sandbox test buyer: the buyer takes their own step. */
function buyerStepCharge(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo,
    amountMinor: 4560,
    currency: 'CNY',
    subject: 'PayOnce 订单 扫码',
    attempt: 1,
    buyerStep: 'qr',
    notifyUrl: `${receiver.url}/api/webhooks/wechatpay`,
    ...overrides,
  };
}

function toHeaders(incoming: http.IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [key, value] of Object.entries(incoming)) {
    if (value !== undefined) headers.set(key, Array.isArray(value) ? value.join(', ') : value);
  }
  return headers;
}

/** The buyer's phone: open the scanned code's page, then press one of its buttons (the form's POST). */
async function scanAndPress(qrCode: string, buyer: 'ok' | 'insufficient_funds' | 'account_restricted'): Promise<number> {
  const page = await fetch(`${sandbox.url}/sandbox/wechatpay/scan?code_url=${encodeURIComponent(qrCode)}`);
  const html = await page.text();
  if (page.status !== 200) return page.status;
  const action = /<form method="post" action="([^"]+)"/.exec(html)?.[1];
  const codeUrl = /<input type="hidden" name="code_url" value="([^"]+)">/.exec(html)?.[1]?.replaceAll('&#38;', '&');
  assert.ok(action && codeUrl, 'the page has the payment form');
  assert.ok(html.includes(`value="${buyer}"`), `the page offers ${buyer}`);
  const pressed = await fetch(new URL(action, sandbox.url), {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ code_url: codeUrl, buyer }).toString(),
  });
  await pressed.text();
  return pressed.status;
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

before(async () => {
  receiver = await startServer((req, res) => {
    let rawBody = '';
    req.on('data', (chunk: Buffer) => (rawBody += chunk.toString()));
    req.on('end', () => {
      void gateway.verifyNotification({ headers: toHeaders(req.headers), rawBody }).then((verdict) => {
        verdicts.push(verdict);
        const reply = gateway.notificationReply(verdict.kind !== 'rejected');
        res.writeHead(reply.status, reply.headers).end(reply.body);
      });
    });
  });
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [wechatpayModule] });
  const creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { wechatpay: WechatPayGatewayConfig }).wechatpay;
  gateway = createWechatPayGateway(creds);
});

after(async () => {
  await sandbox.close();
  await receiver.close();
});

describe('the buyer’s step: Native pay QR code', () => {
  it('offers the qr step', () => {
    assert.deepEqual(gateway.buyerSteps, ['qr']);
    assert.equal(gateway.hasTestBuyers, true);
  });

  it('answers awaiting_buyer with the weixin:// code_url; the buyer pays on the scan page; query and TRANSACTION.SUCCESS say succeeded', async () => {
    verdicts = [];
    const outTradeNo = newOutTradeNo();
    // 1. The order is open and waits for the buyer: no polling, no test buyer in attach.
    const started = Date.now();
    const opened = await gateway.charge(buyerStepCharge(outTradeNo));
    assert.ok(opened.kind === 'awaiting_buyer', JSON.stringify(opened));
    assert.ok(Date.now() - started < 1500, 'answered without waiting for a payment');
    assert.equal(opened.action.kind, 'qr');
    assert.ok(opened.action.kind === 'qr');
    assert.match(opened.action.qrCode, /^weixin:\/\/wxpay\/bizpayurl\?pr=[0-9A-Za-z]+$/);
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    // 2. A retry of the same attempt (same parameters, before the order expires): a new code_url.
    const retried = await gateway.charge(buyerStepCharge(outTradeNo));
    assert.ok(retried.kind === 'awaiting_buyer' && retried.action.kind === 'qr', JSON.stringify(retried));
    assert.notEqual(retried.action.qrCode, opened.action.qrCode);
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
    // 3. The buyer scans the first code and pays.
    assert.equal(await scanAndPress(opened.action.qrCode, 'ok'), 200);
    const settled = await gateway.query(outTradeNo);
    assert.ok(settled.kind === 'answered' && settled.trade.kind === 'succeeded', JSON.stringify(settled));
    assert.equal(settled.trade.amountMinor, 4560);
    // 4. The notification reaches the webhook, verifies, and is acknowledged once.
    const verified = await waitFor('the verified notification', async () => verdicts.find((v) => v.kind === 'verified'));
    assert.ok(verified.kind === 'verified');
    assert.equal(verified.notification.outTradeNo, outTradeNo);
    assert.equal(verified.notification.status, 'succeeded');
    assert.equal(verified.notification.gatewayTradeNo, settled.trade.gatewayTradeNo);
    const { charges, notifications } = await waitFor('the acknowledgement', async () => {
      const l = await ledger(outTradeNo);
      return l.notifications.some((n) => n.acknowledged) ? l : undefined;
    });
    assert.deepEqual(
      charges.map((c) => c.status),
      ['succeeded'],
    );
    assert.equal(notifications.filter((n) => n.acknowledged).length, 1);
    // 5. The next charge of the order finds it paid (403 OUT_TRADE_NO_USED, then a query).
    const again = await gateway.charge(buyerStepCharge(outTradeNo, { attempt: 2 }));
    assert.ok(again.kind === 'succeeded' && again.gatewayTradeNo === settled.trade.gatewayTradeNo, JSON.stringify(again));
  });

  it('a decline on the page leaves the order pending, still payable by the same code', async () => {
    const outTradeNo = newOutTradeNo();
    const opened = await gateway.charge(buyerStepCharge(outTradeNo));
    assert.ok(opened.kind === 'awaiting_buyer' && opened.action.kind === 'qr');
    assert.equal(await scanAndPress(opened.action.qrCode, 'insufficient_funds'), 402);
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    assert.equal(await scanAndPress(opened.action.qrCode, 'account_restricted'), 402);
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    assert.equal(await scanAndPress(opened.action.qrCode, 'ok'), 200);
    const paid = await gateway.query(outTradeNo);
    assert.ok(paid.kind === 'answered' && paid.trade.kind === 'succeeded');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'declined', 'succeeded'],
    );
  });

  it('close() closes the waiting order: the scan page refuses the code (409), close again is closed, a new charge is ORDER_CLOSED', async () => {
    const outTradeNo = newOutTradeNo();
    const opened = await gateway.charge(buyerStepCharge(outTradeNo));
    assert.ok(opened.kind === 'awaiting_buyer' && opened.action.kind === 'qr');
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 4560, currency: 'CNY' }), { kind: 'closed' });
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'closed' } });
    assert.equal(await scanAndPress(opened.action.qrCode, 'ok'), 409);
    assert.deepEqual(await gateway.close({ outTradeNo, amountMinor: 4560, currency: 'CNY' }), { kind: 'closed' });
    // "400 ORDER_CLOSED 当前订单已关闭，请重新下单": terminal for this gateway, with or without a buyer.
    const reopened = await gateway.charge(buyerStepCharge(outTradeNo, { attempt: 2 }));
    assert.ok(reopened.kind === 'declined' && reopened.code === 'ORDER_CLOSED', JSON.stringify(reopened));
    assert.deepEqual((await ledger(outTradeNo)).charges, []);
  });

  it('keeps the test buyer synchronous: with buyer ok the charge succeeds at once', async () => {
    const outTradeNo = newOutTradeNo();
    const { buyerStep: _step, ...request } = buyerStepCharge(outTradeNo);
    const paid = await gateway.charge({ ...request, buyer: 'ok' });
    assert.equal(paid.kind, 'succeeded');
  });
});
