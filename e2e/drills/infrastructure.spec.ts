/**
 * Failures around the app rather than in it: a storm of duplicate notifications arriving at once and
 * out of order, and retries of one key spread across two app instances behind a load balancer —
 * which share one database through PgBouncer in transaction-pooling mode when pgbouncer is installed
 * (playwright.config.ts, docs/scaling.md) — and an instance evicted with SIGTERM mid-payment.
 */
import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { DRILL_GATEWAYS, GATEWAY_LABELS, drillMs, drillRunsOn, expect, test } from './drill';
import { Shopper } from './shopper';

const SECOND_APP = process.env.DRILL_SECOND_APP_URL ?? 'http://127.0.0.1:3201';
/** The instance the drills evict; the load balancer of ./shopper.ts sends a refused call to the other. */
const FIRST_APP = SECOND_APP.replace(/:(\d+)$/, (_, port: string) => `:${Number(port) - 1}`);
/** Every point of a payment's request where SIGTERM may find it (server/checkout/fault-points.ts). */
const PAYMENT_PHASES = ['before_claim', 'after_claim', 'before_gateway_call', 'after_gateway_call', 'after_commit'] as const;
/** Any 5xx but the documented 503 (refused while draining, or a gateway unavailable): none may be seen. */
const undocumented5xx = (seen: number[]) => seen.filter((status) => status >= 500 && status !== 503);
/** The drills' PgBouncer admin console, or '' when the stack runs without one. */
const PGBOUNCER_ADMIN_URL = process.env.DRILL_PGBOUNCER_ADMIN_URL ?? '';

/** Transactions PgBouncer has passed to the app's database so far, and its pool mode. */
async function pgbouncerCounters(): Promise<{ transactions: number; poolMode: string | undefined; clients: string[] }> {
  // The admin console speaks the simple protocol only: no type fetch, no parameters.
  const admin = postgres(PGBOUNCER_ADMIN_URL, { max: 1, prepare: false, fetch_types: false, onnotice: () => {}, connect_timeout: 5 });
  try {
    const stats = await admin.unsafe<{ database: string; total_xact_count: string }[]>('show stats');
    const pools = await admin.unsafe<{ database: string; pool_mode: string }[]>('show pools');
    const clients = await admin.unsafe<{ database: string; application_name: string }[]>('show clients');
    const app = (row: { database: string }) => row.database !== 'pgbouncer';
    return {
      transactions: stats.filter(app).reduce((n, row) => n + Number(row.total_xact_count), 0),
      poolMode: pools.find(app)?.pool_mode,
      clients: [...new Set(clients.filter(app).map((row) => row.application_name))].sort(),
    };
  } catch (error) {
    throw new Error(
      `the drills' PgBouncer (${PGBOUNCER_ADMIN_URL.replace(/:[^:@/]+@/, ':***@')}) did not answer: ${(error as Error).message}. ` +
        'Was the drills stack started without it (a reused server)? DRILL_PGBOUNCER=0 runs the drills direct.',
    );
  } finally {
    await admin.end({ timeout: 1 });
  }
}

for (const gateway of DRILL_GATEWAYS) {
  test.describe(`${gateway}`, () => {
    if (drillRunsOn(0, gateway))
      test(`eviction: SIGTERM while the payment is at the gateway; it finishes, new requests get 503, one charge (${gateway})`, async ({
        checkout,
        drill,
        page,
        request,
      }) => {
        const pays: string[] = [];
        page.on('response', (response) => {
          if (response.url().includes('checkout.pay'))
            pays.push(`${response.status()}${response.headers()['idempotency-replayed'] ? ' replayed' : ''}`);
        });
        await test.step('1. the pod is told to leave just before the charge; the charge then takes a moment', async () => {
          await drill.armAppFault({ point: 'before_gateway_call', action: { kind: 'terminate' }, gateway });
          await drill.armAppFault({ point: 'after_gateway_call', action: { kind: 'delay', ms: drillMs(6000) }, gateway });
          await checkout.open();
          await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
          await checkout.pay();
        });
        await test.step('2. while it drains: not ready, and a new request is refused with 503 + Retry-After', async () => {
          await expect.poll(async () => (await request.get('/api/health')).status(), { message: 'health while draining' }).toBe(503);
          const refused = await request.get('/api/trpc/checkout.products');
          expect(refused.status()).toBe(503);
          expect(refused.headers()['retry-after']).toBe('1');
          expect(JSON.stringify(await refused.json())).toContain('SHUTTING_DOWN');
        });
        await test.step('3. the payment in flight finishes: 支付成功 at the first answer, charged once', async () => {
          await expect(checkout.status).toContainText('支付成功');
          // The request in flight was answered, not cut off; a retry of the same key (the page asking
          // again while the instance refused its order queries) is the stored answer, replayed.
          expect(pays[0], `the pay answers: ${pays.join(', ')}`).toBe('201');
          expect(pays.slice(1).every((answer) => answer === '201 replayed' || answer === '503')).toBe(true);
          await drill.expectChargedExactlyOnce(await checkout.paidOutTradeNo(), gateway);
        });
        await test.step('4. the instance exits and the supervisor starts it again', async () => {
          await drill.waitForApp();
        });
      });

    if (drillRunsOn(1, gateway))
      test(`eviction at every phase of a payment: the payment finishes, charged once (${gateway})`, async ({ drill }) => {
        for (const point of PAYMENT_PHASES) {
          await test.step(`SIGTERM at ${point}`, async () => {
            await drill.armAppFault({ point, action: { kind: 'terminate' }, gateway });
            const shopper = await Shopper.start([FIRST_APP, SECOND_APP]);
            try {
              const { outTradeNo, paid } = await shopper.buy(gateway);
              // Answered by the instance it reached, at the first try: not cut off as by a crash,
              // which would have left the retry waiting out the dead request's lease.
              expect(paid.statuses, `the pay call's answers (all: ${shopper.seen.join(', ')})`).toEqual([201]);
              expect(undocumented5xx(shopper.seen)).toEqual([]);
              await drill.expectChargedExactlyOnce(outTradeNo, gateway);
            } finally {
              await shopper.dispose();
            }
            await drill.waitForApp();
          });
        }
      });

    if (drillRunsOn(2, gateway))
      test(`eviction under load: 16 shoppers at once through two instances, one evicted; every order paid once (${gateway})`, async ({
        drill,
      }) => {
        // The first payment to reach the charge on the first instance evicts it; the rest of the
        // shoppers are mid-request there, or arrive while it drains, or after it is gone.
        await drill.armAppFault({ point: 'before_gateway_call', action: { kind: 'terminate' }, gateway });
        const shoppers = await Promise.all(Array.from({ length: 16 }, () => Shopper.start([FIRST_APP, SECOND_APP])));
        try {
          // Arriving over a few seconds, as a flash of traffic does: some before, some during the drain.
          const arrive = (i: number) => new Promise((resolve) => setTimeout(resolve, i * 200));
          const bought = await Promise.all(shoppers.map(async (shopper, i) => (await arrive(i), shopper.buy(gateway, i % 2))));
          const seen = shoppers.flatMap((shopper) => shopper.seen);
          expect(
            bought.map((b) => b.paid.status),
            `every pay answered 201 (all answers seen: ${seen.join(', ')})`,
          ).toEqual(bought.map(() => 201));
          expect(undocumented5xx(seen)).toEqual([]);
          expect(seen.filter((status) => status === 503 || status === 0).length, 'the eviction was felt').toBeGreaterThan(0);
          for (const { outTradeNo } of bought) await drill.expectChargedExactlyOnce(outTradeNo, gateway);
        } finally {
          await Promise.all(shoppers.map((shopper) => shopper.dispose()));
        }
        await drill.waitForApp();
      });

    test(`notification storm: 25 duplicates at once, out of order, make one email (${gateway})`, async ({ checkout, drill, request }) => {
      await test.step('1. the gateway sends its notification 25 times, each copy after a random delay', async () => {
        await drill.armSandboxFault({ gateway, action: 'duplicate_notifications', copies: 24 });
        await checkout.open();
        await checkout.chooseGateway(GATEWAY_LABELS[gateway]);
        await checkout.pay();
        await expect(checkout.status).toContainText('支付成功');
      });
      const outTradeNo = await checkout.paidOutTradeNo();
      await expect
        .poll(async () => (await drill.ledger(outTradeNo)).notifications.length, { message: '25 deliveries' })
        .toBeGreaterThanOrEqual(25);
      await test.step("2. and 25 more fired at once by the sandbox's notification tool", async () => {
        const storm = await request.post(`${drill.sandboxUrl}/sandbox/${gateway}/notify`, { data: { outTradeNo, copies: 25 } });
        expect(storm.status(), await storm.text()).toBe(200);
        expect(((await storm.json()) as { deliveries: unknown[] }).deliveries).toHaveLength(25);
      });
      await test.step('3. one payment, one email', async () => {
        await drill.expectChargedExactlyOnce(outTradeNo, gateway);
      });
    });

    test(`two app instances: retries of one key alternate between them, one charge (${gateway})`, async ({ request, drill }) => {
      test.info().annotations.push({
        type: 'database',
        description: PGBOUNCER_ADMIN_URL ? 'both instances through PgBouncer, transaction pooling' : 'both instances direct (no pgbouncer)',
      });
      const pooled = PGBOUNCER_ADMIN_URL ? await pgbouncerCounters() : undefined;
      // One customer (one session cookie, valid on both instances) behind a load balancer; the
      // first request opens the session.
      expect((await request.get('/api/trpc/checkout.products')).status()).toBe(200);
      const create = await request.post('/api/trpc/checkout.createOrder', {
        headers: { 'idempotency-key': randomUUID() },
        data: { items: [{ sku: 'MUG-CELADON', quantity: 1 }] },
      });
      expect(create.status(), await create.text()).toBe(201);
      const order = (await create.json()).result.data as { orderId: string; outTradeNo: string };
      const key = randomUUID();
      const pay = (base: string) =>
        request.post(`${base}/api/trpc/checkout.pay`, {
          headers: { 'idempotency-key': key },
          data: { orderId: order.orderId, gateway, buyer: 'ok' },
          failOnStatusCode: false,
        });

      // The first instance is slow after claiming the key; the retries meanwhile alternate.
      await drill.armAppFault({ point: 'after_claim', action: { kind: 'delay', ms: 4000 }, gateway });
      const slow = pay('');
      await new Promise((resolve) => setTimeout(resolve, 300));
      const statuses: number[] = [];
      const bodies: string[] = [];
      for (let retry = 0; retry < 12 && bodies.length < 2; retry++) {
        const response = await pay(retry % 2 === 0 ? SECOND_APP : '');
        statuses.push(response.status());
        if (response.status() === 201) bodies.push(await response.text());
        else await new Promise((resolve) => setTimeout(resolve, 400));
      }
      const first = await slow;
      expect(first.status()).toBe(201);
      expect(statuses, 'the other instance saw the key in flight').toContain(409);
      expect(bodies).toHaveLength(2);
      for (const body of bodies) expect(body).toBe(await first.text());
      await drill.expectChargedExactlyOnce(order.outTradeNo, gateway);
      if (pooled) {
        // Every claim, phase and replay above was a transaction handed out by PgBouncer, with the
        // requests' pools and the job queues of both instances among its clients.
        const now = await pgbouncerCounters();
        expect(now.poolMode).toBe('transaction');
        expect(now.transactions - pooled.transactions, 'transactions through PgBouncer during the drill').toBeGreaterThan(statuses.length);
        expect(now.clients).toEqual(expect.arrayContaining(['payonce', 'payonce-jobs']));
      }
    });
  });
}

test('under `next start` the address an order counts against is the socket’s, whatever headers the client forges', async ({ drill }) => {
  const request = drill.request;
  await request.get('/api/trpc/checkout.products'); // the session
  const created = await request.post('/api/trpc/checkout.createOrder', {
    headers: { 'idempotency-key': randomUUID(), 'x-forwarded-for': '203.0.113.98', 'x-payonce-peer-address': '203.0.113.99' },
    data: { items: [{ sku: 'MUG-CELADON', quantity: 1 }] },
  });
  expect(created.status(), await created.text()).toBe(201);
  const { outTradeNo } = ((await created.json()) as { result: { data: { outTradeNo: string } } }).result.data;
  expect((await drill.state(outTradeNo)).order.clientAddress).toBe('127.0.0.1');
});
