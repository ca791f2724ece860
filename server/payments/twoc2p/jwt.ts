/**
 * 2C2P's JWTs: HS256 over the UTF-8 bytes of the merchant's secret key, as 2C2P's samples do. Claims
 * are written with exact decimal literals for amounts; an answer is believed only when it verifies.
 */
import { CompactSign, errors as joseErrors, jwtVerify } from 'jose';
import { DecimalLiteral } from './amounts';

/** The claims of a 2C2P JWT, or the fields of a plain 2C2P answer. */
export type Claims = Record<string, unknown>;

/** The merchant's secret key as jose takes it. */
export function jwtKey(secretKey: string): Uint8Array {
  return new TextEncoder().encode(secretKey);
}

/** JSON.stringify, except that DecimalLiteral values are written as number literals (168.00). */
export function jsonText(value: unknown): string {
  if (value instanceof DecimalLiteral) return value.text;
  if (Array.isArray(value)) return `[${value.map((item) => jsonText(item)).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const parts: string[] = [];
    for (const [key, item] of Object.entries(value)) {
      if (item !== undefined) parts.push(`${JSON.stringify(key)}:${jsonText(item)}`);
    }
    return `{${parts.join(',')}}`;
  }
  return JSON.stringify(value);
}

export async function signClaims(key: Uint8Array, claims: Claims): Promise<string> {
  return new CompactSign(new TextEncoder().encode(jsonText(claims))).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(key);
}

/** Verifies a JWT from 2C2P; null for anything that is not provably signed with our secret. */
export async function verifyJwt(key: Uint8Array, token: string): Promise<Claims | null> {
  try {
    const { payload } = await jwtVerify(token, key, { algorithms: ['HS256'] });
    return payload as Claims;
  } catch (err) {
    if (err instanceof joseErrors.JOSEError) return null;
    throw err;
  }
}
