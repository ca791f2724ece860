/**
 * The PSP sandbox's 2C2P Payment Maintenance API (refund, refund status), driven the way a merchant
 * drives the real one: XML in a JWE (RSA-OAEP, A256GCM) for 2C2P's public key, in a JWS (PS256) with
 * the merchant's private key, made with jose; answers opened the other way round. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/twoc2p-maintenance.test.ts
 */
import assert from 'node:assert/strict';
import { createPrivateKey, createPublicKey, randomBytes, type KeyObject } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { CompactEncrypt, CompactSign, compactDecrypt, compactVerify, SignJWT } from 'jose';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { twoC2pModule, TWOC2P_TEST_CARDS } from '@/sandbox/twoc2p';
import { strangerKey } from '@/test/support/contract-adapters';
import { readLedger } from '@/test/support/harness';
import type { Ledger } from '@/soak/invariants';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  merchantId: string;
  secretKey: string;
  baseUrl: string;
  maintenanceUrl: string;
  merchantPrivateKey: string;
  twoc2pPublicKey: string;
}

type Fields = Record<string, string | undefined>;
/** An answer: sealed (verified with 2C2P's key and decrypted with ours) or plain XML, as its XML text. */
type Answer = { sealed: boolean; xml: string };

let sandbox: RunningSandbox;
let creds: Credentials;
let merchantKey: KeyObject;
let twoc2pKey: KeyObject;

function newInvoiceNo(): string {
  return `M${Date.now().toString(36).toUpperCase()}${randomBytes(5).toString('hex').toUpperCase()}`;
}

function xml(fields: Fields, root = 'PaymentProcessRequest'): string {
  const lines = Object.entries(fields).flatMap(([k, v]) => (v === undefined ? [] : [`<${k}>${v}</${k}>`]));
  return `<${root}>${lines.join('')}</${root}>`;
}

async function seal(text: string, keys: { encryptFor?: KeyObject; signWith?: KeyObject } = {}): Promise<string> {
  const jwe = await new CompactEncrypt(new TextEncoder().encode(text))
    .setProtectedHeader({ alg: 'RSA-OAEP', enc: 'A256GCM' })
    .encrypt(keys.encryptFor ?? twoc2pKey);
  return new CompactSign(new TextEncoder().encode(jwe)).setProtectedHeader({ alg: 'PS256', typ: 'JWT' }).sign(keys.signWith ?? merchantKey);
}

async function post(body: string, url = creds.maintenanceUrl): Promise<Answer> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'text/plain' }, body });
  assert.equal(res.status, 200);
  const text = (await res.text()).trim();
  if (text.startsWith('<')) return { sealed: false, xml: text };
  const { payload } = await compactVerify(text, twoc2pKey, { algorithms: ['PS256'] });
  const { plaintext } = await compactDecrypt(new TextDecoder().decode(payload), merchantKey);
  return { sealed: true, xml: new TextDecoder().decode(plaintext) };
}

/** One element's text (the first), or undefined. */
function get(answer: Answer, name: string): string | undefined {
  return new RegExp(`<${name}>([^<]*)</${name}>`).exec(answer.xml)?.[1];
}

function sealedCode(answer: Answer): string | undefined {
  assert.ok(answer.sealed, `expected a sealed answer, got ${answer.xml}`);
  return get(answer, 'respCode');
}

function refundXml(invoiceNo: string, actionAmount: string | undefined, idempotencyID?: string, extra: Fields = {}): string {
  return xml({ version: '3.8', merchantID: creds.merchantId, invoiceNo, actionAmount, processType: 'R', idempotencyID, ...extra });
}

async function refund(invoiceNo: string, actionAmount: string | undefined, idempotencyID?: string, extra: Fields = {}): Promise<Answer> {
  return post(await seal(refundXml(invoiceNo, actionAmount, idempotencyID, extra)));
}

async function refundStatus(invoiceNo: string): Promise<Answer> {
  return post(await seal(xml({ version: '3.8', merchantID: creds.merchantId, invoiceNo, processType: 'RS' })));
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

/** A paid invoice, through PGW v4.3 as a merchant pays one (paymentToken, then Do Payment). */
async function paidInvoice(amount = 168): Promise<{ invoiceNo: string; tranRef: string }> {
  const invoiceNo = newInvoiceNo();
  const key = new TextEncoder().encode(creds.secretKey);
  const claims = {
    merchantID: creds.merchantId,
    invoiceNo,
    description: 'PayOnce 订单',
    amount,
    currencyCode: 'CNY',
    paymentChannel: ['CC'],
  };
  const tokenAnswer = (await (
    await fetch(`${creds.baseUrl}/paymentToken`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ payload: await new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).sign(key) }),
    })
  ).json()) as { payload: string };
  const token = JSON.parse(Buffer.from(tokenAnswer.payload.split('.')[1] ?? '', 'base64url').toString()) as { paymentToken: string };
  const paid = (await (
    await fetch(`${creds.baseUrl}/payment`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        paymentToken: token.paymentToken,
        payment: { code: { channelCode: 'CC' }, data: { name: 'Test', cardNo: TWOC2P_TEST_CARDS.ok } },
      }),
    })
  ).json()) as { respCode: string };
  assert.equal(paid.respCode, '2000');
  const { charges } = await ledger(invoiceNo);
  const tranRef = charges[0]?.gatewayTradeNo;
  assert.ok(tranRef);
  return { invoiceNo, tranRef };
}

async function arm(fault: Record<string, unknown>): Promise<void> {
  const res = await fetch(`${sandbox.url}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ gateway: '2c2p', ...fault }),
  });
  assert.equal(res.status, 201);
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [twoC2pModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { '2c2p': Credentials })['2c2p'];
  merchantKey = createPrivateKey(creds.merchantPrivateKey);
  twoc2pKey = createPublicKey(creds.twoc2pPublicKey);
});

after(async () => {
  await fetch(`${sandbox.url}/sandbox/faults`, { method: 'DELETE' });
  await sandbox.close();
});

describe('the merchant portal', () => {
  it('hands out the maintenance URL (2C2P’s sandbox path), the merchant’s private key and 2C2P’s public key', () => {
    assert.equal(creds.maintenanceUrl, `${sandbox.url}/2C2PFrontend/PaymentAction/2.0/action`);
    assert.equal(createPrivateKey(creds.merchantPrivateKey).asymmetricKeyDetails?.modulusLength, 2048);
    assert.equal(createPublicKey(creds.twoc2pPublicKey).asymmetricKeyType, 'rsa');
    assert.notEqual(createPublicKey(creds.merchantPrivateKey).export({ type: 'spki', format: 'pem' }), creds.twoc2pPublicKey);
  });
});

describe('the envelope', () => {
  it('answers a JWS of a JWE with a JWS of a JWE: the request’s nesting, headers as 2C2P’s sample', async () => {
    const { invoiceNo } = await paidInvoice();
    const res = await fetch(creds.maintenanceUrl, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: await seal(refundXml(invoiceNo, '1.00', `R${newInvoiceNo()}`)),
    });
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain/);
    const [header, payload] = (await res.text()).split('.');
    assert.deepEqual(JSON.parse(Buffer.from(header ?? '', 'base64url').toString()), { alg: 'PS256', typ: 'JWT' });
    const jwe = Buffer.from(payload ?? '', 'base64url').toString();
    assert.deepEqual(JSON.parse(Buffer.from(jwe.split('.')[0] ?? '', 'base64url').toString()), { alg: 'RSA-OAEP', enc: 'A256GCM' });
  });

  it('refuses a signature no registered key verifies (13, plain) and refunds nothing', async () => {
    const { invoiceNo } = await paidInvoice();
    const forged = await post(
      await seal(refundXml(invoiceNo, '168.00', `R${newInvoiceNo()}`), { signWith: createPrivateKey(strangerKey('private')) }),
    );
    assert.deepEqual([forged.sealed, get(forged, 'respCode')], [false, '13']);
    // A genuine request with one signature byte changed.
    const genuine = await seal(refundXml(invoiceNo, '168.00', `R${newInvoiceNo()}`));
    const tampered = `${genuine.slice(0, -4)}${genuine.slice(-4) === 'AAAA' ? 'BBBB' : 'AAAA'}`;
    assert.equal(get(await post(tampered), 'respCode'), '13');
    assert.deepEqual((await ledger(invoiceNo)).refunds, []);
  });

  it('answers 96 (sealed) for a JWE made for another key, and 02 for what is not a JWS, refunding nothing', async () => {
    const { invoiceNo } = await paidInvoice();
    const wrongKey = await post(
      await seal(refundXml(invoiceNo, '168.00', `R${newInvoiceNo()}`), { encryptFor: createPublicKey(strangerKey('public')) }),
    );
    assert.equal(sealedCode(wrongKey), '96');
    const notJws = await post(refundXml(invoiceNo, '168.00', `R${newInvoiceNo()}`));
    assert.deepEqual([notJws.sealed, get(notJws, 'respCode')], [false, '02']);
    assert.deepEqual((await ledger(invoiceNo)).refunds, []);
  });

  it('refuses malformed XML (02), missing fields (10), another merchantID (14) and other process types (17, 97)', async () => {
    const { invoiceNo } = await paidInvoice();
    for (const bad of [
      '<PaymentProcessRequest><version>3.8</version>',
      '<!DOCTYPE x><PaymentProcessRequest/>',
      '{"processType":"R"}',
      xml({ a: '1' }, 'Other'),
    ]) {
      assert.equal(sealedCode(await post(await seal(bad))), '02', bad);
    }
    assert.equal(sealedCode(await refund(invoiceNo, undefined, `R${newInvoiceNo()}`)), '10');
    assert.equal(
      sealedCode(await post(await seal(xml({ version: '3.8', merchantID: creds.merchantId, processType: 'R', actionAmount: '1.00' })))),
      '10',
    );
    assert.equal(sealedCode(await refund(invoiceNo, '1.00', `R${newInvoiceNo()}`, { merchantID: 'JT01' })), '14');
    assert.equal(sealedCode(await refund(invoiceNo, '1.00', `R${newInvoiceNo()}`, { processType: 'X' })), '17');
    assert.equal(sealedCode(await refund(invoiceNo, '1.00', `R${newInvoiceNo()}`, { processType: 'V' })), '97');
    assert.deepEqual((await ledger(invoiceNo)).refunds, []);
  });

  it('serves 2C2P’s production path too, in any case (2C2P’s paths ignore case)', async () => {
    const { invoiceNo } = await paidInvoice();
    for (const path of ['/PaymentAction/2.0/action', '/paymentaction/2.0/ACTION', '/2c2pfrontend/paymentaction/2.0/action']) {
      assert.equal(
        sealedCode(
          await post(
            await seal(xml({ version: '3.8', merchantID: creds.merchantId, invoiceNo, processType: 'RS' })),
            `${sandbox.url}${path}`,
          ),
        ),
        '00',
        path,
      );
    }
  });
});

describe('refund (processType R)', () => {
  it('refunds part, then the rest: partial refunds sum to the charge; more than what is left is 40, then 49', async () => {
    const { invoiceNo, tranRef } = await paidInvoice(100);
    const id1 = `R${newInvoiceNo()}`;
    const first = await refund(invoiceNo, '30.50', id1);
    assert.deepEqual(
      ['respCode', 'processType', 'invoiceNo', 'idempotencyID', 'amount', 'currencyCode', 'status', 'referenceNo'].map((n) =>
        get(first, n),
      ),
      ['00', 'R', invoiceNo, id1, '30.50', 'CNY', 'RF', tranRef],
    );
    assert.match(get(first, 'refundReferenceNo') ?? '', /^\d{7,}$/);
    const tooMuch = await refund(invoiceNo, '69.51', `R${newInvoiceNo()}`);
    assert.deepEqual([sealedCode(tooMuch), get(tooMuch, 'respDesc')], ['40', 'Refund amount is more than transaction amount.']);
    const id2 = `R${newInvoiceNo()}`;
    assert.equal(sealedCode(await refund(invoiceNo, '69.50', id2)), '00');
    assert.equal(sealedCode(await refund(invoiceNo, '0.01', `R${newInvoiceNo()}`)), '49');

    const { refunds, charges } = await ledger(invoiceNo);
    assert.deepEqual(
      refunds.map((r) => [r.gateway, r.outTradeNo, r.amountMinor, r.currency, r.status, r.refundId, r.gatewayTradeNo]),
      [
        ['2c2p', invoiceNo, 3050, 'CNY', 'succeeded', id1, tranRef],
        ['2c2p', invoiceNo, 6950, 'CNY', 'succeeded', id2, tranRef],
      ],
    );
    assert.equal(refunds[0]?.gatewayRefundId, get(first, 'refundReferenceNo'));
    assert.deepEqual(
      charges.map((c) => c.status),
      ['succeeded'],
    );
  });

  it('answers the same idempotencyID with the first refund, refunding once (sequential and 10 at once)', async () => {
    const { invoiceNo } = await paidInvoice();
    const id = `R${newInvoiceNo()}`;
    const first = await refund(invoiceNo, '168.00', id);
    assert.equal(sealedCode(first), '00');
    // The charge is now fully refunded, yet the repeat (even with another amount) is the first refund.
    const again = await refund(invoiceNo, '1.00', id);
    assert.deepEqual(
      ['respCode', 'amount', 'refundReferenceNo', 'status'].map((n) => get(again, n)),
      ['00', '168.00', get(first, 'refundReferenceNo'), 'RF'],
    );

    const other = await paidInvoice();
    const concurrentId = `R${newInvoiceNo()}`;
    const answers = await Promise.all(Array.from({ length: 10 }, () => refund(other.invoiceNo, '100.00', concurrentId)));
    assert.equal(new Set(answers.map((a) => get(a, 'refundReferenceNo'))).size, 1);
    assert.deepEqual(
      (await ledger(other.invoiceNo)).refunds.map((r) => r.amountMinor),
      [10000],
    );
    // The same key for another invoice is refused, and refunds nothing there.
    assert.equal(sealedCode(await refund(other.invoiceNo, '1.00', id)), '11');
    assert.deepEqual(
      (await ledger(other.invoiceNo)).refunds.map((r) => r.amountMinor),
      [10000],
    );
  });

  it('refuses unpaid and unknown invoices (12, 16) and bad amounts (18)', async () => {
    assert.equal(sealedCode(await refund(newInvoiceNo(), '1.00', `R${newInvoiceNo()}`)), '16');
    const { invoiceNo } = await paidInvoice();
    for (const amount of ['0', '-1', '1.001', 'abc']) {
      assert.equal(sealedCode(await refund(invoiceNo, amount, `R${newInvoiceNo()}`)), '18', amount);
    }
    assert.deepEqual((await ledger(invoiceNo)).refunds, []);
  });

  it('processes a refund whose answer is dropped (drop_after_charge): refund status finds it, the repeat refunds nothing', async () => {
    const { invoiceNo } = await paidInvoice();
    const id = `R${newInvoiceNo()}`;
    await arm({ operation: 'refund', action: 'drop_after_charge' });
    await assert.rejects(post(await seal(refundXml(invoiceNo, '168.00', id))));
    const status = await refundStatus(invoiceNo);
    assert.match(status.xml, new RegExp(`<idempotencyID>${id}</idempotencyID>`));
    const repeat = await refund(invoiceNo, '168.00', id);
    assert.equal(get(repeat, 'refundReferenceNo'), get(status, 'refundReferenceNo'));
    assert.deepEqual(
      (await ledger(invoiceNo)).refunds.map((r) => r.amountMinor),
      [16800],
    );
  });

  it('takes no refund fault on refund status: a query is never faulted', async () => {
    const { invoiceNo } = await paidInvoice();
    await arm({ operation: 'refund', action: 'fail_before_charge' });
    assert.equal(sealedCode(await refundStatus(invoiceNo)), '00');
    const failed = await refund(invoiceNo, '1.00', `R${newInvoiceNo()}`);
    assert.deepEqual([sealedCode(failed), get(failed, 'invoiceNo')], ['99', invoiceNo]);
    assert.deepEqual((await ledger(invoiceNo)).refunds, []);
  });
});

describe('refund status (processType RS)', () => {
  it('lists every refund of the invoice under its idempotencyID; 16 for an invoice 2C2P does not have', async () => {
    const { invoiceNo, tranRef } = await paidInvoice();
    const none = await refundStatus(invoiceNo);
    assert.deepEqual(
      ['respCode', 'amount', 'status', 'referenceNo'].map((n) => get(none, n)),
      ['00', '168.00', 'S', tranRef],
    );
    assert.doesNotMatch(none.xml, /<refund>/);
    const [a, b] = [`RA${newInvoiceNo()}`, `RB${newInvoiceNo()}`];
    await refund(invoiceNo, '100.00', a);
    await refund(invoiceNo, '68.00', b);
    const both = await refundStatus(invoiceNo);
    const items = [...both.xml.matchAll(/<refund>([\s\S]*?)<\/refund>/g)].map((m) =>
      ['idempotencyID', 'amount', 'status'].map((n) => new RegExp(`<${n}>([^<]*)</${n}>`).exec(m[1] ?? '')?.[1]),
    );
    assert.deepEqual(items, [
      [a, '100.00', 'RF'],
      [b, '68.00', 'RF'],
    ]);
    assert.equal(get(both, 'status'), 'RF');
    assert.equal(sealedCode(await refundStatus(newInvoiceNo())), '16');
  });
});
