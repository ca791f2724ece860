/**
 * One run of the failover drill with one kind of replication: the formation, the stack on it, the
 * shoppers, a failover at each point, then the checks. failover/main.ts runs it once per kind.
 */
import { createWriteStream } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import { startHaPostgres, type HaNode, type HaPostgres } from '@/scripts/ha-postgres';
import { startStack, type Stack } from '@/scripts/stack';
import { gatewaysFromEnv } from '@/server/payments';
import { sandboxCredentialsToEnv } from '@/server/payments/sandbox-credentials';
import { checkInvariants, fetchLedger, takeBaseline, waitUntilSettled, type InvariantStats } from '@/soak/invariants';
import { SKUS } from '@/soak/schedule';
import { armAndWait, commitWaitingForStandby, pauseReplication, POINTS, type PointName } from './points';
import { Shoppers, type Answer } from './shoppers';

/** As the soak's: crashed requests are taken over quickly, yet a lease outlasts one gateway call. */
const LEASE_MS = 7000;

export interface RunOptions {
  synchronous: boolean;
  points: PointName[];
  shoppers: number;
  lagMs: number;
  appPort: number;
  sandboxPort: number;
  haPort: number;
  distDir: string;
  build: boolean;
  logFile?: string;
}

export interface PointReport {
  name: PointName;
  label: string;
  oldPrimary: string;
  newPrimary: string;
  /** Backends whose COMMIT waited for the standby when the primary died (commit_in_flight). */
  commitsInFlight?: number;
  /** From the kill: the standby promoted and taking writes. */
  writableAfterMs: number;
  /** From the kill: the first checkout.pay answered 201. */
  firstPaidAfterMs: number | undefined;
  /** From the kill: the old primary back as a standby, the formation whole again. */
  rejoinedAfterMs: number;
  /** What the shoppers were answered between the kill and that first 201. */
  answers: Record<string, number>;
  keysCompletedBefore: number;
  keysLost: number;
}

export interface ReplicationReport {
  synchronous: boolean;
  lagMs: number;
  logFile: string;
  points: PointReport[];
  orders: { started: number; outcomes: Record<string, number> };
  answers: Record<string, number>;
  losses: { paidOrdersLost: number; completedKeysLost: number; ordersLost: number };
  /** The soak's invariants, and the drill's own: order_lost, paid_lost, completed_key_lost, unexpected_answer. */
  violations: { kind: string; subject: string; detail: string }[];
  stats?: InvariantStats;
  error?: string;
}

interface Run {
  options: RunOptions;
  ha: HaPostgres;
  stack: Stack;
  sql: postgres.Sql;
  shoppers: Shoppers;
  appUrls: string[];
  log: (line: string) => void;
}

export async function runReplication(options: RunOptions): Promise<ReplicationReport> {
  const kind = options.synchronous ? 'sync' : 'async';
  const logFile = options.logFile ?? path.join(os.tmpdir(), `payonce-failover-${kind}-${process.pid}.log`);
  const logStream = createWriteStream(logFile, { flags: 'a' });
  const log = (line: string) => logStream.write(`${new Date().toISOString()} ${line}\n`);
  const say = (line: string) => {
    console.error(line);
    log(`[drill] ${line}`);
  };
  const report: ReplicationReport = {
    synchronous: options.synchronous,
    lagMs: options.lagMs,
    logFile,
    points: [],
    orders: { started: 0, outcomes: {} },
    answers: {},
    losses: { paidOrdersLost: 0, completedKeysLost: 0, ordersLost: 0 },
    violations: [],
  };
  let ha: HaPostgres | undefined;
  let stack: Stack | undefined;
  let sql: postgres.Sql | undefined;
  let shoppers: Shoppers | undefined;
  // Stopped with the drill (Ctrl-C, a CI timeout): nothing of the run is left listening.
  const onSignal = (signal: NodeJS.Signals) => {
    say(`${signal}: stopping the stack and the formation`);
    void Promise.allSettled([stack?.stop(), ha?.stop()]).then(() => process.exit(130));
  };
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal);
  try {
    say(`[${kind}] starting pg_auto_failover (monitor, primary, ${options.synchronous ? 'synchronous' : 'asynchronous'} standby) …`);
    ha = await startHaPostgres({ port: options.haPort, synchronous: options.synchronous, log: (line) => log(`[ha] ${line}`) });
    say(`[${kind}] formation up: ${ha.url}; starting two app instances on it …`);
    stack = await startStack(stackOptions(options, ha.url, log));
    sql = postgres(ha.url, { max: 4, onnotice: () => {}, connection: { application_name: 'payonce-drill' } });
    const appUrls = [0, 1].map((i) => `http://127.0.0.1:${options.appPort + i}`);
    shoppers = new Shoppers(appUrls, { concurrency: options.shoppers });
    const run: Run = { options, ha, stack, sql, shoppers, appUrls, log };
    await drill(run, report, say);
  } catch (error) {
    report.error = (error as Error).stack ?? String(error);
    say(`[${kind}] the drill stopped: ${(error as Error).message}`);
  } finally {
    // No shopper of this run may go on into the next one's stack (same ports).
    await Promise.race([shoppers?.stop(), sleep(120_000)]);
    await sql?.end({ timeout: 5 }).catch(() => {});
    await stack?.stop().catch(() => {});
    await ha?.stop().catch(() => {});
    process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
    await new Promise<void>((resolve) => logStream.end(resolve));
  }
  return report;
}

function stackOptions(options: RunOptions, appDatabaseUrl: string, log: (line: string) => void) {
  return {
    mode: 'prod' as const,
    build: options.build,
    instances: 2,
    appPort: options.appPort,
    sandboxPort: options.sandboxPort,
    // The PSP's ledger is the gateway's own system: it stays on a database of its own, off the formation.
    databaseName: 'payonce_failover_psp',
    separateDatabase: true,
    appDatabaseUrl,
    distDir: options.distDir,
    log,
    appEnv: {
      CHECKOUT_FAULTS: '1',
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
      GATEWAY_TIMEOUT_MS: '2000',
      JOBS_RECONCILE_SECONDS: '1',
      JOBS_OUTBOX_SECONDS: '1',
      JOBS_REFUND_SECONDS: '1',
      REFUND_BACKOFF_MS: '500',
      REFUND_LEASE_MS: '10000',
      RATE_LIMIT_SESSION_PER_MINUTE: '0',
      RATE_LIMIT_ADDRESS_PER_MINUTE: '0',
      OPEN_ORDERS_PER_ADDRESS: '0',
      OPEN_ORDER_HELD_UNITS_PER_SKU_PER_ADDRESS: '0',
    },
  };
}

async function drill(run: Run, report: ReplicationReport, say: (line: string) => void): Promise<void> {
  const { sql, shoppers } = run;
  for (const sku of SKUS) await sql`update products set stock = greatest(stock, 100000) where sku = ${sku}`;
  const baseline = await takeBaseline(sql);
  shoppers.start();
  await waitFor('the first paid orders', 120_000, async () => shoppers.paidSince(0) >= 4);
  for (const name of run.options.points) {
    say(`  failover ${POINTS[name]} …`);
    const point = await failoverAt(run, name);
    report.points.push(point);
    say(
      `    ${point.oldPrimary} → ${point.newPrimary}: writable after ${point.writableAfterMs} ms, first 201 after ${point.firstPaidAfterMs ?? '—'} ms, ` +
        `rejoined after ${point.rejoinedAfterMs} ms; keys lost ${point.keysLost} of ${point.keysCompletedBefore}`,
    );
  }
  say('  shoppers finishing their orders …');
  await shoppers.stop();
  // Quiet for longer than a lease: requests that died with a primary are taken over and finish.
  await waitUntilSettled(sql, baseline.at, { quietMs: LEASE_MS + 2000, budgetMs: 120_000 });
  const ledger = await fetchLedger(run.stack.sandboxUrl);
  const invariants = await checkInvariants({ sql, ledger, baseline, leaseMs: LEASE_MS });
  report.stats = invariants.stats;
  report.violations.push(...invariants.violations);
  await checkPromises(run, report);
}

/** One failover: hold a request at the point, kill the primary under it, promote, rejoin. */
async function failoverAt(run: Run, name: PointName): Promise<PointReport> {
  const { ha, shoppers, appUrls } = run;
  const primary = await ha.primary();
  if (!primary) throw new Error('no primary before the failover');
  const standby = ha.nodes.find((node) => node !== primary)!;
  const holding = armAndWait(appUrls, name);
  if (name === 'refund_lease') await strayCharge(run);
  await holding;

  let commitsInFlight: number | undefined;
  const paused = name === 'commit_in_flight' || !ha.synchronous ? await pauseReplication(ha, standby) : undefined;
  if (name === 'commit_in_flight') commitsInFlight = await commitWaitingForStandby(ha, primary);
  if (!ha.synchronous) await sleep(run.options.lagMs); // the asynchronous standby falls behind
  const completedBefore = await completedKeys(ha, primary);

  const killedAt = Date.now();
  await ha.kill(primary);
  paused?.discard();
  await ha.waitForPrimary(standby, { timeoutMs: 120_000 });
  await waitFor('the promoted standby to take writes', 120_000, () => takesWrites(ha, standby));
  const writableAfterMs = Date.now() - killedAt;
  const firstPaid = await waitFor('a 201 after the failover', 120_000, async () => shoppers.firstPaidAnswerAfter(killedAt)).catch(
    () => undefined,
  );
  await ha.restart(primary);
  await ha.waitForHealthy({ timeoutMs: 180_000 });
  const rejoinedAfterMs = Date.now() - killedAt;
  const keysLost = await lostKeys(run.sql, completedBefore);
  const window = shoppers.answers.filter((a) => a.at >= killedAt && a.at <= (firstPaid ?? Date.now()));
  return {
    name,
    label: POINTS[name],
    oldPrimary: primary.name,
    newPrimary: standby.name,
    ...(commitsInFlight !== undefined ? { commitsInFlight } : {}),
    writableAfterMs,
    firstPaidAfterMs: firstPaid === undefined ? undefined : firstPaid - killedAt,
    rejoinedAfterMs,
    answers: tallyAnswers(window),
    keysCompletedBefore: completedBefore.length,
    keysLost,
  };
}

/**
 * A second payment of a paid order, through another gateway (the buyer also paid a WeChat Pay code
 * of the same order): the notification tells the app, which records the excess charge and queues its
 * refund for the refund worker.
 */
async function strayCharge(run: Run): Promise<void> {
  const paid = [...run.shoppers.results].reverse().find((r) => r.outcome === 'paid' && r.plan.gateway === 'alipay' && r.outTradeNo);
  if (!paid) throw new Error('no paid Alipay order to pay a second time');
  const [order] = await run.sql<{ amount_minor: number; currency: string }[]>`
    select amount_minor, currency from orders where out_trade_no = ${paid.outTradeNo!}`;
  const credentials = (await (await fetch(`${run.stack.sandboxUrl}/sandbox/credentials`)).json()) as Parameters<
    typeof sandboxCredentialsToEnv
  >[0];
  const wechatpay = gatewaysFromEnv(sandboxCredentialsToEnv(credentials)).wechatpay!;
  const outcome = await wechatpay.charge({
    outTradeNo: paid.outTradeNo!,
    amountMinor: order!.amount_minor,
    currency: order!.currency,
    subject: `PayOnce 订单 ${paid.outTradeNo}`,
    attempt: 1,
    buyer: 'ok',
    notifyUrl: `${run.appUrls[0]}/api/webhooks/wechatpay`,
  });
  if (outcome.kind !== 'succeeded') throw new Error(`the second payment did not succeed: ${outcome.kind}`);
}

async function completedKeys(ha: HaPostgres, primary: HaNode): Promise<string[]> {
  const sql = postgres(ha.nodeUrl(primary), { max: 1, onnotice: () => {} });
  try {
    const rows = await sql<{ id: string }[]>`select id::text from idempotency_keys where completed_at is not null`;
    return rows.map((r) => r.id);
  } finally {
    await sql.end({ timeout: 1 });
  }
}

async function lostKeys(sql: postgres.Sql, ids: string[]): Promise<number> {
  if (ids.length === 0) return 0;
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from unnest(${ids}::uuid[]) as before(id)
     where not exists (select 1 from idempotency_keys k where k.id = before.id and k.completed_at is not null)`;
  return row!.n;
}

async function takesWrites(ha: HaPostgres, node: HaNode): Promise<boolean> {
  const sql = postgres(ha.nodeUrl(node), { max: 1, onnotice: () => {}, connect_timeout: 2 });
  try {
    const [row] = await sql<{ recovery: boolean; ro: string }[]>`
      select pg_is_in_recovery() as recovery, current_setting('default_transaction_read_only') as ro`;
    return row!.recovery === false && row!.ro === 'off';
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** The drill's own promises, beyond the soak's invariants. */
async function checkPromises(run: Run, report: ReplicationReport): Promise<void> {
  const { sql, shoppers } = run;
  const results = shoppers.results;
  report.orders = { started: results.length, outcomes: tally(results.map((r) => r.outcome)) };
  report.answers = tallyAnswers(shoppers.answers);
  const tradeNos = results.map((r) => r.outTradeNo).filter((t): t is string => Boolean(t));
  const rows = tradeNos.length
    ? await sql<{ out_trade_no: string; status: string }[]>`select out_trade_no, status from orders where out_trade_no in ${sql(tradeNos)}`
    : [];
  const status = new Map(rows.map((r) => [r.out_trade_no, r.status]));
  for (const r of results) {
    if (!r.outTradeNo) continue;
    const now = status.get(r.outTradeNo);
    if (now === undefined) {
      report.losses.ordersLost++;
      report.violations.push({ kind: 'order_lost', subject: r.outTradeNo, detail: 'the order a shopper created is gone after a failover' });
    } else if ((r.outcome === 'paid' || r.outcome === 'paid_after_decline') && now !== 'paid') {
      report.losses.paidOrdersLost++;
      report.violations.push({ kind: 'paid_lost', subject: r.outTradeNo, detail: `the shopper was told paid (201); the order is ${now}` });
    }
  }
  report.losses.completedKeysLost = report.points.reduce((sum, p) => sum + p.keysLost, 0);
  if (report.losses.completedKeysLost > 0) {
    report.violations.push({
      kind: 'completed_key_lost',
      subject: 'idempotency keys',
      detail: `${report.losses.completedKeysLost} completed keys lost in failovers`,
    });
  }
  const unexpected = shoppers.answers.filter((a) => a.status >= 500 && !(a.status === 503 && a.reason));
  for (const a of unexpected.slice(0, 20)) {
    report.violations.push({
      kind: 'unexpected_answer',
      subject: a.procedure,
      detail: `a shopper was answered ${a.status}${a.reason ? ` ${a.reason}` : ''}`,
    });
  }
}

function tallyAnswers(answers: Answer[]): Record<string, number> {
  return tally(answers.map((a) => `${a.status}${a.reason ? ` ${a.reason}` : ''}`));
}

function tally(values: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const value of values) out[value] = (out[value] ?? 0) + 1;
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => a.localeCompare(b)));
}

async function waitFor<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined | false>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check().catch(() => undefined);
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(100);
  }
}
