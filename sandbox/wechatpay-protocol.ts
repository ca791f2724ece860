/**
 * WeChat Pay API v3 wire details for the sandbox: request authentication, response and notification
 * signatures, the AEAD_AES_256_GCM resource encryption, and WeChat's identifier formats.
 *
 * Everything here follows WeChat Pay's own documentation ("签名认证", "签名验证", "回调报文解密"):
 *  - A merchant request carries `Authorization: WECHATPAY2-SHA256-RSA2048 mchid="…",nonce_str="…",
 *    timestamp="…",serial_no="…",signature="…"`, the signature being SHA256withRSA (base64) by the
 *    merchant's API key over "METHOD\nPATH?QUERY\nTIMESTAMP\nNONCE\nBODY\n" (an empty body for GET).
 *  - WeChat signs its answers and notifications with the platform key over "TS\nNONCE\nBODY\n" and
 *    sends Wechatpay-Timestamp / -Nonce / -Signature / -Serial headers; for a 204 the body line is
 *    empty, so the message ends in "\n\n".
 *  - A notification's `resource` is AES-256-GCM with the merchant's 32-byte APIv3 key, the 12-byte
 *    `nonce` as IV, `associated_data` as AAD, and the 16-byte tag appended to the base64 ciphertext.
 *
 * node:crypto only: this is exactly what a merchant's server has to get right, so it is spelled out
 * rather than hidden in an SDK.
 */
import { createCipheriv, randomBytes, randomInt } from 'node:crypto';
import { signRsa2, verifyRsa2 } from './keys';

export const AUTH_SCHEMA = 'WECHATPAY2-SHA256-RSA2048';

/** WeChat Pay rejects requests whose timestamp is more than 5 minutes from its own clock. */
export const MAX_CLOCK_SKEW_SECONDS = 300;

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

export function randomAlnum(length: number): string {
  let out = '';
  for (let i = 0; i < length; i += 1) out += ALNUM[randomInt(ALNUM.length)];
  return out;
}

export function randomDigits(count: number): string {
  let out = '';
  for (let i = 0; i < count; i += 1) out += String(randomInt(10));
  return out;
}

export function randomHexUpper(bytes: number): string {
  return randomBytes(bytes).toString('hex').toUpperCase();
}

// ---------------------------------------------------------------------------------------------
// Time

/** RFC 3339 in Beijing time, the way WeChat writes success_time / create_time: 2024-01-01T12:00:00+08:00. */
export function beijingRfc3339(date: Date): string {
  return `${new Date(date.getTime() + 8 * 3_600_000).toISOString().slice(0, 19)}+08:00`;
}

/** yyyyMMdd in Beijing time. */
export function beijingDate(date: Date): string {
  return new Date(date.getTime() + 8 * 3_600_000).toISOString().slice(0, 10).replaceAll('-', '');
}

export function unixSeconds(date: Date): number {
  return Math.floor(date.getTime() / 1000);
}

// ---------------------------------------------------------------------------------------------
// Request authentication

export interface AuthorizationParams {
  mchid: string;
  nonceStr: string;
  timestamp: string;
  serialNo: string;
  signature: string;
}

/**
 * Parses `WECHATPAY2-SHA256-RSA2048 k="v",k="v",…`. The order of the pairs is free (WeChat's own
 * examples vary); a pair appearing twice, an unquoted value or a missing pair makes it unusable.
 */
export function parseAuthorization(header: string | undefined): AuthorizationParams | null {
  if (!header) return null;
  const trimmed = header.trim();
  if (!trimmed.startsWith(`${AUTH_SCHEMA} `)) return null;
  const pairs = new Map<string, string>();
  for (const part of trimmed.slice(AUTH_SCHEMA.length + 1).split(',')) {
    const match = /^\s*([a-z_]+)="([^"]*)"\s*$/.exec(part);
    if (!match) return null;
    const [, key = '', value = ''] = match;
    if (pairs.has(key)) return null;
    pairs.set(key, value);
  }
  const mchid = pairs.get('mchid');
  const nonceStr = pairs.get('nonce_str');
  const timestamp = pairs.get('timestamp');
  const serialNo = pairs.get('serial_no');
  const signature = pairs.get('signature');
  if (!mchid || !nonceStr || !timestamp || !serialNo || !signature) return null;
  return { mchid, nonceStr, timestamp, serialNo, signature };
}

/** The request's sign string: the path as sent, with its query string, and the exact body. */
export function requestMessage(method: string, pathAndQuery: string, timestamp: string, nonce: string, body: string): string {
  return `${method}\n${pathAndQuery}\n${timestamp}\n${nonce}\n${body}\n`;
}

export function verifyRequestSignature(message: string, signature: string, merchantPublicKeyPem: string): boolean {
  return verifyRsa2(message, signature, merchantPublicKeyPem);
}

// ---------------------------------------------------------------------------------------------
// Platform signatures (responses and notifications)

export interface PlatformSigner {
  serialNo: string;
  privateKeyPem: string;
}

/**
 * The Wechatpay-* headers for one body. `timestamp` / `nonce` may be given (the notification tool
 * overrides them to forge a stale delivery that still carries a valid signature).
 */
export function platformHeaders(
  signer: PlatformSigner,
  body: string,
  now: Date,
  fixed: { timestamp?: string; nonce?: string } = {},
): Record<string, string> {
  const timestamp = fixed.timestamp ?? String(unixSeconds(now));
  const nonce = fixed.nonce ?? randomAlnum(32);
  return {
    'Wechatpay-Timestamp': timestamp,
    'Wechatpay-Nonce': nonce,
    'Wechatpay-Signature': signRsa2(`${timestamp}\n${nonce}\n${body}\n`, signer.privateKeyPem),
    'Wechatpay-Serial': signer.serialNo,
    'Wechatpay-Signature-Type': AUTH_SCHEMA,
  };
}

// ---------------------------------------------------------------------------------------------
// AEAD_AES_256_GCM

/** Encrypts a notification resource: base64(ciphertext ‖ 16-byte tag). */
export function encryptResource(plaintext: string, apiV3Key: string, nonce: string, associatedData: string): string {
  const cipher = createCipheriv('aes-256-gcm', Buffer.from(apiV3Key, 'utf8'), Buffer.from(nonce, 'utf8'));
  cipher.setAAD(Buffer.from(associatedData, 'utf8'));
  const encrypted = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final(), cipher.getAuthTag()]);
  return encrypted.toString('base64');
}

// ---------------------------------------------------------------------------------------------
// Formats

/** out_trade_no: 6–32 characters, digits, letters and _-|* (Native下单 documentation). */
export const OUT_TRADE_NO_RE = /^[0-9A-Za-z_\-|*]{6,32}$/;

/** 28 digits like WeChat's transaction_id: 4200, 6 digits, the Beijing date, 10 digits. */
export function newTransactionId(now: Date): string {
  return `4200${randomDigits(6)}${beijingDate(now)}${randomDigits(10)}`;
}

/** 29 digits like WeChat's refund_id (50000000382019052709732678859): 50, 8 digits, the Beijing date, 11 digits. */
export function newRefundId(now: Date): string {
  return `50${randomDigits(8)}${beijingDate(now)}${randomDigits(11)}`;
}

/** `weixin://wxpay/bizpayurl?pr=XXXXXXX`, the QR code content Native下单 returns. */
export function newCodeUrl(): string {
  return `weixin://wxpay/bizpayurl?pr=${randomAlnum(7)}`;
}

/** `wx` + yyyyMMddHHmmss (Beijing) + 20 characters, the shape of JSAPI's prepay_id. */
export function newPrepayId(now: Date): string {
  const stamp = new Date(now.getTime() + 8 * 3_600_000).toISOString().slice(0, 19).replace(/\D/g, '');
  return `wx${stamp}${randomBytes(10).toString('hex')}`;
}
