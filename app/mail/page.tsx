import { desc } from 'drizzle-orm';
import { notFound } from 'next/navigation';
import { connection } from 'next/server';
import { mailSink } from '@/db/schema';
import { appServices } from '@/server/app/services';
import { formatBeijingTimestamp } from '@/server/jobs/beijing-time';
import { demoMode } from '@/server/demo/mode';

/**
 * The demo's mail server: every confirmation and refund email the outbox relay has sent, newest
 * first, whoever the customer. It is a demo mailbox, so it exists only in demo mode
 * (PAYONCE_DEMO=1, server/demo/mode.ts); anywhere else it is a 404 — one customer must never read
 * another's mail.
 */
export default async function MailPage() {
  // Rendered per request, never at build: demo mode is the running server's environment, not the
  // builder's, and the list changes with every paid order.
  await connection();
  if (!demoMode()) notFound();

  const messages = await appServices().db.select().from(mailSink).orderBy(desc(mailSink.sentAt)).limit(200);
  return (
    <main className="shell">
      <header className="masthead">
        <h1>邮件（演示用收件箱）</h1>
        <p className="tagline">每笔已支付订单只发送一封确认邮件。</p>
      </header>
      <section className="card" aria-labelledby="mail-heading">
        <h2 id="mail-heading">已发送 {messages.length} 封</h2>
        {messages.length === 0 && <p>还没有邮件。</p>}
        <ul className="products">
          {messages.map((m) => (
            <li className="product" key={m.id}>
              <div>
                <div>{m.subject}</div>
                <div className="meta">
                  {m.recipient} · <time dateTime={m.sentAt.toISOString()}>{formatBeijingTimestamp(m.sentAt)}</time>
                </div>
                {/* An email body is lines of text (amount, gateway, time): keep its line breaks. */}
                <div style={{ whiteSpace: 'pre-line' }}>{m.body}</div>
              </div>
            </li>
          ))}
        </ul>
        <p>
          <a href="/">返回收银台</a>
        </p>
      </section>
    </main>
  );
}
