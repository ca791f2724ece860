/**
 * What the merchant's fee contract with a gateway (server/config/fee-contract.ts) comes to on one
 * statement line: 对账 checks the gateway's fee on every line against it, as finance does with the
 * rate card in hand.
 *
 * base = round(amount × rate) + fixed; fee = base + round(base × vat) − round(base × wht), each
 * rounded half away from zero to the minor unit. A refund under pro_rata gives back its share on the
 * running total (so a payment refunded in full gives back exactly its fee, however the parts round).
 * Unset, a gateway's fees are summed and shown but not checked.
 */
import type { FeeContract } from '@/server/config/fee-contract';

/**
 * How far a line's fee may sit from the contract's and still be taken as equal: one minor unit, for
 * a gateway that rounds a part differently (per refund rather than on the running total, or in
 * another order when two refunds of one payment settle in the same second).
 */
export const FEE_TOLERANCE_MINOR = 1;

/** numerator / denominator rounded half away from zero, in integers (denominator > 0). */
function roundHalfUp(numerator: bigint, denominator: bigint): bigint {
  const magnitude = numerator < 0n ? -numerator : numerator;
  const rounded = (magnitude * 2n + denominator) / (denominator * 2n);
  return numerator < 0n ? -rounded : rounded;
}

const MILLION = 1_000_000n;

/** The contract's fee on a payment of `amountMinor`. */
export function contractFee(contract: FeeContract, amountMinor: number): number {
  const base = roundHalfUp(BigInt(amountMinor) * BigInt(contract.ratePpm), MILLION) + BigInt(contract.fixedMinor);
  const vat = roundHalfUp(base * BigInt(contract.vatPpm), MILLION);
  const wht = roundHalfUp(base * BigInt(contract.whtPpm), MILLION);
  return Number(base + vat - wht);
}

/** What a fee depends on, of one of our book entries (./match.ts BookEntry). */
export interface FeeSubject {
  kind: 'payment' | 'refund';
  amountMinor: number;
  /** A refund: the amount of its payment, and what earlier refunds of that payment returned. */
  chargeAmountMinor?: number;
  refundedBeforeMinor?: number;
}

/**
 * The fee a statement line should show for one of our book entries, signed as StatementLine.feeMinor
 * is: what the gateway took (a payment), or minus what it gave back (a refund). A refund needs the
 * payment it returns money of: its amount and what earlier refunds of it returned.
 */
export function expectedFee(contract: FeeContract, entry: FeeSubject): number {
  if (entry.kind === 'payment') return contractFee(contract, entry.amountMinor);
  const charge = entry.chargeAmountMinor ?? 0;
  if (contract.onRefund === 'kept' || charge <= 0) return 0;
  const fee = BigInt(contractFee(contract, charge));
  const before = BigInt(entry.refundedBeforeMinor ?? 0);
  const shareUpTo = (refunded: bigint) => roundHalfUp(fee * refunded, BigInt(charge));
  return -Number(shareUpTo(before + BigInt(entry.amountMinor)) - shareUpTo(before));
}
