/**
 * Matching one gateway's statement for one day against our books (对账), as a pure function: every
 * line of the statement matched to a payment or refund we recorded, and every payment and refund we
 * recorded for that day found on the statement — amounts and currencies equal, and, where the
 * merchant's fee contract is configured (./fees.ts), the gateway's fee what the contract says. What
 * does not match is classed, for a person to resolve:
 *
 *   unknown_payment   money at the gateway we have no record of (a payment on the statement, not in our books)
 *   missing_payment   a payment we recorded that the gateway's statement does not show
 *   amount_differs    the same payment (or refund) with another amount or currency on each side
 *   fee_differs       the same payment (or refund), amounts equal, the gateway's fee not the contract's
 *   missing_refund    a refund we recorded as done that the statement does not show
 *   unknown_refund    a refund on the statement that we never made
 *
 * Payments are matched by the gateway's trade number, refunds by our refund id (the gateway's own
 * refund id when the statement has no room for ours). Without a contract the fees are summed and
 * shown, not checked.
 */
import type { GatewayId, StatementLine } from '@/server/payments/gateway';
import type { FeeContract } from '@/server/config/fee-contract';
import { expectedFee, FEE_TOLERANCE_MINOR } from './fees';

export type { StatementLine };

/** One payment or refund in our books for that gateway and day. */
export interface BookEntry {
  kind: 'payment' | 'refund';
  orderId: string;
  outTradeNo: string;
  gatewayTradeNo: string;
  refundId?: string;
  gatewayRefundId?: string;
  amountMinor: number;
  currency: string;
  /** A refund: the amount of the payment it returns money of, and what earlier refunds of it returned (for the fee's share). */
  chargeAmountMinor?: number;
  refundedBeforeMinor?: number;
  /** fee_differs: the fee the contract gives this entry (signed as StatementLine.feeMinor). */
  feeMinor?: number;
}

/** In the order a person works through them (the console lists a day's mismatches so). */
export const MISMATCH_KINDS = [
  'unknown_payment',
  'missing_payment',
  'amount_differs',
  'fee_differs',
  'missing_refund',
  'unknown_refund',
] as const;
export type MismatchKind = (typeof MISMATCH_KINDS)[number];

export interface Mismatch {
  kind: MismatchKind;
  gateway: GatewayId;
  /** What names it, for a person and for the dedupe of a re-run: the trade or refund reference. */
  reference: string;
  outTradeNo: string;
  orderId: string | null;
  ours: BookEntry | null;
  theirs: StatementLine | null;
}

export interface Matched {
  lines: number;
  matched: number;
  /** The statement's fees, net of what refunds gave back. */
  feesMinor: number;
  /** Whether each line's fee was checked against a contract (none configured: summed only). */
  feesChecked: boolean;
  mismatches: Mismatch[];
}

const paymentKey = (entry: { gatewayTradeNo: string }) => `payment:${entry.gatewayTradeNo}`;
const refundKeys = (entry: { refundId?: string | undefined; gatewayRefundId?: string | undefined }) =>
  [entry.refundId ? `refund:${entry.refundId}` : undefined, entry.gatewayRefundId ? `gwrefund:${entry.gatewayRefundId}` : undefined].filter(
    (key): key is string => key !== undefined,
  );

/** The keys an entry or a line is matched by: a payment's trade number; a refund's ids, ours and the gateway's. */
export function entryKeys(entry: Pick<BookEntry, 'kind' | 'gatewayTradeNo' | 'refundId' | 'gatewayRefundId'>): string[] {
  return entry.kind === 'payment' ? [paymentKey(entry)] : refundKeys(entry);
}

export function matchStatement(
  gateway: GatewayId,
  statement: readonly StatementLine[],
  books: readonly BookEntry[],
  contract?: FeeContract,
): Matched {
  const ours = new Map<string, BookEntry>();
  for (const entry of books) {
    for (const key of entryKeys(entry)) ours.set(key, entry);
  }
  const seen = new Set<BookEntry>();
  const mismatches: Mismatch[] = [];
  let matched = 0;
  for (const line of statement) {
    const entry = entryKeys(line)
      .map((key) => ours.get(key))
      .find((found) => found !== undefined);
    // A second line for one entry of ours is money we have no record of either: the gateway lists
    // (and may have settled) the same trade twice.
    if (!entry || seen.has(entry)) {
      const kind = line.kind === 'payment' ? 'unknown_payment' : 'unknown_refund';
      mismatches.push({
        kind,
        gateway,
        reference: referenceOf(line),
        outTradeNo: line.outTradeNo,
        orderId: entry?.orderId ?? null,
        ours: null,
        theirs: line,
      });
      continue;
    }
    seen.add(entry);
    if (entry.amountMinor !== line.amountMinor || entry.currency !== line.currency) {
      mismatches.push({
        kind: 'amount_differs',
        gateway,
        reference: referenceOf(entry),
        outTradeNo: entry.outTradeNo,
        orderId: entry.orderId,
        ours: entry,
        theirs: line,
      });
      continue;
    }
    const fee = contract ? expectedFee(contract, entry) : line.feeMinor;
    if (Math.abs(fee - line.feeMinor) > FEE_TOLERANCE_MINOR) {
      mismatches.push({
        kind: 'fee_differs',
        gateway,
        reference: referenceOf(entry),
        outTradeNo: entry.outTradeNo,
        orderId: entry.orderId,
        ours: { ...entry, feeMinor: fee },
        theirs: line,
      });
      continue;
    }
    matched++;
  }
  for (const entry of books) {
    if (seen.has(entry)) continue;
    const kind = entry.kind === 'payment' ? 'missing_payment' : 'missing_refund';
    mismatches.push({
      kind,
      gateway,
      reference: referenceOf(entry),
      outTradeNo: entry.outTradeNo,
      orderId: entry.orderId,
      ours: entry,
      theirs: null,
    });
  }
  const feesMinor = statement.reduce((sum, line) => sum + line.feeMinor, 0);
  return { lines: statement.length, matched, feesMinor, feesChecked: contract !== undefined, mismatches };
}

function referenceOf(entry: {
  kind: 'payment' | 'refund';
  gatewayTradeNo: string;
  refundId?: string | undefined;
  gatewayRefundId?: string | undefined;
}): string {
  if (entry.kind === 'payment') return entry.gatewayTradeNo;
  return entry.refundId ?? entry.gatewayRefundId ?? entry.gatewayTradeNo;
}
