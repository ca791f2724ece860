/**
 * 2C2P PGW v4.3 wire helpers for the sandbox: HS256 JWTs, D(12,5) amounts, response codes.
 *
 * Signing is done here with node:crypto rather than jose, on purpose: the notifier's buildRequest is
 * synchronous (jose signs through WebCrypto, which is async), and a second, independent
 * implementation of "HS256 over the UTF-8 bytes of the merchant's secret key" checks that the
 * adapter (which uses jose) speaks the same JWT as the gateway, not the same library.
 * Verification of merchants' requests uses jose (alg pinned to HS256).
 */
import { createHmac } from 'node:crypto';
import { decodeJwt, decodeProtectedHeader, errors as joseErrors, jwtVerify } from 'jose';

// ---------------------------------------------------------------------------------------------
// Response codes

/**
 * The codes the sandbox answers with. 0000/0001/0003/2000/2001/2002/4xxx/9015/9042/6103 are the ones
 * shared/gateways.md lists; the other 9xxx validation codes and their descriptions follow 2C2P's
 * published "API response code" list as far as it could be checked [unverified: the exact numbers
 * of 9004–9010, 9040 and 0999 come from that list, not from a live 2C2P answer].
 */
export const RESP_DESC = {
  '0000': 'Success',
  '0001': 'Transaction is pending',
  '0003': 'Transaction is cancelled',
  '0999': 'System error',
  '2000': 'Transaction is completed, please do payment inquiry request for full payment information.',
  '2002': 'Transaction not found',
  '4005': 'Do not honor',
  '4014': 'Invalid card number',
  '4051': 'Insufficient funds',
  '4054': 'Expired card',
  '4062': 'Restricted card',
  '6103': 'Invalid JWT',
  '9004': 'The value is not valid',
  '9005': 'Some mandatory fields are missing',
  '9006': 'This field exceeded its authorized length',
  '9007': 'Invalid merchant',
  '9008': 'Invalid payment expiry',
  '9009': 'Amount is invalid',
  '9010': 'Invalid currency code',
  '9015': 'Existing invoice number',
  '9040': 'The token is invalid',
  '9042': 'Hash value mismatch',
} as const;

export type RespCode = keyof typeof RESP_DESC;

/**
 * The Payment Maintenance API's own result codes (two digits), as 2C2P's "Payment Maintenance Result
 * Codes" page lists them: refund and refund-status answers carry these, not PGW's four-digit codes.
 * Only the ones the sandbox can produce are here.
 */
export const MAINTENANCE_DESC = {
  '00': 'Success',
  '02': 'Invalid Request',
  '10': 'Missing Compulsory Values',
  '11': 'Request validation failed.',
  '12': 'Transaction status is not valid to perform your action.',
  '13': 'Invalid hash value.',
  '14': 'Invalid merchant ID.',
  '15': 'Invalid invoice number.',
  '16': "Requested transaction doesn't exist.",
  '17': 'Request type is invalid.',
  '18': 'Invalid Action Amount.',
  '40': 'Refund amount is more than transaction amount.',
  '49': 'Transaction is already fully refunded.',
  '96': 'Unable to decrypt.',
  '97': 'Process is not supported.',
  '99': 'Unable to complete the request.',
} as const;

export type MaintenanceCode = keyof typeof MAINTENANCE_DESC;

// ---------------------------------------------------------------------------------------------
// JSON with exact decimal literals

/** A decimal written into JSON as a number literal, digit for digit (no double in between). */
export class DecimalLiteral {
  constructor(readonly text: string) {
    if (!/^\d+(\.\d+)?$/.test(text)) throw new Error(`not a decimal: ${text}`);
  }
}

/**
 * JSON.stringify that writes DecimalLiteral values as number literals ("amount":168.00). 2C2P's
 * amounts are JSON numbers; building the text ourselves keeps them exact on the way out.
 */
export function jsonText(value: unknown): string {
  if (value instanceof DecimalLiteral) return value.text;
  if (Array.isArray(value)) return `[${value.map((item) => jsonText(item)).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const parts: string[] = [];
    for (const [key, item] of Object.entries(value)) {
      if (item === undefined) continue;
      parts.push(`${JSON.stringify(key)}:${jsonText(item)}`);
    }
    return `{${parts.join(',')}}`;
  }
  return JSON.stringify(value);
}

// ---------------------------------------------------------------------------------------------
// JWT (HS256, key = UTF-8 bytes of the merchant's secret key, as 2C2P's samples do)

const JWT_HEADER = Buffer.from(JSON.stringify({ alg: 'HS256', typ: 'JWT' })).toString('base64url');

export function signJwt(claims: Record<string, unknown>, secretKey: string): string {
  const payload = Buffer.from(jsonText(claims), 'utf8').toString('base64url');
  const signature = createHmac('sha256', secretKey).update(`${JWT_HEADER}.${payload}`).digest('base64url');
  return `${JWT_HEADER}.${payload}.${signature}`;
}

export type Claims = Record<string, unknown>;

/** Reads a JWT's claims WITHOUT verifying it, to find whose secret verifies it; null if not a JWT. */
export function peekJwt(token: string): Claims | null {
  try {
    const header = decodeProtectedHeader(token);
    // 2C2P only issues and accepts HS256; `none` or an RSA/EC alg is not a 2C2P JWT at all.
    if (header.alg !== 'HS256') return null;
    return decodeJwt(token) as Claims;
  } catch {
    return null;
  }
}

export type VerifyResult = { kind: 'verified'; claims: Claims } | { kind: 'bad_signature' } | { kind: 'invalid' };

export async function verifyJwt(token: string, secretKey: string): Promise<VerifyResult> {
  try {
    const { payload } = await jwtVerify(token, new TextEncoder().encode(secretKey), { algorithms: ['HS256'] });
    return { kind: 'verified', claims: payload as Claims };
  } catch (err) {
    if (err instanceof joseErrors.JWSSignatureVerificationFailed) return { kind: 'bad_signature' };
    return { kind: 'invalid' };
  }
}

// ---------------------------------------------------------------------------------------------
// Amounts and currencies

/**
 * ISO 4217 minor-unit exponents of the currencies the sandbox accepts (a subset of 2C2P's list).
 * The ledger counts minor units, so an amount finer than the currency's minor unit is refused.
 */
export const CURRENCY_EXPONENT: Readonly<Record<string, number>> = {
  AUD: 2,
  BDT: 2,
  CAD: 2,
  CHF: 2,
  CNY: 2,
  EUR: 2,
  GBP: 2,
  HKD: 2,
  IDR: 2,
  INR: 2,
  JPY: 0,
  KHR: 2,
  KRW: 0,
  LAK: 2,
  LKR: 2,
  MMK: 2,
  MYR: 2,
  NPR: 2,
  NZD: 2,
  PHP: 2,
  SGD: 2,
  THB: 2,
  TWD: 2,
  USD: 2,
  VND: 0,
};

/** D(12,5): up to 12 integer digits (leading zeros allowed, as in 2C2P's "000000002500.90000"). */
const AMOUNT_RE = /^(\d{1,12})(?:\.(\d{1,5}))?$/;

/**
 * A claim amount (JSON number or string) → minor units; null if invalid, zero, or finer than the
 * currency allows. A JSON number has been through a double in JSON.parse; String() gives back its
 * shortest decimal form, which is exact for every amount with ≤ 15 significant digits — all D(12,2)
 * amounts — and anything that comes back in exponent form is refused.
 */
export function parseAmount(value: unknown, exponent: number): bigint | null {
  let text: string;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) return null;
    text = String(value);
  } else if (typeof value === 'string') {
    text = value;
  } else {
    return null;
  }
  const match = AMOUNT_RE.exec(text);
  if (!match) return null;
  const whole = match[1] ?? '0';
  const fraction = match[2] ?? '';
  if (/[1-9]/.test(fraction.slice(exponent))) return null;
  const kept = fraction.slice(0, exponent).padEnd(exponent, '0');
  const minor = BigInt(whole) * 10n ** BigInt(exponent) + BigInt(kept || '0');
  return minor > 0n ? minor : null;
}

/** 16800n, 2 → "168.00"; 1500n, 0 → "1500". */
export function formatAmount(minor: bigint, exponent: number): string {
  if (exponent === 0) return minor.toString();
  const digits = minor.toString().padStart(exponent + 1, '0');
  return `${digits.slice(0, -exponent)}.${digits.slice(-exponent)}`;
}

// ---------------------------------------------------------------------------------------------
// Cards

export function luhnValid(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i -= 1) {
    let d = Number(digits[i]);
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return sum % 10 === 0;
}

/** 2C2P masks card numbers as the first 6 and last 4 digits: 411111XXXXXX1111. */
export function maskCard(cardNo: string): string {
  return `${cardNo.slice(0, 6)}${'X'.repeat(Math.max(0, cardNo.length - 10))}${cardNo.slice(-4)}`;
}

// ---------------------------------------------------------------------------------------------
// Time

/**
 * transactionDateTime, `yyyyMMddHHmmss`. 2C2P does not say which zone [unverified]; the sandbox uses
 * UTC+8 (Singapore, 2C2P's head office; also the CNY demo's Beijing time).
 */
export function transactionDateTime(date: Date): string {
  return new Date(date.getTime() + 8 * 3_600_000).toISOString().slice(0, 19).replace(/[-T:]/g, '');
}

/** Canonical JSON (keys sorted at every level) for request fingerprints. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item)).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value)
      .filter(([, item]) => item !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonicalJson(item)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}
