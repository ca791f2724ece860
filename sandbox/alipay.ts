/**
 * The sandbox's Alipay: an emulation of the OpenAPI 2.0 gateway (`POST /gateway.do`) close enough
 * that the official alipay-sdk (4.14) talks to it unchanged, only `gateway` pointed here.
 *
 * Wire format, as alipay-sdk sends and checks it (node_modules/alipay-sdk/dist/esm):
 *  - Request: `POST {gateway}?method&app_id&charset&version&sign_type&timestamp&notify_url&sign`,
 *    body `application/x-www-form-urlencoded` with `biz_content=<JSON>`. The signature is RSA2 over
 *    every parameter but `sign` (URL and body alike, `sign_type` included), sorted by name, joined
 *    as `k=v&…` with the raw (decoded) values. Like the real gateway we leave empty values out.
 *  - Response: `{"<method_with_underscores>_response":{…},"sign":"…"}`, where `sign` is RSA2 by the
 *    platform key over the exact JSON text of the inner object. The SDK cuts that text out of the raw
 *    body by position (from the response key to the LAST `"sign"`), so the response object must
 *    come first and `sign` last. Every answer is signed, errors included, so `validateSign: true`
 *    callers can always read the code.
 *
 * Where Alipay's documentation leaves a choice open, the nearest documented behaviour is used and
 * said so in a comment.
 */
import { randomBytes, randomInt } from 'node:crypto';
import { signRsa2, verifyRsa2 } from './keys';
import { z } from 'zod';
import { json, readBuyerPays, type SandboxGatewayModule, type SandboxResponse } from './gateway-module';
import { errorPage, paidPage, payPage, redirect, type TradeView } from './alipay-pages';
import {
  enqueueNotification,
  findRefund,
  insertAttempt,
  loadOrCreateAlipayIdentity,
  recordCharge,
  recordRefund,
  refundedMinor,
  type AlipayIdentity,
  type DeliveryResult,
  type NotificationRow,
  type Sql,
  type Tx,
} from './store';
import { postNotification, type GatewayNotifier } from './notifier';
import { ALIPAY_BILL_METHOD, ALIPAY_BILL_PATH, alipayBillDownload, billDownloadUrlQuery } from './alipay-bill';
import { feeContract } from './statements';

// ---------------------------------------------------------------------------------------------
// Test buyers

export type TestBuyerName = 'ok' | 'insufficient_funds' | 'account_restricted';

interface TestBuyer {
  name: TestBuyerName;
  /** Alipay user id (2088…), sent as buyer_id / buyer_user_id. */
  buyerId: string;
  /** Masked login shown to the merchant. */
  logonId: string;
  /** The business error a payment by this buyer ends with, or null when it succeeds. */
  decline: { subCode: string; subMsg: string } | null;
}

/**
 * The sandbox's test buyers, addressed like a real face-to-face payment: by the 18-digit payment
 * code ("auth_code", the barcode in the buyer's Alipay app; real ones start with 25–30).
 *
 *   280000000000000001 — ok: has funds, pays.
 *   280000000000000002 — insufficient_funds: 40004 ACQ.BUYER_BALANCE_NOT_ENOUGH.
 *   280000000000000003 — account_restricted: 40004 ACQ.BUYER_ENABLE_STATUS_FORBID.
 *
 * Any other code is 40004 ACQ.PAYMENT_AUTH_CODE_INVALID. The codes are fixed (not per-install) so
 * they can be documented; they are also served by GET /sandbox/credentials.
 */
export const ALIPAY_TEST_BUYERS: Readonly<Record<string, TestBuyer>> = {
  '280000000000000001': {
    name: 'ok',
    buyerId: '2088102000000001',
    logonId: 'ok***@sandbox.example',
    decline: null,
  },
  '280000000000000002': {
    name: 'insufficient_funds',
    buyerId: '2088102000000002',
    logonId: 'poo***@sandbox.example',
    decline: { subCode: 'ACQ.BUYER_BALANCE_NOT_ENOUGH', subMsg: '买家余额不足' },
  },
  '280000000000000003': {
    name: 'account_restricted',
    buyerId: '2088102000000003',
    logonId: 'res***@sandbox.example',
    decline: { subCode: 'ACQ.BUYER_ENABLE_STATUS_FORBID', subMsg: '买家状态非法，无法继续交易' },
  },
};

/**
 * A payment code whose buyer must still confirm in the app (a large amount, a password or a
 * fingerprint): alipay.trade.pay answers 10003 "order success pay inprocess" and the trade waits
 * WAIT_BUYER_PAY, as Alipay documents for barcode payments; the merchant then queries (or cancels).
 * In the sandbox the buyer confirms with POST /sandbox/alipay/buyer-pays. No ledger charge is recorded
 * for the 10003 answer itself: nothing has been decided yet.
 */
export const ALIPAY_USERPAYING_AUTH_CODE = '280000000000000004';

export function alipayTestBuyerAuthCodes(): Record<TestBuyerName, string> {
  const codes: Partial<Record<TestBuyerName, string>> = {};
  for (const [authCode, buyer] of Object.entries(ALIPAY_TEST_BUYERS)) codes[buyer.name] = authCode;
  const { ok, insufficient_funds, account_restricted } = codes;
  if (!ok || !insufficient_funds || !account_restricted) throw new Error('test buyer table incomplete');
  return { ok, insufficient_funds, account_restricted };
}

// ---------------------------------------------------------------------------------------------
// Formats

/** Alipay's out_trade_no rule: letters, digits and underscore, at most 64 (a hyphen is refused). */
const OUT_TRADE_NO_RE = /^[A-Za-z0-9_]{1,64}$/;
/** A yuan amount with at most two decimals, no sign, no exponent, no leading zeros. */
const AMOUNT_RE = /^(0|[1-9]\d{0,8})(?:\.(\d{1,2}))?$/;
const MIN_FEN = 1n;
const MAX_FEN = 10_000_000_000n; // 100,000,000.00 yuan
const TIMESTAMP_RE = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;

/** Parses a yuan decimal string into integer fen without floating point; null if invalid. */
export function parseYuanToFen(text: string): bigint | null {
  const match = AMOUNT_RE.exec(text);
  if (!match) return null;
  const [, whole = '', fraction = ''] = match;
  const fen = BigInt(whole) * 100n + BigInt(fraction.padEnd(2, '0'));
  return fen >= MIN_FEN && fen <= MAX_FEN ? fen : null;
}

export function formatFen(fen: bigint): string {
  return `${fen / 100n}.${(fen % 100n).toString().padStart(2, '0')}`;
}

/** Alipay's timestamps are Beijing time (UTC+8, no DST), `yyyy-MM-dd HH:mm:ss`. */
function beijingTime(date: Date): string {
  return new Date(date.getTime() + 8 * 3_600_000).toISOString().slice(0, 19).replace('T', ' ');
}

function randomDigits(count: number): string {
  let out = '';
  for (let i = 0; i < count; i += 1) out += String(randomInt(10));
  return out;
}

/** 28 digits like Alipay's: the Beijing date, the channel "22", then 18 digits. */
function newTradeNo(): string {
  return `${beijingTime(new Date()).slice(0, 10).replaceAll('-', '')}22${randomDigits(18)}`;
}

// ---------------------------------------------------------------------------------------------
// Signing

/** Alipay's sign content: sorted `k=v` pairs joined by `&`, leaving out the excluded and the empty. */
function signContent(params: ReadonlyMap<string, string>, exclude: ReadonlySet<string>): string {
  return [...params.keys()]
    .filter((key) => !exclude.has(key) && (params.get(key) ?? '') !== '')
    .sort()
    .map((key) => `${key}=${params.get(key) ?? ''}`)
    .join('&');
}

type Inner = Record<string, unknown>;

export interface GatewayHttpResponse {
  status: number;
  contentType: string;
  body: string;
}

function signedResponse(responseKey: string, inner: Inner, platformPrivateKeyPem: string): GatewayHttpResponse {
  const innerJson = JSON.stringify(inner);
  const sign = signRsa2(innerJson, platformPrivateKeyPem);
  // Built by hand, not with JSON.stringify of an outer object, so the signed text is byte-for-byte
  // the text in the body and `sign` is guaranteed to come last (see the header comment).
  return {
    status: 200,
    contentType: 'application/json;charset=utf-8',
    body: `{${JSON.stringify(responseKey)}:${innerJson},"sign":${JSON.stringify(sign)}}`,
  };
}

const CODE_MSG = {
  '10000': 'Success',
  '20000': 'Service Currently Unavailable',
  '40001': 'Missing Required Arguments',
  '40002': 'Invalid Arguments',
  '40004': 'Business Failed',
} as const;

function failure(code: keyof typeof CODE_MSG, subCode: string, subMsg: string, extra: Inner = {}): Inner {
  return { code, msg: CODE_MSG[code], sub_code: subCode, sub_msg: subMsg, ...extra };
}

function success(fields: Inner): Inner {
  return { code: '10000', msg: 'Success', ...fields };
}

function businessFailure(subCode: string, subMsg: string, extra: Inner = {}): Inner {
  return failure('40004', subCode, subMsg, extra);
}

const SUB_MSG = {
  'ACQ.PAYMENT_AUTH_CODE_INVALID': '支付失败，获取顾客账户信息失败，请顾客刷新付款码后重新收款',
  'ACQ.CONTEXT_INCONSISTENT': '交易信息被篡改',
  'ACQ.TRADE_HAS_SUCCESS': '交易已被支付',
  'ACQ.TRADE_HAS_CLOSE': '交易已经关闭',
  'ACQ.TRADE_BUYER_NOT_MATCH': '交易买家不匹配',
  'ACQ.TRADE_NOT_EXIST': '交易不存在',
  'ACQ.TRADE_STATUS_ERROR': '交易状态不合法',
  'ACQ.TRADE_HAS_FINISHED': '交易已完结',
  'ACQ.REFUND_AMT_NOT_EQUAL_TOTAL': '撤销或退款金额与订单金额不一致',
  'ACQ.REASON_TRADE_REFUND_FEE_ERR': '退款金额无效',
  'ACQ.DISCORDANT_REPEAT_REQUEST': '不一致的请求',
} as const;

/**
 * How far a request's `timestamp` may be from the gateway's clock. [unverified] Alipay documents
 * `timestamp` ("发送请求的时间", GMT+8, yyyy-MM-dd HH:mm:ss) and refuses a malformed one with 40002
 * isv.invalid-timestamp, but publishes no window; a stale request gets the same isv.invalid-timestamp,
 * the nearest documented error. The timestamp carries no zone and alipay-sdk writes the host's LOCAL
 * time (utility's YYYYMMDDHHmmss), so the official SDK on a UTC host sends Beijing time − 8 h and
 * works against Alipay: the window is the span of real time zones (UTC−12 … UTC+14, i.e. Beijing
 * −20 h … +6 h) plus 15 minutes of clock skew (the tolerance other Alibaba gateways document).
 * A replayed request from yesterday is refused; a host in any zone with a sane clock is not.
 */
export const ALIPAY_TIMESTAMP_WINDOW = { behindMs: (20 * 60 + 15) * 60_000, aheadMs: (6 * 60 + 15) * 60_000 } as const;

/** Beijing `yyyy-MM-dd HH:mm:ss` to a Date; NaN time when it does not parse. */
function parseBeijingTime(text: string): Date {
  return new Date(`${text.replace(' ', 'T')}+08:00`);
}

/**
 * A business parameter error. Alipay answers malformed biz_content fields (an amount with three
 * decimals, a missing out_trade_no, …) with 40004 ACQ.INVALID_PARAMETER "参数无效" and a reason,
 * as its per-interface error tables list; public parameters (app_id, sign, …) get 40001/40002.
 */
function invalidParameter(reason: string): Inner {
  return businessFailure('ACQ.INVALID_PARAMETER', `参数无效: ${reason}`);
}

// ---------------------------------------------------------------------------------------------
// Trades

interface TradeRow {
  app_id: string;
  out_trade_no: string;
  trade_no: string;
  subject: string;
  total_amount_fen: string;
  status: 'WAIT_BUYER_PAY' | 'TRADE_SUCCESS' | 'TRADE_FINISHED' | 'TRADE_CLOSED';
  buyer_id: string | null;
  buyer_logon_id: string | null;
  notify_url: string | null;
  gmt_create: Date;
  gmt_payment: Date | null;
  gmt_close?: Date | null;
}

/**
 * Serializes everything that touches one merchant order, across requests AND sandbox processes.
 * A row lock (SELECT … FOR UPDATE) cannot do it: on the first request the row does not exist yet, so
 * 50 concurrent first payments would all see "no trade" and all charge. The transaction-scoped
 * advisory lock on (app, out_trade_no) exists before the row does and is released at commit.
 */
async function lockTrade(tx: Tx, appId: string, outTradeNo: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(hashtextextended(${`alipay:${appId}:${outTradeNo}`}, 0))`;
}

async function selectTrade(
  db: Sql | Tx,
  appId: string,
  by: { outTradeNo?: string | undefined; tradeNo?: string | undefined },
): Promise<TradeRow | undefined> {
  const outTradeNo = by.outTradeNo ?? null;
  const tradeNo = by.tradeNo ?? null;
  const rows = await db<TradeRow[]>`
    SELECT app_id, out_trade_no, trade_no, subject, total_amount_fen, status, buyer_id, buyer_logon_id,
           notify_url, gmt_create, gmt_payment
      FROM psp_sandbox.alipay_trades
     WHERE app_id = ${appId}
       AND (${outTradeNo}::text IS NULL OR out_trade_no = ${outTradeNo})
       AND (${tradeNo}::text IS NULL OR trade_no = ${tradeNo})`;
  return rows[0];
}

function isPaid(trade: TradeRow): boolean {
  return trade.status === 'TRADE_SUCCESS' || trade.status === 'TRADE_FINISHED';
}

/**
 * Alipay's rule for a repeated out_trade_no: a paid or closed trade refuses, changed parameters are
 * ACQ.CONTEXT_INCONSISTENT, identical parameters on an open trade proceed (the trade "reopens").
 */
function repeatedTradeError(trade: TradeRow, fen: bigint, subject: string): Inner | null {
  if (isPaid(trade)) return businessFailure('ACQ.TRADE_HAS_SUCCESS', SUB_MSG['ACQ.TRADE_HAS_SUCCESS']);
  if (trade.status === 'TRADE_CLOSED') return businessFailure('ACQ.TRADE_HAS_CLOSE', SUB_MSG['ACQ.TRADE_HAS_CLOSE']);
  if (BigInt(trade.total_amount_fen) !== fen || trade.subject !== subject) {
    return businessFailure('ACQ.CONTEXT_INCONSISTENT', SUB_MSG['ACQ.CONTEXT_INCONSISTENT']);
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// biz_content readers

type Biz = Record<string, unknown>;

function optionalString(biz: Biz, key: string): string | undefined | Inner {
  const value = biz[key];
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string') return invalidParameter(`${key} 必须是字符串`);
  return value;
}

function requiredString(biz: Biz, key: string): string | Inner {
  const value = optionalString(biz, key);
  if (value === undefined) return invalidParameter(`缺少 ${key}`);
  return value;
}

function readOutTradeNo(biz: Biz, required: boolean): string | undefined | Inner {
  const value = required ? requiredString(biz, 'out_trade_no') : optionalString(biz, 'out_trade_no');
  if (typeof value !== 'string') return value;
  if (!OUT_TRADE_NO_RE.test(value)) {
    return invalidParameter('out_trade_no 只能包含字母、数字、下划线，且不超过 64 位');
  }
  return value;
}

function readAmount(biz: Biz, key = 'total_amount'): bigint | Inner {
  const raw = biz[key];
  // Alipay's Price fields accept a JSON number or a string; either way the decimal text is what
  // counts (0.1 + 0.2 sent as a number arrives as 0.30000000000000004 and is refused, as on Alipay).
  const text = typeof raw === 'number' ? String(raw) : raw;
  if (typeof text !== 'string' || text === '') return invalidParameter(`缺少 ${key}`);
  const fen = parseYuanToFen(text);
  const label = key === 'total_amount' ? '订单总金额' : '退款金额';
  if (fen === null) return invalidParameter(`${label}格式错误，取值范围 [0.01,100000000]，最多两位小数`);
  return fen;
}

function readSubject(biz: Biz): string | Inner {
  const subject = requiredString(biz, 'subject');
  if (typeof subject === 'string' && [...subject].length > 256) return invalidParameter('subject 超过 256 个字符');
  return subject;
}

function isInner(value: unknown): value is Inner {
  return typeof value === 'object' && value !== null;
}

// ---------------------------------------------------------------------------------------------
// Context

export interface AlipayContext {
  sql: Sql;
  identity: AlipayIdentity;
  /** Pokes the notifier so the first delivery goes out right after the charge commits. */
  wakeNotifier(): void;
  deliveryTimeoutMs: number;
}

interface AppRow {
  app_id: string;
  seller_id: string;
  app_public_key_pem: string;
}

/** The first delivery of a new notification is due at once; it is polled from the table. */
function notificationFields(app: AppRow, trade: TradeRow, notifyId: string): Record<string, string> {
  const total = formatFen(BigInt(trade.total_amount_fen));
  const paid = isPaid(trade);
  const fields: Record<string, string | null> = {
    notify_type: 'trade_status_sync',
    notify_id: notifyId,
    app_id: app.app_id,
    // The app the payment was authorised for; the merchant's own app unless an ISV pays on its behalf.
    auth_app_id: app.app_id,
    charset: 'utf-8',
    version: '1.0',
    trade_no: trade.trade_no,
    out_trade_no: trade.out_trade_no,
    buyer_id: trade.buyer_id,
    seller_id: app.seller_id,
    trade_status: trade.status,
    total_amount: total,
    receipt_amount: paid ? total : null,
    buyer_pay_amount: paid ? total : null,
    invoice_amount: paid ? total : null,
    point_amount: paid ? '0.00' : null,
    // As Alipay sends it: a JSON array with camelCase keys (unlike the snake_case of trade.pay's answer).
    fund_bill_list: paid ? JSON.stringify([{ amount: total, fundChannel: 'ALIPAYACCOUNT' }]) : null,
    gmt_create: beijingTime(trade.gmt_create),
    gmt_payment: trade.gmt_payment ? beijingTime(trade.gmt_payment) : null,
    gmt_close: trade.status === 'TRADE_CLOSED' && trade.gmt_close ? beijingTime(trade.gmt_close) : null,
    subject: trade.subject,
  };
  // No empty fields: Alipay leaves them out, and alipay-sdk's checker would sign them as `k=`.
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(fields)) if (value) out[key] = value;
  return out;
}

/** notify_id: one per notification, constant across its retries, so receivers can dedupe on it. */
function newNotifyId(): string {
  return randomBytes(16).toString('hex');
}

/**
 * Builds one delivery of an Alipay notification: adds notify_time and sign_type, applies overrides
 * (an empty string removes a field), then signs with the platform key over every field but `sign`
 * and `sign_type`, sorted (Alipay's documented notify rule, which alipay-sdk's checkNotifySignV2
 * verifies on its second pass). An override of `sign` itself replaces the signature (forgery tests).
 */
export function buildAlipayNotification(
  fields: Record<string, string>,
  platformPrivateKeyPem: string,
  now: Date,
  overrides: Record<string, string> = {},
): { contentType: string; body: string } {
  const params = new Map<string, string>(Object.entries(fields));
  params.set('notify_time', beijingTime(now));
  params.set('sign_type', 'RSA2');
  for (const [key, value] of Object.entries(overrides)) {
    if (key === 'sign') continue;
    if (value === '') params.delete(key);
    else params.set(key, value);
  }
  const sign = signRsa2(signContent(params, new Set(['sign', 'sign_type'])), platformPrivateKeyPem);
  const forged = overrides.sign;
  if (forged === undefined) params.set('sign', sign);
  else if (forged !== '') params.set('sign', forged);
  return {
    contentType: 'application/x-www-form-urlencoded; charset=utf-8',
    body: new URLSearchParams([...params.entries()]).toString(),
  };
}

/** Alipay's retry schedule after a failed delivery: 4m, 10m, 10m, 1h, 2h, 6h, 15h (8 in all). */
export function alipayNotifier(platformPrivateKeyPem: string): GatewayNotifier {
  const minute = 60_000;
  return {
    retryIntervalsMs: [4, 10, 10, 60, 120, 360, 900].map((m) => m * minute),
    buildRequest: (fields, now) => buildAlipayNotification(fields, platformPrivateKeyPem, now),
    isAcknowledged: isAlipayAck,
  };
}

/** "Reply with the plain text `success`; anything else makes Alipay retry." */
export function isAlipayAck(status: number, body: string): boolean {
  return status >= 200 && status < 300 && body === 'success';
}

// ---------------------------------------------------------------------------------------------
// POST /gateway.do

const METHOD_RE = /^[a-z][a-z0-9]*(\.[a-z0-9]+)+$/;

/** Collects the request's parameters: the URL's query string and a form-urlencoded body. */
export function gatewayParams(url: URL, body: string, contentType: string | undefined): Map<string, string> {
  const params = new Map<string, string>();
  for (const [key, value] of url.searchParams) if (!params.has(key)) params.set(key, value);
  if (contentType?.toLowerCase().includes('application/x-www-form-urlencoded') && body !== '') {
    // Body parameters win over URL ones of the same name: the SDK never sends a name in both.
    for (const [key, value] of new URLSearchParams(body)) params.set(key, value);
  }
  return params;
}

/** Where the request came in: the sandbox's own address, for URLs it hands out (precreate's qr_code). */
interface RequestEnv {
  baseUrl: string;
}

type MethodHandler = (ctx: AlipayContext, app: AppRow, params: Map<string, string>, biz: Biz, env: RequestEnv) => Promise<Inner>;

const METHODS: Readonly<Record<string, MethodHandler>> = {
  'alipay.trade.pay': tradePay,
  'alipay.trade.create': tradeCreate,
  'alipay.trade.precreate': tradePrecreate,
  'alipay.trade.query': tradeQuery,
  'alipay.trade.close': tradeClose,
  'alipay.trade.cancel': tradeCancel,
  'alipay.trade.refund': tradeRefund,
  'alipay.trade.fastpay.refund.query': tradeRefundQuery,
  [ALIPAY_BILL_METHOD]: (ctx, app, _params, biz, env) =>
    billDownloadUrlQuery(ctx.sql, app, biz, { baseUrl: env.baseUrl, platformPrivateKeyPem: ctx.identity.platformPrivateKeyPem }),
};

/** The request passed the gateway's public checks: its app and its parsed biz_content. */
type Authenticated = { app: AppRow; biz: Biz };

/**
 * The gateway's public checks, in the order Alipay's public error table lists them: required public
 * parameters (40001), then method, charset, sign_type, timestamp, app_id and signature (40002), then
 * biz_content. `knownMethod` says whether the method is one this gateway serves; `checkClock`
 * applies the timestamp window (see ALIPAY_TIMESTAMP_WINDOW_MS).
 */
async function authenticate(
  ctx: AlipayContext,
  params: Map<string, string>,
  options: { knownMethod: boolean; checkClock: boolean; now?: Date },
): Promise<Authenticated | { refusal: Inner }> {
  const refuse = (inner: Inner) => ({ refusal: inner });
  const method = params.get('method') ?? '';
  const missing: [string, string][] = [
    ['method', 'isv.missing-method'],
    ['app_id', 'isv.missing-app-id'],
    ['sign_type', 'isv.missing-signature-type'],
    ['sign', 'isv.missing-signature'],
    ['timestamp', 'isv.missing-timestamp'],
    ['version', 'isv.missing-version'],
  ];
  for (const [name, subCode] of missing) {
    if (!params.get(name)) return refuse(failure('40001', subCode, `缺少参数 ${name}`));
  }
  if (!METHOD_RE.test(method) || !options.knownMethod) {
    return refuse(failure('40002', 'isv.invalid-method', `不存在的方法名: ${method}`));
  }
  const charset = params.get('charset');
  if (charset && charset.toLowerCase() !== 'utf-8') {
    return refuse(failure('40002', 'isv.invalid-charset', '字符集错误，仅支持 utf-8'));
  }
  if (params.get('sign_type') !== 'RSA2') {
    return refuse(failure('40002', 'isv.invalid-signature-type', '无效的签名类型，请使用 RSA2'));
  }
  const timestamp = params.get('timestamp') ?? '';
  const sentAt = parseBeijingTime(timestamp);
  if (!TIMESTAMP_RE.test(timestamp) || Number.isNaN(sentAt.getTime())) {
    return refuse(failure('40002', 'isv.invalid-timestamp', '非法的时间戳参数，格式为 yyyy-MM-dd HH:mm:ss'));
  }
  const skew = sentAt.getTime() - (options.now ?? new Date()).getTime();
  if (options.checkClock && (skew < -ALIPAY_TIMESTAMP_WINDOW.behindMs || skew > ALIPAY_TIMESTAMP_WINDOW.aheadMs)) {
    return refuse(
      failure(
        '40002',
        'isv.invalid-timestamp',
        `非法的时间戳参数: ${timestamp} 与支付宝网关时间 ${beijingTime(options.now ?? new Date())} 相差过大`,
      ),
    );
  }

  const appId = params.get('app_id') ?? '';
  const apps = await ctx.sql<AppRow[]>`
    SELECT app_id, seller_id, app_public_key_pem FROM psp_sandbox.alipay_apps WHERE app_id = ${appId}`;
  const app = apps[0];
  if (!app) return refuse(failure('40002', 'isv.invalid-app-id', `无效的AppID参数: ${appId}`));

  const content = signContent(params, new Set(['sign']));
  if (!verifyRsa2(content, params.get('sign') ?? '', app.app_public_key_pem)) {
    // Like Alipay, show the string the gateway verified, which is what a developer needs to debug.
    return refuse(
      failure(
        '40002',
        'isv.invalid-signature',
        `验签出错，建议检查签名字符串或签名私钥与应用公钥是否匹配，网关生成的验签字符串为：${content}`,
      ),
    );
  }

  let biz: Biz = {};
  const bizText = params.get('biz_content');
  if (bizText) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(bizText);
    } catch {
      parsed = undefined;
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      return refuse(failure('40002', 'isv.invalid-parameter', 'biz_content 不是合法的 JSON 对象'));
    }
    biz = parsed as Biz;
  }
  return { app, biz };
}

export async function handleGateway(ctx: AlipayContext, params: Map<string, string>, baseUrl = ''): Promise<GatewayHttpResponse> {
  const platformKey = ctx.identity.platformPrivateKeyPem;
  const method = params.get('method') ?? '';
  // The SDK looks for `<method>_response` and falls back to `error_response`; use the former whenever
  // the method name is usable so that even errors pass its signature check.
  const responseKey = METHOD_RE.test(method) ? `${method.replaceAll('.', '_')}_response` : 'error_response';
  const answer = (inner: Inner) => signedResponse(responseKey, inner, platformKey);

  const handler = Object.hasOwn(METHODS, method) ? METHODS[method] : undefined;
  const checked = await authenticate(ctx, params, { knownMethod: handler !== undefined, checkClock: true });
  if ('refusal' in checked) return answer(checked.refusal);
  if (!handler) return answer(failure('40002', 'isv.invalid-method', `不存在的方法名: ${method}`));
  try {
    return answer(await handler(ctx, checked.app, params, checked.biz, { baseUrl }));
  } catch (err) {
    // The gateway's "unknown error": the caller cannot tell whether the request took effect, which
    // is exactly what a database failure mid-request means.
    console.error('[psp-sandbox] alipay %s failed:', method, err);
    return answer(failure('20000', 'isp.unknow-error', '服务暂不可用'));
  }
}

/** One payment attempt on an open trade, as the buyer's app makes it: declined or paid. */
type PayAttempt = { kind: 'declined'; subCode: string; subMsg: string } | { kind: 'paid'; trade: TradeRow; buyer: TestBuyer };

/**
 * A buyer (undefined: an unknown payment code) pays an open (WAIT_BUYER_PAY) trade. Runs under the
 * trade's lock. Every attempt goes into the ledger; a decline leaves the trade WAIT_BUYER_PAY (payable
 * by another buyer later, as on Alipay); a payment schedules the TRADE_SUCCESS notification in the
 * same transaction (an outbox: it exists if and only if the payment committed). Shared by
 * alipay.trade.pay and the buyer-pays tool, so both pay exactly the same way.
 */
async function payOpenTrade(tx: Tx, app: AppRow, trade: TradeRow, buyer: TestBuyer | undefined): Promise<PayAttempt> {
  const decline = !buyer
    ? { subCode: 'ACQ.PAYMENT_AUTH_CODE_INVALID', subMsg: SUB_MSG['ACQ.PAYMENT_AUTH_CODE_INVALID'] }
    : trade.buyer_id && trade.buyer_id !== buyer.buyerId
      ? { subCode: 'ACQ.TRADE_BUYER_NOT_MATCH', subMsg: SUB_MSG['ACQ.TRADE_BUYER_NOT_MATCH'] }
      : buyer.decline;
  const fen = BigInt(trade.total_amount_fen);
  const base = {
    gateway: 'alipay',
    merchantId: app.app_id,
    outTradeNo: trade.out_trade_no,
    amountMinor: fen,
    currency: 'CNY',
    gatewayTradeNo: trade.trade_no,
    buyerId: buyer?.buyerId ?? null,
  };
  if (decline || !buyer) {
    const subCode = decline?.subCode ?? 'ACQ.PAYMENT_AUTH_CODE_INVALID';
    await recordCharge(tx, { ...base, status: 'declined', declineCode: subCode });
    return { kind: 'declined', subCode, subMsg: decline?.subMsg ?? SUB_MSG['ACQ.PAYMENT_AUTH_CODE_INVALID'] };
  }

  const paidRows = await tx<TradeRow[]>`
    UPDATE psp_sandbox.alipay_trades
       SET status = 'TRADE_SUCCESS', buyer_id = ${buyer.buyerId}, buyer_logon_id = ${buyer.logonId},
           gmt_payment = now()
     WHERE app_id = ${app.app_id} AND out_trade_no = ${trade.out_trade_no} AND status = 'WAIT_BUYER_PAY'
    RETURNING app_id, out_trade_no, trade_no, subject, total_amount_fen, status, buyer_id, buyer_logon_id,
              notify_url, gmt_create, gmt_payment`;
  const paid = paidRows[0];
  if (!paid || !paid.gmt_payment) throw new Error('trade left WAIT_BUYER_PAY under its lock');
  await recordCharge(tx, { ...base, status: 'succeeded', declineCode: null });
  if (paid.notify_url) {
    const notifyId = newNotifyId();
    await enqueueNotification(tx, {
      gateway: 'alipay',
      merchantId: app.app_id,
      outTradeNo: paid.out_trade_no,
      notifyId,
      notifyUrl: paid.notify_url,
      fields: notificationFields(app, paid, notifyId),
    });
  }
  return { kind: 'paid', trade: paid, buyer };
}

async function tradePay(ctx: AlipayContext, app: AppRow, params: Map<string, string>, biz: Biz): Promise<Inner> {
  const outTradeNo = readOutTradeNo(biz, true);
  if (typeof outTradeNo !== 'string') return outTradeNo ?? invalidParameter('缺少 out_trade_no');
  const fen = readAmount(biz);
  if (typeof fen !== 'bigint') return fen;
  const subject = readSubject(biz);
  if (typeof subject !== 'string') return subject;
  const scene = requiredString(biz, 'scene');
  if (typeof scene !== 'string') return scene;
  if (scene !== 'bar_code' && scene !== 'security_code') return invalidParameter('scene 只能是 bar_code 或 security_code');
  const authCode = requiredString(biz, 'auth_code');
  if (typeof authCode !== 'string') return authCode;
  const productCode = optionalString(biz, 'product_code');
  if (isInner(productCode)) return productCode;
  if (productCode !== undefined && productCode !== 'FACE_TO_FACE_PAYMENT') {
    return invalidParameter('product_code 只能是 FACE_TO_FACE_PAYMENT');
  }
  const notifyUrl = params.get('notify_url') || null;

  let charged = false;
  const zero = { out_trade_no: outTradeNo, buyer_pay_amount: '0.00', invoice_amount: '0.00', point_amount: '0.00', receipt_amount: '0.00' };
  const result = await ctx.sql.begin(async (tx): Promise<Inner> => {
    await lockTrade(tx, app.app_id, outTradeNo);
    let trade = await selectTrade(tx, app.app_id, { outTradeNo });
    if (!trade && (await isCancelledOrder(tx, app.app_id, outTradeNo))) {
      return { ...businessFailure('ACQ.TRADE_HAS_CLOSE', SUB_MSG['ACQ.TRADE_HAS_CLOSE']), out_trade_no: outTradeNo };
    }
    if (trade) {
      const refusal = repeatedTradeError(trade, fen, subject);
      // Refusals of the request itself are not charge attempts: nothing is recorded.
      if (refusal) return { ...refusal, out_trade_no: outTradeNo };
      if (notifyUrl && notifyUrl !== trade.notify_url) {
        await tx`UPDATE psp_sandbox.alipay_trades SET notify_url = ${notifyUrl}
                  WHERE app_id = ${app.app_id} AND out_trade_no = ${outTradeNo}`;
        trade = { ...trade, notify_url: notifyUrl };
      }
    } else {
      // The trade exists from the first attempt on, so a declined payment leaves it WAIT_BUYER_PAY
      // and a later attempt with another buyer pays the same trade.
      const inserted = await tx<TradeRow[]>`
        INSERT INTO psp_sandbox.alipay_trades
          (app_id, out_trade_no, trade_no, subject, total_amount_fen, status, notify_url)
        VALUES (${app.app_id}, ${outTradeNo}, ${newTradeNo()}, ${subject}, ${fen.toString()}, 'WAIT_BUYER_PAY',
                ${notifyUrl})
        RETURNING app_id, out_trade_no, trade_no, subject, total_amount_fen, status, buyer_id, buyer_logon_id,
                  notify_url, gmt_create, gmt_payment`;
      trade = inserted[0];
      if (!trade) throw new Error('INSERT … RETURNING returned no row');
    }

    if (authCode === ALIPAY_USERPAYING_AUTH_CODE) {
      // 10003: the trade exists and waits for the buyer's confirmation; the answer is not final, so
      // the merchant must query (or cancel) — it carries no sub_code, as Alipay's sample shows.
      return {
        code: '10003',
        msg: 'order success pay inprocess',
        ...zero,
        trade_no: trade.trade_no,
        total_amount: formatFen(fen),
      };
    }
    const attempt = await payOpenTrade(tx, app, trade, ALIPAY_TEST_BUYERS[authCode]);
    if (attempt.kind === 'declined') return businessFailure(attempt.subCode, attempt.subMsg, zero);
    const { trade: paid, buyer } = attempt;
    if (!paid.gmt_payment) throw new Error('paid trade without gmt_payment');
    charged = true;
    const amount = formatFen(fen);
    return success({
      trade_no: paid.trade_no,
      out_trade_no: outTradeNo,
      buyer_logon_id: buyer.logonId,
      buyer_user_id: buyer.buyerId,
      total_amount: amount,
      receipt_amount: amount,
      buyer_pay_amount: amount,
      invoice_amount: amount,
      point_amount: '0.00',
      gmt_payment: beijingTime(paid.gmt_payment),
      fund_bill_list: [{ fund_channel: 'ALIPAYACCOUNT', amount }],
    });
  });
  if (charged) ctx.wakeNotifier();
  return result;
}

async function tradeCreate(ctx: AlipayContext, app: AppRow, params: Map<string, string>, biz: Biz): Promise<Inner> {
  const outTradeNo = readOutTradeNo(biz, true);
  if (typeof outTradeNo !== 'string') return outTradeNo ?? invalidParameter('缺少 out_trade_no');
  const fen = readAmount(biz);
  if (typeof fen !== 'bigint') return fen;
  const subject = readSubject(biz);
  if (typeof subject !== 'string') return subject;
  const buyerId = optionalString(biz, 'buyer_id');
  if (isInner(buyerId)) return buyerId;
  if (buyerId !== undefined && !/^2088\d{12}$/.test(buyerId)) return invalidParameter('buyer_id 格式错误');
  const notifyUrl = params.get('notify_url') || null;

  return ctx.sql.begin(async (tx): Promise<Inner> => {
    await lockTrade(tx, app.app_id, outTradeNo);
    const trade = await selectTrade(tx, app.app_id, { outTradeNo });
    if (!trade && (await isCancelledOrder(tx, app.app_id, outTradeNo))) {
      return businessFailure('ACQ.TRADE_HAS_CLOSE', SUB_MSG['ACQ.TRADE_HAS_CLOSE']);
    }
    if (!trade) {
      const tradeNo = newTradeNo();
      await tx`
        INSERT INTO psp_sandbox.alipay_trades
          (app_id, out_trade_no, trade_no, subject, total_amount_fen, status, buyer_id, notify_url)
        VALUES (${app.app_id}, ${outTradeNo}, ${tradeNo}, ${subject}, ${fen.toString()}, 'WAIT_BUYER_PAY',
                ${buyerId ?? null}, ${notifyUrl})`;
      return success({ out_trade_no: outTradeNo, trade_no: tradeNo });
    }
    const refusal = repeatedTradeError(trade, fen, subject);
    if (refusal) return refusal;
    if (buyerId && trade.buyer_id && buyerId !== trade.buyer_id) {
      return businessFailure('ACQ.TRADE_BUYER_NOT_MATCH', SUB_MSG['ACQ.TRADE_BUYER_NOT_MATCH']);
    }
    // Identical parameters on an open trade: the same trade "reopens" (same trade_no).
    await tx`
      UPDATE psp_sandbox.alipay_trades
         SET buyer_id = COALESCE(buyer_id, ${buyerId ?? null}), notify_url = COALESCE(${notifyUrl}, notify_url)
       WHERE app_id = ${app.app_id} AND out_trade_no = ${outTradeNo}`;
    return success({ out_trade_no: outTradeNo, trade_no: trade.trade_no });
  });
}

function readTradeRef(biz: Biz): { outTradeNo?: string; tradeNo?: string } | Inner {
  const outTradeNo = optionalString(biz, 'out_trade_no');
  if (isInner(outTradeNo)) return outTradeNo;
  const tradeNo = optionalString(biz, 'trade_no');
  if (isInner(tradeNo)) return tradeNo;
  if (outTradeNo === undefined && tradeNo === undefined) return invalidParameter('out_trade_no 和 trade_no 不能同时为空');
  return {
    ...(outTradeNo !== undefined ? { outTradeNo } : {}),
    ...(tradeNo !== undefined ? { tradeNo } : {}),
  };
}

async function tradeQuery(ctx: AlipayContext, app: AppRow, _params: Map<string, string>, biz: Biz): Promise<Inner> {
  const ref = readTradeRef(biz);
  if ('code' in ref) return ref;
  const trade = await selectTrade(ctx.sql, app.app_id, ref);
  if (!trade) return businessFailure('ACQ.TRADE_NOT_EXIST', SUB_MSG['ACQ.TRADE_NOT_EXIST']);
  const total = formatFen(BigInt(trade.total_amount_fen));
  const paid = isPaid(trade);
  const fields: Inner = {
    trade_no: trade.trade_no,
    out_trade_no: trade.out_trade_no,
    trade_status: trade.status,
    total_amount: total,
    receipt_amount: paid ? total : '0.00',
    buyer_pay_amount: paid ? total : '0.00',
    point_amount: '0.00',
    invoice_amount: paid ? total : '0.00',
  };
  if (trade.buyer_id) fields.buyer_user_id = trade.buyer_id;
  if (trade.buyer_logon_id) fields.buyer_logon_id = trade.buyer_logon_id;
  if (trade.gmt_payment) fields.send_pay_date = beijingTime(trade.gmt_payment);
  return success(fields);
}

async function tradeClose(ctx: AlipayContext, app: AppRow, _params: Map<string, string>, biz: Biz): Promise<Inner> {
  const ref = readTradeRef(biz);
  if ('code' in ref) return ref;
  let notified = false;
  const result = await ctx.sql.begin(async (tx): Promise<Inner> => {
    const found = await selectTrade(tx, app.app_id, ref);
    if (!found) return businessFailure('ACQ.TRADE_NOT_EXIST', SUB_MSG['ACQ.TRADE_NOT_EXIST']);
    await lockTrade(tx, app.app_id, found.out_trade_no);
    // Re-read under the lock: a payment may have committed between the lookup and the lock.
    const trade = await selectTrade(tx, app.app_id, { outTradeNo: found.out_trade_no });
    if (!trade) return businessFailure('ACQ.TRADE_NOT_EXIST', SUB_MSG['ACQ.TRADE_NOT_EXIST']);
    // Only a WAIT_BUYER_PAY trade closes: a paid one and an already closed one are both
    // ACQ.TRADE_STATUS_ERROR "交易状态不合法" (Alipay's error table for trade.close), so a caller
    // must query to tell them apart.
    if (trade.status !== 'WAIT_BUYER_PAY') return businessFailure('ACQ.TRADE_STATUS_ERROR', SUB_MSG['ACQ.TRADE_STATUS_ERROR']);
    notified = await closeOpenTrade(tx, app, trade);
    return success({ trade_no: trade.trade_no, out_trade_no: trade.out_trade_no });
  });
  if (notified) ctx.wakeNotifier();
  return result;
}

/**
 * Closes a WAIT_BUYER_PAY trade under its lock and schedules its TRADE_CLOSED notification to the
 * trade's notify_url in the same transaction. Alipay lists TRADE_CLOSED among the trade_status_sync
 * triggers ("未付款交易超时关闭，或支付完成后全额退款"); [unverified] whether a close the merchant asked for
 * is notified too — the sandbox notifies it, the nearest documented behaviour, so receivers are
 * tested against a non-success notification. True when a notification was scheduled.
 */
async function closeOpenTrade(tx: Tx, app: AppRow, trade: TradeRow): Promise<boolean> {
  const closed = await tx<TradeRow[]>`
    UPDATE psp_sandbox.alipay_trades SET status = 'TRADE_CLOSED', gmt_close = now()
     WHERE app_id = ${app.app_id} AND out_trade_no = ${trade.out_trade_no} AND status = 'WAIT_BUYER_PAY'
    RETURNING app_id, out_trade_no, trade_no, subject, total_amount_fen, status, buyer_id, buyer_logon_id,
              notify_url, gmt_create, gmt_payment, gmt_close`;
  const row = closed[0];
  if (!row) throw new Error('trade left WAIT_BUYER_PAY under its lock');
  if (!row.notify_url) return false;
  const notifyId = newNotifyId();
  await enqueueNotification(tx, {
    gateway: 'alipay',
    merchantId: app.app_id,
    outTradeNo: row.out_trade_no,
    notifyId,
    notifyUrl: row.notify_url,
    fields: notificationFields(app, row, notifyId),
  });
  return true;
}

// ---------------------------------------------------------------------------------------------
// alipay.trade.cancel (撤销)

/**
 * Orders cancelled before Alipay ever had a trade for them. alipay.trade.cancel exists for barcode
 * payments whose outcome is unknown, including "the pay request may still be on its way": cancelling
 * an out_trade_no that has no trade yet must stop a late trade.pay from creating (and charging) it.
 * The trades table needs an amount and a subject that such an order never had, so the block lives
 * in its own table. [unverified] Alipay does not document what trade.query says afterwards; the
 * sandbox keeps answering ACQ.TRADE_NOT_EXIST (no trade was ever created) while trade.pay and
 * trade.create answer ACQ.TRADE_HAS_CLOSE.
 */
const CANCELLED_ORDERS_SQL = `
CREATE TABLE IF NOT EXISTS psp_sandbox.alipay_cancelled_orders (
  app_id        text NOT NULL REFERENCES psp_sandbox.alipay_apps (app_id),
  out_trade_no  text NOT NULL,
  cancelled_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (app_id, out_trade_no)
);
`;

async function isCancelledOrder(tx: Tx, appId: string, outTradeNo: string): Promise<boolean> {
  const rows = await tx<{ one: number }[]>`
    SELECT 1 AS one FROM psp_sandbox.alipay_cancelled_orders WHERE app_id = ${appId} AND out_trade_no = ${outTradeNo}`;
  return rows.length > 0;
}

/**
 * Alipay names a refund by its trade and the merchant's out_request_no; it has no refund id of its
 * own on the wire. The ledger's gatewayRefundId (and the adapter's) is that pair, written `trade_no:out_request_no`.
 */
function gatewayRefundIdOf(tradeNo: string, outRequestNo: string): string {
  return `${tradeNo}:${outRequestNo}`;
}

/** Alipay's gmt_refund in notifications carries milliseconds: `yyyy-MM-dd HH:mm:ss.SSS`. */
function beijingTimeMillis(date: Date): string {
  return `${beijingTime(date)}.${String(date.getMilliseconds()).padStart(3, '0')}`;
}

/**
 * The notification a refund triggers. Alipay sends it to the notify_url of the payment (trade.refund
 * takes none) as an ordinary trade_status_sync: TRADE_SUCCESS after a partial refund, TRADE_CLOSED
 * after the last one, plus refund_fee (the trade's total refunded so far), out_biz_no (the refund's
 * out_request_no) and gmt_refund, which is how a receiver tells it from the payment's notification.
 * [unverified] for face-to-face specifically: Alipay documents this for products whose notify
 * triggers include TRADE_CLOSED (its FAQ on refunds); the sandbox sends it for every refunded trade
 * that has a notify_url, the documented behaviour nearest to ours.
 */
function refundNotificationFields(
  app: AppRow,
  trade: TradeRow,
  refund: { outRequestNo: string; refundedTotalFen: bigint; at: Date },
  notifyId: string,
): Record<string, string> {
  // Built as the paid trade's notification (amounts received), then given the refund's fields.
  const fields = notificationFields(app, { ...trade, status: 'TRADE_SUCCESS' }, notifyId);
  fields.trade_status = trade.status;
  fields.refund_fee = formatFen(refund.refundedTotalFen);
  fields.out_biz_no = refund.outRequestNo;
  fields.gmt_refund = beijingTimeMillis(refund.at);
  if (trade.status === 'TRADE_CLOSED') fields.gmt_close = beijingTime(refund.at);
  return fields;
}

/**
 * Refunds `fen` of a paid trade under its lock, after the caller checked the refundable balance:
 * records the refund (the ledger's ground truth), closes the trade when nothing is left (as Alipay
 * does after a full refund) and schedules the refund notification in the same transaction.
 */
async function refundPaidTrade(
  tx: Tx,
  app: AppRow,
  trade: TradeRow,
  outRequestNo: string,
  fen: bigint,
  refundedBeforeFen: bigint,
): Promise<{ refundedTotalFen: bigint; at: Date; trade: TradeRow; notified: boolean }> {
  const { refund } = await recordRefund(tx, {
    gateway: 'alipay',
    merchantId: app.app_id,
    outTradeNo: trade.out_trade_no,
    gatewayTradeNo: trade.trade_no,
    refundId: outRequestNo,
    gatewayRefundId: gatewayRefundIdOf(trade.trade_no, outRequestNo),
    amountMinor: fen,
    currency: 'CNY',
    // Alipay's trade.refund is synchronous: fund_change "Y" means the money has moved.
    status: 'succeeded',
  });
  const refundedTotalFen = refundedBeforeFen + fen;
  let after = trade;
  if (refundedTotalFen === BigInt(trade.total_amount_fen)) {
    await tx`
      UPDATE psp_sandbox.alipay_trades SET status = 'TRADE_CLOSED', gmt_close = now()
       WHERE app_id = ${app.app_id} AND out_trade_no = ${trade.out_trade_no}`;
    after = { ...trade, status: 'TRADE_CLOSED' };
  }
  let notified = false;
  if (after.notify_url) {
    const notifyId = newNotifyId();
    await enqueueNotification(tx, {
      gateway: 'alipay',
      merchantId: app.app_id,
      outTradeNo: trade.out_trade_no,
      notifyId,
      notifyUrl: after.notify_url,
      fields: refundNotificationFields(app, after, { outRequestNo, refundedTotalFen, at: refund.createdAt }, notifyId),
    });
    notified = true;
  }
  return { refundedTotalFen, at: refund.createdAt, trade: after, notified };
}

/**
 * alipay.trade.cancel: for a barcode payment whose outcome is unknown. Alipay's rule: an unpaid trade
 * is closed (action "close"), a paid one is refunded in full (action "refund") — so a merchant must
 * never cancel a trade it knows to be paid. An out_trade_no with no trade yet is blocked so that a
 * late trade.pay cannot create it. retry_flag "N": the answer is final.
 * [unverified] cancel of a closed trade: answered as success again (the action it ended with), which
 * keeps cancelling idempotent; cancel of a paid trade with partial refunds: ACQ.TRADE_STATUS_ERROR.
 */
async function tradeCancel(ctx: AlipayContext, app: AppRow, _params: Map<string, string>, biz: Biz): Promise<Inner> {
  const read = readTradeRef(biz);
  if ('code' in read) return read;
  const ref = read as { outTradeNo?: string; tradeNo?: string };
  if (ref.outTradeNo !== undefined && !OUT_TRADE_NO_RE.test(ref.outTradeNo)) {
    return invalidParameter('out_trade_no 只能包含字母、数字、下划线，且不超过 64 位');
  }
  let notified = false;
  const result = await ctx.sql.begin(async (tx): Promise<Inner> => {
    const found = await selectTrade(tx, app.app_id, ref);
    const outTradeNo = found?.out_trade_no ?? ref.outTradeNo;
    const notExist = businessFailure('ACQ.TRADE_NOT_EXIST', SUB_MSG['ACQ.TRADE_NOT_EXIST'], { retry_flag: 'N' });
    // Only a trade_no, and it names nothing: there is no order number to block.
    if (outTradeNo === undefined) return notExist;
    await lockTrade(tx, app.app_id, outTradeNo);
    const trade = await selectTrade(tx, app.app_id, found ? { outTradeNo } : ref);
    if (!trade) {
      // A trade_no that matches no trade, or an out_trade_no whose trade has another trade_no.
      if (ref.tradeNo !== undefined || (await selectTrade(tx, app.app_id, { outTradeNo }))) return notExist;
      await tx`
        INSERT INTO psp_sandbox.alipay_cancelled_orders (app_id, out_trade_no) VALUES (${app.app_id}, ${outTradeNo})
        ON CONFLICT DO NOTHING`;
      return success({ out_trade_no: outTradeNo, retry_flag: 'N', action: 'close' });
    }
    const done = { trade_no: trade.trade_no, out_trade_no: trade.out_trade_no, retry_flag: 'N' };
    switch (trade.status) {
      case 'WAIT_BUYER_PAY':
        notified = await closeOpenTrade(tx, app, trade);
        return success({ ...done, action: 'close' });
      case 'TRADE_CLOSED': {
        const cancelRefund = await findRefund(tx, 'alipay', app.app_id, trade.out_trade_no);
        return success({ ...done, action: cancelRefund?.outTradeNo === trade.out_trade_no ? 'refund' : 'close' });
      }
      case 'TRADE_FINISHED':
        return businessFailure('ACQ.TRADE_HAS_FINISHED', SUB_MSG['ACQ.TRADE_HAS_FINISHED'], { retry_flag: 'N' });
      case 'TRADE_SUCCESS': {
        const refundedBefore = await refundedMinor(tx, 'alipay', app.app_id, trade.trade_no);
        if (refundedBefore > 0n) {
          return businessFailure('ACQ.TRADE_STATUS_ERROR', SUB_MSG['ACQ.TRADE_STATUS_ERROR'], { retry_flag: 'N' });
        }
        // A refund without out_request_no is named by the out_trade_no, as Alipay's refund query says.
        const refunded = await refundPaidTrade(tx, app, trade, trade.out_trade_no, BigInt(trade.total_amount_fen), 0n);
        notified = refunded.notified;
        return success({ ...done, action: 'refund', gmt_refund_pay: beijingTime(refunded.at) });
      }
      default:
        throw new Error(`unknown trade status ${String(trade.status)}`);
    }
  });
  if (notified) ctx.wakeNotifier();
  return result;
}

// ---------------------------------------------------------------------------------------------
// alipay.trade.refund, alipay.trade.fastpay.refund.query

/**
 * alipay.trade.refund. Alipay's rules, in the order it applies them:
 *  - the refund is named by out_request_no (unique per trade; when absent, by the out_trade_no, and
 *    the amount must then be the whole trade: ACQ.REFUND_AMT_NOT_EQUAL_TOTAL);
 *  - the same out_request_no again is the same refund answered again with fund_change "N" (no money
 *    moved this time), even once the trade is closed by it; with another amount or on another trade
 *    it is ACQ.DISCORDANT_REPEAT_REQUEST;
 *  - only a paid trade refunds: WAIT_BUYER_PAY and TRADE_CLOSED are ACQ.TRADE_STATUS_ERROR,
 *    TRADE_FINISHED (past the refund period) ACQ.TRADE_HAS_FINISHED, an unknown one ACQ.TRADE_NOT_EXIST;
 *  - more than is left to refund is ACQ.REASON_TRADE_REFUND_FEE_ERR (what Alipay answers when an
 *    out_request_no is given; ACQ.REFUND_AMT_NOT_EQUAL_TOTAL is its answer without one);
 *  - the last refund closes the trade (TRADE_CLOSED), and trade.query says so from then on.
 * refund_fee in the answer is the trade's total refunded so far, not this refund's amount.
 * The sandbox stores refunds per merchant (psp_sandbox.refunds), so an out_request_no reused on
 * another trade is refused as a discordant repeat rather than refunded again [sandbox limitation].
 */
async function tradeRefund(ctx: AlipayContext, app: AppRow, _params: Map<string, string>, biz: Biz): Promise<Inner> {
  const ref = readTradeRef(biz);
  if ('code' in ref) return ref;
  const fen = readAmount(biz, 'refund_amount');
  if (typeof fen !== 'bigint') return fen;
  const outRequestNo = optionalString(biz, 'out_request_no');
  if (isInner(outRequestNo)) return outRequestNo;
  if (outRequestNo !== undefined && [...outRequestNo].length > 64) return invalidParameter('out_request_no 超过 64 位');
  const reason = optionalString(biz, 'refund_reason');
  if (isInner(reason)) return reason;
  if (reason !== undefined && [...reason].length > 256) return invalidParameter('refund_reason 超过 256 个字符');

  let notified = false;
  const result = await ctx.sql.begin(async (tx): Promise<Inner> => {
    const notExist = businessFailure('ACQ.TRADE_NOT_EXIST', SUB_MSG['ACQ.TRADE_NOT_EXIST'], { refund_fee: '0.00' });
    const found = await selectTrade(tx, app.app_id, ref);
    if (!found) return notExist;
    await lockTrade(tx, app.app_id, found.out_trade_no);
    // Re-read under the lock: a payment or another refund may have committed in between.
    const trade = await selectTrade(tx, app.app_id, { outTradeNo: found.out_trade_no });
    if (!trade) return notExist;
    const refundId = outRequestNo ?? trade.out_trade_no;
    const refusal = (subCode: keyof typeof SUB_MSG, refundedFen = 0n) =>
      businessFailure(subCode, SUB_MSG[subCode], { out_trade_no: trade.out_trade_no, refund_fee: formatFen(refundedFen) });
    const answer = (refundedTotalFen: bigint, at: Date, fundChange: 'Y' | 'N') =>
      success({
        trade_no: trade.trade_no,
        out_trade_no: trade.out_trade_no,
        ...(trade.buyer_logon_id ? { buyer_logon_id: trade.buyer_logon_id } : {}),
        ...(trade.buyer_id ? { buyer_user_id: trade.buyer_id } : {}),
        fund_change: fundChange,
        refund_fee: formatFen(refundedTotalFen),
        gmt_refund_pay: beijingTime(at),
      });

    const refundedBefore = await refundedMinor(tx, 'alipay', app.app_id, trade.trade_no);
    const existing = await findRefund(tx, 'alipay', app.app_id, refundId);
    if (existing) {
      if (existing.outTradeNo !== trade.out_trade_no || existing.amountMinor !== fen) {
        return refusal('ACQ.DISCORDANT_REPEAT_REQUEST', refundedBefore);
      }
      return answer(refundedBefore, existing.createdAt, 'N');
    }
    if (trade.status === 'TRADE_FINISHED') return refusal('ACQ.TRADE_HAS_FINISHED', refundedBefore);
    if (trade.status !== 'TRADE_SUCCESS') return refusal('ACQ.TRADE_STATUS_ERROR', refundedBefore);
    const total = BigInt(trade.total_amount_fen);
    if (outRequestNo === undefined && fen !== total) return refusal('ACQ.REFUND_AMT_NOT_EQUAL_TOTAL', refundedBefore);
    if (refundedBefore + fen > total) return refusal('ACQ.REASON_TRADE_REFUND_FEE_ERR', refundedBefore);

    const refunded = await refundPaidTrade(tx, app, trade, refundId, fen, refundedBefore);
    notified = refunded.notified;
    return answer(refunded.refundedTotalFen, refunded.at, 'Y');
  });
  if (notified) ctx.wakeNotifier();
  return result;
}

/**
 * alipay.trade.fastpay.refund.query. Alipay: "code 10000 only means the query ran; if it returns the
 * refund's data, the refund succeeded; if not, it did not — retry the refund with the same
 * out_request_no". So an unknown out_request_no is 10000 with no refund fields, and a known one
 * carries refund_amount and refund_status REFUND_SUCCESS. An unknown trade is ACQ.TRADE_NOT_EXIST.
 */
async function tradeRefundQuery(ctx: AlipayContext, app: AppRow, _params: Map<string, string>, biz: Biz): Promise<Inner> {
  const ref = readTradeRef(biz);
  if ('code' in ref) return ref;
  const outRequestNo = requiredString(biz, 'out_request_no');
  if (typeof outRequestNo !== 'string') return outRequestNo;
  const options = Array.isArray(biz.query_options) ? biz.query_options : [];
  const trade = await selectTrade(ctx.sql, app.app_id, ref);
  if (!trade) return businessFailure('ACQ.TRADE_NOT_EXIST', SUB_MSG['ACQ.TRADE_NOT_EXIST']);
  const refund = await findRefund(ctx.sql, 'alipay', app.app_id, outRequestNo);
  if (!refund || refund.outTradeNo !== trade.out_trade_no || refund.status !== 'succeeded') return success({});
  return success({
    trade_no: trade.trade_no,
    out_trade_no: trade.out_trade_no,
    out_request_no: outRequestNo,
    total_amount: formatFen(BigInt(trade.total_amount_fen)),
    refund_amount: formatFen(refund.amountMinor),
    refund_status: 'REFUND_SUCCESS',
    ...(options.includes('gmt_refund_pay') ? { gmt_refund_pay: beijingTime(refund.createdAt) } : {}),
  });
}

// ---------------------------------------------------------------------------------------------
// alipay.trade.precreate (当面付 扫码支付) and the buyer's scan page

/**
 * A precreated order: what the QR code will open once scanned. Alipay documents that precreate
 * creates no trade ("预下单并没有创建订单 … 当用户扫码后订单才会创建"): until the buyer scans, trade.query,
 * trade.close and trade.refund answer ACQ.TRADE_NOT_EXIST. So the order waits here, apart from the
 * trades, and becomes a WAIT_BUYER_PAY trade on the first scan. alipay.trade.cancel blocks the
 * out_trade_no (alipay_cancelled_orders), after which the code opens nothing.
 */
const PRECREATES_SQL = `
CREATE TABLE IF NOT EXISTS psp_sandbox.alipay_precreates (
  app_id            text NOT NULL REFERENCES psp_sandbox.alipay_apps (app_id),
  out_trade_no      text NOT NULL,
  qr_token          text NOT NULL UNIQUE,
  subject           text NOT NULL,
  total_amount_fen  bigint NOT NULL CHECK (total_amount_fen > 0),
  notify_url        text,
  created_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (app_id, out_trade_no)
);
`;

interface PrecreateRow {
  app_id: string;
  out_trade_no: string;
  qr_token: string;
  subject: string;
  total_amount_fen: string;
  notify_url: string | null;
}

/** The sandbox's qr_code: the scan page's address (Alipay's is https://qr.alipay.com/bax…). */
function qrCodeUrl(baseUrl: string, token: string): string {
  return `${baseUrl}/sandbox/alipay/qr/${token}`;
}

/**
 * alipay.trade.precreate. The same out_trade_no again follows the trade rules (shared/gateways.md):
 * identical parameters answer the same qr_code (before and after the scan: the trade is kept),
 * another amount or subject is ACQ.CONTEXT_INCONSISTENT, a paid trade ACQ.TRADE_HAS_SUCCESS, a closed
 * (or cancelled) one ACQ.TRADE_HAS_CLOSE. [unverified] Alipay may issue a fresh code for a repeat;
 * answering the same one is what makes a retried charge give the page the same QR code.
 */
async function tradePrecreate(ctx: AlipayContext, app: AppRow, params: Map<string, string>, biz: Biz, env: RequestEnv): Promise<Inner> {
  const outTradeNo = readOutTradeNo(biz, true);
  if (typeof outTradeNo !== 'string') return outTradeNo ?? invalidParameter('缺少 out_trade_no');
  const fen = readAmount(biz);
  if (typeof fen !== 'bigint') return fen;
  const subject = readSubject(biz);
  if (typeof subject !== 'string') return subject;
  const notifyUrl = params.get('notify_url') || null;

  return ctx.sql.begin(async (tx): Promise<Inner> => {
    await lockTrade(tx, app.app_id, outTradeNo);
    const trade = await selectTrade(tx, app.app_id, { outTradeNo });
    const refuse = (subCode: keyof typeof SUB_MSG) => businessFailure(subCode, SUB_MSG[subCode], { out_trade_no: outTradeNo });
    if (!trade && (await isCancelledOrder(tx, app.app_id, outTradeNo))) return refuse('ACQ.TRADE_HAS_CLOSE');
    if (trade) {
      const refusal = repeatedTradeError(trade, fen, subject);
      if (refusal) return { ...refusal, out_trade_no: outTradeNo };
      if (notifyUrl) {
        await tx`UPDATE psp_sandbox.alipay_trades SET notify_url = ${notifyUrl}
                  WHERE app_id = ${app.app_id} AND out_trade_no = ${outTradeNo}`;
      }
    }
    const existing = (
      await tx<PrecreateRow[]>`
        SELECT app_id, out_trade_no, qr_token, subject, total_amount_fen, notify_url
          FROM psp_sandbox.alipay_precreates WHERE app_id = ${app.app_id} AND out_trade_no = ${outTradeNo}`
    )[0];
    if (existing && (BigInt(existing.total_amount_fen) !== fen || existing.subject !== subject)) {
      return refuse('ACQ.CONTEXT_INCONSISTENT');
    }
    const rows = await tx<{ qr_token: string }[]>`
      INSERT INTO psp_sandbox.alipay_precreates (app_id, out_trade_no, qr_token, subject, total_amount_fen, notify_url)
      VALUES (${app.app_id}, ${outTradeNo}, ${randomBytes(16).toString('hex')}, ${subject}, ${fen.toString()}, ${notifyUrl})
      ON CONFLICT (app_id, out_trade_no)
        DO UPDATE SET notify_url = COALESCE(EXCLUDED.notify_url, psp_sandbox.alipay_precreates.notify_url)
      RETURNING qr_token`;
    const token = rows[0]?.qr_token;
    if (!token) throw new Error('INSERT … RETURNING returned no row');
    return success({ out_trade_no: outTradeNo, qr_code: qrCodeUrl(env.baseUrl, token) });
  });
}

async function loadApp(db: Sql | Tx, appId: string): Promise<AppRow> {
  const apps = await db<AppRow[]>`
    SELECT app_id, seller_id, app_public_key_pem FROM psp_sandbox.alipay_apps WHERE app_id = ${appId}`;
  const app = apps[0];
  if (!app) throw new Error(`the sandbox merchant app ${appId} is missing`);
  return app;
}

/** Why a trade cannot be paid, in the words Alipay's pages and error codes use. */
type NotPayable = { subCode: 'ACQ.TRADE_NOT_EXIST' | 'ACQ.TRADE_HAS_SUCCESS' | 'ACQ.TRADE_HAS_CLOSE'; subMsg: string };

function notPayable(subCode: NotPayable['subCode']): NotPayable {
  return { subCode, subMsg: SUB_MSG[subCode] };
}

function payableOrNot(trade: TradeRow): TradeRow | NotPayable {
  if (isPaid(trade)) return notPayable('ACQ.TRADE_HAS_SUCCESS');
  if (trade.status === 'TRADE_CLOSED') return notPayable('ACQ.TRADE_HAS_CLOSE');
  return trade;
}

/**
 * The buyer scans a precreated order, under its lock: the first scan creates the trade
 * (WAIT_BUYER_PAY, the precreate's amount, subject and notify_url); later scans find it. A cancelled
 * order opens nothing.
 */
async function scanPrecreate(tx: Tx, precreate: PrecreateRow): Promise<TradeRow | NotPayable> {
  const existing = await selectTrade(tx, precreate.app_id, { outTradeNo: precreate.out_trade_no });
  if (existing) return payableOrNot(existing);
  if (await isCancelledOrder(tx, precreate.app_id, precreate.out_trade_no)) return notPayable('ACQ.TRADE_HAS_CLOSE');
  const inserted = await tx<TradeRow[]>`
    INSERT INTO psp_sandbox.alipay_trades
      (app_id, out_trade_no, trade_no, subject, total_amount_fen, status, notify_url)
    VALUES (${precreate.app_id}, ${precreate.out_trade_no}, ${newTradeNo()}, ${precreate.subject},
            ${precreate.total_amount_fen}, 'WAIT_BUYER_PAY', ${precreate.notify_url})
    RETURNING app_id, out_trade_no, trade_no, subject, total_amount_fen, status, buyer_id, buyer_logon_id,
              notify_url, gmt_create, gmt_payment`;
  const trade = inserted[0];
  if (!trade) throw new Error('INSERT … RETURNING returned no row');
  return trade;
}

function isNotPayable(value: TradeRow | NotPayable): value is NotPayable {
  return 'subCode' in value;
}

function tradeView(app: AppRow, trade: { subject: string; total_amount_fen: string; out_trade_no: string }): TradeView {
  return {
    merchant: `PayOnce 沙箱商户 (sandbox merchant ${app.app_id})`,
    subject: trade.subject,
    totalAmount: formatFen(BigInt(trade.total_amount_fen)),
    outTradeNo: trade.out_trade_no,
  };
}

const NOT_PAYABLE_TITLE: Record<NotPayable['subCode'], string> = {
  'ACQ.TRADE_NOT_EXIST': '交易不存在 (no such trade)',
  'ACQ.TRADE_HAS_SUCCESS': '交易已支付 (already paid)',
  'ACQ.TRADE_HAS_CLOSE': '交易已关闭 (trade closed)',
};

function notPayablePage(reason: NotPayable): SandboxResponse {
  return errorPage(409, NOT_PAYABLE_TITLE[reason.subCode], reason.subCode, reason.subMsg);
}

/** The test buyer a page's `buyer` field names, or undefined for anything else. */
function buyerNamed(name: string | null): TestBuyer | undefined {
  return Object.values(ALIPAY_TEST_BUYERS).find((buyer) => buyer.name === name);
}

/**
 * GET /sandbox/alipay/qr/<token> — what the Alipay app shows after scanning: the scan creates the
 * trade. POST (form field `buyer`) pays it: ok → TRADE_SUCCESS, the ledger charge and the
 * notification; a declining buyer sees the failure and the trade stays WAIT_BUYER_PAY. A paid,
 * closed or unknown code answers 409 with a page that says so.
 */
async function qrPage(ctx: AlipayContext, token: string, method: string, body: string): Promise<SandboxResponse> {
  if (method !== 'GET' && method !== 'POST')
    return errorPage(405, '不支持的请求 (method not allowed)', 'METHOD_NOT_ALLOWED', '请使用 GET 或 POST');
  const precreate = (
    await ctx.sql<PrecreateRow[]>`
      SELECT app_id, out_trade_no, qr_token, subject, total_amount_fen, notify_url
        FROM psp_sandbox.alipay_precreates WHERE qr_token = ${token}`
  )[0];
  if (!precreate) return notPayablePage(notPayable('ACQ.TRADE_NOT_EXIST'));
  const app = await loadApp(ctx.sql, precreate.app_id);
  const buyer = method === 'POST' ? buyerNamed(new URLSearchParams(body).get('buyer')) : undefined;
  if (method === 'POST' && !buyer)
    return errorPage(400, '参数错误 (bad request)', 'INVALID_BUYER', 'buyer 只能是 ok、insufficient_funds 或 account_restricted');
  const action = `/sandbox/alipay/qr/${token}`;
  let paid = false;
  const page = await ctx.sql.begin(async (tx): Promise<SandboxResponse> => {
    await lockTrade(tx, precreate.app_id, precreate.out_trade_no);
    const trade = await scanPrecreate(tx, precreate);
    if (isNotPayable(trade)) return notPayablePage(trade);
    const view = tradeView(app, trade);
    if (!buyer) return payPage({ title: '确认付款 (confirm payment)', trade: view, action });
    const attempt = await payOpenTrade(tx, app, trade, buyer);
    if (attempt.kind === 'declined') return payPage({ title: '确认付款 (confirm payment)', trade: view, action, failure: attempt });
    paid = true;
    return paidPage(view, attempt.trade.trade_no);
  });
  if (paid) ctx.wakeNotifier();
  return page;
}

// ---------------------------------------------------------------------------------------------
// alipay.trade.page.pay (电脑网站支付) and the cashier

/** page.pay's business parameters, checked as the gateway checks them before the cashier opens. */
function readPagePay(biz: Biz): { ok: true; outTradeNo: string; fen: bigint; subject: string } | { ok: false; refusal: Inner } {
  const refuse = (refusal: Inner) => ({ ok: false as const, refusal });
  const outTradeNo = readOutTradeNo(biz, true);
  if (typeof outTradeNo !== 'string') return refuse(outTradeNo ?? invalidParameter('缺少 out_trade_no'));
  const fen = readAmount(biz);
  if (typeof fen !== 'bigint') return refuse(fen);
  const subject = readSubject(biz);
  if (typeof subject !== 'string') return refuse(subject);
  const productCode = requiredString(biz, 'product_code');
  if (typeof productCode !== 'string') return refuse(productCode);
  if (productCode !== 'FAST_INSTANT_TRADE_PAY') return refuse(invalidParameter('product_code 只能是 FAST_INSTANT_TRADE_PAY'));
  return { ok: true, outTradeNo, fen, subject };
}

function gatewayErrorPage(inner: Inner): SandboxResponse {
  const subCode = typeof inner.sub_code === 'string' ? inner.sub_code : String(inner.code);
  const subMsg = typeof inner.sub_msg === 'string' ? inner.sub_msg : String(inner.msg);
  return errorPage(400, '支付宝 - 请求错误 (invalid request)', subCode, subMsg);
}

/**
 * The synchronous return (同步通知): the buyer's browser goes back to return_url with these
 * parameters, signed like a notification (all but sign and sign_type, sorted, RSA2 by the platform
 * key), so alipay-sdk's checkNotifySign verifies them. Alipay's sample: charset, out_trade_no,
 * method=alipay.trade.page.pay.return, total_amount, sign, trade_no, auth_app_id, version, app_id,
 * sign_type, seller_id, timestamp. return_url keeps its own query (Alipay advises against one; the
 * sandbox appends with `&` rather than break a merchant that has one) [unverified].
 */
function returnLocation(returnUrl: string, app: AppRow, trade: TradeRow, platformPrivateKeyPem: string, now: Date): string {
  const params = new Map<string, string>([
    ['charset', 'utf-8'],
    ['out_trade_no', trade.out_trade_no],
    ['method', 'alipay.trade.page.pay.return'],
    ['total_amount', formatFen(BigInt(trade.total_amount_fen))],
    ['trade_no', trade.trade_no],
    ['auth_app_id', app.app_id],
    ['version', '1.0'],
    ['app_id', app.app_id],
    ['seller_id', app.seller_id],
    ['timestamp', beijingTime(now)],
  ]);
  const sign = signRsa2(signContent(params, new Set(['sign', 'sign_type'])), platformPrivateKeyPem);
  params.set('sign_type', 'RSA2');
  params.set('sign', sign);
  const query = new URLSearchParams([...params.entries()]).toString();
  return `${returnUrl}${returnUrl.includes('?') ? '&' : '?'}${query}`;
}

/**
 * GET (or POST) /gateway.do?method=alipay.trade.page.pay — the buyer's browser arrives with the
 * merchant's signed request. The gateway checks it like any request (a bad signature is an error
 * page, HTTP 400, and creates nothing), creates or reopens the trade WAIT_BUYER_PAY under the trade
 * rules (a repeat: identical → the same trade; another amount → ACQ.CONTEXT_INCONSISTENT; paid →
 * ACQ.TRADE_HAS_SUCCESS; closed → ACQ.TRADE_HAS_CLOSE, as 409 pages), and shows the cashier.
 * [unverified] The timestamp window is not applied here: the buyer opens the link some time after the
 * merchant signed it, and Alipay bounds a page payment by its timeout_express, not the timestamp.
 */
async function pagePay(ctx: AlipayContext, params: Map<string, string>): Promise<SandboxResponse> {
  const checked = await authenticate(ctx, params, { knownMethod: true, checkClock: false });
  if ('refusal' in checked) return gatewayErrorPage(checked.refusal);
  const { app, biz } = checked;
  const read = readPagePay(biz);
  if (!read.ok) return gatewayErrorPage(read.refusal);
  const { outTradeNo, fen, subject } = read;
  const notifyUrl = params.get('notify_url') || null;
  return ctx.sql.begin(async (tx): Promise<SandboxResponse> => {
    await lockTrade(tx, app.app_id, outTradeNo);
    let trade = await selectTrade(tx, app.app_id, { outTradeNo });
    if (!trade && (await isCancelledOrder(tx, app.app_id, outTradeNo))) return notPayablePage(notPayable('ACQ.TRADE_HAS_CLOSE'));
    if (trade) {
      const refusal = repeatedTradeError(trade, fen, subject);
      if (refusal) return errorPage(409, '无法付款 (cannot pay)', String(refusal.sub_code), String(refusal.sub_msg));
      if (notifyUrl) {
        await tx`UPDATE psp_sandbox.alipay_trades SET notify_url = ${notifyUrl}
                  WHERE app_id = ${app.app_id} AND out_trade_no = ${outTradeNo}`;
      }
    } else {
      const inserted = await tx<TradeRow[]>`
        INSERT INTO psp_sandbox.alipay_trades
          (app_id, out_trade_no, trade_no, subject, total_amount_fen, status, notify_url)
        VALUES (${app.app_id}, ${outTradeNo}, ${newTradeNo()}, ${subject}, ${fen.toString()}, 'WAIT_BUYER_PAY', ${notifyUrl})
        RETURNING app_id, out_trade_no, trade_no, subject, total_amount_fen, status, buyer_id, buyer_logon_id,
                  notify_url, gmt_create, gmt_payment`;
      trade = inserted[0];
      if (!trade) throw new Error('INSERT … RETURNING returned no row');
    }
    return cashierPage(app, trade, params);
  });
}

/**
 * The cashier posts the merchant's signed request back with the buyer's choice, so paying needs no
 * server-side session: POST /sandbox/alipay/cashier re-checks the same request the GET checked.
 */
function cashierPage(
  app: AppRow,
  trade: TradeRow,
  params: Map<string, string>,
  failure?: { subCode: string; subMsg: string },
): SandboxResponse {
  const request = new URLSearchParams([...params.entries()]).toString();
  return payPage({
    title: '支付宝收银台 (Alipay cashier)',
    trade: tradeView(app, trade),
    action: '/sandbox/alipay/cashier',
    hidden: { request },
    ...(failure ? { failure } : {}),
  });
}

/**
 * POST /sandbox/alipay/cashier (form: request, buyer) — the buyer pays on the cashier page. Paid →
 * TRADE_SUCCESS, the notification, then 302 to return_url with the signed synchronous return (or a
 * "paid" page without return_url); a decline shows the cashier again with the message and leaves the
 * trade open; a trade that is no longer payable answers 409.
 */
async function cashierPay(ctx: AlipayContext, method: string, body: string): Promise<SandboxResponse> {
  if (method !== 'POST') return errorPage(405, '不支持的请求 (method not allowed)', 'METHOD_NOT_ALLOWED', '请使用 POST');
  const form = new URLSearchParams(body);
  const buyer = buyerNamed(form.get('buyer'));
  if (!buyer) return errorPage(400, '参数错误 (bad request)', 'INVALID_BUYER', 'buyer 只能是 ok、insufficient_funds 或 account_restricted');
  const params = new Map<string, string>();
  for (const [key, value] of new URLSearchParams(form.get('request') ?? '')) if (!params.has(key)) params.set(key, value);
  if (params.get('method') !== 'alipay.trade.page.pay')
    return gatewayErrorPage(failure('40002', 'isv.invalid-method', '不是电脑网站支付请求'));
  const checked = await authenticate(ctx, params, { knownMethod: true, checkClock: false });
  if ('refusal' in checked) return gatewayErrorPage(checked.refusal);
  const { app, biz } = checked;
  const read = readPagePay(biz);
  if (!read.ok) return gatewayErrorPage(read.refusal);
  let paid = false;
  const page = await ctx.sql.begin(async (tx): Promise<SandboxResponse> => {
    await lockTrade(tx, app.app_id, read.outTradeNo);
    const found = await selectTrade(tx, app.app_id, { outTradeNo: read.outTradeNo });
    if (!found) return notPayablePage(notPayable('ACQ.TRADE_NOT_EXIST'));
    const trade = payableOrNot(found);
    if (isNotPayable(trade)) return notPayablePage(trade);
    const refusal = repeatedTradeError(trade, read.fen, read.subject);
    if (refusal) return errorPage(409, '无法付款 (cannot pay)', String(refusal.sub_code), String(refusal.sub_msg));
    const attempt = await payOpenTrade(tx, app, trade, buyer);
    if (attempt.kind === 'declined') return cashierPage(app, trade, params, attempt);
    paid = true;
    const returnUrl = params.get('return_url');
    if (!returnUrl) return paidPage(tradeView(app, attempt.trade), attempt.trade.trade_no);
    return redirect(returnLocation(returnUrl, app, attempt.trade, ctx.identity.platformPrivateKeyPem, new Date()));
  });
  if (paid) ctx.wakeNotifier();
  return page;
}

// ---------------------------------------------------------------------------------------------
// POST /sandbox/alipay/buyer-pays — the buyer completes an open trade

/**
 * The buyer pays an open trade now, exactly as if they had confirmed it in the Alipay app: a charge
 * in the ledger and, when paid, the trade's usual TRADE_SUCCESS notification. A declined buyer leaves
 * the trade WAIT_BUYER_PAY, as Alipay does. Closed, paid or unknown trades are not payable.
 * gatewayTradeNo is the trade's trade_no either way (the ledger's declined charge carries it too).
 */
export async function buyerPays(
  ctx: AlipayContext,
  request: { outTradeNo: string; buyer: TestBuyerName },
): Promise<{ status: 'succeeded' | 'declined'; gatewayTradeNo: string }> {
  const apps = await ctx.sql<AppRow[]>`
    SELECT app_id, seller_id, app_public_key_pem FROM psp_sandbox.alipay_apps WHERE app_id = ${ctx.identity.appId}`;
  const app = apps[0];
  if (!app) throw new Error('the sandbox merchant app is missing');
  const authCode = alipayTestBuyerAuthCodes()[request.buyer];
  const outcome = await ctx.sql.begin(async (tx) => {
    await lockTrade(tx, app.app_id, request.outTradeNo);
    let trade = await selectTrade(tx, app.app_id, { outTradeNo: request.outTradeNo });
    if (!trade) {
      // A precreated order nobody scanned yet: the tool scans it first, as the buyer's app would.
      const precreate = (
        await tx<PrecreateRow[]>`
          SELECT app_id, out_trade_no, qr_token, subject, total_amount_fen, notify_url
            FROM psp_sandbox.alipay_precreates WHERE app_id = ${app.app_id} AND out_trade_no = ${request.outTradeNo}`
      )[0];
      const scanned = precreate ? await scanPrecreate(tx, precreate) : undefined;
      if (scanned && !isNotPayable(scanned)) trade = scanned;
    }
    if (!trade) throw new ToolError(409, 'TRADE_NOT_PAYABLE', `no Alipay trade with out_trade_no ${request.outTradeNo}`);
    if (trade.status !== 'WAIT_BUYER_PAY') {
      throw new ToolError(409, 'TRADE_NOT_PAYABLE', `trade ${request.outTradeNo} is ${trade.status}`);
    }
    const attempt = await payOpenTrade(tx, app, trade, ALIPAY_TEST_BUYERS[authCode]);
    return { status: attempt.kind === 'paid' ? ('succeeded' as const) : ('declined' as const), gatewayTradeNo: trade.trade_no };
  });
  if (outcome.status === 'succeeded') ctx.wakeNotifier();
  return outcome;
}

// ---------------------------------------------------------------------------------------------
// POST /sandbox/alipay/notify — the sandbox's "notification tool"

export class ToolError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Sends `copies` deliveries of one trade's notification at once, for testing a receiver's dedupe and
 * checks. Overrides are applied before signing, so a tampered amount still carries a valid signature
 * (the receiver's amount check, not its signature check, must catch it). Like Alipay's own tool, it
 * does not touch the trade's retry schedule; every delivery still goes into the ledger.
 */
export async function sendToolNotifications(
  ctx: AlipayContext,
  request: { outTradeNo: string; copies: number; overrides: Record<string, string> },
): Promise<DeliveryResult[]> {
  const trades = await ctx.sql<(TradeRow & AppRow)[]>`
    SELECT t.app_id, t.out_trade_no, t.trade_no, t.subject, t.total_amount_fen, t.status, t.buyer_id,
           t.buyer_logon_id, t.notify_url, t.gmt_create, t.gmt_payment, a.seller_id, a.app_public_key_pem
      FROM psp_sandbox.alipay_trades t JOIN psp_sandbox.alipay_apps a USING (app_id)
     WHERE t.out_trade_no = ${request.outTradeNo}
     ORDER BY (t.app_id = ${ctx.identity.appId}) DESC, t.gmt_create DESC
     LIMIT 1`;
  const trade = trades[0];
  if (!trade) throw new ToolError(404, 'TRADE_NOT_FOUND', `no Alipay trade with out_trade_no ${request.outTradeNo}`);
  if (!trade.notify_url) {
    throw new ToolError(409, 'NO_NOTIFY_URL', `trade ${request.outTradeNo} was created without a notify_url`);
  }
  // The trade's payment notification (a refund's carries out_biz_no): the tool re-sends payments.
  const scheduledRows = await ctx.sql<{ id: string; notify_id: string }[]>`
    SELECT id, notify_id FROM psp_sandbox.notifications
     WHERE gateway = 'alipay' AND merchant_id = ${trade.app_id} AND out_trade_no = ${trade.out_trade_no}
       AND NOT (fields ? 'out_biz_no')
     ORDER BY id DESC LIMIT 1`;
  const scheduledRow = scheduledRows[0];
  const scheduled: Pick<NotificationRow, 'id' | 'notifyId'> | undefined = scheduledRow
    ? { id: scheduledRow.id, notifyId: scheduledRow.notify_id }
    : undefined;
  // Same notify_id as the trade's scheduled notification: the copies are that notification again.
  const notifyId = scheduled?.notifyId ?? newNotifyId();
  const fields = notificationFields(trade, trade, notifyId);
  const notifyUrl = trade.notify_url;

  return Promise.all(
    Array.from({ length: request.copies }, async () => {
      const startedAt = new Date();
      const delivery = buildAlipayNotification(fields, ctx.identity.platformPrivateKeyPem, startedAt, request.overrides);
      const result = await postNotification(notifyUrl, delivery, ctx.deliveryTimeoutMs, startedAt, isAlipayAck);
      await insertAttempt(ctx.sql, { id: scheduled?.id ?? null, gateway: 'alipay', outTradeNo: trade.out_trade_no }, 'tool', result);
      return result;
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// The module: Alipay's paths on the sandbox's one port

const notifyToolBody = z.object({
  outTradeNo: z.string().min(1).max(64),
  copies: z.number().int().min(1).max(100).default(1),
  overrides: z.record(z.string(), z.string()).default({}),
});

export const alipayModule: SandboxGatewayModule = {
  gateway: 'alipay',
  // Alipay's trade tables are part of the shared schema (store.ts), which predates the module split;
  // only what came after it lives here.
  schemaSql: CANCELLED_ORDERS_SQL + PRECREATES_SQL,
  async setUp(tx, moduleContext) {
    const identity = await loadOrCreateAlipayIdentity(tx);
    const ctx: AlipayContext = {
      sql: moduleContext.sql,
      identity,
      wakeNotifier: moduleContext.wakeNotifier,
      deliveryTimeoutMs: moduleContext.deliveryTimeoutMs,
    };
    return {
      notifier: alipayNotifier(identity.platformPrivateKeyPem),
      // Alipay's own failure: HTTP 200 with a signed 20000 "Service Currently Unavailable"
      // (isp.unknow-error) under the method's response key — the SDK returns it, it does not throw.
      systemError: (request) => {
        const method = request.url.searchParams.get('method') ?? new URLSearchParams(request.body).get('method') ?? '';
        const responseKey = METHOD_RE.test(method) ? `${method.replaceAll('.', '_')}_response` : 'error_response';
        const answer = signedResponse(responseKey, failure('20000', 'isp.unknow-error', '服务暂不可用'), identity.platformPrivateKeyPem);
        return { status: answer.status, headers: { 'content-type': answer.contentType }, body: answer.body };
      },
      credentials: (baseUrl) => ({
        appId: identity.appId,
        appPrivateKey: identity.appPrivateKeyPem,
        alipayPublicKey: identity.platformPublicKeyPem,
        gateway: `${baseUrl}/gateway.do`,
        testBuyers: alipayTestBuyerAuthCodes(),
        // Not a test buyer of the checkout's: a barcode whose payment waits for the buyer (10003).
        userPayingAuthCode: ALIPAY_USERPAYING_AUTH_CODE,
        // The fees this merchant's statements show, for 对账 to check them against (statements.ts).
        feeContract: feeContract('alipay'),
      }),
      async handle(request) {
        const path = request.url.pathname;
        const qr = /^\/sandbox\/alipay\/qr\/([0-9a-f]{32})$/.exec(path);
        if (qr?.[1]) return qrPage(ctx, qr[1], request.method, request.body);
        if (path.startsWith('/sandbox/alipay/qr/')) return notPayablePage(notPayable('ACQ.TRADE_NOT_EXIST'));
        if (path === '/sandbox/alipay/cashier') return cashierPay(ctx, request.method, request.body);
        if (path === ALIPAY_BILL_PATH) return alipayBillDownload(ctx.sql, request, identity.platformPrivateKeyPem);
        if (path === '/gateway.do' && request.url.searchParams.get('method') === 'alipay.trade.page.pay') {
          // A page interface: the buyer's browser gets HTML (the cashier), not a signed JSON answer.
          const params = gatewayParams(request.url, request.method === 'POST' ? request.body : '', request.headers['content-type']);
          return pagePay(ctx, params);
        }
        if (path === '/gateway.do') {
          if (request.method !== 'POST' && request.method !== 'GET') {
            return json(405, { error: { code: 'METHOD_NOT_ALLOWED', message: 'use POST' } });
          }
          const answer = await handleGateway(
            ctx,
            gatewayParams(request.url, request.method === 'POST' ? request.body : '', request.headers['content-type']),
            request.baseUrl,
          );
          return { status: answer.status, headers: { 'content-type': answer.contentType }, body: answer.body };
        }
        if (path === '/sandbox/alipay/buyer-pays') {
          const read = readBuyerPays(request);
          if ('answer' in read) return read.answer;
          try {
            const paid = await buyerPays(ctx, read.input);
            return json(200, { gateway: 'alipay', outTradeNo: read.input.outTradeNo, ...paid });
          } catch (error) {
            if (error instanceof ToolError) return json(error.status, { code: error.code, message: error.message });
            throw error;
          }
        }
        if (path === '/sandbox/alipay/notify') {
          if (request.method !== 'POST') return json(405, { error: { code: 'METHOD_NOT_ALLOWED', message: 'use POST' } });
          if (!(request.headers['content-type'] ?? '').toLowerCase().includes('application/json')) {
            return json(415, { error: { code: 'UNSUPPORTED_MEDIA_TYPE', message: 'send application/json' } });
          }
          let body: unknown;
          try {
            body = JSON.parse(request.body);
          } catch {
            return json(400, { error: { code: 'INVALID_JSON', message: 'the body is not valid JSON' } });
          }
          const parsed = notifyToolBody.safeParse(body);
          if (!parsed.success) {
            const issue = parsed.error.issues[0];
            const message = issue ? `${issue.path.join('.') || 'body'}: ${issue.message}` : 'invalid';
            return json(400, { error: { code: 'INVALID_REQUEST', message } });
          }
          try {
            const deliveries = await sendToolNotifications(ctx, parsed.data);
            return json(200, {
              deliveries: deliveries.map((d) => ({
                status: d.httpStatus,
                body: d.responseBody,
                ...(d.error ? { error: d.error } : {}),
              })),
            });
          } catch (error) {
            if (error instanceof ToolError) return json(error.status, { error: { code: error.code, message: error.message } });
            throw error;
          }
        }
        return undefined;
      },
    };
  },
};
