/**
 * Notification storm: 1,000 orders paid at the gateways (250 each: Alipay, WeChat Pay, Stripe, 2C2P)
 * whose pay responses were lost, then every gateway's notification delivered 8 times at once, the
 * orders shuffled across gateways and the copies of one order jittered. Measures the time until all
 * orders are paid and counts double effects in the database (must be 0).
 *
 *   1. orders are created through the app (checkout.createOrder) and left as a lost pay response
 *      leaves them: `paying`, attempt 1 — exactly as test/integration/gateway-contract.test.ts does;
 *   2. each is charged at the sandbox through the app's own adapter, its notify URL aimed at a relay
 *      in this process that captures the gateway's signed delivery and acknowledges it (so the
 *      sandbox's own retries stop and cannot add to the storm);
 *   3. the storm: each captured delivery POSTed 8 times concurrently to /api/webhooks/{gateway};
 *      a delivery that got no acknowledgement (a copy that met the first still in flight) is sent
 *      again, as the gateway would, until the order is acknowledged.
 *
 * Run alone: `tsx bench/notification-storm.ts [--orders 1000] [--copies 8] [--reuse-build]`; `npm run
 * bench` runs it after the latency scenarios.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { gatewaysFromEnv, type GatewayId, type PaymentGateway } from '@/server/payments';
import { GATEWAY_IDS } from '@/server/payments/gateway-ids';
import { sandboxCredentialsToEnv } from '@/server/payments/sandbox-credentials';
import { startBenchStack } from './environment';
import { mergeSorted, percentile } from './load';

const GATEWAYS: readonly GatewayId[] = GATEWAY_IDS;
/** One item per order, rotating over the demo catalogue so that repeated runs spread the stock they take. */
const SKUS = ['MUG-CELADON', 'MOONCAKE-BOX', 'TEA-LONGJING'] as const;
/** Stripe refuses a signature older than 300 s: captures older than this are fetched again. */
const STRIPE_CAPTURE_MAX_AGE_MS = 200_000;

export interface StormOptions {
  appUrl: string;
  sandboxUrl: string;
  sql: postgres.Sql;
  orders: number;
  copies: number;
  /** Orders whose copies are in flight at once (each order's copies all go together). */
  ordersInFlight?: number;
  log?: (line: string) => void;
}

export interface StormResult {
  orders: number;
  perGateway: Record<GatewayId, number>;
  copiesPerOrder: number;
  deliveries: number;
  redeliveries: number;
  /** Answers by class: acknowledged, not acknowledged (e.g. a copy that met the first in flight), errors. */
  answers: { acknowledged: number; notAcknowledged: number; networkErrors: number; byStatus: Record<string, number> };
  deliveryLatencyMs: { p50: number; p90: number; p99: number; max: number };
  /** From the first delivery until every order is paid in the database. */
  timeToSettleMs: number;
  /** From the first delivery until every order's notification has been acknowledged. */
  timeToAcknowledgeMs: number;
  doubleEffects: {
    ordersWithMoreThanOneSucceededPayment: number;
    ordersWithMoreThanOnePaymentRow: number;
    ordersWithMoreThanOneEmail: number;
    duplicateChargeRecords: number;
    ordersNotPaid: number;
    total: number;
  };
  setupSeconds: { createOrders: number; charge: number };
}

interface StormOrder {
  orderId: string;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  gateway: GatewayId;
}

interface Capture {
  headers: Record<string, string>;
  body: string;
  at: number;
}

/** Whether the app's answer acknowledges the delivery, by each gateway's own rule. */
function acknowledged(gateway: GatewayId, status: number, body: string): boolean {
  switch (gateway) {
    case 'alipay':
      return status >= 200 && status < 300 && body === 'success';
    case 'wechatpay':
      return status === 200 || status === 204;
    case 'stripe':
      return status >= 200 && status < 300;
    case '2c2p':
      return status === 200;
    default: {
      const unreachable: never = gateway;
      throw new Error(`unknown gateway ${String(unreachable)}`);
    }
  }
}

/** Runs `fn` over `items` with at most `limit` at once. */
async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const index = next++;
        results[index] = await fn(items[index]!, index);
      }
    }),
  );
  return results;
}

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

/** Captures each gateway's delivery for an order and acknowledges it, by every gateway's rule at once. */
async function startCaptureRelay(): Promise<{ url: string; captures: Map<string, Capture>; close(): Promise<void> }> {
  const captures = new Map<string, Capture>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const outTradeNo = decodeURIComponent((req.url ?? '').split('/').pop() ?? '');
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(req.headers)) {
        if (typeof value === 'string' && !['host', 'content-length', 'connection'].includes(name)) headers[name] = value;
      }
      captures.set(outTradeNo, { headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() });
      // 200 `success` acknowledges Alipay (exact body), WeChat Pay (200), Stripe (2xx) and 2C2P (200).
      res.writeHead(200, { 'content-type': 'text/plain' }).end('success');
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    captures,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function waitFor(what: string, timeoutMs: number, check: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export async function runNotificationStorm(options: StormOptions): Promise<StormResult> {
  const log = options.log ?? ((line: string) => console.error(line));
  const { sql, appUrl } = options;
  const credentials = (await (await fetch(`${options.sandboxUrl}/sandbox/credentials`)).json()) as Parameters<
    typeof sandboxCredentialsToEnv
  >[0];
  const adapters = gatewaysFromEnv(sandboxCredentialsToEnv(credentials));
  const gatewayOf = (id: GatewayId): PaymentGateway => {
    const adapter = adapters[id];
    if (!adapter) throw new Error(`the sandbox offers no credentials for ${id}`);
    return adapter;
  };

  const stock = await sql<{ sku: string; stock: number }[]>`select sku, stock from products where sku = any(${[...SKUS]})`;
  for (const sku of SKUS) {
    const left = stock.find((row) => row.sku === sku)?.stock ?? 0;
    if (left < Math.ceil(options.orders / SKUS.length)) {
      throw new Error(`${sku} has ${left} in stock, too few for the ${options.orders} orders of the storm`);
    }
  }

  // 1. Orders, through the app, spread over a few customers; then left as a lost pay response leaves them.
  const createStarted = Date.now();
  const cookies = await Promise.all(
    Array.from({ length: 8 }, async () => {
      const response = await fetch(`${appUrl}/api/trpc/checkout.products`);
      await response.arrayBuffer();
      return response.headers.getSetCookie()[0]!.split(';')[0]!;
    }),
  );
  const orders = await pool(
    Array.from({ length: options.orders }, (_, i) => i),
    16,
    async (i): Promise<StormOrder> => {
      const response = await fetch(`${appUrl}/api/trpc/checkout.createOrder`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', cookie: cookies[i % cookies.length]!, 'idempotency-key': randomUUID() },
        body: JSON.stringify({ items: [{ sku: SKUS[i % SKUS.length]!, quantity: 1 }] }),
      });
      const text = await response.text();
      if (response.status !== 201) throw new Error(`createOrder answered ${response.status}: ${text}`);
      const created = (JSON.parse(text) as { result: { data: Omit<StormOrder, 'gateway'> } }).result.data;
      return { ...created, gateway: GATEWAYS[i % GATEWAYS.length]! };
    },
  );
  for (const gateway of GATEWAYS) {
    await sql`
      update orders set status = 'paying', payment_attempt = 1, attempt_gateway = ${gateway}, attempt_started_at = now()
       where id = any(${orders.filter((o) => o.gateway === gateway).map((o) => o.orderId)}::uuid[])`;
  }
  const createSeconds = (Date.now() - createStarted) / 1000;
  log(`[storm] ${orders.length} orders created in ${createSeconds.toFixed(1)} s`);

  // 2. Charged at the gateways; each notification captured (and acknowledged) by the relay.
  const relay = await startCaptureRelay();
  try {
    const chargeStarted = Date.now();
    await pool(shuffle([...orders]), 16, async (order) => {
      const outcome = await gatewayOf(order.gateway).charge({
        outTradeNo: order.outTradeNo,
        amountMinor: order.amountMinor,
        currency: order.currency,
        subject: `PayOnce 订单 ${order.outTradeNo}`,
        attempt: 1,
        buyer: 'ok',
        notifyUrl: `${relay.url}/capture/${order.gateway}/${encodeURIComponent(order.outTradeNo)}`,
      });
      if (outcome.kind !== 'succeeded') throw new Error(`${order.gateway} charge of ${order.outTradeNo}: ${JSON.stringify(outcome)}`);
    });
    const chargeSeconds = (Date.now() - chargeStarted) / 1000;
    await waitFor('every notification to reach the relay', 120_000, () => orders.every((o) => relay.captures.has(o.outTradeNo)));
    const stale = orders.filter(
      (o) => o.gateway === 'stripe' && Date.now() - relay.captures.get(o.outTradeNo)!.at > STRIPE_CAPTURE_MAX_AGE_MS,
    );
    if (stale.length > 0) {
      // Fresh signatures for Stripe's 300 s tolerance: the sandbox's tool sends the same event again.
      for (const order of stale) relay.captures.delete(order.outTradeNo);
      await pool(stale, 16, async (order) => {
        const response = await fetch(`${options.sandboxUrl}/sandbox/stripe/notify`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ outTradeNo: order.outTradeNo, copies: 1 }),
        });
        await response.arrayBuffer();
      });
      await waitFor('fresh Stripe notifications', 60_000, () => stale.every((o) => relay.captures.has(o.outTradeNo)));
    }
    log(`[storm] charged in ${chargeSeconds.toFixed(1)} s; ${relay.captures.size} notifications captured`);
    const [notPaying] = await sql<{ n: number }[]>`
      select count(*)::int as n from orders where id = any(${orders.map((o) => o.orderId)}::uuid[]) and status <> 'paying'`;
    if (notPaying!.n !== 0) throw new Error(`${notPaying!.n} orders were settled before the storm`);

    // 3. The storm.
    const copies = options.copies;
    const byStatus: Record<string, number> = {};
    const latencies: number[] = [];
    let acked = 0;
    let notAcked = 0;
    let networkErrors = 0;
    let redeliveries = 0;
    const ackedOrders = new Set<string>();
    const ids = orders.map((o) => o.orderId);

    const deliver = async (order: StormOrder): Promise<boolean> => {
      const capture = relay.captures.get(order.outTradeNo)!;
      const sent = performance.now();
      try {
        const response = await fetch(`${appUrl}/api/webhooks/${order.gateway}`, {
          method: 'POST',
          headers: capture.headers,
          body: capture.body,
        });
        const body = await response.text();
        latencies.push(performance.now() - sent);
        byStatus[response.status] = (byStatus[response.status] ?? 0) + 1;
        if (acknowledged(order.gateway, response.status, body)) {
          acked++;
          return true;
        }
        notAcked++;
        return false;
      } catch {
        networkErrors++;
        return false;
      }
    };

    // Load each webhook route before the clock starts: an unsigned body is refused (4xx), records nothing.
    for (const gateway of GATEWAYS) {
      const response = await fetch(`${appUrl}/api/webhooks/${gateway}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      await response.arrayBuffer();
    }

    const started = performance.now();
    let settledAt: number | undefined;
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const [row] = await sql<{ n: number }[]>`
          select count(*)::int as n from orders where id = any(${ids}::uuid[]) and status = 'paid'`;
        if (row!.n === ids.length) {
          settledAt = performance.now();
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();

    await pool(shuffle([...orders]), options.ordersInFlight ?? 32, async (order) => {
      const answers = await Promise.all(
        Array.from({ length: copies }, async () => {
          // A few ms of jitter each: the copies of one order arrive in no particular order.
          await new Promise((resolve) => setTimeout(resolve, Math.random() * 5));
          return deliver(order);
        }),
      );
      if (answers.some(Boolean)) ackedOrders.add(order.orderId);
    });
    // The gateway comes back for every order it has no acknowledgement for.
    for (let attempt = 0; attempt < 20 && ackedOrders.size < orders.length; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** Math.min(attempt, 4)));
      await pool(
        orders.filter((o) => !ackedOrders.has(o.orderId)),
        32,
        async (order) => {
          redeliveries++;
          if (await deliver(order)) ackedOrders.add(order.orderId);
        },
      );
    }
    const acknowledgedAt = performance.now();
    await Promise.race([poller, new Promise((resolve) => setTimeout(resolve, 30_000))]);
    polling = false;

    const [effects] = await sql<{ succeeded: number; rows: number; emails: number; duplicate_charges: number; not_paid: number }[]>`
      with ids as (select unnest(${ids}::uuid[]) as id)
      select
        (select count(*)::int from (select order_id from payments where order_id in (select id from ids)
            and status = 'succeeded' group by order_id having count(*) > 1) s) as succeeded,
        (select count(*)::int from (select order_id from payments where order_id in (select id from ids)
            group by order_id having count(*) > 1) r) as rows,
        (select count(*)::int from (select payload->>'orderId' from outbox where topic = 'email.order_paid'
            and payload->>'orderId' in (select id::text from ids) group by 1 having count(*) > 1) e) as emails,
        (select count(*)::int from outbox where topic = 'payment.duplicate_charge'
            and payload->>'orderId' in (select id::text from ids)) as duplicate_charges,
        (select count(*)::int from orders where id in (select id from ids) and status <> 'paid') as not_paid`;
    const sorted = mergeSorted([Float64Array.from(latencies)]);
    const doubleEffects = {
      ordersWithMoreThanOneSucceededPayment: effects!.succeeded,
      ordersWithMoreThanOnePaymentRow: effects!.rows,
      ordersWithMoreThanOneEmail: effects!.emails,
      duplicateChargeRecords: effects!.duplicate_charges,
      ordersNotPaid: effects!.not_paid,
      total: 0,
    };
    doubleEffects.total =
      doubleEffects.ordersWithMoreThanOneSucceededPayment +
      doubleEffects.ordersWithMoreThanOnePaymentRow +
      doubleEffects.ordersWithMoreThanOneEmail +
      doubleEffects.duplicateChargeRecords +
      doubleEffects.ordersNotPaid;
    const perGateway = Object.fromEntries(GATEWAYS.map((g) => [g, orders.filter((o) => o.gateway === g).length])) as Record<
      GatewayId,
      number
    >;
    return {
      orders: orders.length,
      perGateway,
      copiesPerOrder: copies,
      deliveries: orders.length * copies + redeliveries,
      redeliveries,
      answers: { acknowledged: acked, notAcknowledged: notAcked, networkErrors, byStatus },
      deliveryLatencyMs: {
        p50: percentile(sorted, 50),
        p90: percentile(sorted, 90),
        p99: percentile(sorted, 99),
        max: sorted[sorted.length - 1] ?? Number.NaN,
      },
      timeToSettleMs: settledAt === undefined ? Number.NaN : settledAt - started,
      timeToAcknowledgeMs: acknowledgedAt - started,
      doubleEffects,
      setupSeconds: { createOrders: createSeconds, charge: chargeSeconds },
    };
  } finally {
    await relay.close();
  }
}

export function stormMarkdown(result: StormResult): string {
  const ms = (n: number) => (Number.isFinite(n) ? `${n.toFixed(0)} ms` : 'n/a');
  const d = result.doubleEffects;
  return [
    `### Notification storm: ${result.orders} paid orders × ${result.copiesPerOrder} concurrent copies`,
    '',
    `Orders per gateway: ${Object.entries(result.perGateway)
      .map(([g, n]) => `${g} ${n}`)
      .join(', ')}.`,
    '',
    '| time to settle (all paid) | time to acknowledge all | deliveries (re-sent) | acknowledged / not / network errors | delivery p50 / p90 / p99 | double effects |',
    '|---:|---:|---:|---:|---:|---:|',
    `| ${ms(result.timeToSettleMs)} | ${ms(result.timeToAcknowledgeMs)} | ${result.deliveries} (${result.redeliveries}) | ` +
      `${result.answers.acknowledged} / ${result.answers.notAcknowledged} / ${result.answers.networkErrors} | ` +
      `${result.deliveryLatencyMs.p50.toFixed(1)} / ${result.deliveryLatencyMs.p90.toFixed(1)} / ${result.deliveryLatencyMs.p99.toFixed(1)} ms | ` +
      `**${d.total}** ${d.total === 0 ? '✅' : '❌'} |`,
    '',
    `Double effects: orders with >1 succeeded payment ${d.ordersWithMoreThanOneSucceededPayment}, with >1 payment row ` +
      `${d.ordersWithMoreThanOnePaymentRow}, with >1 confirmation email ${d.ordersWithMoreThanOneEmail}, duplicate-charge ` +
      `records ${d.duplicateChargeRecords}, orders not paid ${d.ordersNotPaid}. Answers by status: ` +
      `${Object.entries(result.answers.byStatus)
        .map(([s, n]) => `${s}×${n}`)
        .join(', ')}.`,
  ].join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      orders: { type: 'string', default: '1000' },
      copies: { type: 'string', default: '8' },
      'reuse-build': { type: 'boolean', default: false },
      verbose: { type: 'boolean', default: false },
    },
  });
  const stack = await startBenchStack({ build: !values['reuse-build'], verbose: values.verbose });
  const sql = postgres(stack.databaseUrl, { max: 4, onnotice: () => {} });
  try {
    const result = await runNotificationStorm({
      appUrl: stack.appUrl,
      sandboxUrl: stack.sandboxUrl,
      sql,
      orders: Number(values.orders),
      copies: Number(values.copies),
    });
    const markdown = stormMarkdown(result);
    console.log(markdown);
    const dir = path.join(path.dirname(new URL(import.meta.url).pathname), 'results');
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'storm-latest.json'), `${JSON.stringify({ at: new Date().toISOString(), storm: result }, null, 2)}\n`);
    await writeFile(path.join(dir, 'storm-latest.md'), `${markdown}\n`);
    if (result.doubleEffects.total !== 0) process.exitCode = 1;
  } finally {
    await sql.end({ timeout: 5 });
    await stack.stop();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
