/**
 * What every gateway's daily statement (对账单) is built from, so that finance can reconcile against
 * the sandbox as it does against the real gateways:
 *
 *  - the day's lines: the payments and refunds that succeeded, per merchant, on one calendar day in
 *    the gateway's own time zone, read from the sandbox's ledger (psp_sandbox.charges and
 *    psp_sandbox.refunds) — the same ground truth GET /ledger shows;
 *  - the fee each gateway takes (FEE_RULES, the one place they live);
 *  - the merchant's fee contract (feeContract), what GET /sandbox/credentials publishes of FEE_RULES
 *    so that a reconciler can check every fee a statement shows;
 *  - discrepancies on demand (psp_sandbox.statement_discrepancies): a payment the merchant never
 *    had, a payment or a refund left out, an amount that differs, a fee that is not the contract's.
 *    They change what the statement says and nothing else — the ledger, the query APIs and the
 *    notifications stay true — which is exactly the disagreement a reconciler has to catch.
 *
 * Each gateway's format and delivery lives in its own file: alipay-bill.ts, wechatpay-bill.ts,
 * stripe-balance.ts, twoc2p-settlement.ts. docs/statements.md describes them for the merchant's side.
 *
 *   POST   /sandbox/statements/discrepancies  {gateway, date, kind, outTradeNo?, amountMinor?, …} → 201
 *   GET    /sandbox/statements/discrepancies[?gateway=&date=]                                      → 200
 *   DELETE /sandbox/statements/discrepancies[?gateway=&date=]                                      → 204
 */
import { randomInt } from 'node:crypto';
import { z } from 'zod';
import { json, type SandboxRequest, type SandboxResponse } from './gateway-module';
import type { Queryable } from './store';
import { newId } from './stripe-objects';
import { newTransactionId } from './wechatpay-protocol';

export const STATEMENT_GATEWAYS = ['alipay', 'wechatpay', 'stripe', '2c2p'] as const;
export type StatementGateway = (typeof STATEMENT_GATEWAYS)[number];

// ---------------------------------------------------------------------------------------------
// Days

/**
 * The day a statement covers, in the gateway's own zone: Beijing for Alipay and WeChat Pay (their
 * statements and timestamps are Beijing time), UTC for Stripe (balance transactions carry Unix
 * times; a "day" of them is a UTC day, as Stripe's reports default to), Bangkok for 2C2P (its
 * reconciliation files are dropped "before 4:00AM GMT+7"). None of the three zones has daylight
 * saving time, so a fixed offset is exact.
 */
export const STATEMENT_ZONE_OFFSET_MINUTES: Readonly<Record<StatementGateway, number>> = {
  alipay: 8 * 60,
  wechatpay: 8 * 60,
  stripe: 0,
  '2c2p': 7 * 60,
};

const DATE_RE = /^(\d{4})-(\d{2})-(\d{2})$/;

/** A real calendar date written yyyy-MM-dd, or null. */
export function parseBillDate(text: unknown): string | null {
  if (typeof text !== 'string') return null;
  const match = DATE_RE.exec(text);
  if (!match) return null;
  const date = new Date(`${text}T00:00:00Z`);
  return !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 10) === text ? text : null;
}

/** The wall clock in the gateway's zone, as a Date whose UTC fields read as local time. */
export function wallClock(gateway: StatementGateway, at: Date): Date {
  return new Date(at.getTime() + STATEMENT_ZONE_OFFSET_MINUTES[gateway] * 60_000);
}

/** The gateway's calendar date of an instant, yyyy-MM-dd. */
export function billDateOf(gateway: StatementGateway, at: Date): string {
  return wallClock(gateway, at).toISOString().slice(0, 10);
}

/** [start, end) of a gateway's calendar day. */
export function dayWindow(gateway: StatementGateway, date: string): { start: Date; end: Date } {
  const start = new Date(new Date(`${date}T00:00:00Z`).getTime() - STATEMENT_ZONE_OFFSET_MINUTES[gateway] * 60_000);
  return { start, end: new Date(start.getTime() + 86_400_000) };
}

/**
 * Whether a statement for `date` can be asked for now. The real gateways publish a day's statement
 * the next morning (Alipay and WeChat Pay after about 10:00 Beijing time, 2C2P before 04:00
 * Bangkok time) and refuse the current day; the sandbox also serves the current day as it stands
 * so far, so a test need not wait for tomorrow. A day that has not begun has no statement anywhere.
 */
export function isStatementDay(gateway: StatementGateway, date: string, now = new Date()): boolean {
  return date <= billDateOf(gateway, now);
}

// ---------------------------------------------------------------------------------------------
// Fees

export interface FeeRule {
  /** Of the payment's amount, in parts per million (6000 = 0.6 %). */
  ratePpm: bigint;
  /** What a refund does to the payment's fee. */
  onRefund: 'returned_pro_rata' | 'kept';
  /** The rate as the statement prints it. */
  label: string;
}

/**
 * The fees the statements show, every one rounded half up to the currency's minor unit (分 for the
 * yuan):
 *  - Alipay 当面付 0.6 % of 订单金额, as its standard rate card says; on a refund Alipay gives the fee
 *    back in proportion [unverified for every product and contract: Alipay's rate card says fees
 *    are returned pro rata on refunds for its standard products; some contracts keep them].
 *  - WeChat Pay 0.6 % (费率 printed "0.60%"); refunds give the fee back in proportion, which its
 *    statements show as a negative 手续费 on the REFUND row (seen in merchants' downloaded bills,
 *    e.g. `…,\`-0.27000,\`0.54%,…` for a 50.00 refund).
 *  - Stripe 3.4 % + 0. Stripe publishes no CNY price (CNY is a presentment currency only; the fee
 *    depends on the account's country, the card's origin and the conversion to the settlement
 *    currency): 3.4 % is its Hong Kong / Singapore card rate, and the fixed part (HK$2.35, S$0.50)
 *    is left out because the sandbox keeps balances in the charge's own currency with no
 *    conversion [unverified]. Stripe does not return processing fees when a charge is refunded.
 *  - 2C2P 3.0 % MDR, plus 7 % VAT on the MDR and 3 % withholding tax on the MDR credited back, the
 *    arithmetic 2C2P's sample reconciliation files show (MDR 48.00 → VAT 3.36, WHT 1.44, net =
 *    amount − MDR − VAT + WHT). Whether 2C2P returns the MDR on a refund is not documented: kept
 *    [unverified].
 */
export const FEE_RULES: Readonly<Record<StatementGateway, FeeRule>> = {
  alipay: { ratePpm: 6_000n, onRefund: 'returned_pro_rata', label: '0.60%' },
  wechatpay: { ratePpm: 6_000n, onRefund: 'returned_pro_rata', label: '0.60%' },
  stripe: { ratePpm: 34_000n, onRefund: 'kept', label: '3.40%' },
  '2c2p': { ratePpm: 30_000n, onRefund: 'kept', label: '3.00' },
};

/** 2C2P's taxes on its MDR, in parts per million of the MDR (see FEE_RULES). */
export const TWOC2P_MDR_TAXES = { vatPpm: 70_000n, withholdingPpm: 30_000n } as const;

/** numerator / denominator rounded half away from zero (denominator > 0). */
export function roundHalfUp(numerator: bigint, denominator: bigint): bigint {
  const magnitude = numerator < 0n ? -numerator : numerator;
  const rounded = (magnitude * 2n + denominator) / (denominator * 2n);
  return numerator < 0n ? -rounded : rounded;
}

/** The gateway's fee on a payment of `amountMinor`, as the contract has it (2C2P: its MDR, before the taxes on it). */
export function paymentFee(gateway: StatementGateway, amountMinor: bigint): bigint {
  return roundHalfUp(amountMinor * FEE_RULES[gateway].ratePpm, 1_000_000n);
}

/**
 * The fee a statement shows for a payment line: the contract's on the amount shown, plus what a
 * fee_differs discrepancy adds (2C2P: the MDR, on which its VAT and WHT are then computed). Every
 * bill module takes a payment's fee from here, so a changed fee reads the same in every column and
 * total. Never below 0: the tool refuses a change that would take it there, but an amount_differs
 * injected afterwards can still shrink the contract's part under a negative change.
 */
export function paymentLineFee(gateway: StatementGateway, line: PaymentLine): bigint {
  const fee = paymentFee(gateway, line.amountMinor) + line.feeChangeMinor;
  return fee < 0n ? 0n : fee;
}

/**
 * The part of its payment's fee a refund gives back (0 where the gateway keeps fees). Pro rata on
 * the running total, so the refunds of one payment give back exactly its fee once it is refunded in
 * full, however the rounding of each part falls.
 */
export function refundFee(gateway: StatementGateway, refund: RefundLine): bigint {
  if (FEE_RULES[gateway].onRefund === 'kept' || refund.chargeAmountMinor <= 0n) return 0n;
  const fee = paymentFee(gateway, refund.chargeAmountMinor);
  const before = roundHalfUp(fee * refund.refundedBeforeMinor, refund.chargeAmountMinor);
  const after = roundHalfUp(fee * (refund.refundedBeforeMinor + refund.amountMinor), refund.chargeAmountMinor);
  return after - before;
}

/** Parts per million written as a percentage, without trailing zeros: 6000 → "0.6%", 30000 → "3%". */
function percentOfPpm(ppm: bigint): string {
  const fraction = (ppm % 10_000n).toString().padStart(4, '0').replace(/0+$/, '');
  return `${ppm / 10_000n}${fraction === '' ? '' : `.${fraction}`}%`;
}

/**
 * The merchant's fee contract with a gateway as GET /sandbox/credentials publishes it, written from
 * FEE_RULES (and TWOC2P_MDR_TAXES) so that it cannot drift from the fees the statements show:
 * `;`-separated key=value pairs, `rate=<percent>%` first, then `vat=`/`wht=` where the gateway taxes
 * its fee, then `refund=pro_rata|kept` (always written). `fixed=` is left out: no rule has a fixed
 * part. The meaning — base = round(amount × rate) + fixed; fee = base + round(base × vat) −
 * round(base × wht), each half up to the minor unit; a pro_rata refund gives back its share on the
 * running total, as refundFee does — is docs/statements.md's.
 */
export function feeContract(gateway: StatementGateway): string {
  const rule = FEE_RULES[gateway];
  const terms = [`rate=${percentOfPpm(rule.ratePpm)}`];
  if (gateway === '2c2p') {
    terms.push(`vat=${percentOfPpm(TWOC2P_MDR_TAXES.vatPpm)}`, `wht=${percentOfPpm(TWOC2P_MDR_TAXES.withholdingPpm)}`);
  }
  terms.push(`refund=${rule.onRefund === 'returned_pro_rata' ? 'pro_rata' : 'kept'}`);
  return terms.join(';');
}

/** Minor units written as a decimal with `exponent` digits of the unit, padded to `decimals` places. */
export function formatMinor(minor: bigint, exponent = 2, decimals = exponent): string {
  const negative = minor < 0n;
  const scaled = (negative ? -minor : minor) * 10n ** BigInt(Math.max(0, decimals - exponent));
  const digits = scaled.toString().padStart(decimals + 1, '0');
  const text = decimals === 0 ? digits : `${digits.slice(0, -decimals)}.${digits.slice(-decimals)}`;
  return negative && scaled !== 0n ? `-${text}` : text;
}

// ---------------------------------------------------------------------------------------------
// The day's lines

export interface PaymentLine {
  merchantId: string;
  outTradeNo: string;
  /** The gateway's id of the payment (Alipay trade_no, WeChat transaction_id, Stripe's PaymentIntent — or its Charge for a phantom — and 2C2P's tranRef). */
  gatewayTradeNo: string;
  /** As the statement shows it: the ledger's amount, or the injected one. */
  amountMinor: bigint;
  currency: string;
  at: Date;
  /** An unknown_payment discrepancy: the gateway's own tables know nothing of it. */
  phantom: boolean;
  /** fee_differs discrepancies: what the statement's fee for it differs from the contract's by (0n: none). */
  feeChangeMinor: bigint;
}

export interface RefundLine {
  merchantId: string;
  outTradeNo: string;
  gatewayTradeNo: string;
  /** The merchant's refund id (Alipay out_request_no, WeChat out_refund_no, Stripe metadata[refund_id], 2C2P idempotencyID). */
  refundId: string;
  gatewayRefundId: string;
  amountMinor: bigint;
  currency: string;
  at: Date;
  /** The refunded payment's amount, and what earlier refunds of it gave back: for the fee. */
  chargeAmountMinor: bigint;
  refundedBeforeMinor: bigint;
}

export interface StatementLines {
  payments: PaymentLine[];
  refunds: RefundLine[];
}

export const DISCREPANCY_KINDS = ['unknown_payment', 'missing_payment', 'amount_differs', 'missing_refund', 'fee_differs'] as const;
export type DiscrepancyKind = (typeof DISCREPANCY_KINDS)[number];

export interface Discrepancy {
  id: number;
  gateway: StatementGateway;
  date: string;
  kind: DiscrepancyKind;
  merchantId: string | null;
  outTradeNo: string | null;
  refundId: string | null;
  /** unknown_payment: its amount; amount_differs and fee_differs: the change. */
  amountMinor: string | null;
  currency: string | null;
  /** unknown_payment: the gateway's id for it, and when it happened. */
  gatewayTradeNo: string | null;
  at: string | null;
  createdAt: string;
}

interface DiscrepancyRow {
  id: string;
  gateway: StatementGateway;
  bill_date: string;
  kind: DiscrepancyKind;
  merchant_id: string | null;
  out_trade_no: string | null;
  refund_id: string | null;
  amount_minor: string | null;
  currency: string | null;
  gateway_trade_no: string | null;
  at: Date | null;
  created_at: Date;
}

const DISCREPANCY_COLUMNS =
  'id, gateway, bill_date::text AS bill_date, kind, merchant_id, out_trade_no, refund_id, amount_minor, currency, gateway_trade_no, at, created_at';

function toDiscrepancy(row: DiscrepancyRow): Discrepancy {
  return {
    id: Number(row.id),
    gateway: row.gateway,
    date: row.bill_date,
    kind: row.kind,
    merchantId: row.merchant_id,
    outTradeNo: row.out_trade_no,
    refundId: row.refund_id,
    amountMinor: row.amount_minor,
    currency: row.currency,
    gatewayTradeNo: row.gateway_trade_no,
    at: row.at?.toISOString() ?? null,
    createdAt: row.created_at.toISOString(),
  };
}

export interface LinesQuery {
  gateway: StatementGateway;
  merchantIds: readonly string[];
  /** Only lines at or after `from` and before `to`; null: every line. */
  from: Date | null;
  to: Date | null;
  /**
   * The statement as it stood at this instant: later lines and later discrepancies are left out.
   * A download link re-creates exactly the file its hash was computed over.
   */
  asOf: Date;
}

/**
 * The payments and refunds that succeeded in a span, oldest first, as the statement shows them:
 * each line on its gateway date has that date's discrepancies applied.
 */
export async function readLines(db: Queryable, query: LinesQuery): Promise<StatementLines> {
  const { gateway, merchantIds, from, to, asOf } = query;
  const charges = await db<
    { merchant_id: string; out_trade_no: string; gateway_trade_no: string; amount_minor: string; currency: string; created_at: Date }[]
  >`
    SELECT merchant_id, out_trade_no, gateway_trade_no, amount_minor::text AS amount_minor, currency, created_at
      FROM psp_sandbox.charges
     WHERE gateway = ${gateway} AND status = 'succeeded' AND gateway_trade_no IS NOT NULL
       AND merchant_id = ANY(${merchantIds as string[]}::text[])
       AND (${from}::timestamptz IS NULL OR created_at >= ${from}::timestamptz)
       AND (${to}::timestamptz IS NULL OR created_at < ${to}::timestamptz)
       AND created_at <= ${asOf}
     ORDER BY created_at, id`;
  // A refund belongs to the day its money moved; its payment's amount and what earlier refunds of
  // that payment took are what its share of the fee is computed from.
  const refunds = await db<
    {
      merchant_id: string;
      out_trade_no: string;
      gateway_trade_no: string;
      refund_id: string;
      gateway_refund_id: string;
      amount_minor: string;
      currency: string;
      at: Date;
      charge_amount_minor: string | null;
      refunded_before_minor: string;
    }[]
  >`
    SELECT r.merchant_id, r.out_trade_no, r.gateway_trade_no, r.refund_id, r.gateway_refund_id,
           r.amount_minor::text AS amount_minor, r.currency, coalesce(r.settled_at, r.created_at) AS at,
           (SELECT c.amount_minor::text FROM psp_sandbox.charges c
             WHERE c.gateway = r.gateway AND c.merchant_id = r.merchant_id AND c.gateway_trade_no = r.gateway_trade_no
               AND c.status = 'succeeded' ORDER BY c.id LIMIT 1) AS charge_amount_minor,
           (SELECT coalesce(sum(e.amount_minor), 0)::text FROM psp_sandbox.refunds e
             WHERE e.gateway = r.gateway AND e.merchant_id = r.merchant_id AND e.gateway_trade_no = r.gateway_trade_no
               AND e.status = 'succeeded' AND e.id < r.id) AS refunded_before_minor
      FROM psp_sandbox.refunds r
     WHERE r.gateway = ${gateway} AND r.status = 'succeeded'
       AND r.merchant_id = ANY(${merchantIds as string[]}::text[])
       AND (${from}::timestamptz IS NULL OR coalesce(r.settled_at, r.created_at) >= ${from}::timestamptz)
       AND (${to}::timestamptz IS NULL OR coalesce(r.settled_at, r.created_at) < ${to}::timestamptz)
       AND coalesce(r.settled_at, r.created_at) <= ${asOf}
     ORDER BY coalesce(r.settled_at, r.created_at), r.id`;
  const discrepancies = (
    await db<DiscrepancyRow[]>`
      SELECT ${db.unsafe(DISCREPANCY_COLUMNS)} FROM psp_sandbox.statement_discrepancies
       WHERE gateway = ${gateway} AND created_at <= ${asOf}
         AND (${from}::timestamptz IS NULL OR bill_date >= ${from ? billDateOf(gateway, from) : null}::date)
         AND (${to}::timestamptz IS NULL OR bill_date <= ${to ? billDateOf(gateway, to) : null}::date)
       ORDER BY id`
  ).filter((d) => d.merchant_id === null || merchantIds.includes(d.merchant_id));

  const onDay = (kind: DiscrepancyKind, at: Date, merchantId: string, outTradeNo: string) =>
    discrepancies.filter(
      (d) =>
        d.kind === kind &&
        d.bill_date === billDateOf(gateway, at) &&
        d.out_trade_no === outTradeNo &&
        (d.merchant_id === null || d.merchant_id === merchantId),
    );

  const changeOn = (kind: 'amount_differs' | 'fee_differs', row: (typeof charges)[number]) =>
    onDay(kind, row.created_at, row.merchant_id, row.out_trade_no).reduce((sum, d) => sum + BigInt(d.amount_minor ?? '0'), 0n);
  const payments: PaymentLine[] = [];
  for (const row of charges) {
    if (onDay('missing_payment', row.created_at, row.merchant_id, row.out_trade_no).length > 0) continue;
    payments.push({
      merchantId: row.merchant_id,
      outTradeNo: row.out_trade_no,
      gatewayTradeNo: row.gateway_trade_no,
      amountMinor: BigInt(row.amount_minor) + changeOn('amount_differs', row),
      currency: row.currency,
      at: row.created_at,
      phantom: false,
      feeChangeMinor: changeOn('fee_differs', row),
    });
  }
  for (const d of discrepancies) {
    if (d.kind !== 'unknown_payment' || !d.at || !d.merchant_id || !d.out_trade_no || !d.gateway_trade_no) continue;
    if ((from && d.at < from) || (to && d.at >= to)) continue;
    payments.push({
      merchantId: d.merchant_id,
      outTradeNo: d.out_trade_no,
      gatewayTradeNo: d.gateway_trade_no,
      amountMinor: BigInt(d.amount_minor ?? '0'),
      currency: d.currency ?? 'CNY',
      at: d.at,
      phantom: true,
      feeChangeMinor: 0n,
    });
  }
  payments.sort((a, b) => a.at.getTime() - b.at.getTime());

  const kept = refunds.filter((row) =>
    onDay('missing_refund', row.at, row.merchant_id, row.out_trade_no).every((d) => d.refund_id !== null && d.refund_id !== row.refund_id),
  );
  return {
    payments,
    refunds: kept.map((row) => ({
      merchantId: row.merchant_id,
      outTradeNo: row.out_trade_no,
      gatewayTradeNo: row.gateway_trade_no,
      refundId: row.refund_id,
      gatewayRefundId: row.gateway_refund_id,
      amountMinor: BigInt(row.amount_minor),
      currency: row.currency,
      at: row.at,
      chargeAmountMinor: BigInt(row.charge_amount_minor ?? '0'),
      refundedBeforeMinor: BigInt(row.refunded_before_minor),
    })),
  };
}

/** One gateway day of one or more merchants (several Alipay apps of one seller share a bill). */
export function readDay(
  db: Queryable,
  gateway: StatementGateway,
  merchantIds: readonly string[],
  date: string,
  asOf: Date,
): Promise<StatementLines> {
  const { start, end } = dayWindow(gateway, date);
  return readLines(db, { gateway, merchantIds, from: start, to: end, asOf });
}

// ---------------------------------------------------------------------------------------------
// Bytes

/**
 * A module's answer whose body is bytes (a zip, a gzip stream): the server sends `bytes` instead of
 * the text body. SandboxResponse carries text only; this is its binary form.
 */
export interface BinarySandboxResponse extends SandboxResponse {
  bytes: Buffer;
}

/** What to send for an answer: its bytes when it has them, else its text. */
export function responseBody(answer: SandboxResponse): string | Buffer {
  const bytes = (answer as Partial<BinarySandboxResponse>).bytes;
  return Buffer.isBuffer(bytes) ? bytes : answer.body;
}

// ---------------------------------------------------------------------------------------------
// POST/GET/DELETE /sandbox/statements/discrepancies — the test tool (not any gateway's API)

export const DISCREPANCIES_PATH = '/sandbox/statements/discrepancies';

const discrepancyBody = z
  .object({
    gateway: z.enum(STATEMENT_GATEWAYS),
    date: z.string().refine((text) => parseBillDate(text) !== null, 'date: a calendar date written yyyy-MM-dd'),
    kind: z.enum(DISCREPANCY_KINDS),
    outTradeNo: z.string().min(1).max(64).optional(),
    amountMinor: z.number().int().safe().optional(),
    merchantId: z.string().min(1).max(64).optional(),
    /** missing_refund: only this refund (the merchant's refund id) rather than every refund of the order that day. */
    refundId: z.string().min(1).max(255).optional(),
    /** unknown_payment: its currency; default the merchant's latest payment's, else CNY (THB for 2C2P). */
    currency: z
      .string()
      .regex(/^[A-Za-z]{3}$/)
      .optional(),
  })
  .strict();

type DiscrepancyInput = z.infer<typeof discrepancyBody>;

class ToolError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The first merchant each gateway module creates: the one GET /sandbox/credentials hands out. */
const DEFAULT_MERCHANT: Readonly<Record<StatementGateway, { table: string; column: string }>> = {
  alipay: { table: 'psp_sandbox.alipay_apps', column: 'app_id' },
  wechatpay: { table: 'psp_sandbox.wechatpay_merchants', column: 'mchid' },
  stripe: { table: 'psp_sandbox.stripe_accounts', column: 'account_id' },
  '2c2p': { table: 'psp_sandbox.twoc2p_merchants', column: 'merchant_id' },
};

async function defaultMerchant(db: Queryable, gateway: StatementGateway): Promise<string> {
  const { table, column } = DEFAULT_MERCHANT[gateway];
  const [exists] = await db<{ found: boolean }[]>`SELECT to_regclass(${table}) IS NOT NULL AS found`;
  if (!exists?.found) throw new ToolError(400, 'GATEWAY_NOT_EMULATED', `this sandbox does not emulate ${gateway}`);
  const [row] = await db<{ id: string }[]>`
    SELECT ${db.unsafe(column)} AS id FROM ${db.unsafe(table)} ORDER BY created_at, ${db.unsafe(column)} LIMIT 1`;
  if (!row) throw new ToolError(400, 'NO_MERCHANT', `${gateway} has no merchant yet`);
  return row.id;
}

function randomDigits(count: number): string {
  let out = '';
  for (let i = 0; i < count; i += 1) out += String(randomInt(10));
  return out;
}

/**
 * The gateway's id for a payment the merchant never had, shaped like its real ones so the injected
 * line cannot be told from a real line: Alipay's 28-digit trade_no (Beijing date, "22", 18 digits),
 * WeChat's 28-digit transaction_id, a Stripe Charge id (the balance transaction's source) and a
 * 7-digit 2C2P tranRef.
 */
function phantomTradeNo(gateway: StatementGateway, at: Date): string {
  switch (gateway) {
    case 'alipay':
      return `${billDateOf('alipay', at).replaceAll('-', '')}22${randomDigits(18)}`;
    case 'wechatpay':
      return newTransactionId(at);
    case 'stripe':
      return newId('ch');
    case '2c2p':
      return `9${randomDigits(6)}`;
  }
}

/** An order number every gateway accepts (Alipay's is the strictest: letters, digits, underscore). */
function phantomOutTradeNo(): string {
  return `PO${Date.now().toString(36).toUpperCase()}${randomDigits(8)}`;
}

/** When an injected payment happened: now if now is on that day, else midday of that day. */
function phantomTime(gateway: StatementGateway, date: string, now: Date): Date {
  const { start, end } = dayWindow(gateway, date);
  return now >= start && now < end ? now : new Date(start.getTime() + 12 * 3_600_000);
}

/** The merchants whose ledger has a successful payment of `outTradeNo` on the input's day (none: nothing to change). */
async function merchantsPaid(db: Queryable, input: DiscrepancyInput, outTradeNo: string): Promise<string[]> {
  const { start, end } = dayWindow(input.gateway, input.date);
  const rows = await db<{ merchant_id: string }[]>`
    SELECT DISTINCT merchant_id FROM psp_sandbox.charges
     WHERE gateway = ${input.gateway} AND status = 'succeeded' AND out_trade_no = ${outTradeNo}
       AND (${input.merchantId ?? null}::text IS NULL OR merchant_id = ${input.merchantId ?? null}::text)
       AND created_at >= ${start} AND created_at < ${end}`;
  return rows.map((row) => row.merchant_id);
}

/** fee_differs' default: ¥1.00 (100 fen) more taken, a difference no rounding explains. */
const DEFAULT_FEE_CHANGE_MINOR = 100;

/**
 * What a discrepancy on a payment keeps in amount_minor: the change of amount_differs (default +1)
 * or of fee_differs (default +100), nothing for missing_payment. A fee change is refused when it
 * would take the fee of one of the order's lines below 0 on the statement as it stands now (its
 * amount_differs and earlier fee_differs included): no gateway pays a merchant for a payment.
 */
async function paymentChange(db: Queryable, input: DiscrepancyInput, outTradeNo: string, merchantIds: string[]): Promise<string | null> {
  if (input.kind === 'missing_payment') {
    if (input.amountMinor !== undefined) throw new ToolError(400, 'INVALID_DISCREPANCY', 'amountMinor: not for missing_payment');
    return null;
  }
  const change = input.amountMinor ?? (input.kind === 'fee_differs' ? DEFAULT_FEE_CHANGE_MINOR : 1);
  if (change === 0) throw new ToolError(400, 'INVALID_DISCREPANCY', 'amountMinor: the change cannot be 0');
  if (input.kind !== 'fee_differs') return String(change);
  const lines = await readDay(db, input.gateway, merchantIds, input.date, new Date());
  for (const line of lines.payments) {
    if (line.phantom || line.outTradeNo !== outTradeNo) continue;
    const fee = paymentFee(input.gateway, line.amountMinor) + line.feeChangeMinor;
    if (fee + BigInt(change) < 0n) {
      throw new ToolError(
        400,
        'INVALID_DISCREPANCY',
        `amountMinor: the fee of ${outTradeNo} is ${fee} minor units on ${input.date}; a change of ${change} would take it below 0`,
      );
    }
  }
  return String(change);
}

async function ledgerHasRefund(db: Queryable, input: DiscrepancyInput, outTradeNo: string): Promise<boolean> {
  const { start, end } = dayWindow(input.gateway, input.date);
  const rows = await db<{ one: number }[]>`
    SELECT 1 AS one FROM psp_sandbox.refunds
     WHERE gateway = ${input.gateway} AND status = 'succeeded' AND out_trade_no = ${outTradeNo}
       AND (${input.refundId ?? null}::text IS NULL OR refund_id = ${input.refundId ?? null}::text)
       AND (${input.merchantId ?? null}::text IS NULL OR merchant_id = ${input.merchantId ?? null}::text)
       AND coalesce(settled_at, created_at) >= ${start} AND coalesce(settled_at, created_at) < ${end}
     LIMIT 1`;
  return rows.length > 0;
}

async function injectDiscrepancy(db: Queryable, input: DiscrepancyInput): Promise<Discrepancy> {
  const now = new Date();
  const base = {
    gateway: input.gateway,
    bill_date: input.date,
    kind: input.kind,
    merchant_id: input.merchantId ?? null,
    out_trade_no: input.outTradeNo ?? null,
    refund_id: null as string | null,
    amount_minor: null as string | null,
    currency: null as string | null,
    gateway_trade_no: null as string | null,
    at: null as Date | null,
  };
  const unknownOrder = (what: string) =>
    new ToolError(
      404,
      'NOT_IN_LEDGER',
      `no ${what} of out_trade_no ${input.outTradeNo ?? ''} succeeded at ${input.gateway} on ${input.date}`,
    );
  switch (input.kind) {
    case 'unknown_payment': {
      if (input.refundId !== undefined) throw new ToolError(400, 'INVALID_DISCREPANCY', 'refundId: only for missing_refund');
      const amount = input.amountMinor ?? 1000;
      if (amount <= 0) throw new ToolError(400, 'INVALID_DISCREPANCY', 'amountMinor: the unknown payment needs a positive amount');
      const merchantId = input.merchantId ?? (await defaultMerchant(db, input.gateway));
      const [latest] = await db<{ currency: string }[]>`
        SELECT currency FROM psp_sandbox.charges
         WHERE gateway = ${input.gateway} AND merchant_id = ${merchantId} AND status = 'succeeded'
         ORDER BY id DESC LIMIT 1`;
      const at = phantomTime(input.gateway, input.date, now);
      Object.assign(base, {
        merchant_id: merchantId,
        out_trade_no: input.outTradeNo ?? phantomOutTradeNo(),
        amount_minor: String(amount),
        currency: (input.currency ?? latest?.currency ?? (input.gateway === '2c2p' ? 'THB' : 'CNY')).toUpperCase(),
        gateway_trade_no: phantomTradeNo(input.gateway, at),
        at,
      });
      break;
    }
    case 'missing_payment':
    case 'amount_differs':
    case 'fee_differs': {
      if (input.outTradeNo === undefined) throw new ToolError(400, 'INVALID_DISCREPANCY', `outTradeNo: ${input.kind} names a payment`);
      if (input.refundId !== undefined) throw new ToolError(400, 'INVALID_DISCREPANCY', 'refundId: only for missing_refund');
      const merchantIds = await merchantsPaid(db, input, input.outTradeNo);
      if (merchantIds.length === 0) throw unknownOrder('payment');
      base.amount_minor = await paymentChange(db, input, input.outTradeNo, merchantIds);
      break;
    }
    case 'missing_refund': {
      if (input.outTradeNo === undefined)
        throw new ToolError(400, 'INVALID_DISCREPANCY', 'outTradeNo: missing_refund names the refunded order');
      if (input.amountMinor !== undefined) throw new ToolError(400, 'INVALID_DISCREPANCY', 'amountMinor: not for missing_refund');
      if (!(await ledgerHasRefund(db, input, input.outTradeNo))) throw unknownOrder('refund');
      base.refund_id = input.refundId ?? null;
      break;
    }
  }
  const [row] = await db<DiscrepancyRow[]>`
    INSERT INTO psp_sandbox.statement_discrepancies
      (gateway, bill_date, kind, merchant_id, out_trade_no, refund_id, amount_minor, currency, gateway_trade_no, at)
    VALUES (${base.gateway}, ${base.bill_date}, ${base.kind}, ${base.merchant_id}, ${base.out_trade_no}, ${base.refund_id},
            ${base.amount_minor}, ${base.currency}, ${base.gateway_trade_no}, ${base.at})
    RETURNING ${db.unsafe(DISCREPANCY_COLUMNS)}`;
  if (!row) throw new Error('INSERT … RETURNING returned no row');
  return toDiscrepancy(row);
}

function readFilter(url: URL): { gateway: string | null; date: string | null } {
  const gateway = url.searchParams.get('gateway');
  const date = url.searchParams.get('date');
  if (gateway !== null && !(STATEMENT_GATEWAYS as readonly string[]).includes(gateway)) {
    throw new ToolError(400, 'INVALID_QUERY', `gateway: one of ${STATEMENT_GATEWAYS.join(', ')}`);
  }
  if (date !== null && parseBillDate(date) === null) throw new ToolError(400, 'INVALID_QUERY', 'date: yyyy-MM-dd');
  return { gateway, date };
}

async function answerDiscrepancies(
  db: Queryable,
  request: Pick<SandboxRequest, 'method' | 'url' | 'headers' | 'body'>,
): Promise<SandboxResponse> {
  if (request.method === 'GET') {
    const { gateway, date } = readFilter(request.url);
    const rows = await db<DiscrepancyRow[]>`
      SELECT ${db.unsafe(DISCREPANCY_COLUMNS)} FROM psp_sandbox.statement_discrepancies
       WHERE (${gateway}::text IS NULL OR gateway = ${gateway}::text) AND (${date}::date IS NULL OR bill_date = ${date}::date)
       ORDER BY id`;
    return json(200, { discrepancies: rows.map(toDiscrepancy) });
  }
  if (request.method === 'DELETE') {
    const { gateway, date } = readFilter(request.url);
    await db`
      DELETE FROM psp_sandbox.statement_discrepancies
       WHERE (${gateway}::text IS NULL OR gateway = ${gateway}::text) AND (${date}::date IS NULL OR bill_date = ${date}::date)`;
    return { status: 204, headers: {}, body: '' };
  }
  if (request.method !== 'POST') throw new ToolError(405, 'METHOD_NOT_ALLOWED', 'use GET, POST or DELETE');
  // JSON only: a page elsewhere cannot post JSON without a CORS preflight (see server.ts).
  if ((request.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase() !== 'application/json') {
    throw new ToolError(415, 'UNSUPPORTED_MEDIA_TYPE', 'send the discrepancy as JSON with content-type: application/json');
  }
  let body: unknown;
  try {
    body = JSON.parse(request.body);
  } catch {
    throw new ToolError(400, 'INVALID_JSON', 'the body is not valid JSON');
  }
  const parsed = discrepancyBody.safeParse(body);
  if (!parsed.success) {
    const message = parsed.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; ');
    throw new ToolError(400, 'INVALID_DISCREPANCY', message);
  }
  return json(201, { discrepancy: await injectDiscrepancy(db, parsed.data) });
}

/** The discrepancy tool, answered in the sandbox's own `{ error: { code, message } }` shape. */
export async function discrepanciesTool(
  db: Queryable,
  request: Pick<SandboxRequest, 'method' | 'url' | 'headers' | 'body'>,
): Promise<SandboxResponse> {
  try {
    return await answerDiscrepancies(db, request);
  } catch (err) {
    if (err instanceof ToolError) return json(err.status, { error: { code: err.code, message: err.message } });
    throw err;
  }
}
