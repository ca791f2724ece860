/**
 * WeChat Pay's trade bill (交易账单), API v3, as a merchant downloads it:
 *
 *   GET /v3/bill/tradebill?bill_date=yyyy-MM-dd[&bill_type=ALL|SUCCESS][&tar_type=GZIP]
 *       signed and verified like every v3 call (sandbox/wechatpay.ts)
 *     → 200 {"download_url":"…/v3/billdownload/file?token=…","hash_type":"SHA1","hash_value":"<sha1 hex>"}
 *     → 400 {"code":"NO_STATEMENT_EXIST","message":"请求的账单文件不存在"} for a day without a bill
 *   GET download_url, signed like any v3 call → the file (gzip when tar_type=GZIP was asked for). Its
 *       answer carries no Wechatpay-Signature ("该接口响应的信息请求头中不包含微信接口响应的签名值"):
 *       the merchant checks the file against hash_value, the SHA-1 of the uncompressed file.
 *
 * The file, as merchants' downloaded bills show it (UTF-8, no BOM): the header row; one row per
 * payment (交易状态 SUCCESS) and one per refund (交易状态 REFUND, 应结订单金额 and 订单金额 0.00, the
 * refund in 退款金额 and 申请退款金额, 手续费 negative: the fee given back); every data field prefixed
 * with a backtick so spreadsheets keep long numbers as text; then the summary header and its one
 * row. Amounts are yuan with two decimals, 手续费 with five, 费率 "0.60%"; 交易时间 is Beijing time.
 * 总交易单数 counts every row; 手续费总金额 is the net of the rows' 手续费.
 *
 * [unverified]: lines end with CRLF (what WeChat's v2 bill download sends; v3 pages do not say);
 * the download link lives 5 minutes (the newer reference; an older page says 30 s); an expired or
 * forged link answers 400 INVALID_REQUEST and another merchant's link 403 NO_AUTH; the file comes as
 * text/plain; charset=utf-8 (application/octet-stream when gzipped); only bill_type ALL and SUCCESS
 * are emulated (others answer 400 PARAM_ERROR); WeChat refuses the current day (STATEMENT_CREATING
 * until the next morning) — the sandbox serves it as it stands.
 */
import { createHash, createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { json, type SandboxRequest, type SandboxResponse } from './gateway-module';
import type { Queryable } from './store';
import {
  billDateOf,
  FEE_RULES,
  formatMinor,
  isStatementDay,
  parseBillDate,
  paymentLineFee,
  readDay,
  refundFee,
  wallClock,
  type BinarySandboxResponse,
  type StatementLines,
} from './statements';

export const WECHATPAY_TRADEBILL_PATH = '/v3/bill/tradebill';
export const WECHATPAY_BILLDOWNLOAD_PATH = '/v3/billdownload/file';

/**
 * download_url names WeChat's own host, as WeChat's does: a client signs the URL's path and query
 * (wechatpay-node-v3 signs the URL with exactly this origin cut off), and reaches the sandbox the way
 * it reaches every v3 path, by sending that path to the sandbox's address.
 */
const WECHAT_API_ORIGIN = 'https://api.mch.weixin.qq.com';
/** "供下一步请求账单文件的下载地址，该地址5min内有效" */
const LINK_LIFETIME_MS = 5 * 60_000;
/** "仅支持三个月内的账单下载申请" */
const OLDEST_BILL_DAYS = 92;

export function isWechatpayBillPath(path: string): boolean {
  return path === WECHATPAY_TRADEBILL_PATH || path === WECHATPAY_BILLDOWNLOAD_PATH;
}

export interface WechatpayBillContext {
  sql: Queryable;
  /** The v3 request signature check of sandbox/wechatpay.ts: the caller's mchid, or its refusal. */
  authenticate(request: SandboxRequest): { mchid: string } | SandboxResponse;
  /** An answer signed the way every v3 answer is. */
  signed(answer: { status: number; body?: unknown }): SandboxResponse;
  /** Keys the download links' tokens; never sent. */
  linkSecret: string;
}

type BillType = 'ALL' | 'SUCCESS';

interface LinkClaims {
  /** mchid, bill date, bill type, gzip or not, the statement's moment, the link's end. */
  m: string;
  d: string;
  t: BillType;
  z: boolean;
  a: number;
  e: number;
}

function paramError(field: string, issue: string) {
  return {
    status: 400,
    body: { code: 'PARAM_ERROR', message: `参数错误: ${field} ${issue}`, detail: { location: 'query', field, issue } },
  };
}

function unsigned(status: number, code: string, message: string): SandboxResponse {
  return json(status, { code, message }, { 'Request-ID': randomUUID() });
}

export async function wechatpayBill(ctx: WechatpayBillContext, request: SandboxRequest): Promise<SandboxResponse | BinarySandboxResponse> {
  if (request.method !== 'GET') {
    return unsigned(400, 'INVALID_REQUEST', `HTTP 请求不符合微信支付 APIv3 接口规则：${request.url.pathname} 只接受 GET`);
  }
  const auth = ctx.authenticate(request);
  if ('status' in auth) return auth;
  try {
    return request.url.pathname === WECHATPAY_TRADEBILL_PATH
      ? await tradeBill(ctx, request, auth.mchid)
      : await downloadBill(ctx, request, auth.mchid);
  } catch (err) {
    console.error('[psp-sandbox] wechatpay %s failed:', request.url.pathname, err);
    return ctx.signed({ status: 500, body: { code: 'SYSTEM_ERROR', message: '系统异常，请用相同参数重新调用' } });
  }
}

/** GET /v3/bill/tradebill */
async function tradeBill(ctx: WechatpayBillContext, request: SandboxRequest, mchid: string): Promise<SandboxResponse> {
  const query = request.url.searchParams;
  const text = query.get('bill_date');
  if (text === null) return ctx.signed(paramError('bill_date', '为必填参数'));
  const date = parseBillDate(text);
  if (!date) return ctx.signed(paramError('bill_date', '格式须为 yyyy-MM-dd'));
  const billType = query.get('bill_type') ?? 'ALL';
  if (billType !== 'ALL' && billType !== 'SUCCESS') {
    const known = ['REFUND', 'RECHARGE_REFUND', 'ALL_SPECIAL', 'SUC_SPECIAL', 'REF_SPECIAL'].includes(billType);
    return ctx.signed(paramError('bill_type', known ? `${billType} 不在沙箱模拟范围（ALL、SUCCESS）` : '取值须为 ALL、SUCCESS、REFUND 等'));
  }
  const tarType = query.get('tar_type');
  if (tarType !== null && tarType !== 'GZIP') return ctx.signed(paramError('tar_type', '取值须为 GZIP'));
  if (query.has('sub_mchid')) return ctx.signed(paramError('sub_mchid', '直连商户无需填写'));
  const now = new Date();
  if (!isStatementDay('wechatpay', date, now)) return ctx.signed(paramError('bill_date', '不能晚于今天'));
  if (date < billDateOf('wechatpay', new Date(now.getTime() - OLDEST_BILL_DAYS * 86_400_000))) {
    return ctx.signed(paramError('bill_date', '仅支持三个月内的账单下载申请'));
  }

  const file = await billFile(ctx.sql, mchid, date, billType, now);
  if (file === null) return ctx.signed({ status: 400, body: { code: 'NO_STATEMENT_EXIST', message: '请求的账单文件不存在' } });
  const claims: LinkClaims = {
    m: mchid,
    d: date,
    t: billType,
    z: tarType === 'GZIP',
    a: now.getTime(),
    e: now.getTime() + LINK_LIFETIME_MS,
  };
  const download = new URL(WECHATPAY_BILLDOWNLOAD_PATH, WECHAT_API_ORIGIN);
  download.searchParams.set('token', signLink(claims, ctx.linkSecret));
  if (claims.z) download.searchParams.set('tartype', 'gzip');
  return ctx.signed({
    status: 200,
    body: { download_url: download.toString(), hash_type: 'SHA1', hash_value: createHash('sha1').update(file).digest('hex') },
  });
}

/** GET /v3/billdownload/file?token=… */
async function downloadBill(
  ctx: WechatpayBillContext,
  request: SandboxRequest,
  mchid: string,
): Promise<SandboxResponse | BinarySandboxResponse> {
  const claims = readLink(request.url.searchParams.get('token') ?? '', ctx.linkSecret);
  if (!claims) return unsigned(400, 'INVALID_REQUEST', '下载链接无效');
  if (claims.m !== mchid) return unsigned(403, 'NO_AUTH', '无权下载该商户的账单');
  if (Date.now() > claims.e) return unsigned(400, 'INVALID_REQUEST', '下载链接已过期，请重新申请账单');
  const file = (await billFile(ctx.sql, claims.m, claims.d, claims.t, new Date(claims.a))) ?? Buffer.alloc(0);
  const headers = { 'Request-ID': randomUUID() };
  if (!claims.z) return { status: 200, headers: { ...headers, 'content-type': 'text/plain; charset=utf-8' }, body: file.toString('utf8') };
  return { status: 200, headers: { ...headers, 'content-type': 'application/octet-stream' }, body: '', bytes: gzipSync(file) };
}

function signLink(claims: LinkClaims, secret: string): string {
  const payload = Buffer.from(JSON.stringify(claims)).toString('base64url');
  return `${payload}.${createHmac('sha256', secret).update(payload).digest('base64url')}`;
}

function readLink(token: string, secret: string): LinkClaims | null {
  const [payload = '', mac = ''] = token.split('.');
  const expected = Buffer.from(createHmac('sha256', secret).update(payload).digest('base64url'));
  const given = Buffer.from(mac);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
  try {
    return JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as LinkClaims;
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// The file

const ALL_COLUMNS = [
  '交易时间',
  '公众账号ID',
  '商户号',
  '特约商户号',
  '设备号',
  '微信订单号',
  '商户订单号',
  '用户标识',
  '交易类型',
  '交易状态',
  '付款银行',
  '货币种类',
  '应结订单金额',
  '代金券金额',
  '微信退款单号',
  '商户退款单号',
  '退款金额',
  '充值券退款金额',
  '退款类型',
  '退款状态',
  '商品名称',
  '商户数据包',
  '手续费',
  '费率',
  '订单金额',
  '申请退款金额',
  '费率备注',
] as const;

/** SUCCESS bills leave out the refund columns. */
const SUCCESS_COLUMNS = ALL_COLUMNS.filter(
  (column) => !['微信退款单号', '商户退款单号', '退款金额', '充值券退款金额', '退款类型', '退款状态', '申请退款金额'].includes(column),
);

const SUMMARY_COLUMNS = ['总交易单数', '应结订单总金额', '退款总金额', '充值券退款总金额', '手续费总金额', '订单总金额', '申请退款总金额'];

type Column = (typeof ALL_COLUMNS)[number];
type Row = Record<Column, string>;

interface TradeRow {
  out_trade_no: string;
  appid: string;
  trade_type: string;
  description: string;
  attach: string | null;
  payer_openid: string | null;
  bank_type: string | null;
}

const yuan = (fen: bigint) => formatMinor(fen);
const feeText = (fen: bigint) => formatMinor(fen, 2, 5);

function beijing(at: Date): string {
  return wallClock('wechatpay', at).toISOString().slice(0, 19).replace('T', ' ');
}

/** A payer for a payment WeChat's tables do not know (an injected one): fixed by its id, so a file re-made for its link is the same file. */
function phantomOpenid(transactionId: string): string {
  return `o${createHash('sha256').update(transactionId).digest('base64url').slice(0, 27)}`;
}

/** The day's file as bytes, or null when there is no bill for that day and type. */
async function billFile(db: Queryable, mchid: string, date: string, billType: BillType, asOf: Date): Promise<Buffer | null> {
  const lines = await readDay(db, 'wechatpay', [mchid], date, asOf);
  const rows = await billRows(db, mchid, lines, billType);
  if (rows.length === 0) return null;
  const columns = billType === 'ALL' ? ALL_COLUMNS : SUCCESS_COLUMNS;
  const sum = (column: Column) => rows.reduce((total, row) => total + toFen(row[column]), 0n);
  const fees = rows.reduce((total, row) => total + toFen(row['手续费'].slice(0, -3)), 0n);
  const summary = [
    String(rows.length),
    yuan(sum('应结订单金额')),
    yuan(sum('退款金额')),
    yuan(sum('充值券退款金额')),
    feeText(fees),
    yuan(sum('订单金额')),
    yuan(sum('申请退款金额')),
  ];
  const out = [
    columns.join(','),
    ...rows.map((row) => columns.map((column) => `\`${row[column]}`).join(',')),
    SUMMARY_COLUMNS.join(','),
    summary.map((value) => `\`${value}`).join(','),
  ];
  return Buffer.from(`${out.join('\r\n')}\r\n`, 'utf8');
}

/** "12.30" → 1230n (the file's own amounts, summed as they are printed). */
function toFen(value: string): bigint {
  const negative = value.startsWith('-');
  const [whole = '0', fraction = ''] = (negative ? value.slice(1) : value).split('.');
  const fen = BigInt(whole) * 100n + BigInt(fraction.padEnd(2, '0').slice(0, 2));
  return negative ? -fen : fen;
}

async function billRows(db: Queryable, mchid: string, lines: StatementLines, billType: BillType): Promise<Row[]> {
  const trades = await db<TradeRow[]>`
    SELECT out_trade_no, appid, trade_type, description, attach, payer_openid, bank_type FROM psp_sandbox.wechatpay_trades
     WHERE mchid = ${mchid} AND out_trade_no = ANY(${[...lines.payments, ...lines.refunds].map((line) => line.outTradeNo)}::text[])`;
  const [merchant] = await db<{ appid: string }[]>`SELECT appid FROM psp_sandbox.wechatpay_merchants WHERE mchid = ${mchid}`;
  const tradeOf = (outTradeNo: string) => trades.find((t) => t.out_trade_no === outTradeNo);
  const base = (outTradeNo: string, transactionId: string, phantom: boolean) => {
    const trade = phantom ? undefined : tradeOf(outTradeNo);
    return {
      公众账号ID: trade?.appid ?? merchant?.appid ?? '',
      商户号: mchid,
      特约商户号: '0',
      设备号: '',
      微信订单号: transactionId,
      商户订单号: outTradeNo,
      用户标识: trade?.payer_openid ?? phantomOpenid(transactionId),
      交易类型: trade?.trade_type ?? 'NATIVE',
      付款银行: trade?.bank_type ?? 'OTHERS',
      商品名称: trade?.description ?? 'PayOnce 订单',
      商户数据包: trade?.attach ?? '',
      费率: FEE_RULES.wechatpay.label,
      代金券金额: '0.00',
      充值券退款金额: '0.00',
      费率备注: '',
    };
  };
  const rows: (Row & { at: Date })[] = lines.payments.map((payment) => ({
    ...base(payment.outTradeNo, payment.gatewayTradeNo, payment.phantom),
    at: payment.at,
    交易时间: beijing(payment.at),
    货币种类: payment.currency,
    交易状态: 'SUCCESS',
    应结订单金额: yuan(payment.amountMinor),
    订单金额: yuan(payment.amountMinor),
    微信退款单号: '0',
    商户退款单号: '0',
    退款金额: '0.00',
    申请退款金额: '0.00',
    退款类型: '',
    退款状态: '',
    手续费: feeText(paymentLineFee('wechatpay', payment)),
  }));
  if (billType === 'ALL') {
    for (const refund of lines.refunds) {
      rows.push({
        ...base(refund.outTradeNo, refund.gatewayTradeNo, false),
        at: refund.at,
        交易时间: beijing(refund.at),
        货币种类: refund.currency,
        交易状态: 'REFUND',
        应结订单金额: '0.00',
        订单金额: '0.00',
        微信退款单号: refund.gatewayRefundId,
        商户退款单号: refund.refundId,
        退款金额: yuan(refund.amountMinor),
        申请退款金额: yuan(refund.amountMinor),
        退款类型: 'ORIGINAL',
        退款状态: 'SUCCESS',
        手续费: feeText(-refundFee('wechatpay', refund)),
      });
    }
  }
  return rows.sort((a, b) => a.at.getTime() - b.at.getTime());
}
