/**
 * Anonymous customers: the first request gets a signed, httpOnly session cookie carrying a fresh
 * customer id, and that id is the scope of every idempotency key the customer sends. The signature
 * (HMAC-SHA256) stops anyone from claiming another customer's id and so reading or replaying their
 * stored responses.
 */
import { createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export const SESSION_COOKIE = 'payonce_session';
/** A year: the cookie only identifies an anonymous cart owner; nothing sensitive rides on it. */
const MAX_AGE_SECONDS = 365 * 24 * 60 * 60;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function sign(secret: string, customerId: string): string {
  return createHmac('sha256', secret).update(customerId).digest('base64url');
}

export function parseCookies(header: string | null): Map<string, string> {
  const cookies = new Map<string, string>();
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0) continue;
    const name = part.slice(0, eq).trim();
    if (!cookies.has(name)) cookies.set(name, decodeURIComponent(part.slice(eq + 1).trim()));
  }
  return cookies;
}

/** The customer id carried by a valid session cookie, or undefined for a missing or forged one. */
export function verifySession(secret: string, cookieHeader: string | null): string | undefined {
  const value = parseCookies(cookieHeader).get(SESSION_COOKIE);
  if (!value) return undefined;
  const dot = value.lastIndexOf('.');
  const customerId = value.slice(0, dot);
  if (dot < 0 || !UUID.test(customerId)) return undefined;
  const expected = Buffer.from(sign(secret, customerId));
  const actual = Buffer.from(value.slice(dot + 1));
  return expected.length === actual.length && timingSafeEqual(expected, actual) ? customerId : undefined;
}

export function issueSession(secret: string, options: { secure: boolean }): { customerId: string; setCookie: string } {
  const customerId = randomUUID();
  const attributes = [
    `${SESSION_COOKIE}=${customerId}.${sign(secret, customerId)}`,
    'Path=/',
    'HttpOnly',
    'SameSite=Lax',
    `Max-Age=${MAX_AGE_SECONDS}`,
  ];
  if (options.secure) attributes.push('Secure');
  return { customerId, setCookie: attributes.join('; ') };
}

const globalForSecret = globalThis as unknown as { __payonceSessionSecret?: string };

/**
 * SESSION_SECRET in production (every instance must share it). On a developer's machine, a random
 * secret is made once and kept under .data/ so sessions survive restarts.
 */
export function sessionSecret(): string {
  if (process.env.SESSION_SECRET) return process.env.SESSION_SECRET;
  if (globalForSecret.__payonceSessionSecret) return globalForSecret.__payonceSessionSecret;
  const file = path.join(process.cwd(), '.data', 'session-secret');
  if (!existsSync(file)) {
    mkdirSync(path.dirname(file), { recursive: true });
    try {
      writeFileSync(file, randomBytes(32).toString('base64url'), { flag: 'wx', mode: 0o600 });
    } catch (error) {
      if ((error as { code?: string }).code !== 'EEXIST') throw error;
    }
  }
  globalForSecret.__payonceSessionSecret = readFileSync(file, 'utf8').trim();
  return globalForSecret.__payonceSessionSecret;
}
