/**
 * WeChat Pay's statement for one day (Beijing time): `GET /v3/bill/tradebill?bill_type=ALL` answers,
 * signed, a download_url and the file's SHA-1; the file itself (a signed GET of that URL's path at
 * our base URL) is not signed, so its hash is checked before a line of it is read. Each data field
 * starts with a backtick; rows until the summary header: 交易状态 SUCCESS is a payment (应结订单金额),
 * REFUND a refund (退款金额, 商户退款单号 = our refund id, 微信退款单号); 手续费 has five decimals (a
 * refund's is negative). NO_STATEMENT_EXIST: the day has no bill (nothing happened, or not yet).
 */
import { createHash } from 'node:crypto';
import type { StatementLine, StatementOutcome } from '@/server/payments/gateway';
import { decimalToMinor } from '@/server/payments/money';
import { stringField } from '@/server/payments/transport';
import { call, download, type Client } from './exchange';

export async function statement(client: Client, date: string): Promise<StatementOutcome> {
  const applied = await call(client, 'GET', `/v3/bill/tradebill?bill_date=${encodeURIComponent(date)}&bill_type=ALL`);
  if (applied.kind !== 'answered') return { kind: 'unavailable', code: applied.code, message: applied.message };
  const code = stringField(applied.body, 'code');
  if (applied.status !== 200) {
    const message = stringField(applied.body, 'message') ?? `HTTP ${applied.status}`;
    return code === 'NO_STATEMENT_EXIST'
      ? { kind: 'none', code, message }
      : { kind: 'unavailable', code: code ?? `HTTP_${applied.status}`, message };
  }
  const downloadUrl = stringField(applied.body, 'download_url');
  const hash = stringField(applied.body, 'hash_value');
  if (!downloadUrl || !hash)
    return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'tradebill without download_url or hash_value' };
  // WeChat's own host in the link: the path and query go to our configured base URL, signed as any v3 path.
  const link = new URL(downloadUrl);
  const file = await download(client, `${link.pathname}${link.search}`);
  if (file.kind !== 'received') return { kind: 'unavailable', code: file.code, message: file.message };
  if (file.status !== 200) return { kind: 'unavailable', code: `HTTP_${file.status}`, message: file.text.slice(0, 200) };
  if (createHash('sha1').update(file.text).digest('hex') !== hash.toLowerCase()) {
    return { kind: 'unavailable', code: 'HASH_MISMATCH', message: 'the bill file does not match the SHA-1 the signed answer gave' };
  }
  return parseTradeBill(file.text);
}

/** WeChat prefixes every data field with a backtick (so spreadsheets keep long numbers as text). */
const LEADING_BACKTICK = /^\u0060/;

/** The bill file's rows as statement lines; a row that cannot be read makes the whole file unreadable. */
export function parseTradeBill(text: string): StatementOutcome {
  const rows = text.split(/\r?\n/).filter((row) => row !== '');
  const header = rows[0]?.split(',') ?? [];
  const column = (name: string) => header.indexOf(name);
  const at = {
    status: column('交易状态'),
    transactionId: column('微信订单号'),
    outTradeNo: column('商户订单号'),
    currency: column('货币种类'),
    settled: column('应结订单金额'),
    refundId: column('微信退款单号'),
    outRefundNo: column('商户退款单号'),
    refunded: column('退款金额'),
    fee: column('手续费'),
  };
  if (Object.values(at).some((index) => index < 0))
    return { kind: 'unavailable', code: 'MALFORMED_BILL', message: 'the bill’s header lacks a column' };
  const lines: StatementLine[] = [];
  for (const row of rows.slice(1)) {
    if (row.startsWith('总交易单数')) break;
    const field = (index: number) => (row.split(',')[index] ?? '').replace(LEADING_BACKTICK, '');
    const status = field(at.status);
    const base = { outTradeNo: field(at.outTradeNo), gatewayTradeNo: field(at.transactionId), currency: field(at.currency) };
    const fee = feeMinor(field(at.fee));
    const amount = decimalToMinor(field(status === 'REFUND' ? at.refunded : at.settled));
    if (amount === null || fee === null)
      return { kind: 'unavailable', code: 'MALFORMED_BILL', message: `unreadable amounts in: ${row.slice(0, 120)}` };
    if (status === 'SUCCESS') lines.push({ kind: 'payment', ...base, amountMinor: amount, feeMinor: fee });
    else if (status === 'REFUND') {
      lines.push({
        kind: 'refund',
        ...base,
        refundId: field(at.outRefundNo),
        gatewayRefundId: field(at.refundId),
        amountMinor: amount,
        feeMinor: fee,
      });
    }
  }
  return { kind: 'lines', lines };
}

/** 手续费 in yuan with five decimals, maybe negative, to fen rounded half away from zero. */
function feeMinor(text: string): number | null {
  const match = /^(-?)(\d+)\.(\d{2})(\d*)$/.exec(text);
  if (!match) return null;
  const [, sign, whole = '0', cents = '00', rest = ''] = match;
  const fen = Number(whole) * 100 + Number(cents) + (rest !== '' && Number(rest[0]) >= 5 ? 1 : 0);
  return sign === '-' ? -fen : fen;
}
