/**
 * The keys and signatures of API v3: the merchant's key signing each request (the Authorization
 * header), WeChat's platform key verifying each answer and notification (the Wechatpay-* headers),
 * and the APIv3 key that notification resources are encrypted with.
 */
import { createSign, createVerify, randomBytes, type KeyObject } from 'node:crypto';
import { keyFromText } from '@/server/payments/rsa-keys';
import type { WechatPayGatewayConfig } from './config';

export const AUTH_SCHEMA = 'WECHATPAY2-SHA256-RSA2048';
/** WeChat's window for request timestamps; we hold its answers and notifications to the same. */
export const MAX_CLOCK_SKEW_SECONDS = 300;

export interface Keys {
  merchantPrivateKey: KeyObject;
  platformPublicKey: KeyObject;
  apiV3Key: Buffer;
}

/** Reads and checks the keys of `config`; a configuration that cannot work throws at construction. */
export function loadKeys(config: WechatPayGatewayConfig): Keys {
  let merchantPrivateKey: KeyObject;
  let platformPublicKey: KeyObject;
  try {
    merchantPrivateKey = keyFromText(config.merchantPrivateKey, 'private');
  } catch (err) {
    throw new Error(`WeChat Pay merchantPrivateKey is not a valid RSA private key (${(err as Error).message})`);
  }
  try {
    platformPublicKey = keyFromText(config.platformPublicKey, 'public');
  } catch (err) {
    throw new Error(`WeChat Pay platformPublicKey is not a valid RSA public key (${(err as Error).message})`);
  }
  const apiV3Key = Buffer.from(config.apiV3Key, 'utf8');
  if (apiV3Key.length !== 32) throw new Error(`WeChat Pay apiV3Key must be 32 bytes, got ${apiV3Key.length}`);
  for (const field of ['mchid', 'appid', 'merchantSerialNo', 'platformSerialNo', 'baseUrl'] as const) {
    if (!config[field]) throw new Error(`WeChat Pay ${field} is empty`);
  }
  return { merchantPrivateKey, platformPublicKey, apiV3Key };
}

const NONCE_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

function nonce(length = 32): string {
  const bytes = randomBytes(length);
  let out = '';
  for (const byte of bytes) out += NONCE_ALPHABET[byte % NONCE_ALPHABET.length];
  return out;
}

/** The Authorization header of one request: SHA256withRSA over "METHOD\nPATH?QUERY\nTS\nNONCE\nBODY\n". */
export function authorization(
  merchant: { mchid: string; merchantSerialNo: string; merchantPrivateKey: KeyObject },
  method: string,
  url: URL,
  body: string,
): string {
  const timestamp = String(Math.floor(Date.now() / 1000));
  const nonceStr = nonce();
  // The path exactly as sent, with its query string: that is what WeChat verifies.
  const message = `${method}\n${url.pathname}${url.search}\n${timestamp}\n${nonceStr}\n${body}\n`;
  const signature = createSign('RSA-SHA256').update(message, 'utf8').sign(merchant.merchantPrivateKey, 'base64');
  return `${AUTH_SCHEMA} mchid="${merchant.mchid}",nonce_str="${nonceStr}",timestamp="${timestamp}",serial_no="${merchant.merchantSerialNo}",signature="${signature}"`;
}

/** Verifies Wechatpay-* headers over `body`; null when they hold, otherwise why not. */
export function checkPlatformSignature(
  headers: Headers,
  body: string,
  platformSerialNo: string,
  platformPublicKey: KeyObject,
  nowMs: number,
): string | null {
  const timestamp = headers.get('wechatpay-timestamp');
  const nonceValue = headers.get('wechatpay-nonce');
  const signature = headers.get('wechatpay-signature');
  const serial = headers.get('wechatpay-serial');
  if (!timestamp || !nonceValue || !signature || !serial) return 'missing Wechatpay-* signature headers';
  const signatureType = headers.get('wechatpay-signature-type');
  if (signatureType !== null && signatureType !== AUTH_SCHEMA) return `unsupported signature type ${signatureType}`;
  // A serial we do not hold means a key we cannot verify with (e.g. WeChat rotated it): not provable.
  if (serial !== platformSerialNo) return `unknown platform key ${serial}`;
  if (!verifies(`${timestamp}\n${nonceValue}\n${body}\n`, signature, platformPublicKey)) return 'invalid signature';
  if (!/^\d{1,12}$/.test(timestamp) || Math.abs(nowMs / 1000 - Number(timestamp)) > MAX_CLOCK_SKEW_SECONDS) {
    return `timestamp ${timestamp} is more than ${MAX_CLOCK_SKEW_SECONDS} s from now`;
  }
  return null;
}

function verifies(message: string, signature: string, key: KeyObject): boolean {
  try {
    // WeChat's signature-probe traffic ("WECHATPAY/SIGNTEST/…") fails here like any forgery.
    return createVerify('RSA-SHA256').update(message, 'utf8').verify(key, signature, 'base64');
  } catch {
    return false;
  }
}
