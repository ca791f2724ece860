/**
 * Background work on the PostgreSQL job queue: the reconciler, the outbox relay, order expiry — each
 * checked against the database and the sandbox ledger, and each safe to run twice at once.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { relayOutbox } from '@/server/jobs/outbox-relay';
import { startJobs } from '@/server/jobs/queue';
import { expireUnpaidOrders, reconcilePayments } from '@/server/jobs/reconciler';
import { eventually, requireDatabaseUrl, startTestStack, type TestStack } from '@/test/support/stack';

let stack: TestStack;
before(async () => {
  stack = await startTestStack({ idempotency: { leaseMs: 1000 } });
});
after(async () => {
  await stack?.close();
});

async function orderStatus(orderId: string) {
  const [row] = await stack.sql<{ status: string }[]>`select status from orders where id = ${orderId}`;
  return row!.status;
}

/** An order whose pay request died after the gateway charged: `paying`, nobody holding its key. */
async function orderChargedButNeverRecorded() {
  const order = await stack.customer().createOrder();
  await stack.sql`
    update orders set status = 'paying', payment_attempt = 1, attempt_gateway = 'alipay',
                      attempt_started_at = now() - interval '1 minute'
     where id = ${order.orderId}`;
  const outcome = await stack.services.gateways.alipay!.charge({
    outTradeNo: order.outTradeNo,
    amountMinor: order.amountMinor,
    currency: 'CNY',
    subject: 'lost response',
    attempt: 1,
    buyer: 'ok',
    notifyUrl: 'http://127.0.0.1:9/unreachable', // the notification never arrives either
  });
  assert.equal(outcome.kind, 'succeeded');
  return order;
}

describe('reconciler', () => {
  it('1. settles an order charged at the gateway whose response was never recorded', async () => {
    const order = await orderChargedButNeverRecorded();
    const summary = await reconcilePayments(stack.services, { minAgeMs: 0 });
    assert.ok(summary.settled >= 1);
    assert.equal(await orderStatus(order.orderId), 'paid');
    const [payment] = await stack.sql<{ source: string; n: number }[]>`
      select source, count(*) over ()::int as n from payments where order_id = ${order.orderId} and status = 'succeeded'`;
    assert.equal(payment!.source, 'reconciliation');
    assert.equal(payment!.n, 1);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    // Twice more, concurrently: nothing changes.
    await Promise.all([reconcilePayments(stack.services, { minAgeMs: 0 }), reconcilePayments(stack.services, { minAgeMs: 0 })]);
    const [emails] = await stack.sql<{ n: number }[]>`
      select count(*)::int as n from outbox where payload->>'orderId' = ${order.orderId}`;
    assert.equal(emails!.n, 1);
  });

  it('2. reopens an attempt the gateway never saw, so the customer can pay again', async () => {
    const customer = stack.customer();
    const order = await customer.createOrder();
    await stack.sql`
      update orders set status = 'paying', payment_attempt = 1, attempt_gateway = 'alipay',
                        attempt_started_at = now() - interval '1 minute'
       where id = ${order.orderId}`;
    const blocked = await customer.pay(order.orderId);
    assert.equal(blocked.status, 409);
    assert.equal(blocked.json.error.data.reason, 'ORDER_PAYMENT_IN_PROGRESS');

    await reconcilePayments(stack.services, { minAgeMs: 0 });
    assert.equal(await orderStatus(order.orderId), 'awaiting_payment');
    const paid = await customer.pay(order.orderId);
    assert.equal(paid.status, 201, paid.text);
    assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
  });

  it('3. leaves alone an attempt whose request still holds its lease', async () => {
    const order = await stack.customer().createOrder();
    const [owner] = await stack.sql<{ customer_id: string }[]>`select customer_id from orders where id = ${order.orderId}`;
    const [key] = await stack.sql<{ id: string }[]>`
      insert into idempotency_keys (scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token, recovery_point)
      values (${`customer:${owner!.customer_id}`}, ${`live-${order.orderId}`}, 'checkout.pay', 'h', now(), now() + interval '1 minute', gen_random_uuid(), 'attempt_started')
      returning id`;
    await stack.sql`
      update orders set status = 'paying', payment_attempt = 1, attempt_gateway = 'alipay', attempt_key_id = ${key!.id},
                        attempt_started_at = now() - interval '1 minute'
       where id = ${order.orderId}`;
    await reconcilePayments(stack.services, { minAgeMs: 0 });
    assert.equal(await orderStatus(order.orderId), 'paying');
  });
});

describe('order expiry', () => {
  it('expires unpaid orders and gives their stock back exactly once, however many runs race', async () => {
    const [before] = await stack.sql<{ stock: number }[]>`select stock from products where sku = 'MOONCAKE-BOX'`;
    const order = await stack.customer().createOrder([{ sku: 'MOONCAKE-BOX', quantity: 3 }]);
    const [taken] = await stack.sql<{ stock: number }[]>`select stock from products where sku = 'MOONCAKE-BOX'`;
    assert.equal(taken!.stock, before!.stock - 3);
    await stack.sql`update orders set expires_at = now() - interval '1 second' where id = ${order.orderId}`;
    await Promise.all(Array.from({ length: 4 }, () => expireUnpaidOrders(stack.services)));
    assert.equal(await orderStatus(order.orderId), 'expired');
    const [after] = await stack.sql<{ stock: number }[]>`select stock from products where sku = 'MOONCAKE-BOX'`;
    assert.equal(after!.stock, before!.stock);
    const pay = await stack.customer().pay(order.orderId);
    assert.equal(pay.status, 404, 'and only its own customer could ever pay it');
  });
});

describe('outbox relay', () => {
  it('delivers each confirmation email once, even with relays running concurrently', async () => {
    const customer = stack.customer();
    const orders = [];
    for (let i = 0; i < 5; i++) {
      const order = await customer.createOrder();
      assert.equal((await customer.pay(order.orderId)).status, 201);
      orders.push(order.orderId);
    }
    await Promise.all(Array.from({ length: 4 }, () => relayOutbox(stack.db, 2)));
    await relayOutbox(stack.db);
    const mails = await stack.sql<{ order_id: string; n: number }[]>`
      select o.payload->>'orderId' as order_id, count(m.id)::int as n
        from outbox o left join mail_sink m on m.outbox_id = o.id
       where o.payload->>'orderId' in ${stack.sql(orders)}
       group by 1`;
    assert.equal(mails.length, 5);
    for (const row of mails) assert.equal(row.n, 1, `order ${row.order_id}`);
  });
});

describe('the job queue', () => {
  it('mends a chain whose next run could not be written (a database failing over as a run ended)', async () => {
    const jobs = await startJobs(stack.services, {
      connectionString: requireDatabaseUrl(),
      intervals: { reconcileSeconds: 0.5, outboxSeconds: 0.5, keyCleanupSeconds: 60 },
      log: () => {},
    });
    try {
      // Every waiting reconcile run is removed for three seconds: the chain's links written meanwhile
      // go too, as links lost to a failover would, and none is left.
      for (const end = Date.now() + 3000; Date.now() < end; await sleep(100)) {
        await stack.sql`delete from pgboss.job where name = 'payments.reconcile' and state in ('created', 'retry')`;
      }
      const order = await orderChargedButNeverRecorded();
      await eventually(async () => ((await orderStatus(order.orderId)) === 'paid' ? true : undefined), 25_000, 'the reconciler, re-seeded');
    } finally {
      await jobs.stop();
    }
  });

  it('settles an order left in paying with no client retry, and mails the customer, by itself', async () => {
    const jobs = await startJobs(stack.services, {
      connectionString: requireDatabaseUrl(),
      intervals: { reconcileSeconds: 0.5, outboxSeconds: 0.5, keyCleanupSeconds: 60 },
      log: () => {},
    });
    try {
      const order = await orderChargedButNeverRecorded();
      await eventually(async () => ((await orderStatus(order.orderId)) === 'paid' ? true : undefined), 20_000, 'the reconciler');
      const mail = await eventually(
        async () => {
          const rows = await stack.sql<{ subject: string }[]>`
          select m.subject from mail_sink m join outbox o on o.id = m.outbox_id where o.payload->>'orderId' = ${order.orderId}`;
          return rows.length > 0 ? rows : undefined;
        },
        20_000,
        'the email',
      );
      assert.equal(mail.length, 1);
      assert.match(mail[0]!.subject, new RegExp(order.outTradeNo));
    } finally {
      await jobs.stop();
    }
  });
});
