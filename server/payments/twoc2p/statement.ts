/**
 * 2C2P's statement for one day (Bangkok time): its reconciliation report, one file per merchant and
 * currency (`Reconcile2c2p_A_v2.1_…`), an H record with the totals and a D record per payment or
 * refund. Columns by position (0-based), as 2C2P's published samples show them [unverified names]:
 * 12 invoiceNo (our out_trade_no), 17 amount (five decimals; a refund negative), 20 MDR, 21 VAT on it,
 * 28 WHT credited back, 29 net, 31 currency, 44 tranRef, 64 referenceNo (a refund: 2C2P's reference).
 * The fee is what 2C2P keeps: MDR + VAT − WHT.
 *
 * 2C2P drops the file on SFTP; the address here serves it over HTTP with the merchant's secret as a
 * bearer token (the sandbox's way, [unverified] for 2C2P itself). Our books match a 2C2P payment by
 * invoiceNo: PayOnce records a 2C2P charge under its tranRef, which the report carries too.
 */
import type { StatementLine, StatementOutcome } from '@/server/payments/gateway';

export interface ReportSource {
  url: string;
  merchantId: string;
  secretKey: string;
  timeoutMs: number;
}

const COLUMN = { kind: 2, invoiceNo: 12, amount: 17, mdr: 20, vat: 21, wht: 28, currency: 31, tranRef: 44, referenceNo: 64 } as const;

export async function statement(source: ReportSource, date: string, currencies: readonly string[]): Promise<StatementOutcome> {
  const lines: StatementLine[] = [];
  for (const currency of currencies.length > 0 ? currencies : ['THB']) {
    const url = new URL(source.url);
    url.searchParams.set('merchantID', source.merchantId);
    url.searchParams.set('date', date);
    url.searchParams.set('currency', currency);
    let response: Response;
    try {
      response = await fetch(url, {
        headers: { authorization: `Bearer ${source.secretKey}` },
        signal: AbortSignal.timeout(source.timeoutMs),
      });
    } catch (error) {
      return { kind: 'unavailable', code: 'DOWNLOAD_FAILED', message: error instanceof Error ? error.message : String(error) };
    }
    const text = await response.text();
    if (response.status === 404) return { kind: 'none', code: 'NO_REPORT', message: text.slice(0, 200) };
    if (!response.ok) return { kind: 'unavailable', code: `HTTP_${response.status}`, message: text.slice(0, 200) };
    const parsed = parseReport(text);
    if (parsed.kind !== 'lines') return parsed;
    lines.push(...parsed.lines);
  }
  return { kind: 'lines', lines };
}

export function parseReport(text: string): StatementOutcome {
  const lines: StatementLine[] = [];
  for (const row of text.split(/\r?\n/).filter((r) => r !== '')) {
    const fields = row.split(',');
    if (fields[COLUMN.kind] !== 'D') continue;
    const minor = (index: number) => fiveDecimalsToMinor(fields[index] ?? '');
    const [amount, mdr, vat, wht] = [minor(COLUMN.amount), minor(COLUMN.mdr), minor(COLUMN.vat), minor(COLUMN.wht)];
    if (amount === null || mdr === null || vat === null || wht === null) {
      return { kind: 'unavailable', code: 'MALFORMED_REPORT', message: `unreadable amounts in: ${row.slice(0, 120)}` };
    }
    const base = {
      outTradeNo: fields[COLUMN.invoiceNo] ?? '',
      gatewayTradeNo: fields[COLUMN.tranRef] ?? '',
      currency: fields[COLUMN.currency] ?? '',
      feeMinor: mdr + vat - wht,
    };
    if (amount >= 0) lines.push({ kind: 'payment', ...base, amountMinor: amount });
    else lines.push({ kind: 'refund', ...base, gatewayRefundId: fields[COLUMN.referenceNo] ?? '', amountMinor: -amount });
  }
  return { kind: 'lines', lines };
}

/** "12.30000" / "-5.00000" → 1230 / -500, rounded half away from zero at the fen; null for anything else. */
function fiveDecimalsToMinor(text: string): number | null {
  const match = /^(-?)(\d+)(?:\.(\d{1,5}))?$/.exec(text.trim());
  if (!match) return null;
  const [, sign, whole = '0', fraction = ''] = match;
  const digits = fraction.padEnd(5, '0');
  const fen = Number(whole) * 100 + Number(digits.slice(0, 2)) + (Number(digits[2]) >= 5 ? 1 : 0);
  return sign === '-' ? -fen : fen;
}
