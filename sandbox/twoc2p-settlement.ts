/**
 * 2C2P's daily reconciliation report (developer.2c2p.com "Reconciliation Reports", the Non-IPP /
 * full-payment report), as the sandbox serves it:
 *
 *   GET /sandbox/2c2p/settlement-report?merchantID=…&date=yyyy-MM-dd[&currency=THB]
 *       Authorization: Bearer <the merchant's secret key>
 *     → 200 text/csv, Content-Disposition filename Reconcile2c2p_A_v2.1_<MID>_<CUR>_<date>_<HHmmss>.csv
 *
 * What 2C2P documents: the report is a CSV (comma-delimited, one record per line) that 2C2P drops
 * daily on its SFTP server (/output, "before 4:00AM GMT+7"), one file per merchant ID and currency,
 * named Reconcile2c2p_A_v2.1_MID_CURRENCY_yyyy-MM-dd_HHmmss.csv; a header record (TYPE_TABLE H: the
 * totals) and one detail record (D) per payment, refund or chargeback; its published samples have 67
 * columns. SFTP has no place in an HTTP sandbox: this download stands in for picking the file up,
 * authenticated with the merchant's secret key as a bearer token [unverified: 2C2P's own access is
 * an SFTP account].
 *
 * The column table itself could not be read; the columns below are those whose meaning 2C2P's
 * sample files show by their values (and the arithmetic between them), each named here for the
 * merchant's parser [unverified names]; every other column keeps the sample's neutral value. Detail
 * amounts have five decimals, header totals two. The day is Bangkok's (GMT+7). Refund records — whose
 * layout the samples do not show in full — carry negative amounts, no MDR, the refund's date and time
 * in columns 7–10 and 2C2P's refund reference in column 64 [unverified]. A day without transactions
 * is a header record with zero totals [unverified: whether 2C2P drops a file then].
 */
import { randomUUID, timingSafeEqual } from 'node:crypto';
import { json, type SandboxRequest, type SandboxResponse } from './gateway-module';
import type { Queryable } from './store';
import {
  FEE_RULES,
  formatMinor,
  isStatementDay,
  parseBillDate,
  paymentLineFee,
  readDay,
  roundHalfUp,
  TWOC2P_MDR_TAXES,
  wallClock,
  type PaymentLine,
  type RefundLine,
} from './statements';
import { CURRENCY_EXPONENT } from './twoc2p-wire';

export const TWOC2P_SETTLEMENT_PATH = '/sandbox/2c2p/settlement-report';

/** 0-based positions in a record, for the columns the sandbox fills. */
export const RECONCILE_COLUMNS = {
  batchId: 0,
  sequence: 1,
  recordType: 2,
  reportDate: 5,
  /** H: the date the file was made. */
  generatedDate: 7,
  transactionDate: 7,
  transactionTime: 8,
  actionDate: 9,
  actionTime: 10,
  merchantId: 11,
  invoiceNo: 12,
  channel: 15,
  issuerBank: 16,
  amount: 17,
  mdr: 20,
  vat: 21,
  settlementBatch: 22,
  settlementDate: 23,
  withholdingTax: 28,
  netAmount: 29,
  currency: 31,
  approvalCode: 32,
  eci: 33,
  cardNo: 34,
  mdrRate: 40,
  cardBrand: 43,
  tranRef: 44,
  merchantName: 45,
  description: 48,
  referenceNo: 64,
} as const;

const COLUMN_COUNT = 67;
const MERCHANT_NAME = 'PayOnce Sandbox';
const ISSUER_BANK = 'PAYONCE SANDBOX BANK';

function toolError(status: number, code: string, message: string): SandboxResponse {
  return json(status, { error: { code, message } });
}

/** dd/MM/yyyy and HHmmss, Bangkok time. */
function bangkok(at: Date): { date: string; time: string } {
  const iso = wallClock('2c2p', at).toISOString();
  return { date: `${iso.slice(8, 10)}/${iso.slice(5, 7)}/${iso.slice(0, 4)}`, time: iso.slice(11, 19).replaceAll(':', '') };
}

function dayAfter(date: string): string {
  return new Date(new Date(`${date}T00:00:00Z`).getTime() + 86_400_000).toISOString().slice(0, 10);
}

function slashed(date: string): string {
  return `${date.slice(8, 10)}/${date.slice(5, 7)}/${date.slice(0, 4)}`;
}

interface TransactionRow {
  tran_ref: string;
  channel_code: string;
  card_no_masked: string;
  reference_no: string;
  approval_code: string | null;
  eci: string | null;
  description: string;
}

interface Amounts {
  /** In units of 10⁻⁵ of the currency, the detail records' precision. */
  amount: bigint;
  mdr: bigint;
  vat: bigint;
  withholding: bigint;
  net: bigint;
}

/**
 * A payment record's amounts. The MDR is the line's fee (a fee_differs change lands here) and its
 * taxes follow from it: VAT rounded to the minor unit, WHT at the record's five decimals, where it is
 * exact (MDR × 3 % has at most two digits below the minor unit, whose exponent is 0 or 2 for every
 * currency of twoc2p-wire.ts). A reconciler that books the WHT in minor units rounds it half up.
 */
function paymentAmounts(line: PaymentLine, exponent: number): Amounts {
  const scale = 10n ** BigInt(5 - exponent);
  const mdrMinor = paymentLineFee('2c2p', line);
  const vatMinor = roundHalfUp(mdrMinor * TWOC2P_MDR_TAXES.vatPpm, 1_000_000n);
  const amount = line.amountMinor * scale;
  const mdr = mdrMinor * scale;
  const vat = vatMinor * scale;
  const withholding = roundHalfUp(mdr * TWOC2P_MDR_TAXES.withholdingPpm, 1_000_000n);
  return { amount, mdr, vat, withholding, net: amount - mdr - vat + withholding };
}

function refundAmounts(line: RefundLine, exponent: number): Amounts {
  const amount = -line.amountMinor * 10n ** BigInt(5 - exponent);
  return { amount, mdr: 0n, vat: 0n, withholding: 0n, net: amount };
}

const five = (value: bigint) => formatMinor(value, 5, 5);
/** Header totals: two decimals, rounded from the detail records' five. */
const two = (value: bigint) => formatMinor(roundHalfUp(value, 1_000n), 2, 2);

function csvField(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}

/** GET /sandbox/2c2p/settlement-report */
export async function twoC2pSettlementReport(
  db: Queryable,
  request: Pick<SandboxRequest, 'method' | 'url' | 'headers'>,
): Promise<SandboxResponse> {
  if (request.method !== 'GET') return toolError(405, 'METHOD_NOT_ALLOWED', 'use GET');
  const params = request.url.searchParams;
  const merchantId = params.get('merchantID') ?? '';
  const [merchant] = await db<
    { secret_key: string }[]
  >`SELECT secret_key FROM psp_sandbox.twoc2p_merchants WHERE merchant_id = ${merchantId}`;
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '')?.[1] ?? '';
  const given = Buffer.from(bearer);
  const expected = Buffer.from(merchant?.secret_key ?? '');
  if (!merchant || given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return toolError(401, 'UNAUTHORIZED', "send the merchant's secret key as Authorization: Bearer <secretKey> with its merchantID");
  }
  const date = parseBillDate(params.get('date'));
  if (!date) return toolError(400, 'INVALID_QUERY', 'date: a calendar date written yyyy-MM-dd');
  const currency = (params.get('currency') ?? 'THB').toUpperCase();
  const exponent = CURRENCY_EXPONENT[currency];
  if (exponent === undefined) return toolError(400, 'INVALID_QUERY', `currency: one of ${Object.keys(CURRENCY_EXPONENT).join(', ')}`);
  const now = new Date();
  if (!isStatementDay('2c2p', date, now)) return toolError(404, 'NO_REPORT', `no report for ${date} yet: the day has not begun in Bangkok`);

  const lines = await readDay(db, '2c2p', [merchantId], date, now);
  const payments = lines.payments.filter((line) => line.currency === currency);
  const refunds = lines.refunds.filter((line) => line.currency === currency);
  const transactions = await db<TransactionRow[]>`
    SELECT t.tran_ref, t.channel_code, t.card_no_masked, t.reference_no, t.approval_code, t.eci, i.description
      FROM psp_sandbox.twoc2p_transactions t
      JOIN psp_sandbox.twoc2p_invoices i ON i.merchant_id = t.merchant_id AND i.invoice_no = t.invoice_no
     WHERE t.merchant_id = ${merchantId} AND t.tran_ref = ANY(${[...payments, ...refunds].map((line) => line.gatewayTradeNo)}::text[])`;
  const transactionOf = (tranRef: string) => transactions.find((t) => t.tran_ref === tranRef);

  const batchId = `2C2P${date.replaceAll('-', '')}01`;
  const settlementDate = slashed(dayAfter(date));
  const details: { at: Date; fields: string[]; amounts: Amounts }[] = [];
  const record = (fields: Partial<Record<keyof typeof RECONCILE_COLUMNS, string>>, kind: 'H' | 'D'): string[] => {
    const out: string[] = Array.from({ length: COLUMN_COUNT }, () => '');
    // The samples' neutral values in the columns the sandbox does not fill.
    const neutral: Record<number, string> =
      kind === 'D'
        ? {
            3: 'test',
            4: '0',
            6: 'test',
            14: '001',
            18: '0.00000',
            19: '0.00000',
            24: '0.00000',
            25: '0.00000',
            26: '0.00000',
            30: '0.00000',
            50: '0.00',
            55: '0.00000',
            65: '0.00000',
            66: '0.00000',
          }
        : {
            3: 'test',
            4: '0',
            6: 'test',
            8: '000000',
            9: '00/00/00',
            10: '000000',
            12: '0'.repeat(20),
            13: '0'.repeat(20),
            14: '000',
            15: '000',
            16: '000',
            18: '0.00',
            19: '0.00',
            30: '0.00',
            32: '000000',
            33: '0',
            34: '0',
            65: '0.0',
            66: '0.0',
          };
    for (const [index, value] of Object.entries(neutral)) out[Number(index)] = value;
    for (const [name, value] of Object.entries(fields)) out[RECONCILE_COLUMNS[name as keyof typeof RECONCILE_COLUMNS]] = value;
    out[RECONCILE_COLUMNS.batchId] = batchId;
    out[RECONCILE_COLUMNS.recordType] = kind;
    out[RECONCILE_COLUMNS.reportDate] = slashed(date);
    out[RECONCILE_COLUMNS.merchantId] = merchantId;
    out[RECONCILE_COLUMNS.currency] = currency;
    return out;
  };
  const brandOf = (masked: string) => (masked.startsWith('4') ? 'VI' : masked.startsWith('5') ? 'MA' : 'CC');

  for (const payment of payments) {
    const transaction = payment.phantom ? undefined : transactionOf(payment.gatewayTradeNo);
    const at = bangkok(payment.at);
    const amounts = paymentAmounts(payment, exponent);
    const masked = transaction?.card_no_masked ?? '411111XXXXXX1111';
    details.push({
      at: payment.at,
      amounts,
      fields: record(
        {
          transactionDate: at.date,
          transactionTime: at.time,
          actionDate: at.date,
          actionTime: '000000',
          invoiceNo: payment.outTradeNo,
          channel: brandOf(masked),
          issuerBank: ISSUER_BANK,
          amount: five(amounts.amount),
          mdr: five(amounts.mdr),
          vat: five(amounts.vat),
          settlementBatch: `2C2P-${date.slice(2).replaceAll('-', '')}-0001`,
          settlementDate,
          withholdingTax: five(amounts.withholding),
          netAmount: five(amounts.net),
          approvalCode: transaction?.approval_code ?? String(100000 + (Number(payment.gatewayTradeNo) % 900000)),
          eci: transaction?.eci ?? '07',
          cardNo: masked,
          mdrRate: FEE_RULES['2c2p'].label,
          cardBrand: brandOf(masked),
          tranRef: payment.gatewayTradeNo,
          merchantName: MERCHANT_NAME,
          description: transaction?.description ?? 'PayOnce 订单',
          referenceNo: transaction?.reference_no ?? payment.gatewayTradeNo.padStart(12, '0'),
        },
        'D',
      ),
    });
  }
  for (const refund of refunds) {
    const transaction = transactionOf(refund.gatewayTradeNo);
    const at = bangkok(refund.at);
    const amounts = refundAmounts(refund, exponent);
    const masked = transaction?.card_no_masked ?? '411111XXXXXX1111';
    details.push({
      at: refund.at,
      amounts,
      fields: record(
        {
          transactionDate: at.date,
          transactionTime: at.time,
          actionDate: at.date,
          actionTime: at.time,
          invoiceNo: refund.outTradeNo,
          channel: brandOf(masked),
          issuerBank: ISSUER_BANK,
          amount: five(amounts.amount),
          mdr: five(0n),
          vat: five(0n),
          settlementBatch: `2C2P-${date.slice(2).replaceAll('-', '')}-0001`,
          settlementDate,
          withholdingTax: five(0n),
          netAmount: five(amounts.net),
          approvalCode: transaction?.approval_code ?? '',
          eci: transaction?.eci ?? '',
          cardNo: masked,
          mdrRate: '0.00',
          cardBrand: brandOf(masked),
          tranRef: refund.gatewayTradeNo,
          merchantName: MERCHANT_NAME,
          description: transaction?.description ?? '',
          referenceNo: refund.gatewayRefundId,
        },
        'D',
      ),
    });
  }
  details.sort((a, b) => a.at.getTime() - b.at.getTime());
  details.forEach((detail, index) => (detail.fields[RECONCILE_COLUMNS.sequence] = String(index + 1)));

  const total = (pick: (a: Amounts) => bigint) => details.reduce((sum, detail) => sum + pick(detail.amounts), 0n);
  const made = bangkok(now);
  const header = record(
    {
      sequence: String(details.length + 1),
      generatedDate: made.date,
      amount: two(total((a) => a.amount)),
      mdr: two(total((a) => a.mdr)),
      vat: two(total((a) => a.vat)),
      withholdingTax: two(total((a) => a.withholding)),
      netAmount: two(total((a) => a.net)),
    },
    'H',
  );
  const text = [header, ...details.map((detail) => detail.fields)].map((fields) => fields.map(csvField).join(',')).join('\r\n');
  const name = `Reconcile2c2p_A_v2.1_${merchantId}_${currency}_${date}_${made.time}.csv`;
  return {
    status: 200,
    headers: {
      'content-type': 'text/csv; charset=utf-8',
      'content-disposition': `attachment; filename="${name}"`,
      'x-request-id': randomUUID(),
    },
    body: `${text}\r\n`,
  };
}
