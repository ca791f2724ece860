/**
 * Anonymous customers: the first request gets a signed, httpOnly session cookie carrying a fresh
 * customer id and the time it was issued, and that id is the scope of every idempotency key the
 * customer sends. The signature (HMAC-SHA256 over id and issue time) stops anyone from claiming
 * another customer's id — and so reading or replaying their stored responses — or from stretching a
 * session past its maximum age.
 *
 * Cookie value: `{customerId}.{issuedAtSeconds}.{signature}`. Over https the cookie is
 * `__Host-payonce_session`: the prefix makes the browser refuse it unless it is Secure, Path=/ and
 * host-only, so a sibling subdomain cannot plant a session of its choosing on our customers.
 */
import { createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { EnvConfigError, envFrom, parseServerEnv, serverEnv, type RawEnv } from '@/server/config/env';

export { DEFAULT_SESSION_MAX_AGE_SECONDS, MIN_SESSION_SECRET_LENGTH } from '@/server/config/env';

export const SESSION_COOKIE = 'payonce_session';
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;

/** Instances' clocks may disagree a little; a session "issued" further ahead than this is refused. */
const CLOCK_SKEW_SECONDS = 5 * 60;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ISSUED_AT = /^[0-9]{1,12}$/;

/** The environment variables this module reads (process.env, or a test's own). */
export type SessionEnv = RawEnv;

export interface SessionOptions {
  /** Served over https: the cookie is `__Host-payonce_session` and Secure. */
  secure: boolean;
  /** Default: SESSION_MAX_AGE_SECONDS, else 30 days. */
  maxAgeSeconds?: number;
  /** Milliseconds since the epoch (tests). */
  now?: number;
}

export function sessionCookieName(secure: boolean): string {
  return secure ? SECURE_SESSION_COOKIE : SESSION_COOKIE;
}

/** Whether the customer reached us over https (directly, or through a proxy that says so). */
export function isSecureRequest(request: Pick<Request, 'url' | 'headers'>): boolean {
  return new URL(request.url).protocol === 'https:' || request.headers.get('x-forwarded-proto') === 'https';
}

function sign(secret: string, customerId: string, issuedAt: number): string {
  return createHmac('sha256', secret).update(`${customerId}.${issuedAt}`).digest('base64url');
}

/** The signed cookie value for a customer id issued at `issuedAtSeconds`. */
export function sessionCookieValue(secret: string, customerId: string, issuedAtSeconds: number): string {
  return `${customerId}.${issuedAtSeconds}.${sign(secret, customerId, issuedAtSeconds)}`;
}

/** SESSION_MAX_AGE_SECONDS, or 30 days; a value that is not a positive integer is refused at start (server/config/env.ts). */
export function sessionMaxAgeSeconds(env?: SessionEnv): number {
  return envFrom(env).SESSION_MAX_AGE_SECONDS;
}

/**
 * Every value of the cookie `name` in a Cookie header, in header order. A value that cannot be
 * percent-decoded is skipped: cookies of other sites on our domain (a sibling subdomain's) are not
 * ours to validate, and one bad byte in them must not fail the request.
 */
export function cookieValues(header: string | null, name: string): string[] {
  const values: string[] = [];
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0 || part.slice(0, eq).trim() !== name) continue;
    try {
      values.push(decodeURIComponent(part.slice(eq + 1).trim()));
    } catch {
      // URIError: a malformed % escape. Not a value we could have set.
    }
  }
  return values;
}

/** Cookie name → its first decodable value; undecodable values are ignored (see cookieValues). */
export function parseCookies(header: string | null): Map<string, string> {
  const cookies = new Map<string, string>();
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq <= 0) continue;
    const name = part.slice(0, eq).trim();
    if (cookies.has(name)) continue;
    try {
      cookies.set(name, decodeURIComponent(part.slice(eq + 1).trim()));
    } catch {
      // Ignored, as in cookieValues.
    }
  }
  return cookies;
}

/** The customer id and issue time of one cookie value, if it is ours, unaltered and not expired. */
function verifyValue(secret: string, value: string, nowSeconds: number, maxAgeSeconds: number) {
  // Old cookies (`{customerId}.{signature}`, no issue time) have two parts: their age cannot be
  // bounded, so they count as absent and the customer gets a new session.
  const parts = value.split('.');
  if (parts.length !== 3) return undefined;
  const [customerId, issuedAtText, signature] = parts as [string, string, string];
  if (!UUID.test(customerId) || !ISSUED_AT.test(issuedAtText)) return undefined;
  const issuedAt = Number(issuedAtText);
  const expected = Buffer.from(sign(secret, customerId, issuedAt));
  const actual = Buffer.from(signature);
  if (expected.length !== actual.length || !timingSafeEqual(expected, actual)) return undefined;
  if (issuedAt > nowSeconds + CLOCK_SKEW_SECONDS || nowSeconds - issuedAt >= maxAgeSeconds) return undefined;
  return { customerId, issuedAt };
}

/**
 * The customer id carried by a valid session cookie, or undefined for a missing, forged, expired or
 * old-format one. Only the cookie name for this scheme is read: over https a plain `payonce_session`
 * may have been set by a sibling subdomain. When a browser sends several (another Path or Domain, a
 * leftover), the valid one issued last wins, so an invalid one in front never locks the customer out.
 */
export function verifySession(secret: string, cookieHeader: string | null, options: SessionOptions): string | undefined {
  const nowSeconds = Math.floor((options.now ?? Date.now()) / 1000);
  const maxAgeSeconds = options.maxAgeSeconds ?? sessionMaxAgeSeconds();
  let best: { customerId: string; issuedAt: number } | undefined;
  for (const value of cookieValues(cookieHeader, sessionCookieName(options.secure))) {
    const session = verifyValue(secret, value, nowSeconds, maxAgeSeconds);
    if (session && (!best || session.issuedAt > best.issuedAt)) best = session;
  }
  return best?.customerId;
}

export function issueSession(secret: string, options: SessionOptions): { customerId: string; setCookie: string } {
  const customerId = randomUUID();
  const issuedAt = Math.floor((options.now ?? Date.now()) / 1000);
  const attributes = [
    `${sessionCookieName(options.secure)}=${sessionCookieValue(secret, customerId, issuedAt)}`,
    'Path=/',
    'HttpOnly',
    'SameSite=Lax',
    // The browser forgets the cookie when the server would start refusing it.
    `Max-Age=${options.maxAgeSeconds ?? sessionMaxAgeSeconds()}`,
  ];
  if (options.secure) attributes.push('Secure');
  return { customerId, setCookie: attributes.join('; ') };
}

export class SessionConfigError extends Error {}

/**
 * Refuses a session configuration that would fail customers later (the rules are server/config/env.ts's:
 * SESSION_MAX_AGE_SECONDS a positive whole number; in production a SESSION_SECRET of at least
 * MIN_SESSION_SECRET_LENGTH characters, shared by every instance). Throws a SessionConfigError whose
 * message is one line saying what to set. The server's start checks these with everything else
 * (exitOnBadEnv in server/config/env.ts).
 */
export function assertSessionConfig(env: SessionEnv): void {
  try {
    parseServerEnv({ NODE_ENV: env.NODE_ENV, SESSION_SECRET: env.SESSION_SECRET, SESSION_MAX_AGE_SECONDS: env.SESSION_MAX_AGE_SECONDS });
  } catch (error) {
    if (error instanceof EnvConfigError) throw new SessionConfigError(error.message);
    throw error;
  }
}

const globalForSecret = globalThis as unknown as { __payonceSessionSecret?: string };

/**
 * SESSION_SECRET (production refuses to start without it: server/config/env.ts). On a developer's
 * machine, a random secret is made once and kept under .data/ so sessions survive restarts.
 */
export function sessionSecret(): string {
  // In production serverEnv() has refused to parse without a long enough SESSION_SECRET.
  const configured = serverEnv().SESSION_SECRET;
  if (configured) return configured;
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
