/**
 * Amounts as 2C2P writes them: JSON numbers in major units, D(12,5), with the currency's own exponent.
 * Outgoing amounts are exact decimal literals; incoming ones are read back without float arithmetic.
 */
import { decimalToMinor } from '@/server/payments/money';

/** D(12,5): 12 integer digits at most. */
export const MAX_INTEGER_DIGITS = 12;

/** ISO 4217 exponents that differ from 2 among the currencies 2C2P settles. */
const CURRENCY_EXPONENT: Readonly<Record<string, number>> = { JPY: 0, KRW: 0, VND: 0 };

export function exponentOf(currency: string): number {
  return CURRENCY_EXPONENT[currency] ?? 2;
}

/** A positive safe integer with at most 12 integer digits in the currency's major unit. */
export function fitsAmount(amountMinor: number, currency: string): boolean {
  return Number.isSafeInteger(amountMinor) && amountMinor >= 1 && String(amountMinor).length <= MAX_INTEGER_DIGITS + exponentOf(currency);
}

/** A decimal that must reach the JSON text as a number literal, digit for digit. */
export class DecimalLiteral {
  constructor(readonly text: string) {}
}

/**
 * 2C2P amounts are JSON numbers. JSON.parse has turned them into doubles; String() gives back the
 * shortest decimal that reads as the same double, which is the amount exactly for anything up to 15
 * significant digits (every D(12,2) amount). Trailing zeros past the currency's exponent
 * ("168.00000") are dropped; other digits past it, exponent forms or signs make the amount invalid.
 */
export function claimAmountToMinor(value: unknown, currency: string): number | null {
  const text = amountText(value);
  if (text === null) return null;
  const match = /^(\d+)(?:\.(\d+))?$/.exec(text);
  if (!match) return null;
  const exponent = exponentOf(currency);
  const whole = match[1] ?? '';
  const fraction = (match[2] ?? '').replace(/0+$/, '');
  if (fraction.length > exponent) return null;
  return decimalToMinor(fraction ? `${whole}.${fraction}` : whole, exponent);
}

function amountText(value: unknown): string | null {
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : null;
  if (typeof value === 'string') return value;
  return null;
}
