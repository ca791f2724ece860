/**
 * Alipay's asynchronous notifications (trade_status_sync form POSTs): checked in order — the form,
 * the RSA2 signature, then what it says (./classify) — and the reply that stops or repeats them.
 */
import type { NotificationReply, NotificationVerdict } from '@/server/payments/gateway';
import { classifyNotification, readNotificationForm } from './classify';
import type { AlipayClient } from './client';

export async function verifyNotification(
  client: AlipayClient,
  request: { headers: Headers; rawBody: string },
): Promise<NotificationVerdict> {
  const form = readNotificationForm(request.rawBody);
  if (form.kind === 'rejected') return form;
  if (!client.notificationSigned(form.fields)) return { kind: 'rejected', reason: 'invalid signature' };
  return classifyNotification(form.fields);
}

/**
 * Alipay stops only on the exact body `success`; anything else (here `retry`, with a 503 for people
 * reading logs) makes it deliver again on its schedule.
 */
export function notificationReply(ack: boolean): NotificationReply {
  return ack
    ? { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: 'success' }
    : { status: 503, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: 'retry' };
}
