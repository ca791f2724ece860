/**
 * Conversions between PayOnce's integer minor units and the decimal strings gateways put on the wire
 * ("12.30"). String and BigInt arithmetic only: 0.1 + 0.2 must never reach a gateway as
 * "0.30000000000000004", and "19.99" must never come back as 1998 fen.
 */

/** 1999 → "19.99" (exponent 2). Throws on anything but a non-negative safe integer. */
export function minorToDecimal(amountMinor: number, exponent = 2): string {
  if (!Number.isSafeInteger(amountMinor) || amountMinor < 0) {
    throw new RangeError(`amount in minor units must be a non-negative safe integer, got ${amountMinor}`);
  }
  if (exponent === 0) return String(amountMinor);
  const digits = String(amountMinor).padStart(exponent + 1, '0');
  return `${digits.slice(0, -exponent)}.${digits.slice(-exponent)}`;
}

/**
 * "19.99" → 1999, "20" → 2000, "0.5" → 50 (exponent 2). Null for anything else: signs, exponents,
 * more decimals than the currency has, or a value beyond Number.MAX_SAFE_INTEGER.
 */
export function decimalToMinor(text: string, exponent = 2): number | null {
  const match = /^(\d+)(?:\.(\d+))?$/.exec(text);
  if (!match) return null;
  const [, whole = '', fraction = ''] = match;
  if (fraction.length > exponent) return null;
  const minor = BigInt(whole) * 10n ** BigInt(exponent) + BigInt(fraction.padEnd(exponent, '0') || '0');
  return minor <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(minor) : null;
}
