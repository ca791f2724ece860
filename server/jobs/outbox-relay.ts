/**
 * The outbox relay: delivers each confirmation email once.
 *
 * The demo's mail server is a table in the same database (mail_sink), so claiming an outbox row,
 * "sending" it and marking it delivered is one transaction: exactly once. Against a real mail
 * service the send would sit between a claim and a mark, at least once, with the outbox id as the
 * message's idempotency key so the provider drops the repeat.
 */
import { sql } from 'drizzle-orm';
import type { Database } from '@/db/client';
import { journal } from '@/server/checkout/journal';
import { REFUND_EMAIL_TOPIC } from '@/server/checkout/refunds';
import { ORDER_PAID_EMAIL_TOPIC } from '@/server/checkout/settle';
import { renderEmail, type EmailPayload } from './email-templates';

interface PendingEmail extends Record<string, unknown> {
  id: string;
  topic: string;
  payload: EmailPayload;
}

/** What each outbox topic says to the customer: the wording lives in email-templates.ts. */
function render(email: PendingEmail): { subject: string; body: string } {
  return renderEmail(email.topic, email.payload);
}

/** Relays up to `limit` pending emails; returns how many were delivered. Safe on many instances. */
export async function relayOutbox(db: Database, limit = 100): Promise<number> {
  return db.transaction(async (tx) => {
    // SKIP LOCKED: instances relaying at once take disjoint rows instead of queueing on each other.
    const pending = await tx.execute<PendingEmail>(sql`
      select id, topic, payload from outbox
       where delivered_at is null and topic in (${ORDER_PAID_EMAIL_TOPIC}, ${REFUND_EMAIL_TOPIC})
       order by created_at
       limit ${limit}
       for update skip locked`);
    for (const email of pending) {
      const { subject, body } = render(email);
      const customer = email.payload.customerId ?? email.payload.orderId;
      await tx.execute(sql`
        insert into mail_sink (outbox_id, recipient, subject, body)
        values (${email.id}::uuid, ${`customer-${customer.slice(0, 8)}@payonce.test`}, ${subject}, ${body})
        on conflict (outbox_id) do nothing`);
      await tx.execute(sql`update outbox set delivered_at = now(), attempts = attempts + 1 where id = ${email.id}::uuid`);
    }
    // Journaled last and in order of order id: each order's journal has a lock of its own, and taking
    // them in one order keeps two relays from deadlocking on each other.
    const sent = [...pending].sort((a, b) => (a.payload.orderId < b.payload.orderId ? -1 : 1));
    for (const email of sent) {
      await journal(tx, {
        orderId: email.payload.orderId,
        kind: 'email.sent',
        data: { email: email.topic === REFUND_EMAIL_TOPIC ? 'refund' : 'order_paid', subject: render(email).subject },
      });
    }
    return pending.length;
  });
}
