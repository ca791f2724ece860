/**
 * The adapter's two RSA keys — the app's private key that signs requests and Alipay's public key
 * that verifies answers and notifications — read from configuration into the PEM alipay-sdk needs.
 */
import type { KeyObject } from 'node:crypto';
import { keyFromText } from '@/server/payments/rsa-keys';

export interface AlipayKeyTexts {
  /** PEM (PKCS#1 or PKCS#8) or the bare base64 that Alipay's key tool prints. */
  appPrivateKey: string;
  /** The Alipay (platform) public key: PEM or bare base64 SPKI. */
  alipayPublicKey: string;
}

/**
 * Canonical PEM for the SDK, trimmed: its formatKey() strips the header and footer only when they are
 * the first and last lines, so a trailing newline (or a PKCS#1 public key) would corrupt the key.
 * Throws, naming the setting, when either is not an RSA key.
 */
export function canonicalKeys(texts: AlipayKeyTexts): { privateKeyPem: string; publicKeyPem: string } {
  const privateKey = readKey(texts.appPrivateKey, 'private', 'appPrivateKey');
  const publicKey = readKey(texts.alipayPublicKey, 'public', 'alipayPublicKey');
  return {
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString().trim(),
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString().trim(),
  };
}

function readKey(text: string, kind: 'private' | 'public', setting: string): KeyObject {
  try {
    return keyFromText(text, kind);
  } catch (err) {
    throw new Error(`Alipay ${setting} is not a valid RSA ${kind} key (${(err as Error).message})`);
  }
}
