/**
 * Alipay's statement (对账单) for one day (Beijing time): `alipay.data.dataservice.bill.downloadurl.query`
 * (bill_type trade) answers, signed, a link that lives 30 seconds; behind it a zip of GBK CSV files,
 * of which 业务明细 lists every row: 业务类型 交易 (a payment, 订单金额) or 退款 (a refund, amounts
 * negative, 退款批次号/请求号 = our out_request_no), 服务费 the fee (negative when taken, positive when
 * given back). Text columns end with a tab. isp.bill_not_exist: the day has no bill.
 */
import type { StatementLine, StatementOutcome } from '@/server/payments/gateway';
import { decimalToMinor } from '@/server/payments/money';
import { stringField } from '@/server/payments/transport';
import { unzip } from '@/server/payments/unzip';
import type { AlipayClient } from './client';

export async function statement(client: AlipayClient, date: string, timeoutMs: number): Promise<StatementOutcome> {
  const exchange = await client.call('alipay.data.dataservice.bill.downloadurl.query', {
    bizContent: { bill_type: 'trade', bill_date: date },
  });
  if (exchange.kind !== 'answered') return { kind: 'unavailable', code: exchange.code, message: exchange.message };
  const { response } = exchange;
  const code = stringField(response, 'code');
  const subCode = stringField(response, 'sub_code') ?? '';
  const message = stringField(response, 'sub_msg') ?? stringField(response, 'msg') ?? '';
  if (code !== '10000') {
    return subCode === 'isp.bill_not_exist'
      ? { kind: 'none', code: subCode, message }
      : { kind: 'unavailable', code: subCode || `CODE_${code}`, message };
  }
  const link = stringField(response, 'bill_download_url');
  if (!link) return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'no bill_download_url' };
  let archive: Buffer;
  try {
    const file = await fetch(link, { signal: AbortSignal.timeout(timeoutMs) });
    if (!file.ok) return { kind: 'unavailable', code: `HTTP_${file.status}`, message: 'the bill download was refused' };
    archive = Buffer.from(await file.arrayBuffer());
  } catch (error) {
    return { kind: 'unavailable', code: 'DOWNLOAD_FAILED', message: error instanceof Error ? error.message : String(error) };
  }
  try {
    const detail = unzip(archive, 'gbk').find((entry) => entry.name.endsWith('业务明细.csv'));
    if (!detail) return { kind: 'unavailable', code: 'MALFORMED_BILL', message: 'the zip holds no 业务明细 file' };
    return parseTradeDetail(new TextDecoder('gbk').decode(detail.data));
  } catch (error) {
    return { kind: 'unavailable', code: 'MALFORMED_BILL', message: error instanceof Error ? error.message : String(error) };
  }
}

/** The 业务明细 file's rows as statement lines. */
export function parseTradeDetail(text: string): StatementOutcome {
  const rows = text.split(/\r?\n/).filter((row) => row !== '' && !row.startsWith('#'));
  const header = rows[0]?.split(',') ?? [];
  const column = (name: string) => header.indexOf(name);
  const at = {
    tradeNo: column('支付宝交易号'),
    outTradeNo: column('商户订单号'),
    kind: column('业务类型'),
    amount: column('订单金额（元）'),
    requestNo: column('退款批次号/请求号'),
    fee: column('服务费（元）'),
  };
  if (Object.values(at).some((index) => index < 0))
    return { kind: 'unavailable', code: 'MALFORMED_BILL', message: 'the bill’s header lacks a column' };
  const lines: StatementLine[] = [];
  for (const row of rows.slice(1)) {
    const fields = splitCsv(row).map((field) => field.replace(/\t$/, '').trim());
    const field = (index: number) => fields[index] ?? '';
    const amount = yuan(field(at.amount));
    const fee = yuan(field(at.fee));
    if (amount === null || fee === null)
      return { kind: 'unavailable', code: 'MALFORMED_BILL', message: `unreadable amounts in: ${row.slice(0, 120)}` };
    const base = { outTradeNo: field(at.outTradeNo), gatewayTradeNo: field(at.tradeNo), currency: 'CNY', feeMinor: -fee };
    if (field(at.kind) === '交易') lines.push({ kind: 'payment', ...base, amountMinor: Math.abs(amount) });
    else if (field(at.kind) === '退款')
      lines.push({ kind: 'refund', ...base, refundId: field(at.requestNo), amountMinor: Math.abs(amount) });
  }
  return { kind: 'lines', lines };
}

/** "-12.30" → -1230; null for anything else. */
function yuan(text: string): number | null {
  const negative = text.startsWith('-');
  const minor = decimalToMinor(negative ? text.slice(1) : text);
  return minor === null ? null : negative ? -minor : minor;
}

/** One CSV row, quoted fields (a comma or quote in a subject) included. */
function splitCsv(row: string): string[] {
  const fields: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < row.length; i++) {
    const ch = row[i]!;
    if (quoted && ch === '"' && row[i + 1] === '"') {
      field += '"';
      i++;
    } else if (ch === '"') {
      quoted = !quoted;
    } else if (ch === ',' && !quoted) {
      fields.push(field);
      field = '';
    } else {
      field += ch;
    }
  }
  fields.push(field);
  return fields;
}
