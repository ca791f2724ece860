/**
 * What every adapter needs the same way: reading RSA keys from configuration, and telling a
 * connection failure that never reached the gateway (safe to retry) from one that may have.
 */
import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';

/** PEM (PKCS#8/PKCS#1, SPKI) or bare base64 DER, as consoles hand keys out; `\n` escapes allowed. */
export function keyFromText(text: string, kind: 'private' | 'public'): KeyObject {
  // Keys often arrive through environment variables with escaped newlines.
  const normalized = text.replaceAll('\\n', '\n').trim();
  if (normalized.includes('-----BEGIN')) {
    return kind === 'private' ? createPrivateKey(normalized) : createPublicKey(normalized);
  }
  const der = Buffer.from(normalized.replace(/\s+/g, ''), 'base64');
  const attempts: (() => KeyObject)[] =
    kind === 'private'
      ? [
          () => createPrivateKey({ key: der, format: 'der', type: 'pkcs8' }),
          () => createPrivateKey({ key: der, format: 'der', type: 'pkcs1' }),
        ]
      : [
          () => createPublicKey({ key: der, format: 'der', type: 'spki' }),
          () => createPublicKey({ key: der, format: 'der', type: 'pkcs1' }),
        ];
  for (const attempt of attempts) {
    try {
      return attempt();
    } catch {
      // not this encoding; try the next
    }
  }
  throw new Error('not a PEM or base64 DER RSA key');
}

/** Connection failures that happen before a single byte of the request reaches the gateway. */
export const NEVER_SENT_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/**
 * Every error code in a transport failure: the error's own, its causes (undici's "fetch failed" wraps
 * the socket error, sometimes one level deeper) and the per-address errors of an AggregateError
 * (happy eyeballs tries several addresses of one host).
 */
export function transportErrorCodes(err: unknown, depth = 0): string[] {
  if (typeof err !== 'object' || err === null || depth > 4) return [];
  const codes: string[] = [];
  const code = errorCode(err);
  if (code) codes.push(code);
  const errors = (err as { errors?: unknown }).errors;
  if (Array.isArray(errors)) for (const inner of errors) codes.push(...transportErrorCodes(inner, depth + 1));
  codes.push(...transportErrorCodes((err as { cause?: unknown }).cause, depth + 1));
  return codes;
}

/**
 * Whether a transport failure certainly happened before the request reached the gateway (every
 * code found is a never-sent one), and the code to report. Anything else — a reset, a timeout, no
 * code at all — may have been processed: only a query can tell.
 */
export function classifyConnectionFailure(err: unknown): { neverSent: boolean; code: string | undefined } {
  const codes = transportErrorCodes(err);
  return { neverSent: codes.length > 0 && codes.every((code) => NEVER_SENT_CODES.has(code)), code: codes[0] };
}

/** The `code` of a Node or undici error, if it has one. */
export function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}
