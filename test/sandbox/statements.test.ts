/**
 * Each gateway's daily statement (对账单) from the PSP sandbox, downloaded the way a merchant's finance
 * job downloads it — with the official clients where they exist — and read line by line: Alipay's
 * zip of GBK CSV files (alipay-sdk exec + fetch), WeChat Pay's trade bill (wechatpay-node-v3
 * tradebill + downloadBill, checked against its SHA-1), Stripe's balance transactions (stripe-node
 * balanceTransactions.list with expand) and 2C2P's reconciliation report. For each: two payments
 * and a refund of one, a day with nothing, every discrepancy kind visible in the file, and every fee
 * the file shows worked out again from the fee contract GET /sandbox/credentials publishes.
 *
 * The sandbox runs on a database of its own, made here and dropped afterwards, so the day's
 * statement holds this file's payments and nothing else's. Real PostgreSQL.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/statements.test.ts
 */
import assert from 'node:assert/strict';
import { createHash, createPrivateKey, createPublicKey, randomBytes, type KeyObject } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { gunzipSync, inflateRawSync } from 'node:zlib';
import { AlipaySdk } from 'alipay-sdk';
import { CompactEncrypt, CompactSign, compactDecrypt, compactVerify, SignJWT } from 'jose';
import postgres from 'postgres';
import Stripe from 'stripe';
import WxPay from 'wechatpay-node-v3';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { TWOC2P_TEST_CARDS } from '@/sandbox/twoc2p';
import { waitFor } from '@/test/support/harness';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');
const serverUrl: string = DATABASE_URL;

interface Credentials {
  alipay: {
    appId: string;
    appPrivateKey: string;
    alipayPublicKey: string;
    gateway: string;
    testBuyers: { ok: string };
    feeContract: string;
  };
  wechatpay: {
    mchid: string;
    appid: string;
    merchantSerialNo: string;
    merchantPrivateKey: string;
    apiV3Key: string;
    platformPublicKey: string;
    feeContract: string;
  };
  stripe: { secretKey: string; accountId: string; host: string; port: number; feeContract: string };
  '2c2p': {
    merchantId: string;
    secretKey: string;
    baseUrl: string;
    maintenanceUrl: string;
    merchantPrivateKey: string;
    twoc2pPublicKey: string;
    feeContract: string;
  };
}

let databaseName: string;
let databaseUrl: string;
let sandbox: RunningSandbox;
let creds: Credentials;

/** Each gateway's day, as the test computes it on its own: Beijing, UTC, Bangkok. */
const ZONE_HOURS = { alipay: 8, wechatpay: 8, stripe: 0, '2c2p': 7 } as const;
type Gateway = keyof typeof ZONE_HOURS;

function dayOf(gateway: Gateway, at = new Date()): string {
  return new Date(at.getTime() + ZONE_HOURS[gateway] * 3_600_000).toISOString().slice(0, 10);
}

function dayBefore(date: string): string {
  return new Date(new Date(`${date}T00:00:00Z`).getTime() - 86_400_000).toISOString().slice(0, 10);
}

/** A test's payments and refund must fall on one day in every zone: never start one just before a midnight. */
async function awayFromMidnight(): Promise<void> {
  for (;;) {
    const close = Object.values(ZONE_HOURS).some((hours) => {
      const secondsOfDay = (((Date.now() / 1000 + hours * 3600) % 86_400) + 86_400) % 86_400;
      return secondsOfDay > 86_400 - 60;
    });
    if (!close) return;
    await new Promise((resolve) => setTimeout(resolve, 5_000));
  }
}

function newOrderNo(prefix: string): string {
  return `${prefix}${Date.now().toString(36).toUpperCase()}${randomBytes(4).toString('hex').toUpperCase()}`;
}

async function discrepancy(body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const res = await fetch(`${sandbox.url}/sandbox/statements/discrepancies`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const answer = (await res.json()) as { discrepancy?: Record<string, unknown>; error?: unknown };
  assert.equal(res.status, 201, JSON.stringify(answer));
  assert.ok(answer.discrepancy);
  return answer.discrepancy;
}

async function clearDiscrepancies(gateway: Gateway): Promise<void> {
  const res = await fetch(`${sandbox.url}/sandbox/statements/discrepancies?gateway=${gateway}`, { method: 'DELETE' });
  assert.equal(res.status, 204);
}

/** The four kinds at once on one day: orders A (refunded) and B are the day's real payments. */
async function injectAllKinds(gateway: Gateway, date: string, a: string, b: string, unknownAmount: number): Promise<string> {
  const unknown = newOrderNo('PX');
  await discrepancy({ gateway, date, kind: 'unknown_payment', outTradeNo: unknown, amountMinor: unknownAmount });
  await discrepancy({ gateway, date, kind: 'missing_payment', outTradeNo: b });
  await discrepancy({ gateway, date, kind: 'amount_differs', outTradeNo: a });
  await discrepancy({ gateway, date, kind: 'missing_refund', outTradeNo: a });
  return unknown;
}

/** A discrepancy the tool must refuse: its status and error code. */
async function refusedDiscrepancy(body: Record<string, unknown>): Promise<{ status: number; code: string | undefined }> {
  const res = await fetch(`${sandbox.url}/sandbox/statements/discrepancies`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const answer = (await res.json()) as { error?: { code?: string } };
  return { status: res.status, code: answer.error?.code };
}

// ---------------------------------------------------------------------------------------------
// The fee contract, read by the test's own parser of its grammar (docs/statements.md):
// `;`-separated key=value pairs, no spaces — rate=<percent>% (required), fixed=<minor units>,
// vat=<percent>%, wht=<percent>%, refund=pro_rata|kept (default kept).

interface FeeContract {
  /** Percentages in parts per million. */
  ratePpm: bigint;
  fixedMinor: bigint;
  vatPpm: bigint;
  whtPpm: bigint;
  refund: 'pro_rata' | 'kept';
}

function parseFeeContract(text: string): FeeContract {
  assert.match(text, /^[a-z]+=[^;=\s]+(;[a-z]+=[^;=\s]+)*$/, `;-separated key=value pairs without spaces: ${text}`);
  const pairs = new Map<string, string>();
  for (const pair of text.split(';')) {
    const [key = '', value = ''] = pair.split('=');
    assert.ok(['rate', 'fixed', 'vat', 'wht', 'refund'].includes(key), `a known key: ${key}`);
    assert.ok(!pairs.has(key), `${key} once`);
    pairs.set(key, value);
  }
  const percent = (key: string): bigint => {
    const value = pairs.get(key) ?? '0%';
    const match = /^(\d+)(?:\.(\d{1,4}))?%$/.exec(value);
    assert.ok(match, `${key}: a percentage such as 0.6%, got ${value}`);
    return BigInt(match[1] ?? '0') * 10_000n + BigInt((match[2] ?? '').padEnd(4, '0'));
  };
  assert.ok(pairs.has('rate'), 'rate is required');
  const fixed = pairs.get('fixed') ?? '0';
  assert.match(fixed, /^\d+$/);
  const refund = pairs.get('refund') ?? 'kept';
  assert.ok(refund === 'pro_rata' || refund === 'kept', `refund: pro_rata or kept, got ${refund}`);
  return { ratePpm: percent('rate'), fixedMinor: BigInt(fixed), vatPpm: percent('vat'), whtPpm: percent('wht'), refund };
}

/** n / d rounded half up (n ≥ 0, d > 0). */
const halfUp = (n: bigint, d: bigint): bigint => (n * 2n + d) / (d * 2n);

/** base = round(amount × rate) + fixed; fee = base + round(base × vat) − round(base × wht). */
function contractFee(contract: FeeContract, amountMinor: bigint): bigint {
  const base = halfUp(amountMinor * contract.ratePpm, 1_000_000n) + contract.fixedMinor;
  return base + halfUp(base * contract.vatPpm, 1_000_000n) - halfUp(base * contract.whtPpm, 1_000_000n);
}

/** Under pro_rata: round(fee × (refunded before + this) / charge) − round(fee × refunded before / charge); kept: 0. */
function contractRefundShare(contract: FeeContract, chargeMinor: bigint, beforeMinor: bigint, refundMinor: bigint): bigint {
  if (contract.refund === 'kept') return 0n;
  const fee = contractFee(contract, chargeMinor);
  return halfUp(fee * (beforeMinor + refundMinor), chargeMinor) - halfUp(fee * beforeMinor, chargeMinor);
}

/** A statement line's money in minor units: a payment's fee is what was taken, a refund's what was given back. */
interface FeeLine {
  kind: 'payment' | 'refund';
  outTradeNo: string;
  amountMinor: bigint;
  feeMinor: bigint;
}

/** Every line's fee is the contract's; refunds (oldest first) on the running total of their payment's refunds. */
function assertFeesFollow(contract: FeeContract, lines: readonly FeeLine[]): void {
  assert.ok(
    lines.some((line) => line.kind === 'payment') && lines.some((line) => line.kind === 'refund'),
    'payments and a refund to check',
  );
  const refunded = new Map<string, bigint>();
  for (const line of lines) {
    if (line.kind === 'payment') {
      assert.equal(line.feeMinor, contractFee(contract, line.amountMinor), `the fee of payment ${line.outTradeNo}`);
      continue;
    }
    const charge = lines.find((other) => other.kind === 'payment' && other.outTradeNo === line.outTradeNo);
    assert.ok(charge, `the refunded payment ${line.outTradeNo} on the same day`);
    const before = refunded.get(line.outTradeNo) ?? 0n;
    const share = contractRefundShare(contract, charge.amountMinor, before, line.amountMinor);
    assert.equal(line.feeMinor, share, `the fee refund ${line.outTradeNo} gives back`);
    refunded.set(line.outTradeNo, before + line.amountMinor);
  }
}

/** A decimal as a statement writes it ("-0.07", "0.01110") in units of 10^-places, which must hold it exactly. */
function decimalUnits(text: string, places: number): bigint {
  const match = /^(-?)(\d+)(?:\.(\d+))?$/.exec(text);
  assert.ok(match && (match[3] ?? '').length <= places, `a decimal with at most ${places} places: ${text}`);
  const units = BigInt(match[2] ?? '0') * 10n ** BigInt(places) + BigInt((match[3] ?? '').padEnd(places, '0') || '0');
  return match[1] === '-' ? -units : units;
}

before(async () => {
  const admin = new URL(serverUrl);
  databaseName = `po_statements_${process.pid}_${randomBytes(3).toString('hex')}`;
  admin.pathname = '/postgres';
  const sql = postgres(admin.toString(), { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(`CREATE DATABASE "${databaseName}"`);
  } finally {
    await sql.end({ timeout: 5 });
  }
  const own = new URL(serverUrl);
  own.pathname = `/${databaseName}`;
  databaseUrl = own.toString();
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001 });
  creds = (await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as Credentials;
});

after(async () => {
  await sandbox.close();
  const admin = new URL(serverUrl);
  admin.pathname = '/postgres';
  const sql = postgres(admin.toString(), { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(`DROP DATABASE IF EXISTS "${databaseName}" WITH (FORCE)`);
  } finally {
    await sql.end({ timeout: 5 });
  }
});

// ---------------------------------------------------------------------------------------------
// Alipay

/** The archive's entries, read from its central directory (APPNOTE 4.3.12) — a reader of its own, not the sandbox's writer. */
function unzip(archive: Buffer): { name: Buffer; utf8Flag: boolean; data: Buffer }[] {
  const end = archive.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  assert.ok(end >= 0, 'an end of central directory record');
  const count = archive.readUInt16LE(end + 10);
  let at = archive.readUInt32LE(end + 16);
  const entries = [];
  for (let i = 0; i < count; i += 1) {
    assert.equal(archive.readUInt32LE(at), 0x02014b50);
    const flags = archive.readUInt16LE(at + 8);
    const method = archive.readUInt16LE(at + 10);
    const compressedSize = archive.readUInt32LE(at + 20);
    const nameLength = archive.readUInt16LE(at + 28);
    const extraLength = archive.readUInt16LE(at + 30);
    const commentLength = archive.readUInt16LE(at + 32);
    const local = archive.readUInt32LE(at + 42);
    const name = archive.subarray(at + 46, at + 46 + nameLength);
    const dataStart = local + 30 + archive.readUInt16LE(local + 26) + archive.readUInt16LE(local + 28);
    const raw = archive.subarray(dataStart, dataStart + compressedSize);
    entries.push({ name, utf8Flag: (flags & 0x0800) !== 0, data: method === 8 ? inflateRawSync(raw) : Buffer.from(raw) });
    at += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

const gbk = (bytes: Buffer) => new TextDecoder('gbk').decode(bytes);

describe('Alipay: alipay.data.dataservice.bill.downloadurl.query → a zip of GBK CSV files', () => {
  let sdk: AlipaySdk;
  let account: string;
  const a = newOrderNo('A');
  const b = newOrderNo('B');
  const refundNo = newOrderNo('R');

  function exec(method: string, bizContent: Record<string, unknown>): Promise<Record<string, unknown>> {
    // validateSign: the bill query's answer is signed like every other.
    return sdk.exec(method, { bizContent }, { validateSign: true }) as unknown as Promise<Record<string, unknown>>;
  }

  async function downloadBill(date: string): Promise<{ detail: string[]; summary: string[]; names: string[]; archive: Buffer }> {
    const answer = await exec('alipay.data.dataservice.bill.downloadurl.query', { bill_type: 'trade', bill_date: date });
    assert.equal(answer.code, '10000', JSON.stringify(answer));
    const res = await fetch(String(answer.bill_download_url));
    assert.equal(res.status, 200);
    const archive = Buffer.from(await res.arrayBuffer());
    const entries = unzip(archive);
    assert.equal(entries.length, 2);
    assert.ok(
      entries.every((entry) => !entry.utf8Flag),
      'names in GBK, the UTF-8 flag unset',
    );
    const names = entries.map((entry) => gbk(entry.name));
    const file = (suffix: string) => {
      const entry = entries.find((e) => gbk(e.name).endsWith(suffix));
      assert.ok(entry, `an entry ending ${suffix}: ${names.join(', ')}`);
      return gbk(entry.data).split('\r\n').slice(0, -1);
    };
    return { detail: file('_业务明细.csv'), summary: file('_业务明细(汇总).csv'), names, archive };
  }

  /** A detail row's fields, text columns without their trailing tab. */
  const fields = (line: string) => line.split(',').map((field) => field.replace(/\t$/, ''));

  before(async () => {
    sdk = new AlipaySdk({
      appId: creds.alipay.appId,
      privateKey: creds.alipay.appPrivateKey,
      alipayPublicKey: creds.alipay.alipayPublicKey,
      gateway: creds.alipay.gateway,
      camelcase: false,
    });
    const sql = postgres(databaseUrl, { max: 1 });
    try {
      const [app] = await sql<{ seller_id: string }[]>`SELECT seller_id FROM psp_sandbox.alipay_apps WHERE app_id = ${creds.alipay.appId}`;
      account = `${app?.seller_id ?? ''}0156`;
    } finally {
      await sql.end();
    }
    await awayFromMidnight();
    for (const [outTradeNo, amount] of [
      [a, '12.30'],
      [b, '7.50'],
    ] as const) {
      const paid = await exec('alipay.trade.pay', {
        out_trade_no: outTradeNo,
        scene: 'bar_code',
        auth_code: creds.alipay.testBuyers.ok,
        total_amount: amount,
        subject: `对账测试 ${outTradeNo}`,
      });
      assert.equal(paid.code, '10000', JSON.stringify(paid));
    }
    const refunded = await exec('alipay.trade.refund', { out_trade_no: a, refund_amount: '5.00', out_request_no: refundNo });
    assert.equal(refunded.code, '10000', JSON.stringify(refunded));
  });

  it('1. serves the day: 业务明细 with every line, fee and footer, and the 汇总 合计 row', async () => {
    const date = dayOf('alipay');
    const day = date.replaceAll('-', '');
    const { detail, summary, names } = await downloadBill(date);
    assert.deepEqual(names.sort(), [`${account}_${day}_业务明细(汇总).csv`, `${account}_${day}_业务明细.csv`].sort());

    const [y, m, d] = date.split('-');
    const next = dayOf('alipay', new Date(new Date(`${date}T00:00:00+08:00`).getTime() + 86_400_000)).split('-');
    assert.deepEqual(detail.slice(0, 5), [
      '#支付宝业务明细查询',
      `#账号：[${account}]`,
      `#起始日期：[${y}年${m}月${d}日 00:00:00]   终止日期：[${next[0]}年${next[1]}月${next[2]}日 00:00:00]`,
      '#-----------------------------------------业务明细列表----------------------------------------',
      '支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,门店编号,门店名称,操作员,终端号,对方账户,订单金额（元）,商家实收（元）,支付宝红包（元）,集分宝（元）,支付宝优惠（元）,商家优惠（元）,券核销金额（元）,券名称,商家红包消费金额（元）,卡消费金额（元）,退款批次号/请求号,服务费（元）,分润（元）,备注',
    ]);
    const rows = detail.slice(5, -4);
    assert.equal(rows.length, 3);
    assert.ok(rows.every((row) => row.startsWith(`${day.slice(0, 8)}22`) && row.split(',').length === 25));
    assert.match(rows[0] ?? '', /^\d{28}\t,[A-Z0-9]+\t,交易\t,/, 'text columns end with a tab');
    const byKind = rows.map(fields).map((f) => ({
      outTradeNo: f[1],
      kind: f[2],
      subject: f[3],
      orderAmount: f[11],
      received: f[12],
      refundNo: f[21],
      fee: f[22],
    }));
    assert.deepEqual(byKind, [
      { outTradeNo: a, kind: '交易', subject: `对账测试 ${a}`, orderAmount: '12.30', received: '12.30', refundNo: '', fee: '-0.07' },
      // 7.50 × 0.6 % = 0.045 yuan: half up to 0.05 (banker's rounding would say 0.04).
      { outTradeNo: b, kind: '交易', subject: `对账测试 ${b}`, orderAmount: '7.50', received: '7.50', refundNo: '', fee: '-0.05' },
      // The refund gives back its share of A's 0.07: 0.07 × 5.00 / 12.30 = 0.028 → 0.03.
      { outTradeNo: a, kind: '退款', subject: `对账测试 ${a}`, orderAmount: '-5.00', received: '-5.00', refundNo, fee: '0.03' },
    ]);
    assert.deepEqual(detail.slice(-4, -1), [
      '#-----------------------------------------业务明细列表结束------------------------------------',
      '#交易合计：2笔，商家实收共19.80元，商家优惠共0.00元',
      '#退款合计：1笔，商家实收退款共-5.00元，商家优惠退款共0.00元',
    ]);
    assert.match(detail.at(-1) ?? '', /^#导出时间：\[\d{4}年\d{2}月\d{2}日 \d{2}:\d{2}:\d{2}\]$/);

    assert.deepEqual(summary.slice(0, 6), [
      '#支付宝业务汇总查询',
      `#账号：[${account}]`,
      detail[2],
      '#-----------------------------------------业务汇总列表----------------------------------------',
      '门店编号,门店名称,交易订单总笔数,退款订单总笔数,订单金额（元）,商家实收（元）,支付宝优惠（元）,商家优惠（元）,卡消费金额（元）,服务费（元）,分润（元）,实收净额（元）',
      '合计,,2,1,14.80,14.80,0.00,0.00,0.00,-0.09,0.00,14.71',
    ]);
    assert.equal(summary[6], '#----------------------------------------业务汇总列表结束-------------------------------------');
  });

  it('2. answers a day with nothing 40004 isp.bill_not_exist, a day to come isv.invalid_arguments', async () => {
    const empty = await exec('alipay.data.dataservice.bill.downloadurl.query', {
      bill_type: 'trade',
      bill_date: dayBefore(dayOf('alipay')),
    });
    assert.equal(empty.code, '40004');
    assert.equal(empty.sub_code, 'isp.bill_not_exist');
    const tomorrow = dayOf('alipay', new Date(Date.now() + 86_400_000));
    const future = await exec('alipay.data.dataservice.bill.downloadurl.query', { bill_type: 'trade', bill_date: tomorrow });
    assert.equal(future.sub_code, 'isv.invalid_arguments');
  });

  it('3. a link is the credential: a changed token is refused', async () => {
    const answer = await exec('alipay.data.dataservice.bill.downloadurl.query', { bill_type: 'trade', bill_date: dayOf('alipay') });
    const url = new URL(String(answer.bill_download_url));
    url.searchParams.set('bizDates', dayBefore(dayOf('alipay')).replaceAll('-', ''));
    assert.equal((await fetch(url)).status, 403);
  });

  it('4. shows each discrepancy kind in the file as real lines look', async () => {
    const date = dayOf('alipay');
    const unknown = await injectAllKinds('alipay', date, a, b, 888);
    try {
      const rows = (await downloadBill(date)).detail.slice(5, -4).map(fields);
      assert.deepEqual(
        rows.map((f) => [f[1], f[2], f[11], f[22]]),
        [
          [a, '交易', '12.31', '-0.07'],
          [unknown, '交易', '8.88', '-0.05'],
        ],
      );
      const phantom = rows[1] ?? [];
      assert.match(phantom[0] ?? '', new RegExp(`^${date.replaceAll('-', '')}22\\d{18}$`));
      assert.equal(phantom.length, 25);
    } finally {
      await clearDiscrepancies('alipay');
    }
    assert.equal((await downloadBill(date)).detail.slice(5, -4).length, 3, 'cleared: the true statement again');
  });

  it('5. publishes its fee contract, and the contract gives every 服务费 the bill shows', async () => {
    assert.equal(creds.alipay.feeContract, 'rate=0.6%;refund=pro_rata');
    const rows = (await downloadBill(dayOf('alipay'))).detail.slice(5, -4).map(fields);
    // 服务费 is the fee taken (negative) on 交易 rows and the fee given back (positive) on 退款 rows,
    // whose 订单金额 is negative.
    assertFeesFollow(
      parseFeeContract(creds.alipay.feeContract),
      rows.map((f): FeeLine => {
        const payment = f[2] === '交易';
        const amount = decimalUnits(f[11] ?? '', 2);
        const fee = decimalUnits(f[22] ?? '', 2);
        return {
          kind: payment ? 'payment' : 'refund',
          outTradeNo: f[1] ?? '',
          amountMinor: payment ? amount : -amount,
          feeMinor: payment ? -fee : fee,
        };
      }),
    );
  });

  it('6. shows a fee_differs payment’s 服务费 changed, the 合计 with it, and nothing else', async () => {
    const date = dayOf('alipay');
    try {
      assert.deepEqual(
        await refusedDiscrepancy({ gateway: 'alipay', date: dayBefore(date), kind: 'fee_differs', outTradeNo: a }),
        { status: 404, code: 'NOT_IN_LEDGER' },
        'refused for an order with no payment that day',
      );
      const before = await downloadBill(date);
      const injected = await discrepancy({ gateway: 'alipay', date, kind: 'fee_differs', outTradeNo: a });
      assert.deepEqual([injected.kind, injected.amountMinor], ['fee_differs', '100'], 'by default ¥1.00 more taken');
      const after = await downloadBill(date);
      // A's 交易 row: 0.07 + 1.00 taken. Its refund still gives back its share of the contract's 0.07.
      const expected = before.detail.map((line) => {
        const f = line.split(',');
        if (f[1] !== `${a}\t` || f[2] !== '交易\t') return line;
        assert.equal(f[22], '-0.07');
        f[22] = '-1.07';
        return f.join(',');
      });
      assert.deepEqual(after.detail.slice(0, -1), expected.slice(0, -1), 'every line but the export time');
      assert.equal(before.summary[5], '合计,,2,1,14.80,14.80,0.00,0.00,0.00,-0.09,0.00,14.71');
      assert.deepEqual(after.summary.slice(0, -1), [
        ...before.summary.slice(0, 5),
        '合计,,2,1,14.80,14.80,0.00,0.00,0.00,-1.09,0.00,13.71',
        ...before.summary.slice(6, -1),
      ]);
    } finally {
      await clearDiscrepancies('alipay');
    }
  });
});

// ---------------------------------------------------------------------------------------------
// WeChat Pay

describe('WeChat Pay: GET /v3/bill/tradebill → download_url → the CSV, checked by its SHA-1', () => {
  const WECHAT_HOST = 'https://api.mch.weixin.qq.com';
  let pay: WxPay;
  const a = newOrderNo('WA');
  const b = newOrderNo('WB');
  const refundNo = newOrderNo('WR');
  let transactionA = '';
  let refundIdA = '';

  interface Answer {
    status: number;
    headers: Headers;
    bytes: Buffer;
    text: string;
    data?: Record<string, unknown>;
  }

  /** The client's HTTP layer with one change: WeChat's host is the sandbox. */
  function sandboxHttp() {
    async function send(url: string, init: RequestInit): Promise<Answer> {
      assert.ok(url.startsWith(WECHAT_HOST), url);
      const res = await fetch(`${sandbox.url}${url.slice(WECHAT_HOST.length)}`, init);
      const bytes = Buffer.from(await res.arrayBuffer());
      const text = bytes.toString('utf8');
      let data: Record<string, unknown> | undefined;
      try {
        data = JSON.parse(text) as Record<string, unknown>;
      } catch {
        data = undefined;
      }
      return { status: res.status, headers: res.headers, bytes, text, ...(data ? { data } : {}) };
    }
    return {
      post: (url: string, params: Record<string, unknown>, headers: Record<string, string>) =>
        send(url, { method: 'POST', headers, body: JSON.stringify(params) }),
      get: (url: string, headers: Record<string, string>) => send(url, { method: 'GET', headers }),
      upload: () => Promise.reject(new Error('not used')),
    };
  }

  const tradebill = (params: Record<string, string>) => pay.tradebill(params as never) as unknown as Promise<Answer>;
  const download = (url: string) => pay.downloadBill(url) as unknown as Promise<Answer>;

  async function bill(date: string): Promise<{ lines: string[]; answer: Answer }> {
    const applied = await tradebill({ bill_date: date, bill_type: 'ALL' });
    assert.equal(applied.status, 200, applied.text);
    assert.equal(applied.data?.hash_type, 'SHA1');
    const file = await download(String(applied.data?.download_url));
    assert.equal(file.status, 200);
    assert.equal(createHash('sha1').update(file.bytes).digest('hex'), applied.data?.hash_value);
    return { lines: file.text.split('\r\n').slice(0, -1), answer: file };
  }

  const unquote = (line: string) => line.split(',').map((field) => field.replace(/^`/, ''));

  before(async () => {
    pay = new WxPay({
      appid: creds.wechatpay.appid,
      mchid: creds.wechatpay.mchid,
      serial_no: creds.wechatpay.merchantSerialNo,
      publicKey: Buffer.from(creds.wechatpay.platformPublicKey),
      privateKey: Buffer.from(creds.wechatpay.merchantPrivateKey),
      key: creds.wechatpay.apiV3Key,
    });
    pay.createHttp(sandboxHttp());
    await awayFromMidnight();
    for (const [outTradeNo, total] of [
      [a, 1230],
      [b, 750],
    ] as const) {
      const created = (await pay.transactions_native({
        description: `对账测试 ${outTradeNo}`,
        out_trade_no: outTradeNo,
        notify_url: 'http://127.0.0.1:9/unused',
        amount: { total, currency: 'CNY' },
      })) as unknown as Answer;
      assert.equal(created.status, 200, created.text);
      const scanned = await fetch(`${sandbox.url}/sandbox/wechatpay/scan`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ code_url: String(created.data?.code_url), buyer: 'ok' }).toString(),
      });
      assert.equal(scanned.status, 200);
    }
    transactionA = String(((await pay.query({ out_trade_no: a })) as unknown as Answer).data?.transaction_id);
    const refund = (await pay.refunds({
      transaction_id: transactionA,
      out_refund_no: refundNo,
      amount: { refund: 500, total: 1230, currency: 'CNY' },
    })) as unknown as Answer;
    assert.equal(refund.status, 200, refund.text);
    refundIdA = String(refund.data?.refund_id);
    await waitFor('the refund to succeed', async () =>
      ((await pay.find_refunds(refundNo)) as unknown as Answer).data?.status === 'SUCCESS' ? true : undefined,
    );
  });

  it('1. applies signed, downloads unsigned, and the file holds every row, fee and the summary', async () => {
    const date = dayOf('wechatpay');
    const applied = await tradebill({ bill_date: date, bill_type: 'ALL' });
    assert.equal(applied.status, 200);
    assert.match(String(applied.data?.download_url), /^https:\/\/api\.mch\.weixin\.qq\.com\/v3\/billdownload\/file\?token=/);
    const verified = await pay.verifySign({
      timestamp: applied.headers.get('wechatpay-timestamp') ?? '',
      nonce: applied.headers.get('wechatpay-nonce') ?? '',
      body: applied.text,
      serial: applied.headers.get('wechatpay-serial') ?? '',
      signature: applied.headers.get('wechatpay-signature') ?? '',
      apiSecret: creds.wechatpay.apiV3Key,
    });
    assert.ok(verified, 'the application answer is signed like any v3 answer');

    const { lines, answer } = await bill(date);
    assert.equal(answer.headers.get('wechatpay-signature'), null, 'the file itself is not signed');
    assert.equal(
      lines[0],
      '交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注',
    );
    const rows = lines.slice(1, -2);
    assert.equal(rows.length, 3);
    assert.ok(
      rows.every((row) => row.split(',').every((field) => field.startsWith('`'))),
      'every data field starts with a backtick',
    );
    const parsed = rows.map(unquote).map((f) => ({
      time: f[0],
      mchid: f[2],
      transactionId: f[5],
      outTradeNo: f[6],
      state: f[9],
      settled: f[12],
      refundId: f[14],
      outRefundNo: f[15],
      refund: f[16],
      refundType: f[18],
      refundState: f[19],
      fee: f[22],
      rate: f[23],
      total: f[24],
      asked: f[25],
    }));
    assert.ok(parsed.every((row) => row.mchid === creds.wechatpay.mchid && row.rate === '0.60%'));
    assert.ok(parsed.every((row) => row.time?.startsWith(`${date} `)));
    assert.deepEqual(
      parsed.map(({ outTradeNo, state, settled, refundId, outRefundNo, refund, refundType, refundState, fee, total, asked }) => ({
        outTradeNo,
        state,
        settled,
        refundId,
        outRefundNo,
        refund,
        refundType,
        refundState,
        fee,
        total,
        asked,
      })),
      [
        {
          outTradeNo: a,
          state: 'SUCCESS',
          settled: '12.30',
          refundId: '0',
          outRefundNo: '0',
          refund: '0.00',
          refundType: '',
          refundState: '',
          fee: '0.07000',
          total: '12.30',
          asked: '0.00',
        },
        {
          outTradeNo: b,
          state: 'SUCCESS',
          settled: '7.50',
          refundId: '0',
          outRefundNo: '0',
          refund: '0.00',
          refundType: '',
          refundState: '',
          fee: '0.05000',
          total: '7.50',
          asked: '0.00',
        },
        {
          outTradeNo: a,
          state: 'REFUND',
          settled: '0.00',
          refundId: refundIdA,
          outRefundNo: refundNo,
          refund: '5.00',
          refundType: 'ORIGINAL',
          refundState: 'SUCCESS',
          fee: '-0.03000',
          total: '0.00',
          asked: '5.00',
        },
      ],
    );
    assert.equal(parsed[0]?.transactionId, transactionA);
    assert.equal(parsed[2]?.transactionId, transactionA);
    assert.equal(lines.at(-2), '总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额');
    assert.equal(lines.at(-1), '`3,`19.80,`5.00,`0.00,`0.09000,`19.80,`5.00');
  });

  it('2. gzips on request (tar_type GZIP), the hash being of the file inside', async () => {
    const applied = await tradebill({ bill_date: dayOf('wechatpay'), bill_type: 'ALL', tar_type: 'GZIP' });
    assert.equal(applied.status, 200);
    const file = await download(String(applied.data?.download_url));
    assert.equal(file.status, 200);
    const inside = gunzipSync(file.bytes);
    assert.equal(createHash('sha1').update(inside).digest('hex'), applied.data?.hash_value);
    assert.equal(inside.toString('utf8'), (await bill(dayOf('wechatpay'))).lines.join('\r\n') + '\r\n');
  });

  it('3. answers a day with nothing 400 NO_STATEMENT_EXIST', async () => {
    const empty = await tradebill({ bill_date: dayBefore(dayOf('wechatpay')), bill_type: 'ALL' });
    assert.equal(empty.status, 400);
    assert.equal(empty.data?.code, 'NO_STATEMENT_EXIST');
    assert.equal(empty.data?.message, '请求的账单文件不存在');
    const malformed = await tradebill({ bill_date: '2024-13-01', bill_type: 'ALL' });
    assert.equal(malformed.status, 400);
    assert.equal(malformed.data?.code, 'PARAM_ERROR');
  });

  it('4. shows each discrepancy kind in the file as real rows look', async () => {
    const date = dayOf('wechatpay');
    const unknown = await injectAllKinds('wechatpay', date, a, b, 2000);
    try {
      const { lines } = await bill(date);
      const rows = lines.slice(1, -2).map(unquote);
      assert.deepEqual(
        rows.map((f) => [f[6], f[9], f[12], f[22]]),
        [
          [a, 'SUCCESS', '12.31', '0.07000'],
          [unknown, 'SUCCESS', '20.00', '0.12000'],
        ],
      );
      assert.match(rows[1]?.[5] ?? '', /^4200\d{24}$/, 'a transaction_id shaped like WeChat’s');
      assert.equal(rows[1]?.length, 27);
      assert.equal(lines.at(-1), '`2,`32.31,`0.00,`0.00,`0.19000,`32.31,`0.00');
    } finally {
      await clearDiscrepancies('wechatpay');
    }
  });

  it('5. publishes its fee contract, and the contract gives every 手续费 the bill shows', async () => {
    assert.equal(creds.wechatpay.feeContract, 'rate=0.6%;refund=pro_rata');
    const { lines } = await bill(dayOf('wechatpay'));
    // 手续费 has five decimals, whole fen; negative on REFUND rows (given back), whose refund is 退款金额.
    assertFeesFollow(
      parseFeeContract(creds.wechatpay.feeContract),
      lines
        .slice(1, -2)
        .map(unquote)
        .map((f): FeeLine => {
          const payment = f[9] === 'SUCCESS';
          const fee = decimalUnits(f[22] ?? '', 5);
          assert.equal(fee % 1000n, 0n, `whole fen: ${f[22]}`);
          return {
            kind: payment ? 'payment' : 'refund',
            outTradeNo: f[6] ?? '',
            amountMinor: decimalUnits((payment ? f[12] : f[16]) ?? '', 2),
            feeMinor: payment ? fee / 1000n : -fee / 1000n,
          };
        }),
    );
  });

  it('6. shows a fee_differs payment’s 手续费 changed, 手续费总金额 with it, under a SHA-1 that holds', async () => {
    const date = dayOf('wechatpay');
    try {
      // A's fee is 0.07: a change that would leave less than nothing is refused, one down to 0.02 is not.
      const refused = await refusedDiscrepancy({ gateway: 'wechatpay', date, kind: 'fee_differs', outTradeNo: a, amountMinor: -8 });
      assert.deepEqual(refused, { status: 400, code: 'INVALID_DISCREPANCY' });
      const before = (await bill(date)).lines;
      await discrepancy({ gateway: 'wechatpay', date, kind: 'fee_differs', outTradeNo: a, amountMinor: -5 });
      // bill() checks the file against hash_value.
      const after = (await bill(date)).lines;
      const expected = before.map((line) => {
        const f = line.split(',');
        if (f[6] !== `\`${a}` || f[9] !== '`SUCCESS') return line;
        assert.equal(f[22], '`0.07000');
        f[22] = '`0.02000';
        return f.join(',');
      });
      assert.equal(before.at(-1), '`3,`19.80,`5.00,`0.00,`0.09000,`19.80,`5.00');
      expected[expected.length - 1] = '`3,`19.80,`5.00,`0.00,`0.04000,`19.80,`5.00';
      assert.deepEqual(after, expected);
    } finally {
      await clearDiscrepancies('wechatpay');
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Stripe

describe('Stripe: balance transactions through stripe-node, expand data.source', () => {
  let stripe: Stripe;
  const a = newOrderNo('SA');
  const b = newOrderNo('SB');
  let intentA: Stripe.PaymentIntent;
  let intentB: Stripe.PaymentIntent;
  let refund: Stripe.Refund;
  let dayStart = 0;

  async function failure(promise: Promise<unknown>): Promise<Stripe.errors.StripeError> {
    try {
      await promise;
    } catch (err) {
      assert.ok(err instanceof Stripe.errors.StripeError, String(err));
      return err;
    }
    assert.fail('expected the request to fail');
  }

  const today = (extra: Partial<Stripe.BalanceTransactionListParams> = {}) =>
    stripe.balanceTransactions.list({ created: { gte: dayStart, lt: dayStart + 86_400 }, limit: 100, ...extra });

  before(async () => {
    stripe = new Stripe(creds.stripe.secretKey, {
      host: creds.stripe.host,
      port: creds.stripe.port,
      protocol: 'http',
      maxNetworkRetries: 0,
    });
    await awayFromMidnight();
    dayStart = Date.parse(`${dayOf('stripe')}T00:00:00Z`) / 1000;
    const payment = (outTradeNo: string, amount: number) =>
      stripe.paymentIntents.create({
        amount,
        currency: 'cny',
        allowed_payment_method_types: ['card'],
        payment_method: 'pm_card_visa',
        confirm: true,
        description: `对账测试 ${outTradeNo}`,
        metadata: { out_trade_no: outTradeNo },
      } as Stripe.PaymentIntentCreateParams);
    intentA = await payment(a, 1230);
    intentB = await payment(b, 1250);
    refund = await stripe.refunds.create({ payment_intent: intentA.id, amount: 500, metadata: { refund_id: newOrderNo('SR') } });
  });

  it('1. lists the day newest first: each charge with its 3.4 % fee, the refund negative and fee-free, sources expanded', async () => {
    const list = await today({ expand: ['data.source'] });
    assert.equal(list.has_more, false);
    assert.equal(list.data.length, 3);
    const [refundTxn, chargeB, chargeA] = list.data;
    assert.ok(refundTxn && chargeB && chargeA);

    assert.equal(chargeA.type, 'charge');
    assert.equal(chargeA.reporting_category, 'charge');
    assert.equal(chargeA.amount, 1230);
    assert.equal(chargeA.fee, 42); // 1230 × 3.4 % = 41.82
    assert.equal(chargeA.net, 1188);
    assert.equal(chargeA.currency, 'cny');
    assert.deepEqual(chargeA.fee_details, [
      { amount: 42, application: null, currency: 'cny', description: 'Stripe processing fees', type: 'stripe_fee' },
    ]);
    const sourceA = chargeA.source as Stripe.Charge;
    assert.equal(sourceA.object, 'charge');
    assert.equal(sourceA.id, intentA.latest_charge);
    assert.equal(sourceA.payment_intent, intentA.id);
    assert.equal(sourceA.metadata.out_trade_no, a);
    assert.equal(sourceA.balance_transaction, chargeA.id, 'the Charge names its balance transaction');

    assert.equal(chargeB.amount, 1250);
    assert.equal(chargeB.fee, 43); // 1250 × 3.4 % = 42.5: half up (banker's rounding would say 42)
    assert.equal(chargeB.net, 1207);
    assert.equal((chargeB.source as Stripe.Charge).metadata.out_trade_no, b);
    assert.equal((chargeB.source as Stripe.Charge).payment_intent, intentB.id);

    assert.equal(refundTxn.type, 'refund');
    assert.equal(refundTxn.reporting_category, 'refund');
    assert.equal(refundTxn.amount, -500);
    assert.equal(refundTxn.fee, 0);
    assert.deepEqual(refundTxn.fee_details, []);
    assert.equal(refundTxn.net, -500);
    assert.equal(refundTxn.id, refund.balance_transaction, 'the Refund names its balance transaction');
    const sourceR = refundTxn.source as Stripe.Refund;
    assert.equal(sourceR.id, refund.id);
    assert.equal(sourceR.payment_intent, intentA.id);
    assert.equal(sourceR.metadata?.refund_id, refund.metadata?.refund_id);

    for (const txn of list.data) {
      assert.ok(txn.created >= dayStart && txn.created < dayStart + 86_400);
      assert.equal(txn.available_on, dayStart + 2 * 86_400);
      assert.equal(txn.status, 'pending');
    }
  });

  it('2. pages, filters, retrieves, and expands a Charge’s balance_transaction', async () => {
    const ids = (await today()).data.map((txn) => txn.id);
    const first = await today({ limit: 1 });
    assert.deepEqual(
      first.data.map((txn) => txn.id),
      ids.slice(0, 1),
    );
    assert.equal(first.has_more, true);
    const second = await today({ limit: 2, starting_after: ids[0] });
    assert.deepEqual(
      second.data.map((txn) => txn.id),
      ids.slice(1, 3),
    );
    assert.equal(second.has_more, false);
    const back = await today({ limit: 1, ending_before: ids[2] });
    assert.deepEqual(
      back.data.map((txn) => txn.id),
      ids.slice(1, 2),
    );
    assert.deepEqual(
      (await today({ type: 'refund' })).data.map((txn) => txn.id),
      ids.slice(0, 1),
    );
    const chargeA = String(intentA.latest_charge);
    assert.deepEqual(
      (await today({ source: chargeA })).data.map((txn) => txn.id),
      [`txn_${chargeA.slice(3)}`],
    );
    const retrieved = await stripe.balanceTransactions.retrieve(`txn_${chargeA.slice(3)}`, { expand: ['source.payment_intent'] });
    assert.equal(((retrieved.source as Stripe.Charge).payment_intent as Stripe.PaymentIntent).id, intentA.id);
    assert.equal((await stripe.charges.retrieve(chargeA)).balance_transaction, `txn_${chargeA.slice(3)}`);
    const expanded = await stripe.paymentIntents.retrieve(intentA.id, { expand: ['latest_charge'] });
    assert.equal((expanded.latest_charge as Stripe.Charge).balance_transaction, `txn_${chargeA.slice(3)}`);
    assert.equal((await stripe.refunds.retrieve(refund.id)).balance_transaction, ids[0]);
    const charge = await stripe.charges.retrieve(chargeA, { expand: ['balance_transaction'] });
    assert.equal((charge.balance_transaction as Stripe.BalanceTransaction).amount, 1230);
    // And through stripe-node's auto-pagination.
    const all: string[] = [];
    for await (const txn of stripe.balanceTransactions.list({ limit: 1 })) all.push(txn.id);
    assert.deepEqual(all, ids);
  });

  it('3. refuses bad parameters as Stripe does', async () => {
    const limit = await failure(stripe.balanceTransactions.list({ limit: 0 }));
    assert.equal(limit.type, 'StripeInvalidRequestError');
    assert.equal(limit.param, 'limit');
    const unknown = await failure(stripe.balanceTransactions.list({ colour: 'red' } as Stripe.BalanceTransactionListParams));
    assert.equal(unknown.code, 'parameter_unknown');
    const missing = await failure(stripe.balanceTransactions.retrieve('txn_NOTHING'));
    assert.equal(missing.statusCode, 404);
    assert.equal(missing.code, 'resource_missing');
    const expand = await failure(stripe.balanceTransactions.list({ expand: ['data.fee_details'] }));
    assert.equal(expand.param, 'expand');
    const type = await failure(stripe.balanceTransactions.list({ type: 'nonsense' }));
    assert.equal(type.param, 'type');
  });

  it('4. has nothing on a day with nothing', async () => {
    const empty = await stripe.balanceTransactions.list({ created: { gte: dayStart - 86_400, lt: dayStart } });
    assert.deepEqual(empty.data, []);
    assert.equal(empty.has_more, false);
  });

  it('5. shows each discrepancy kind in the list as real transactions look', async () => {
    const date = dayOf('stripe');
    const unknown = await injectAllKinds('stripe', date, a, b, 3000);
    try {
      const list = await today({ expand: ['data.source'] });
      assert.deepEqual(
        list.data.map((txn) => [txn.type, (txn.source as Stripe.Charge).metadata?.out_trade_no, txn.amount, txn.fee, txn.net]),
        [
          // Newest first: the unknown payment happened when it was injected, after A.
          ['charge', unknown, 3000, 102, 2898],
          ['charge', a, 1231, 42, 1189],
        ],
      );
      const phantom = list.data.find((txn) => (txn.source as Stripe.Charge).metadata?.out_trade_no === unknown);
      assert.ok(phantom);
      const source = phantom.source as Stripe.Charge;
      assert.match(source.id, /^ch_[A-Za-z0-9]{24}$/);
      assert.equal(phantom.id, `txn_${source.id.slice(3)}`);
      assert.equal(source.balance_transaction, phantom.id);
      assert.equal((await stripe.balanceTransactions.retrieve(phantom.id)).amount, 3000);
    } finally {
      await clearDiscrepancies('stripe');
    }
  });

  it('6. publishes its fee contract, and the contract gives every fee the day’s transactions show', async () => {
    assert.equal(creds.stripe.feeContract, 'rate=3.4%;refund=kept');
    const oldestFirst = [...(await today({ expand: ['data.source'] })).data].reverse();
    assert.ok(oldestFirst.every((txn) => txn.net === txn.amount - txn.fee));
    // A refund's balance transaction would carry the fee it gives back as a negative fee.
    assertFeesFollow(
      parseFeeContract(creds.stripe.feeContract),
      oldestFirst.map((txn): FeeLine => ({
        kind: txn.type === 'charge' ? 'payment' : 'refund',
        outTradeNo: String((txn.source as Stripe.Charge | Stripe.Refund).payment_intent),
        amountMinor: BigInt(Math.abs(txn.amount)),
        feeMinor: BigInt(txn.type === 'charge' ? txn.fee : -txn.fee),
      })),
    );
  });

  it('7. shows a fee_differs charge’s fee, fee_details and net changed, and nothing else', async () => {
    const date = dayOf('stripe');
    const before = (await today()).data;
    await discrepancy({ gateway: 'stripe', date, kind: 'fee_differs', outTradeNo: b, amountMinor: 250 });
    try {
      const after = (await today()).data;
      const txnB = `txn_${String(intentB.latest_charge).slice(3)}`;
      // B: 1250 with a fee of 43 + 2.50.
      const expected = before.map((txn) => {
        if (txn.id !== txnB) return txn;
        assert.equal(txn.fee, 43);
        return { ...txn, fee: 293, fee_details: txn.fee_details.map((detail) => ({ ...detail, amount: 293 })), net: 1250 - 293 };
      });
      assert.ok(expected.some((txn) => txn.fee === 293));
      assert.deepEqual(after, expected);
    } finally {
      await clearDiscrepancies('stripe');
    }
  });
});

// ---------------------------------------------------------------------------------------------
// 2C2P

describe('2C2P: the daily reconciliation report (Reconcile2c2p_A_v2.1 CSV)', () => {
  let merchantKey: KeyObject;
  let twoc2pKey: KeyObject;
  const a = newOrderNo('CA');
  const b = newOrderNo('CB');
  const refundKey = newOrderNo('CR');
  const tranRefs = new Map<string, string>();

  async function seal(text: string): Promise<string> {
    const jwe = await new CompactEncrypt(new TextEncoder().encode(text))
      .setProtectedHeader({ alg: 'RSA-OAEP', enc: 'A256GCM' })
      .encrypt(twoc2pKey);
    return new CompactSign(new TextEncoder().encode(jwe)).setProtectedHeader({ alg: 'PS256', typ: 'JWT' }).sign(merchantKey);
  }

  async function open(text: string): Promise<string> {
    const { payload } = await compactVerify(text.trim(), twoc2pKey, { algorithms: ['PS256'] });
    const { plaintext } = await compactDecrypt(new TextDecoder().decode(payload), merchantKey);
    return new TextDecoder().decode(plaintext);
  }

  async function payInvoice(invoiceNo: string, amount: number): Promise<void> {
    const key = new TextEncoder().encode(creds['2c2p'].secretKey);
    const claims = {
      merchantID: creds['2c2p'].merchantId,
      invoiceNo,
      description: `对账测试 ${invoiceNo}`,
      amount,
      currencyCode: 'CNY',
      paymentChannel: ['CC'],
    };
    const tokenAnswer = (await (
      await fetch(`${creds['2c2p'].baseUrl}/paymentToken`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ payload: await new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).sign(key) }),
      })
    ).json()) as { payload: string };
    const token = JSON.parse(Buffer.from(tokenAnswer.payload.split('.')[1] ?? '', 'base64url').toString()) as { paymentToken: string };
    const paid = (await (
      await fetch(`${creds['2c2p'].baseUrl}/payment`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          paymentToken: token.paymentToken,
          payment: { code: { channelCode: 'CC' }, data: { name: 'Test', cardNo: TWOC2P_TEST_CARDS.ok } },
        }),
      })
    ).json()) as { respCode: string };
    assert.equal(paid.respCode, '2000');
    const ledger = (await (await fetch(`${sandbox.url}/ledger?outTradeNo=${invoiceNo}`)).json()) as {
      charges: { gatewayTradeNo: string }[];
    };
    tranRefs.set(invoiceNo, ledger.charges[0]?.gatewayTradeNo ?? '');
  }

  async function report(date: string, secret = creds['2c2p'].secretKey): Promise<{ status: number; name: string; records: string[][] }> {
    const url = `${sandbox.url}/sandbox/2c2p/settlement-report?merchantID=${creds['2c2p'].merchantId}&date=${date}&currency=CNY`;
    const res = await fetch(url, { headers: { authorization: `Bearer ${secret}` } });
    const text = await res.text();
    const name = /filename="([^"]+)"/.exec(res.headers.get('content-disposition') ?? '')?.[1] ?? '';
    return {
      status: res.status,
      name,
      records: text
        .split('\r\n')
        .slice(0, -1)
        .map((line) => line.split(',')),
    };
  }

  before(async () => {
    merchantKey = createPrivateKey(creds['2c2p'].merchantPrivateKey);
    twoc2pKey = createPublicKey(creds['2c2p'].twoc2pPublicKey);
    await awayFromMidnight();
    await payInvoice(a, 12.3);
    await payInvoice(b, 7.5);
    const xml = `<PaymentProcessRequest><version>3.8</version><merchantID>${creds['2c2p'].merchantId}</merchantID><invoiceNo>${a}</invoiceNo><actionAmount>5.00</actionAmount><processType>R</processType><idempotencyID>${refundKey}</idempotencyID></PaymentProcessRequest>`;
    const res = await fetch(creds['2c2p'].maintenanceUrl, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: await seal(xml),
    });
    const answer = await open(await res.text());
    assert.match(answer, /<respCode>00<\/respCode>/, answer);
  });

  it('1. holds a header record with the totals and a detail record per payment and refund', async () => {
    const date = dayOf('2c2p');
    const { status, name, records } = await report(date);
    assert.equal(status, 200);
    assert.match(name, new RegExp(`^Reconcile2c2p_A_v2\\.1_${creds['2c2p'].merchantId}_CNY_${date}_\\d{6}\\.csv$`));
    assert.ok(
      records.every((record) => record.length === 67),
      'every record has the 67 columns of 2C2P’s samples',
    );
    const [header, ...details] = records;
    assert.ok(header);
    const slashed = `${date.slice(8, 10)}/${date.slice(5, 7)}/${date.slice(0, 4)}`;
    assert.deepEqual(
      [header[0], header[1], header[2], header[5], header[11], header[31]],
      [`2C2P${date.replaceAll('-', '')}01`, '4', 'H', slashed, creds['2c2p'].merchantId, 'CNY'],
    );
    // amount, MDR, VAT, withholding tax, net: two decimals, rounded from the details' five.
    assert.deepEqual([header[17], header[20], header[21], header[28], header[29]], ['14.80', '0.60', '0.05', '0.02', '14.17']);

    assert.deepEqual(
      details.map((d) => ({
        seq: d[1],
        type: d[2],
        date: d[7],
        invoice: d[12],
        amount: d[17],
        mdr: d[20],
        vat: d[21],
        wht: d[28],
        net: d[29],
        tranRef: d[44],
        rate: d[40],
      })),
      [
        // 12.30: MDR 3 % = 0.369 → 0.37, VAT 7 % of it 0.0259 → 0.03, WHT 3 % of it 0.0111; net 12.30 − 0.37 − 0.03 + 0.0111.
        {
          seq: '1',
          type: 'D',
          date: slashed,
          invoice: a,
          amount: '12.30000',
          mdr: '0.37000',
          vat: '0.03000',
          wht: '0.01110',
          net: '11.91110',
          tranRef: tranRefs.get(a),
          rate: '3.00',
        },
        // 7.50: MDR 0.225 → 0.23 (half up), VAT 0.0161 → 0.02, WHT 0.0069.
        {
          seq: '2',
          type: 'D',
          date: slashed,
          invoice: b,
          amount: '7.50000',
          mdr: '0.23000',
          vat: '0.02000',
          wht: '0.00690',
          net: '7.25690',
          tranRef: tranRefs.get(b),
          rate: '3.00',
        },
        {
          seq: '3',
          type: 'D',
          date: slashed,
          invoice: a,
          amount: '-5.00000',
          mdr: '0.00000',
          vat: '0.00000',
          wht: '0.00000',
          net: '-5.00000',
          tranRef: tranRefs.get(a),
          rate: '0.00',
        },
      ],
    );
    assert.match(details[2]?.[64] ?? '', /^\d+$/, 'the refund record carries 2C2P’s refund reference');
  });

  it('2. asks for the merchant’s secret, and a day with nothing is a header with zero totals', async () => {
    assert.equal((await report(dayOf('2c2p'), 'WRONG')).status, 401);
    const { status, records } = await report(dayBefore(dayOf('2c2p')));
    assert.equal(status, 200);
    assert.equal(records.length, 1);
    assert.deepEqual([records[0]?.[1], records[0]?.[2], records[0]?.[17], records[0]?.[29]], ['1', 'H', '0.00', '0.00']);
  });

  it('3. shows each discrepancy kind in the report as real records look', async () => {
    const date = dayOf('2c2p');
    const unknown = await injectAllKinds('2c2p', date, a, b, 1000);
    try {
      const [header, ...details] = (await report(date)).records;
      assert.deepEqual(
        details.map((d) => [d[12], d[17], d[20]]),
        [
          [a, '12.31000', '0.37000'],
          [unknown, '10.00000', '0.30000'],
        ],
      );
      assert.match(details[1]?.[44] ?? '', /^\d{7}$/, 'a tranRef shaped like 2C2P’s');
      assert.equal(details[1]?.length, 67);
      assert.equal(header?.[1], '3');
    } finally {
      await clearDiscrepancies('2c2p');
    }
  });

  it('4. publishes its fee contract, and the contract gives every record’s MDR + VAT − WHT', async () => {
    assert.equal(creds['2c2p'].feeContract, 'rate=3%;vat=7%;wht=3%;refund=kept');
    const [, ...details] = (await report(dayOf('2c2p'))).records;
    const fen = (text = '') => {
      const units = decimalUnits(text, 5);
      assert.equal(units % 1000n, 0n, `whole fen: ${text}`);
      return units / 1000n;
    };
    // The WHT is written exact (MDR × 3 %, five decimals) and booked rounded half up to the fen.
    const roundedFen = (text = '') => halfUp(decimalUnits(text, 5), 1000n);
    assertFeesFollow(
      parseFeeContract(creds['2c2p'].feeContract),
      details.map((d): FeeLine => {
        const amount = fen(d[17]);
        const fee = fen(d[20]) + fen(d[21]) - roundedFen(d[28]);
        const payment = amount > 0n;
        return {
          kind: payment ? 'payment' : 'refund',
          outTradeNo: d[12] ?? '',
          amountMinor: payment ? amount : -amount,
          feeMinor: payment ? fee : -fee,
        };
      }),
    );
  });

  it('5. shows a fee_differs payment’s MDR changed, its VAT and WHT recomputed, net and totals with them', async () => {
    const date = dayOf('2c2p');
    const before = (await report(date)).records;
    const injected = await discrepancy({ gateway: '2c2p', date, kind: 'fee_differs', outTradeNo: a });
    assert.equal(injected.amountMinor, '100');
    try {
      const after = (await report(date)).records;
      const expected = before.map((record) => [...record]);
      const [header, ...details] = expected;
      const recordA = details.find((d) => d[12] === a && !(d[17] ?? '').startsWith('-'));
      assert.ok(header && recordA);
      // A's MDR 0.37 + 1.00 = 1.37: VAT 7 % of it 0.0959 → 0.10, WHT 3 % of it 0.0411, net 12.30 − 1.37 − 0.10 + 0.0411.
      assert.deepEqual([recordA[20], recordA[21], recordA[28], recordA[29]], ['0.37000', '0.03000', '0.01110', '11.91110']);
      [recordA[20], recordA[21], recordA[28], recordA[29]] = ['1.37000', '0.10000', '0.04110', '10.87110'];
      // Totals: MDR 1.37 + 0.23, VAT 0.10 + 0.02, WHT 0.0411 + 0.0069 = 0.048, net 10.8711 + 7.2569 − 5.
      assert.deepEqual([header[20], header[21], header[28], header[29]], ['0.60', '0.05', '0.02', '14.17']);
      [header[20], header[21], header[28], header[29]] = ['1.60', '0.12', '0.05', '13.13'];
      assert.deepEqual(after, expected);
      // What 2C2P keeps of A grows by the change × (1 + VAT − WHT): 0.3889 → 1.4289.
      const kept = (d: string[]) => decimalUnits(d[20] ?? '', 5) + decimalUnits(d[21] ?? '', 5) - decimalUnits(d[28] ?? '', 5);
      const beforeA = before.find((d) => d[12] === a && d[2] === 'D' && !(d[17] ?? '').startsWith('-'));
      assert.ok(beforeA);
      assert.equal(kept(recordA) - kept(beforeA), 104_000n);
    } finally {
      await clearDiscrepancies('2c2p');
    }
  });
});

// ---------------------------------------------------------------------------------------------
// The discrepancy tool itself

describe('POST/GET/DELETE /sandbox/statements/discrepancies', () => {
  it('1. refuses what it cannot apply: a payment the ledger does not have, an unknown kind, a form post', async () => {
    const date = dayOf('alipay');
    const missing = await fetch(`${sandbox.url}/sandbox/statements/discrepancies`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ gateway: 'alipay', date, kind: 'missing_payment', outTradeNo: 'NOPE' }),
    });
    assert.equal(missing.status, 404);
    const kind = await fetch(`${sandbox.url}/sandbox/statements/discrepancies`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ gateway: 'alipay', date, kind: 'double_payment' }),
    });
    assert.equal(kind.status, 400);
    const form = await fetch(`${sandbox.url}/sandbox/statements/discrepancies`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: JSON.stringify({ gateway: 'alipay', date, kind: 'unknown_payment' }),
    });
    assert.equal(form.status, 415);
  });

  it('2. keeps them across a restart: GET lists them, DELETE clears them', async () => {
    const date = dayOf('2c2p');
    const injected = await discrepancy({ gateway: '2c2p', date, kind: 'unknown_payment', amountMinor: 4200 });
    await sandbox.close();
    sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001 });
    const listed = (await (await fetch(`${sandbox.url}/sandbox/statements/discrepancies?gateway=2c2p`)).json()) as {
      discrepancies: Record<string, unknown>[];
    };
    assert.deepEqual(listed.discrepancies, [injected]);
    assert.equal(injected.kind, 'unknown_payment');
    assert.equal(injected.amountMinor, '4200');
    await clearDiscrepancies('2c2p');
    const cleared = (await (await fetch(`${sandbox.url}/sandbox/statements/discrepancies`)).json()) as { discrepancies: unknown[] };
    assert.deepEqual(cleared.discrepancies, []);
  });
});
