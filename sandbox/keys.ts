/**
 * RSA key handling for the PSP sandbox.
 *
 * The sandbox plays two roles that a real deployment keeps apart: the gateway (it holds the platform
 * private key and signs responses and notifications with it) and the developer console (it hands a
 * merchant its app key pair, like Alipay's sandbox console does). Keys are generated once, stored in
 * the sandbox's own PostgreSQL schema and reused, so a merchant's configuration keeps working across
 * restarts. They are never written into the repository.
 */
import { createSign, createVerify, generateKeyPair } from 'node:crypto';
import { promisify } from 'node:util';

const generateKeyPairAsync = promisify(generateKeyPair);

export interface PemKeyPair {
  /** PKCS#1 ("-----BEGIN RSA PRIVATE KEY-----"): alipay-sdk's default `keyType`, so it works unconfigured. */
  privateKeyPem: string;
  /** SPKI ("-----BEGIN PUBLIC KEY-----"): the format alipay-sdk formats `alipayPublicKey` into. */
  publicKeyPem: string;
}

/** A fresh RSA-2048 key pair. Asynchronous so start-up does not block the event loop for it. */
export async function generateRsaKeyPair(): Promise<PemKeyPair> {
  const { privateKey, publicKey } = await generateKeyPairAsync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
  });
  // Trimmed: alipay-sdk's formatKey() only strips the PEM footer when it is the very last line, so a
  // trailing newline would leave the footer inside the base64 body and break the key.
  return { privateKeyPem: privateKey.trim(), publicKeyPem: publicKey.trim() };
}

/** RSA2 = SHA256withRSA over the UTF-8 bytes, base64 (Alipay's only recommended sign_type). */
export function signRsa2(content: string, privateKeyPem: string): string {
  return createSign('RSA-SHA256').update(content, 'utf8').sign(privateKeyPem, 'base64');
}

/** Never throws: a malformed signature or key is simply "not verified". */
export function verifyRsa2(content: string, signatureBase64: string, publicKeyPem: string): boolean {
  try {
    return createVerify('RSA-SHA256').update(content, 'utf8').verify(publicKeyPem, signatureBase64, 'base64');
  } catch {
    return false;
  }
}
