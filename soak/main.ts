/**
 * The fault soak: `npm run soak -- --orders N --concurrency C --fault-rate F --seed S`.
 *
 * Starts a production stack (two supervised app instances, fault injection on, a short lease and fast
 * jobs), then simulated customers — the page's own retrying flow through @trpc/client — create and
 * pay orders on all four gateways while the seed's schedule fires faults: app fault points × throw /
 * delay / crash, sandbox faults, pg_terminate_backend of the app's connections, duplicate and late
 * notifications, customers who give up mid-payment. Then the reconciler gets a bounded time to settle
 * and the invariant checker reads the sandbox's ledger and the database. Exit 1 on any violation.
 *
 * The same seed replays the same schedule (its digest is printed); the timing of a run is not
 * replayed, so which concurrent order a fault lands on may differ.
 */
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import { startStack, type Stack } from '@/scripts/stack';
import { gatewaysFromEnv } from '@/server/payments';
import type { GatewayId, PaymentGateway } from '@/server/payments/gateway';
import { sandboxCredentialsToEnv } from '@/server/payments/sandbox-credentials';
import { runCustomer, type CustomerResult, type Outcome } from './customer';
import { FaultController } from './faults';
import { checkInvariants, fetchLedger, takeBaseline, VIOLATION_KINDS, waitUntilSettled, type InvariantReport } from './invariants';
import { formatDuration, ProgressBar } from './progress';
import { buildSchedule, faultLabel, scheduleDigest, SKUS, type OrderPlan } from './schedule';

/** Short, so crashed requests are taken over quickly, yet longer than one gateway call can take (3 × GATEWAY_TIMEOUT_MS 2000: server/config/env.ts refuses less). */
const LEASE_MS = 7000;

const { values: args } = parseArgs({
  options: {
    orders: { type: 'string', default: '200' },
    concurrency: { type: 'string', default: '8' },
    'fault-rate': { type: 'string', default: '0.3' },
    seed: { type: 'string', default: '1' },
    'app-port': { type: 'string', default: '3500' },
    'sandbox-port': { type: 'string', default: '4510' },
    instances: { type: 'string', default: '2' },
    'settle-seconds': { type: 'string', default: '60' },
    'no-build': { type: 'boolean', default: false },
    // Another production build of this checkout to start on (CI: the browser tests' .next-e2e), with
    // --no-build: the soak then makes none of its own.
    'dist-dir': { type: 'string', default: '.next-soak' },
    'schedule-only': { type: 'boolean', default: false },
    'log-file': { type: 'string' },
    json: { type: 'string' },
  },
  allowPositionals: false,
});

function numberArg(name: string, value: string | undefined, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || n > max) {
    console.error(`--${name} must be a number in [${min}, ${max}], got ${value}`);
    process.exit(2);
  }
  return n;
}

const options = {
  orders: Math.floor(numberArg('orders', args.orders, 1)),
  concurrency: Math.floor(numberArg('concurrency', args.concurrency, 1, 256)),
  faultRate: numberArg('fault-rate', args['fault-rate'], 0, 1),
  seed: args.seed ?? '1',
  appPort: numberArg('app-port', args['app-port'], 1, 65535),
  sandboxPort: numberArg('sandbox-port', args['sandbox-port'], 1, 65535),
  instances: Math.floor(numberArg('instances', args.instances, 1, 8)),
  settleMs: numberArg('settle-seconds', args['settle-seconds'], 0) * 1000,
};

const plans = buildSchedule({ orders: options.orders, faultRate: options.faultRate, seed: options.seed, instances: options.instances });
const digest = scheduleDigest(plans);

function plannedFaults(list: OrderPlan[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const plan of list) if (plan.fault) counts.set(faultLabel(plan.fault), (counts.get(faultLabel(plan.fault)) ?? 0) + 1);
  return new Map([...counts.entries()].sort(([a], [b]) => a.localeCompare(b)));
}

const planned = plannedFaults(plans);
const plannedTotal = [...planned.values()].reduce((a, b) => a + b, 0);
console.log(
  `PayOnce soak: ${options.orders} orders, concurrency ${options.concurrency}, fault rate ${options.faultRate}, ` +
    `seed ${JSON.stringify(options.seed)} → schedule ${digest} (${plannedTotal} faults planned, ` +
    `${plans.filter((p) => p.buyer !== 'ok').length} declining buyers)`,
);
if (args['schedule-only']) {
  for (const [label, count] of planned) console.log(`  ${label.padEnd(40)} ${count}`);
  process.exit(0);
}

// ---------------------------------------------------------------------------------------------
// The stack

const logFile = args['log-file'] ?? path.join(os.tmpdir(), `payonce-soak-${process.pid}.log`);
const logStream = createWriteStream(logFile, { flags: 'a' });
const appUrls = Array.from({ length: options.instances }, (_, i) => `http://127.0.0.1:${options.appPort + i}`);
let faults: FaultController | undefined;
const exitsBeforeController: number[] = [];

function stackLog(line: string): void {
  logStream.write(`${new Date().toISOString()} ${line}\n`);
  const exited = /^\[supervisor\] (app(?:#(\d+))?) exited/.exec(line);
  if (exited) {
    const instance = exited[2] ? Number(exited[2]) - 1 : 0;
    if (faults) faults.recordExit(instance);
    else exitsBeforeController.push(instance);
  }
}

// The metrics endpoint is closed unless switched on; this run's own token opens it to the report
// below without opening it to anyone else who can reach the port.
const metricsToken = randomBytes(24).toString('base64url');

console.error(`Starting the stack (build: ${!args['no-build']}; log: ${logFile}) …`);
const stackStarted = Date.now();
let stack: Stack;
try {
  stack = await startStack({
    mode: 'prod',
    build: !args['no-build'],
    instances: options.instances,
    appPort: options.appPort,
    sandboxPort: options.sandboxPort,
    databaseName: 'payonce_soak',
    distDir: args['dist-dir'],
    log: stackLog,
    appEnv: {
      CHECKOUT_FAULTS: '1',
      METRICS_TOKEN: metricsToken,
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
      GATEWAY_TIMEOUT_MS: '2000',
      JOBS_RECONCILE_SECONDS: '1',
      JOBS_OUTBOX_SECONDS: '1',
      JOBS_REFUND_SECONDS: '1',
      REFUND_BACKOFF_MS: '500',
      REFUND_LEASE_MS: '10000',
      // Every simulated customer comes from this one address and retries hard through faults: the
      // soak measures the guarantees, not the limits (test/hostile/rate-limits.test.ts does).
      RATE_LIMIT_SESSION_PER_MINUTE: '0',
      RATE_LIMIT_ADDRESS_PER_MINUTE: '0',
      OPEN_ORDERS_PER_ADDRESS: '0',
      OPEN_ORDER_HELD_UNITS_PER_SKU_PER_ADDRESS: '0',
    },
  });
} catch (error) {
  console.error(`The stack did not start: ${(error as Error).message} (see ${logFile})`);
  process.exit(2);
}
console.error(`Stack up in ${formatDuration(Date.now() - stackStarted)}: ${appUrls.join(', ')}, sandbox ${stack.sandboxUrl}`);

const sql = postgres(stack.databaseUrl, { max: 4, onnotice: () => {}, connection: { application_name: 'payonce-soak' } });
let stopping = false;
async function shutdown(code: number): Promise<never> {
  stopping = true;
  await sql.end({ timeout: 5 }).catch(() => {});
  await stack.stop().catch(() => {});
  await new Promise<void>((resolve) => logStream.end(resolve));
  process.exit(code);
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`\n${signal}: stopping the stack`);
    void shutdown(130);
  });
}

// The gateways as a second, stale client would reach them, for the stray charges.
const strayGateways: Partial<Record<GatewayId, PaymentGateway>> = gatewaysFromEnv(
  sandboxCredentialsToEnv(
    (await (await fetch(`${stack.sandboxUrl}/sandbox/credentials`)).json()) as Parameters<typeof sandboxCredentialsToEnv>[0],
  ),
);
/**
 * How many tries one fault must spoil to fail one call: stripe-node retries a 5xx, a timeout or a
 * dropped connection itself (twice, same key); alipay-sdk's HTTP client re-sends a POST once after a
 * dropped connection; the other adapters do not retry.
 */
function triesPerCall(gateway: GatewayId, action: string): number {
  if (gateway === 'stripe') return 3;
  if (gateway === 'alipay' && action !== 'fail_before_charge') return 2;
  return 1;
}

faults = new FaultController(appUrls, stack.sandboxUrl, sql);
for (const instance of exitsBeforeController) faults.recordExit(instance);
const controller = faults;

// Enough stock for the whole schedule (a long-lived soak database is drawn down run after run).
const needed = new Map<string, number>();
for (const plan of plans) for (const line of plan.cart) needed.set(line.sku, (needed.get(line.sku) ?? 0) + line.quantity);
for (const sku of SKUS) {
  const want = (needed.get(sku) ?? 0) + 1000;
  await sql`update products set stock = ${want} where sku = ${sku} and stock < ${want}`;
}
await controller.disarmAll();
const baseline = await takeBaseline(sql);

// ---------------------------------------------------------------------------------------------
// The customers

const results: (CustomerResult & { plan: OrderPlan })[] = [];
/** Longer than any customer's whole retry budget: past it, a customer is wedged, not slow. */
const CUSTOMER_DEADLINE_MS = 5 * 60_000;
let stuckCustomers = 0;
const background: Promise<unknown>[] = [];
let next = 0;
let inFlight = 0;
const runStarted = Date.now();
const progress = new ProgressBar(() => ({
  done: results.length,
  total: plans.length,
  faultsFired: controller.firedCount,
  restarts: controller.restarts,
  inFlight,
}));

async function runOrder(plan: OrderPlan): Promise<void> {
  const fault = plan.fault;
  const label = fault ? faultLabel(fault) : undefined;
  const giveUp = new AbortController();
  let done = false;
  let pgTimer: NodeJS.Timeout | undefined;
  let giveUpTimer: NodeJS.Timeout | undefined;
  let pgFired: Promise<void> | undefined;

  // 1. Arm.
  if (fault?.kind === 'app') {
    await controller.armApp(label!, plan.home, {
      point: fault.point,
      action: fault.action,
      procedure: fault.procedure,
      ...(fault.procedure === 'checkout.pay' ? { gateway: plan.gateway } : {}),
    });
  } else if (fault?.kind === 'sandbox') {
    await controller.armSandbox(label!, {
      gateway: plan.gateway,
      action: fault.action,
      ...('delayMs' in fault && fault.delayMs !== undefined ? { delayMs: fault.delayMs } : {}),
      ...('copies' in fault ? { copies: fault.copies } : {}),
    });
  } else if (fault?.kind === 'sandbox_close') {
    // On the first gateway: its trade is the one closed when the customer switches or the order expires.
    await controller.armSandbox(label!, {
      gateway: plan.gateway,
      operation: 'close',
      action: fault.action,
      times: triesPerCall(plan.gateway, fault.action),
      ...(fault.delayMs !== undefined ? { delayMs: fault.delayMs } : {}),
    });
  } else if (fault?.kind === 'give_up') {
    // A slow gateway, so that the customer leaves while the charge is under way.
    await controller.armSandbox(label!, { gateway: plan.gateway, action: 'slow', delayMs: fault.slowMs }, false);
  } else if (fault?.kind === 'pg_terminate') {
    pgTimer = setTimeout(() => {
      if (done) return;
      pgFired = controller.terminateAppBackends().then(
        () => controller.recordDirect(label!),
        () => controller.recordDirect(label!, false),
      );
    }, fault.atMs);
  }

  // 2. The customer.
  inFlight++;
  // A watchdog: a customer still busy after CUSTOMER_DEADLINE_MS is cut off (its open request
  // aborted) and recorded as an error, so one wedged customer can never hold the whole run up; the
  // invariants are checked regardless.
  let watchdog: NodeJS.Timeout | undefined;
  const customer = runCustomer(plan, {
    appUrls,
    giveUp: giveUp.signal,
    onPaying: () => {
      if (fault?.kind === 'give_up') giveUpTimer = setTimeout(() => giveUp.abort(), fault.afterMs);
    },
  });
  const result = await Promise.race([
    customer,
    new Promise<CustomerResult>((resolve) => {
      watchdog = setTimeout(() => {
        giveUp.abort();
        stuckCustomers++;
        resolve({
          outcome: 'error',
          reason: `still busy after ${CUSTOMER_DEADLINE_MS} ms (cut off)`,
          requests: 0,
          retries: 0,
          durationMs: CUSTOMER_DEADLINE_MS,
        });
      }, CUSTOMER_DEADLINE_MS);
    }),
  ]);
  clearTimeout(watchdog);
  inFlight--;
  done = true;
  clearTimeout(giveUpTimer);
  if (pgTimer) {
    clearTimeout(pgTimer);
    if (pgFired) await pgFired;
    else controller.recordDirect(label!, false); // the order was over before its moment came
  }
  if (fault?.kind === 'give_up') controller.recordDirect(label!, result.outcome === 'gave_up');

  // 3. Record; a late notification comes after the order settled.
  results.push({ ...result, plan });
  const paidOrder = result.outcome === 'paid' || result.outcome === 'paid_after_decline';
  if (plan.lateCompletion && result.outTradeNo) {
    // The buyer completes every trade the order used, late: each must be refused, or settle the
    // order if it was still open, or be refunded.
    const outTradeNo = result.outTradeNo;
    const used = [...new Set([plan.gateway, plan.retryGateway])];
    background.push(
      sleep(plan.lateCompletion.afterMs).then(async () => {
        for (const gateway of used) await controller.buyerPays(gateway, outTradeNo);
      }),
    );
  }
  if (fault?.kind === 'stray_charge') {
    const gateway = strayGateways[fault.gateway];
    if (paidOrder && result.outTradeNo && gateway) {
      const outTradeNo = result.outTradeNo;
      const amount = await sql<{ amount_minor: number; currency: string }[]>`
        select amount_minor, currency from orders where out_trade_no = ${outTradeNo}`;
      background.push(
        sleep(fault.afterMs).then(async () => {
          if (fault.refundFault === 'crash_after_refund_call') {
            // The refund worker runs on whichever instance picks the job: arm every instance.
            for (const instance of appUrls.keys()) {
              await controller.armApp(`${label!}:instance`, instance, {
                point: 'after_refund_call',
                action: { kind: 'crash' },
                procedure: 'refunds.process',
                gateway: fault.gateway,
              });
            }
          } else if (fault.refundFault) {
            await controller.armSandbox(
              `${label!}:armed`,
              {
                gateway: fault.gateway,
                operation: 'refund',
                action: fault.refundFault,
                times: triesPerCall(fault.gateway, fault.refundFault),
              },
              false,
            );
          }
          const outcome = await gateway.charge({
            outTradeNo,
            amountMinor: amount[0]!.amount_minor,
            currency: amount[0]!.currency,
            subject: `PayOnce 订单 ${outTradeNo}`,
            attempt: 100 + plan.index, // a request of its own, not a replay of the checkout's
            buyer: 'ok',
            notifyUrl: `${appUrls[plan.home]}/api/webhooks/${fault.gateway}`,
          });
          if (outcome.kind === 'succeeded') controller.strayCharges.succeeded++;
          else if (outcome.kind === 'declined') controller.strayCharges.refused++;
          else controller.strayCharges.failed++;
          controller.recordDirect(label!, outcome.kind === 'succeeded');
        }),
      );
    } else {
      controller.recordDirect(label!, false);
    }
  }
  if (fault?.kind === 'late_notification') {
    const paid = result.outcome === 'paid' || result.outcome === 'paid_after_decline';
    if (paid && result.outTradeNo) {
      const outTradeNo = result.outTradeNo;
      background.push(
        sleep(fault.afterMs).then(async () => {
          await controller.lateNotification(plan.gateway, outTradeNo, fault.copies);
          controller.recordDirect(label!);
        }),
      );
    } else {
      controller.recordDirect(label!, false);
    }
  }
}

async function worker(): Promise<void> {
  while (!stopping) {
    const index = next++;
    const plan = plans[index];
    if (!plan) return;
    try {
      await runOrder(plan);
    } catch (error) {
      results.push({ outcome: 'error', reason: (error as Error).message, requests: 0, retries: 0, durationMs: 0, plan });
    }
  }
}

controller.startPolling();
progress.start();
await Promise.all(Array.from({ length: Math.min(options.concurrency, plans.length) }, worker));
const customersDone = Date.now();
progress.stop();
await Promise.all(background);
controller.stopPolling();
await controller.disarmAll();

// ---------------------------------------------------------------------------------------------
// Settle, then check

const settleBudget = options.settleMs + 10 * plans.length;
// Requests that customers abandoned still run on the server: settled means nothing pending and no
// change for longer than any request can take (the lease bounds it).
const quietMs = LEASE_MS + 2000;
const { pending, ms: settleMs } = await waitUntilSettled(sql, baseline.at, {
  quietMs,
  budgetMs: settleBudget,
  onWait: (now, elapsedMs, quietForMs) => {
    const status = `settling: ${now.paying} orders paying, ${now.queuedEmails} emails queued, quiet for ${formatDuration(quietForMs)} · ${formatDuration(elapsedMs)} / ${formatDuration(settleBudget)}`;
    if (process.stderr.isTTY) process.stderr.write(`\r${status}   `);
    else if (elapsedMs % 10_000 < 1000) process.stderr.write(`${status}\n`);
  },
});
process.stderr.write(
  `${process.stderr.isTTY ? '\r' : ''}settled in ${formatDuration(settleMs)} (${pending.paying} paying, ${pending.queuedEmails} emails queued)${' '.repeat(40)}\n`,
);

const ledger = await fetchLedger(stack.sandboxUrl);
const report: InvariantReport = await checkInvariants({ sql, ledger, baseline, leaseMs: LEASE_MS });

// What became of the customers who left: settled by a notification or the reconciler?
const leftOrderIds = results
  .filter((r) => (r.outcome === 'gave_up' || r.outcome === 'gave_up_by_retries') && r.orderId)
  .map((r) => r.orderId!);
const leftOrders = leftOrderIds.length
  ? await sql<{ status: string; source: string | null; n: number }[]>`
      select o.status, p.source, count(*)::int as n
        from orders o left join payments p on p.order_id = o.id and p.status = 'succeeded'
       where o.id in ${sql(leftOrderIds)}
       group by 1, 2 order by 1, 2`
  : [];

// Orders no customer knows of (promise 4 says one order per creation key; a customer's retries
// must never leave a second one behind).
const knownTradeNos = new Set(results.map((r) => r.outTradeNo).filter(Boolean));
const orphanOrders = (
  await sql<{ out_trade_no: string; status: string }[]>`select out_trade_no, status from orders where created_at >= ${baseline.at}`
).filter((o) => !knownTradeNos.has(o.out_trade_no));

// ---------------------------------------------------------------------------------------------
// Summary

const runMs = customersDone - runStarted;
const outcomes = new Map<Outcome, number>();
for (const r of results) outcomes.set(r.outcome, (outcomes.get(r.outcome) ?? 0) + 1);
const reasons = new Map<string, number>();
for (const r of results) {
  if (r.reason && r.outcome !== 'paid' && r.outcome !== 'paid_after_decline') {
    const key = `${r.outcome}: ${r.reason}`;
    reasons.set(key, (reasons.get(key) ?? 0) + 1);
  }
}
const durations = results.map((r) => r.durationMs).sort((a, b) => a - b);
const pct = (p: number) => durations[Math.min(durations.length - 1, Math.floor((p / 100) * durations.length))] ?? 0;

const out: string[] = [];
const say = (line = '') => out.push(line);
say('');
say(`=== PayOnce soak — seed ${JSON.stringify(options.seed)}, schedule ${digest} ===`);
say(`orders ${plans.length} · concurrency ${options.concurrency} · fault rate ${options.faultRate} · instances ${options.instances}`);
say(
  `customers ran ${formatDuration(runMs)} (${((plans.length / runMs) * 1000).toFixed(1)} orders/s); settling ${formatDuration(settleMs)}; ` +
    `order latency p50 ${pct(50)} ms, p95 ${pct(95)} ms, p99 ${pct(99)} ms, max ${durations[durations.length - 1] ?? 0} ms`,
);
say(`requests ${results.reduce((s, r) => s + r.requests, 0)}, client retries ${results.reduce((s, r) => s + r.retries, 0)}`);
say('');
say('outcomes:');
for (const [outcome, count] of [...outcomes.entries()].sort(([a], [b]) => a.localeCompare(b))) say(`  ${outcome.padEnd(22)} ${count}`);
for (const [reason, count] of [...reasons.entries()].sort(([, a], [, b]) => b - a).slice(0, 10)) say(`    ${reason} × ${count}`);
say('customers who gave up, by what became of their order:');
if (leftOrders.length === 0) say('  (none)');
for (const row of leftOrders) say(`  ${`${row.status}${row.source ? ` via ${row.source}` : ''}`.padEnd(30)} ${row.n}`);
say(`customers cut off by the watchdog: ${stuckCustomers}`);
say(
  `orders no customer knows of: ${orphanOrders.length}${
    orphanOrders.length
      ? ` (${orphanOrders
          .slice(0, 5)
          .map((o) => `${o.out_trade_no} ${o.status}`)
          .join(', ')}${orphanOrders.length > 5 ? ', …' : ''})`
      : ''
  }`,
);
say('');
say(`faults (armed / fired / lost to a restart / never fired / failed to arm): ${controller.firedCount} fired of ${plannedTotal} planned`);
for (const [label, e] of controller.summary()) {
  say(`  ${label.padEnd(40)} ${e.armed} / ${e.fired} / ${e.lost} / ${e.unfired} / ${e.armFailed}`);
}
say(`  app restarts seen: ${controller.restarts} (${appUrls.map((_, i) => `instance ${i + 1}: ${controller.restartsOf(i)}`).join(', ')})`);
say(`  app connections terminated: ${controller.terminatedBackends}`);
const ln = controller.lateNotifications;
say(`  late notifications: ${ln.sent} sent, ${ln.deliveries} deliveries, ${ln.acknowledged} acknowledged, ${ln.failed} failed`);
const lc = controller.lateCompletions;
say(
  `  late completions by the buyer: ${lc.refused} refused (trade closed or paid), ${lc.paid} paid, ${lc.declined} declined, ${lc.failed} failed`,
);
const sc = controller.strayCharges;
say(`  stray charges of paid orders: ${sc.succeeded} succeeded, ${sc.refused} refused by the gateway, ${sc.failed} in doubt`);
say('');
const s = report.stats;
say('ground truth:');
say(
  `  orders by status: ${Object.entries(s.ordersByStatus)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ')}`,
);
say(
  `  paid orders by source: ${
    Object.entries(s.paidBySource)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || '-'
  }`,
);
say(
  `  ledger charges: ${s.ledgerCharges.succeeded} succeeded, ${s.ledgerCharges.declined} declined; notifications ${s.notifications.deliveries} (${s.notifications.acknowledged} acknowledged)`,
);
say(
  `  emails sent ${s.emailsSent}; orders charged twice ${s.ordersChargedTwice}; excess charges ${s.refunds.excessCharges}, refunds at the ledger ${s.refunds.ledgerSucceeded} succeeded / ${s.refunds.ledgerOther} other`,
);
say(
  `  keys ${s.keys.total}: ${s.keys.completed} completed, ${s.keys.released} released uncompleted, ${s.keys.staleLease} with a stale lease`,
);
say('');
say(`invariants: ${report.violations.length === 0 ? 'all hold' : `${report.violations.length} VIOLATIONS`}`);
for (const kind of VIOLATION_KINDS) {
  const list = report.violations.filter((v) => v.kind === kind);
  say(`  ${kind.padEnd(24)} ${list.length}`);
  for (const v of list.slice(0, 20)) say(`    ${v.subject}: ${v.detail}`);
  if (list.length > 20) say(`    … and ${list.length - 20} more`);
}

// The app's own metrics, when it has them.
for (const [i, url] of appUrls.entries()) {
  try {
    const response = await fetch(`${url}/api/metrics`, {
      headers: { authorization: `Bearer ${metricsToken}` },
      signal: AbortSignal.timeout(5000),
    });
    if (!response.ok) continue;
    // The app's own series; the process defaults (payonce_process_*) and histogram buckets are noise here.
    const lines = (await response.text())
      .split('\n')
      .filter((line) => line.startsWith('payonce_') && !line.startsWith('payonce_process_') && !line.includes('_bucket{'));
    if (lines.length === 0) continue;
    say('');
    say(`metrics of instance ${i + 1} (since its last start):`);
    for (const line of lines) say(`  ${line}`);
  } catch {
    // no metrics: skip silently
  }
}
say('');
say(
  `replay: npm run soak -- --orders ${options.orders} --concurrency ${options.concurrency} --fault-rate ${options.faultRate} --seed ${options.seed}`,
);
say(`stack log: ${logFile}`);
console.log(out.join('\n'));

if (args.json) {
  const { writeFile } = await import('node:fs/promises');
  await writeFile(
    args.json,
    JSON.stringify(
      {
        options,
        digest,
        runMs,
        settleMs,
        outcomes: Object.fromEntries(outcomes),
        faults: Object.fromEntries(controller.summary()),
        restarts: controller.restarts,
        terminatedBackends: controller.terminatedBackends,
        lateNotifications: controller.lateNotifications,
        lateCompletions: controller.lateCompletions,
        strayCharges: controller.strayCharges,
        stats: report.stats,
        orphanOrders,
        violations: report.violations,
        results: results.map((r) => ({
          index: r.plan.index,
          outcome: r.outcome,
          outTradeNo: r.outTradeNo,
          reason: r.reason,
          abortedMidRequest: r.abortedMidRequest,
          fault: r.plan.fault ? faultLabel(r.plan.fault) : null,
          durationMs: r.durationMs,
        })),
      },
      null,
      2,
    ),
  );
}

await shutdown(report.violations.length > 0 ? 1 : 0);
