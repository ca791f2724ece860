/**
 * Alipay's trade statement (交易账单) as a merchant downloads it:
 *
 *   POST /gateway.do  method=alipay.data.dataservice.bill.downloadurl.query
 *                     biz_content {"bill_type":"trade","bill_date":"yyyy-MM-dd"}
 *        → {"alipay_data_dataservice_bill_downloadurl_query_response":{"code":"10000","msg":"Success",
 *            "bill_download_url":"…"},"sign":"…"}   (signed like every answer of sandbox/alipay.ts)
 *   GET  bill_download_url (/downloadBillFile.resource?…, no signature: the link is the credential,
 *        "获取连接后30秒后未下载，链接地址失效") → a zip of two GBK-encoded CSV files:
 *        <account>_<yyyyMMdd>_业务明细.csv and <account>_<yyyyMMdd>_业务明细(汇总).csv
 *
 * The layout follows merchants' downloaded files (header lines, the 25 columns, the 业务明细列表 markers
 * and the 交易合计/退款合计/导出时间 footers): text columns carry a trailing tab so spreadsheets keep
 * long numbers as text; amounts are yuan with two decimals, negative on 退款 rows; the account is the
 * seller's PID followed by 0156 (its CNY account), as in "#账号：[20880211096256330156]"; times are
 * Beijing time. A bill covers every app of the seller.
 *
 * Where the documentation and the files seen leave it open [unverified]:
 *  - 服务费（元）: negative on 交易 rows (the fee taken) and positive on 退款 rows (the fee given back);
 *    the summary's 订单金额/商家实收/服务费 are the day's net over both kinds of row, and 实收净额 is
 *    商家实收 + 服务费 + 分润. The summary has only its 合计 row (no store rows: these trades name no store).
 *  - A date with nothing to show: 40004 isp.bill_not_exist "账单不存在", what merchants' integrations
 *    handle for a day without a bill; invalid arguments are 40004 isv.invalid_arguments.
 *  - Lines end with CRLF; a field holding a comma or a quote is quoted (RFC 4180).
 *  - Only bill_type trade and daily dates are emulated; signcustomer and yyyy-MM are refused as
 *    invalid arguments. Alipay refuses the current day (bills are T+1); the sandbox serves it as it
 *    stands (statements.ts isStatementDay).
 *  - An expired or forged link answers 403 with a plain-text body.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { SandboxRequest, SandboxResponse } from './gateway-module';
import type { Queryable } from './store';
import {
  dayWindow,
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
import { zip } from './zip';

export const ALIPAY_BILL_METHOD = 'alipay.data.dataservice.bill.downloadurl.query';
export const ALIPAY_BILL_PATH = '/downloadBillFile.resource';

/** "获取连接后30秒后未下载，链接地址失效" (the interface's bill_download_url). */
const LINK_LIFETIME_MS = 30_000;
/** The seller's CNY account: its PID and this suffix. */
const CNY_ACCOUNT_SUFFIX = '0156';

type Inner = Record<string, unknown>;

function invalidArguments(reason: string): Inner {
  return { code: '40004', msg: 'Business Failed', sub_code: 'isv.invalid_arguments', sub_msg: `参数不合法：${reason}` };
}

/** The apps whose trades the seller's bill covers. */
async function appsOfSeller(db: Queryable, sellerId: string): Promise<string[]> {
  const rows = await db<{ app_id: string }[]>`SELECT app_id FROM psp_sandbox.alipay_apps WHERE seller_id = ${sellerId} ORDER BY app_id`;
  return rows.map((row) => row.app_id);
}

function linkKey(platformPrivateKeyPem: string): Buffer {
  return createHash('sha256').update('alipay-bill-link\n').update(platformPrivateKeyPem).digest();
}

/** The link's query without its token, in a fixed order: what the token signs. */
function linkQuery(account: string, date: string, issuedSeconds: number): URLSearchParams {
  const day = date.replaceAll('-', '');
  return new URLSearchParams([
    ['bizType', 'trade'],
    ['userId', account],
    ['fileType', 'csv.zip'],
    ['bizDates', day],
    ['downloadFileName', `${account}_${day}.csv.zip`],
    ['fileId', `/trade/${account}/${day}`],
    ['timestamp', String(issuedSeconds)],
  ]);
}

function linkToken(query: URLSearchParams, platformPrivateKeyPem: string): string {
  return createHmac('sha256', linkKey(platformPrivateKeyPem)).update(query.toString()).digest('hex');
}

/** alipay.data.dataservice.bill.downloadurl.query: the day's bill link, or why there is none. */
export async function billDownloadUrlQuery(
  db: Queryable,
  app: { app_id: string; seller_id: string },
  biz: Record<string, unknown>,
  env: { baseUrl: string; platformPrivateKeyPem: string },
): Promise<Inner> {
  const billType = biz.bill_type;
  if (billType === 'signcustomer') return invalidArguments('bill_type signcustomer（账务账单）不在沙箱模拟范围，请使用 trade');
  if (billType !== 'trade') return invalidArguments('bill_type 须为 trade 或 signcustomer');
  const text = typeof biz.bill_date === 'string' ? biz.bill_date : '';
  if (/^\d{4}-\d{2}$/.test(text)) return invalidArguments('月账单（yyyy-MM）不在沙箱模拟范围，请按日下载（yyyy-MM-dd）');
  const date = parseBillDate(text);
  if (!date) return invalidArguments('bill_date 格式为 yyyy-MM-dd');
  if (!isStatementDay('alipay', date)) return invalidArguments(`bill_date ${date} 的账单尚未生成`);

  const issuedSeconds = Math.floor(Date.now() / 1000);
  const lines = await readDay(db, 'alipay', await appsOfSeller(db, app.seller_id), date, asOfLink(issuedSeconds));
  if (lines.payments.length === 0 && lines.refunds.length === 0) {
    return { code: '40004', msg: 'Business Failed', sub_code: 'isp.bill_not_exist', sub_msg: '账单不存在' };
  }
  const query = linkQuery(`${app.seller_id}${CNY_ACCOUNT_SUFFIX}`, date, issuedSeconds);
  query.set('token', linkToken(query, env.platformPrivateKeyPem));
  return { code: '10000', msg: 'Success', bill_download_url: `${env.baseUrl}${ALIPAY_BILL_PATH}?${query.toString()}` };
}

/** The bill a link serves is the bill as it stood when the link was handed out (to the second). */
function asOfLink(issuedSeconds: number): Date {
  return new Date(issuedSeconds * 1000 + 999);
}

function plain(status: number, text: string): SandboxResponse {
  return { status, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: text };
}

/** GET bill_download_url: the zip, or 403 for a link that is not ours or has expired. */
export async function alipayBillDownload(
  db: Queryable,
  request: Pick<SandboxRequest, 'method' | 'url'>,
  platformPrivateKeyPem: string,
): Promise<SandboxResponse | BinarySandboxResponse> {
  if (request.method !== 'GET') return plain(405, 'use GET');
  const params = request.url.searchParams;
  const account = params.get('userId') ?? '';
  const day = params.get('bizDates') ?? '';
  const issuedSeconds = Number(params.get('timestamp'));
  const date = parseBillDate(`${day.slice(0, 4)}-${day.slice(4, 6)}-${day.slice(6, 8)}`);
  if (!date || !Number.isSafeInteger(issuedSeconds) || !account.endsWith(CNY_ACCOUNT_SUFFIX)) return plain(403, '链接无效');
  const expected = Buffer.from(linkToken(linkQuery(account, date, issuedSeconds), platformPrivateKeyPem), 'hex');
  const given = Buffer.from(params.get('token') ?? '', 'hex');
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return plain(403, '链接无效');
  if (Date.now() > issuedSeconds * 1000 + LINK_LIFETIME_MS) return plain(403, '链接已失效，请重新获取账单下载地址');

  const sellerId = account.slice(0, -CNY_ACCOUNT_SUFFIX.length);
  const asOf = asOfLink(issuedSeconds);
  const lines = await readDay(db, 'alipay', await appsOfSeller(db, sellerId), date, asOf);
  const rows = await detailRows(db, lines);
  const prefix = `${account}_${day}`;
  const modified = wallClock('alipay', asOf);
  const bytes = zip([
    { name: encodeGbk(`${prefix}_业务明细.csv`), data: encodeGbk(detailFile(account, date, rows, asOf)), modified },
    { name: encodeGbk(`${prefix}_业务明细(汇总).csv`), data: encodeGbk(summaryFile(account, date, rows, asOf)), modified },
  ]);
  return {
    status: 200,
    headers: { 'content-type': 'application/octet-stream', 'content-disposition': `attachment; filename="${prefix}.csv.zip"` },
    body: '',
    bytes,
  };
}

// ---------------------------------------------------------------------------------------------
// The two CSV files

const DETAIL_COLUMNS = [
  '支付宝交易号',
  '商户订单号',
  '业务类型',
  '商品名称',
  '创建时间',
  '完成时间',
  '门店编号',
  '门店名称',
  '操作员',
  '终端号',
  '对方账户',
  '订单金额（元）',
  '商家实收（元）',
  '支付宝红包（元）',
  '集分宝（元）',
  '支付宝优惠（元）',
  '商家优惠（元）',
  '券核销金额（元）',
  '券名称',
  '商家红包消费金额（元）',
  '卡消费金额（元）',
  '退款批次号/请求号',
  '服务费（元）',
  '分润（元）',
  '备注',
] as const;

const SUMMARY_COLUMNS = [
  '门店编号',
  '门店名称',
  '交易订单总笔数',
  '退款订单总笔数',
  '订单金额（元）',
  '商家实收（元）',
  '支付宝优惠（元）',
  '商家优惠（元）',
  '卡消费金额（元）',
  '服务费（元）',
  '分润（元）',
  '实收净额（元）',
] as const;

const DETAIL_BEGIN = `#${'-'.repeat(41)}业务明细列表${'-'.repeat(40)}`;
const DETAIL_END = `#${'-'.repeat(41)}业务明细列表结束${'-'.repeat(36)}`;
const SUMMARY_BEGIN = `#${'-'.repeat(41)}业务汇总列表${'-'.repeat(40)}`;
const SUMMARY_END = `#${'-'.repeat(40)}业务汇总列表结束${'-'.repeat(37)}`;

/** The sandbox's paying test buyer as merchants see it (its masked login). */
const PHANTOM_BUYER = 'ok***@sandbox.example';
const PHANTOM_SUBJECT = 'PayOnce 订单';

interface DetailRow {
  kind: '交易' | '退款';
  tradeNo: string;
  outTradeNo: string;
  subject: string;
  created: Date;
  finished: Date;
  buyer: string;
  amountFen: bigint;
  refundRequestNo: string;
  feeFen: bigint;
}

interface TradeRow {
  app_id: string;
  out_trade_no: string;
  subject: string;
  buyer_logon_id: string | null;
  gmt_create: Date;
}

async function detailRows(db: Queryable, lines: StatementLines): Promise<DetailRow[]> {
  const keys = [...lines.payments, ...lines.refunds].map((line) => `${line.merchantId}\n${line.outTradeNo}`);
  const trades = await db<TradeRow[]>`
    SELECT app_id, out_trade_no, subject, buyer_logon_id, gmt_create FROM psp_sandbox.alipay_trades
     WHERE app_id || chr(10) || out_trade_no = ANY(${keys}::text[])`;
  const tradeOf = (merchantId: string, outTradeNo: string) => trades.find((t) => t.app_id === merchantId && t.out_trade_no === outTradeNo);
  const rows: DetailRow[] = [];
  for (const payment of lines.payments) {
    const trade = payment.phantom ? undefined : tradeOf(payment.merchantId, payment.outTradeNo);
    rows.push({
      kind: '交易',
      tradeNo: payment.gatewayTradeNo,
      outTradeNo: payment.outTradeNo,
      subject: trade?.subject ?? PHANTOM_SUBJECT,
      // A buyer takes a few seconds between the order and the payment.
      created: trade?.gmt_create ?? new Date(payment.at.getTime() - 7_000),
      finished: payment.at,
      buyer: trade?.buyer_logon_id ?? PHANTOM_BUYER,
      amountFen: payment.amountMinor,
      refundRequestNo: '',
      feeFen: -paymentLineFee('alipay', payment),
    });
  }
  for (const refund of lines.refunds) {
    const trade = tradeOf(refund.merchantId, refund.outTradeNo);
    rows.push({
      kind: '退款',
      tradeNo: refund.gatewayTradeNo,
      outTradeNo: refund.outTradeNo,
      subject: trade?.subject ?? PHANTOM_SUBJECT,
      created: trade?.gmt_create ?? refund.at,
      finished: refund.at,
      buyer: trade?.buyer_logon_id ?? PHANTOM_BUYER,
      amountFen: -refund.amountMinor,
      refundRequestNo: refund.refundId,
      feeFen: refundFee('alipay', refund),
    });
  }
  return rows.sort((a, b) => a.finished.getTime() - b.finished.getTime());
}

function beijing(at: Date): string {
  return wallClock('alipay', at).toISOString().slice(0, 19).replace('T', ' ');
}

/** 2019年09月16日 00:00:00 */
function beijingChinese(at: Date): string {
  const text = beijing(at);
  return `${text.slice(0, 4)}年${text.slice(5, 7)}月${text.slice(8, 10)}日 ${text.slice(11)}`;
}

function csvField(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}

const yuan = (fen: bigint) => formatMinor(fen);
/** Text columns end with a tab, as in Alipay's files (spreadsheets then keep them as text). */
const text = (value: string) => `${value}\t`;

function headerLines(title: string, account: string, date: string): string[] {
  const { start, end } = dayWindow('alipay', date);
  return [title, `#账号：[${account}]`, `#起始日期：[${beijingChinese(start)}]   终止日期：[${beijingChinese(end)}]`];
}

function detailFile(account: string, date: string, rows: readonly DetailRow[], asOf: Date): string {
  const lines = [...headerLines('#支付宝业务明细查询', account, date), DETAIL_BEGIN, DETAIL_COLUMNS.join(',')];
  for (const row of rows) {
    lines.push(
      [
        text(row.tradeNo),
        text(row.outTradeNo),
        text(row.kind),
        csvField(row.subject),
        beijing(row.created),
        beijing(row.finished),
        text(''),
        text(''),
        text(''),
        text(''),
        text(row.buyer),
        yuan(row.amountFen),
        yuan(row.amountFen),
        '0.00',
        '0.00',
        '0.00',
        '0.00',
        '0.00',
        '',
        text('0.00'),
        '0.00',
        text(row.refundRequestNo),
        yuan(row.feeFen),
        '0.00',
        '',
      ].join(','),
    );
  }
  const trades = rows.filter((row) => row.kind === '交易');
  const refunds = rows.filter((row) => row.kind === '退款');
  const sum = (list: readonly DetailRow[]) => list.reduce((total, row) => total + row.amountFen, 0n);
  lines.push(
    DETAIL_END,
    `#交易合计：${trades.length}笔，商家实收共${yuan(sum(trades))}元，商家优惠共0.00元`,
    `#退款合计：${refunds.length}笔，商家实收退款共${yuan(sum(refunds))}元，商家优惠退款共0.00元`,
    `#导出时间：[${beijingChinese(asOf)}]`,
  );
  return `${lines.join('\r\n')}\r\n`;
}

function summaryFile(account: string, date: string, rows: readonly DetailRow[], asOf: Date): string {
  const amount = rows.reduce((total, row) => total + row.amountFen, 0n);
  const fees = rows.reduce((total, row) => total + row.feeFen, 0n);
  const total = [
    '合计',
    '',
    String(rows.filter((row) => row.kind === '交易').length),
    String(rows.filter((row) => row.kind === '退款').length),
    yuan(amount),
    yuan(amount),
    '0.00',
    '0.00',
    '0.00',
    yuan(fees),
    '0.00',
    yuan(amount + fees),
  ];
  const lines = [
    ...headerLines('#支付宝业务汇总查询', account, date),
    SUMMARY_BEGIN,
    SUMMARY_COLUMNS.join(','),
    total.join(','),
    SUMMARY_END,
    `#导出时间：[${beijingChinese(asOf)}]`,
  ];
  return `${lines.join('\r\n')}\r\n`;
}

// ---------------------------------------------------------------------------------------------
// GBK

let gbkTable: Map<string, number> | undefined;

/**
 * Node decodes GBK (TextDecoder 'gbk', WHATWG's GB18030 decoder) but has no encoder; the table is
 * built once by decoding every two-byte GBK code (lead 0x81–0xFE, trail 0x40–0xFE but 0x7F).
 */
function gbkCodes(): Map<string, number> {
  if (gbkTable) return gbkTable;
  const decoder = new TextDecoder('gbk', { fatal: true });
  const table = new Map<string, number>();
  for (let lead = 0x81; lead <= 0xfe; lead += 1) {
    for (let trail = 0x40; trail <= 0xfe; trail += 1) {
      if (trail === 0x7f) continue;
      let char: string;
      try {
        char = decoder.decode(Uint8Array.of(lead, trail));
      } catch {
        continue;
      }
      if (char.length === 1 && !table.has(char)) table.set(char, (lead << 8) | trail);
    }
  }
  gbkTable = table;
  return table;
}

/** Text as GBK bytes; a character GBK lacks becomes "?", as Windows' code page 936 writes it. */
export function encodeGbk(value: string): Buffer {
  const table = gbkCodes();
  const bytes: number[] = [];
  for (const char of value) {
    const code = char.codePointAt(0) ?? 0x3f;
    if (code < 0x80) {
      bytes.push(code);
      continue;
    }
    const gbk = table.get(char);
    if (gbk === undefined) bytes.push(0x3f);
    else bytes.push(gbk >> 8, gbk & 0xff);
  }
  return Buffer.from(bytes);
}
