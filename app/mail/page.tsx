import { desc } from 'drizzle-orm';
import { mailSink } from '../../db/schema';
import { appServices } from '../../server/app-services';

// Read at request time: the list changes with every paid order.
export const dynamic = 'force-dynamic';

/** The demo's mail server: every confirmation email the outbox relay has sent, newest first. */
export default async function MailPage() {
  const messages = await appServices()
    .db.select()
    .from(mailSink)
    .orderBy(desc(mailSink.sentAt))
    .limit(200);
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
                  {m.recipient} · {m.sentAt.toISOString().replace('T', ' ').slice(0, 19)} UTC
                </div>
                <div>{m.body}</div>
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
