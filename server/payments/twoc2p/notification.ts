/**
 * 2C2P's backend notification: `{"payload":"<JWT>"}` POSTed to backendReturnUrl. Its signature is
 * checked before any claim is read; ./classify turns the verified claims into the verdict.
 */
import type { NotificationReply, NotificationVerdict } from '@/server/payments/gateway';
import { classifyNotification, notificationPayloadOf } from './classify';
import { verifyJwt } from './jwt';

export async function verifyNotification(key: Uint8Array, request: { headers: Headers; rawBody: string }): Promise<NotificationVerdict> {
  const body = notificationPayloadOf(request.rawBody);
  if (body.kind === 'rejected') return body;
  // The signature first: nothing below reads an unverified claim.
  const claims = await verifyJwt(key, body.token);
  if (!claims) return { kind: 'rejected', reason: 'invalid signature' };
  return classifyNotification(claims);
}

/** 2C2P stops on HTTP 200; anything else is delivered again on its schedule. */
export function notificationReply(ack: boolean): NotificationReply {
  return ack
    ? { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: '' }
    : { status: 500, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: 'retry' };
}
