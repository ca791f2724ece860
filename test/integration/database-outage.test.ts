/**
 * PostgreSQL going away under the checkout — a restart, a failover, a cut connection — through a
 * proxy between the app's pool and the server (test/support/db-proxy.ts):
 *
 * - while it is unreachable, every request answers 503 + Retry-After (DATABASE_UNAVAILABLE), which
 *   the page retries with the same key, and nothing is created;
 * - a COMMIT in doubt — the settle's COMMIT sent after the gateway charged, and its answer lost, or
 *   the connection cut before it arrived — is resolved by the retry without a second charge: the key
 *   is read back from the database, not assumed from the error. If the settle committed, the retry
 *   replays its 201; if it did not, the key's recovery point is still `attempt_started`, its lease was
 *   released, and the retry asks the gateway again under the same identifiers, which answers with the
 *   charge it already made.
 *
 * The real failover (a primary killed, a standby promoted by pg_auto_failover) is `npm run
 * drill:failover` (failover/main.ts).
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/integration/database-outage.test.ts
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startDatabaseProxy, type DatabaseProxy } from '@/test/support/db-proxy';
import { requireDatabaseUrl, startTestStack, type TestStack } from '@/test/support/stack';

let proxy: DatabaseProxy;
let stack: TestStack;
before(async () => {
  proxy = await startDatabaseProxy(requireDatabaseUrl());
  stack = await startTestStack({ appDatabaseUrl: proxy.url });
});
after(async () => {
  await stack?.close();
  await proxy?.close();
});

async function orderStatus(orderId: string): Promise<string | undefined> {
  const [row] = await stack.sql<{ status: string }[]>`select status from orders where id = ${orderId}`;
  return row?.status;
}

describe('PostgreSQL unreachable', { concurrency: false }, () => {
  it('answers 503 + Retry-After (DATABASE_UNAVAILABLE) to reads and writes, and creates nothing', async () => {
    const customer = stack.customer();
    await customer.query('checkout.products'); // a session, while the database answers
    const [before] = await stack.sql<{ n: number }[]>`select count(*)::int as n from orders`;
    await proxy.refuse();
    try {
      const read = await customer.query('checkout.products');
      const write = await customer.mutate('checkout.createOrder', { items: [{ sku: 'MUG-CELADON', quantity: 1 }] });
      for (const answer of [read, write]) {
        assert.equal(answer.status, 503, answer.text);
        assert.equal(answer.headers.get('retry-after'), '1');
        assert.equal(answer.json.error.data.reason, 'DATABASE_UNAVAILABLE');
        assert.doesNotMatch(answer.text, /ECONNRE|127\.0\.0\.1|CONNECTION_/, 'no address or driver detail on the wire');
      }
    } finally {
      await proxy.accept();
    }
    const [now] = await stack.sql<{ n: number }[]>`select count(*)::int as n from orders`;
    assert.equal(now!.n, before!.n);
  });
});

/** Where the COMMIT is lost: the phase that starts the attempt (before any gateway call), or the settle after it. */
const PHASES = {
  'the attempt start': { armAt: 'after_claim', committed: 'attempt_started' },
  'the settle': { armAt: 'after_gateway_call', committed: 'completed' },
} as const;

describe('a COMMIT in doubt', { concurrency: false }, () => {
  for (const [phase, { armAt, committed }] of Object.entries(PHASES)) {
    for (const gateway of ['alipay', 'stripe', 'wechatpay', '2c2p'] as const) {
      for (const lost of ['answer', 'commit'] as const) {
        const what = lost === 'answer' ? 'committed, its answer lost' : 'cut off before the COMMIT';
        it(`${gateway}: ${phase} ${what} — 503, then the retry answers 201 and the buyer is charged once`, async () => {
          const customer = stack.customer();
          const order = await customer.createOrder();
          // Only this request settles the order: the gateway's notifications of it never arrive.
          await stack.sandboxFault({ gateway, action: 'lose_notifications', times: 20, outTradeNo: order.outTradeNo });
          const key = randomUUID();
          let commitLost: Promise<void> | undefined;
          stack.services.faults = {
            async hit(point, site) {
              if (point === armAt && site.procedure === 'checkout.pay' && !commitLost) commitLost = proxy.loseNextCommit(lost, key);
            },
          };
          try {
            const first = await customer.pay(order.orderId, { gateway, key });
            assert.ok(commitLost, `the request reached ${armAt}`);
            await Promise.race([commitLost, sleep(5000).then(() => assert.fail('no COMMIT of this payment was lost'))]);
            assert.equal(first.status, 503, first.text);
            assert.equal(first.headers.get('retry-after'), '1');
            assert.equal(first.json.error.data.reason, 'DATABASE_UNAVAILABLE');
            // What the database holds is what the COMMIT did, whatever the request was told.
            assert.equal(await keyState(key), lost === 'answer' ? committed : phase === 'the settle' ? 'attempt_started' : 'none');
          } finally {
            stack.services.faults = undefined;
            proxy.disarm();
          }

          const retry = await customer.pay(order.orderId, { gateway, key });
          assert.equal(retry.status, 201, retry.text);
          assert.equal(retry.headers.get('idempotency-replayed'), lost === 'answer' && phase === 'the settle' ? 'true' : null);
          assert.equal(await orderStatus(order.orderId), 'paid');
          assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1, 'one charge at the gateway');
          const [payments] = await stack.sql<{ n: number }[]>`
            select count(*)::int as n from payments where order_id = ${order.orderId} and status = 'succeeded'`;
          assert.equal(payments!.n, 1, 'one payment in our books');
        });
      }
    }
  }
});

/** The key's state in the database: none, its recovery point, or completed. */
async function keyState(key: string): Promise<string> {
  const [row] = await stack.sql<{ completed: boolean; point: string }[]>`
    select completed_at is not null as completed, recovery_point as point from idempotency_keys where key = ${key}`;
  return !row ? 'none' : row.completed ? 'completed' : row.point;
}
