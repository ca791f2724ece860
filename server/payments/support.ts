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

/** The `code` of a Node or undici error, if it has one. */
export function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}
