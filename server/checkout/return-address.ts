/**
 * Where a gateway's own page (Alipay's cashier, 2C2P's hosted payment page) sends the buyer back to.
 *
 * To a browser `localhost:3000`, `127.0.0.1:3000` and a LAN name are three origins, each with its own
 * cookies and localStorage. A buyer sent back to another origin than the one they paid from has no
 * session and no saved attempt: a blank cart, and a second 立即支付 there is a second order and a
 * second charge. So the return goes to the origin the pay request came from, when that origin is one
 * this deployment answers on; and the return link carries a token that lets the page show the order's
 * state without any session, should the buyer land somewhere without it (another browser, cleared
 * storage, an origin not allowed).
 *
 * The token is an HMAC of the order id under the session secret: it proves this deployment issued the
 * link for that order and reveals nothing else. Whoever holds the link (the buyer, the gateway) may
 * see that order's status, as with an order-status link in a confirmation email.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** What the pay procedure and the return page need, bound to one request. */
export interface ReturnAddress {
  /** The absolute URL a gateway sends the buyer back to for this order (`/api/return?...`). */
  urlFor(orderId: string): string;
}

/** The origins a buyer's return may go to, besides the public base URL's. */
export interface ReturnOrigins {
  publicBaseUrl: string;
  /** PUBLIC_ORIGINS: further origins this deployment answers on (e.g. `http://shop.lan:3000`). */
  extraOrigins?: readonly string[];
}

/** 128 bits of HMAC-SHA256 in base64url: unguessable, and short enough for every gateway's URL limit. */
const TOKEN_LENGTH = 22;

export function returnToken(secret: string, orderId: string): string {
  // The message's prefix keeps this MAC apart from every other use of the secret (the session cookie).
  return createHmac('sha256', secret).update(`payonce.return:${orderId}`).digest('base64url').slice(0, TOKEN_LENGTH);
}

export function verifyReturnToken(secret: string, orderId: string, token: string): boolean {
  const expected = Buffer.from(returnToken(secret, orderId));
  const given = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

function isLocalRun(publicBaseUrl: string): boolean {
  const host = new URL(publicBaseUrl).hostname;
  return LOOPBACK_HOSTS.has(host) || host.endsWith('.localhost') || host.startsWith('127.');
}

function originOf(value: string | null): URL | undefined {
  if (!value || value === 'null') return undefined;
  try {
    const url = new URL(value);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The origin the buyer started from, when the return may go there; otherwise the public base URL's.
 *
 * - the public base URL's origin and PUBLIC_ORIGINS: always;
 * - on a local run (the public base URL is a loopback address), any origin the browser sent that names
 *   the very host the request reached (`Origin` host = `Host`): the page was served from there, so the
 *   buyer's session lives there. A production deployment never follows a request's own headers: a
 *   forged pair would send buyers back to an address of the forger's choosing.
 */
export function buyerOrigin(headers: Headers, origins: ReturnOrigins): string {
  const publicOrigin = new URL(origins.publicBaseUrl).origin;
  const requested = originOf(headers.get('origin'));
  if (!requested) return publicOrigin;
  if (requested.origin === publicOrigin) return publicOrigin;
  if (origins.extraOrigins?.some((extra) => originOf(extra)?.origin === requested.origin)) return requested.origin;
  if (isLocalRun(origins.publicBaseUrl) && requested.host === headers.get('host')) return requested.origin;
  return publicOrigin;
}

export function returnAddress(secret: string, origin: string): ReturnAddress {
  return {
    urlFor(orderId) {
      const url = new URL('/api/return', origin);
      url.searchParams.set('orderId', orderId);
      url.searchParams.set('t', returnToken(secret, orderId));
      return url.toString();
    },
  };
}

/** The checkout page's address for a returning buyer: `/?returned=<orderId>&t=<token>`, relative to where they landed. */
export function returnLandingPath(orderId: string | null, token: string | null): string {
  // Only what could be ours is passed on: a UUID and a token of our alphabet and length.
  const validOrder = orderId !== null && /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(orderId);
  const validToken = token !== null && new RegExp(`^[A-Za-z0-9_-]{${TOKEN_LENGTH}}$`).test(token);
  if (!validOrder || !validToken) return '/';
  return `/?${new URLSearchParams({ returned: orderId, t: token }).toString()}`;
}
