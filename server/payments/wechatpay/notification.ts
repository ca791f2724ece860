/**
 * WeChat Pay's notifications (TRANSACTION.* and REFUND.*): the platform signature checked before a
 * byte of the body is read, the resource decrypted with the APIv3 key (AEAD_AES_256_GCM), and the
 * reply WeChat expects. What a decrypted resource says is ./classify.
 */
import { createDecipheriv } from 'node:crypto';
import type { NotificationReply, NotificationVerdict } from '@/server/payments/gateway';
import { classifyNotification, readEnvelope, type EncryptedResource } from './classify';
import type { Client } from './exchange';
import { checkPlatformSignature } from './signing';

/** AES-GCM's authentication tag, appended to WeChat's ciphertext. */
const TAG_BYTES = 16;
const NONCE_BYTES = 12;

export function verifyNotification(client: Client, request: { headers: Headers; rawBody: string }): NotificationVerdict {
  const { config, keys } = client;
  // 1. The signature, before a byte of the body is read.
  const problem = checkPlatformSignature(request.headers, request.rawBody, config.platformSerialNo, keys.platformPublicKey, Date.now());
  if (problem) return { kind: 'rejected', reason: problem };
  // 2. The envelope and its encrypted resource.
  const read = readEnvelope(request.rawBody);
  if ('kind' in read) return read;
  const plaintext = decrypt(read.resource, keys.apiV3Key);
  if (typeof plaintext !== 'string') return plaintext;
  // 3. The transaction or the refund it is about.
  return classifyNotification(read.envelope, read.resource.originalType, plaintext);
}

function decrypt(resource: EncryptedResource, apiV3Key: Buffer): string | { kind: 'rejected'; reason: string } {
  const ciphertext = Buffer.from(resource.ciphertext, 'base64');
  const iv = Buffer.from(resource.nonce, 'utf8');
  if (ciphertext.length <= TAG_BYTES || iv.length !== NONCE_BYTES)
    return { kind: 'rejected', reason: 'malformed resource ciphertext or nonce' };
  try {
    const decipher = createDecipheriv('aes-256-gcm', apiV3Key, iv);
    decipher.setAAD(Buffer.from(resource.associatedData, 'utf8'));
    decipher.setAuthTag(ciphertext.subarray(ciphertext.length - TAG_BYTES));
    return Buffer.concat([decipher.update(ciphertext.subarray(0, ciphertext.length - TAG_BYTES)), decipher.final()]).toString('utf8');
  } catch {
    return { kind: 'rejected', reason: 'resource does not decrypt with the APIv3 key' };
  }
}

export function notificationReply(ack: boolean): NotificationReply {
  // WeChat acknowledges on HTTP 200 or 204 with any body. 200 with an empty body rather than 204:
  // a `new Response('', { status: 204 })` (how the webhook route turns this into a Response) throws,
  // since a 204 may not have a body, even an empty one. Failure: 4xx/5xx + {"code":"FAIL",…}.
  return ack
    ? { status: 200, headers: {}, body: '' }
    : {
        status: 500,
        headers: { 'content-type': 'application/json; charset=utf-8' },
        body: JSON.stringify({ code: 'FAIL', message: '处理失败，请稍后重试' }),
      };
}
