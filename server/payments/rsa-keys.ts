/**
 * Reading RSA keys from configuration, the same way for every adapter that signs with RSA (Alipay,
 * WeChat Pay). How the adapters reach a gateway is ./transport.
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
