/**
 * The 双十一 drill: `npm run flash-sale`.
 *
 * One SKU with `--stock` units (500), `--shoppers` shoppers (5,000) who all want one, two app
 * instances sharing PostgreSQL through PgBouncer (transaction pooling), and a gateway that times out
 * or loses its answer on `--fault-rate` of the charges (5 %). Every shopper is the page's own flow
 * (soak/customer.ts: the catalogue, createOrder, pay, each retried as the page retries), and at most
 * `--concurrency` of them are in flight at once: a bounded loopback load on one machine, each shopper
 * timed from their own first request.
 *
 * Then it checks, against the database and the sandbox's ledger:
 *   - exactly `--stock` orders paid, none oversold (the stock never below 0, every unit accounted for);
 *   - no charge without stock (every charge at the gateway belongs to an order that holds its unit);
 *   - no order charged twice (money kept per order = its amount or 0: soak/invariants.ts);
 *   - every shopper who got nothing was told 已售罄 (SOLD_OUT) within 2 s of their first request;
 * and prints the throughput and the latencies. Exit 1 on any violation.
 *
 *   npm run flash-sale -- [--shoppers 5000] [--stock 500] [--concurrency 64] [--fault-rate 0.05]
 *                         [--dist-dir .next-soak] [--no-build] [--json out.json]
 */
import { createWriteStream } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { startStack, type Stack } from '@/scripts/stack';
import { checkInvariants, fetchLedger, takeBaseline, waitUntilSettled } from '@/soak/invariants';
import { printSale } from './report';
import { runSale, stockTheSku, type SaleResult } from './sale';

const { values: args } = parseArgs({
  options: {
    shoppers: { type: 'string', default: '5000' },
    stock: { type: 'string', default: '500' },
    concurrency: { type: 'string', default: '64' },
    'fault-rate': { type: 'string', default: '0.05' },
    'loser-deadline-ms': { type: 'string', default: '2000' },
    'app-port': { type: 'string', default: '3800' },
    'sandbox-port': { type: 'string', default: '4810' },
    'dist-dir': { type: 'string', default: '.next-soak' },
    'no-build': { type: 'boolean', default: false },
    json: { type: 'string' },
  },
  allowPositionals: false,
});

function numberArg(name: string, min: number, max: number): number {
  const value = Number(args[name as keyof typeof args]);
  if (!Number.isFinite(value) || value < min || value > max) {
    console.error(`--${name} must be a number in [${min}, ${max}], got ${String(args[name as keyof typeof args])}`);
    process.exit(2);
  }
  return value;
}

const options = {
  shoppers: Math.floor(numberArg('shoppers', 1, 100_000)),
  stock: Math.floor(numberArg('stock', 1, 100_000)),
  concurrency: Math.floor(numberArg('concurrency', 1, 2000)),
  faultRate: numberArg('fault-rate', 0, 0.5),
  loserDeadlineMs: numberArg('loser-deadline-ms', 100, 60_000),
  appPort: Math.floor(numberArg('app-port', 1, 65535)),
  sandboxPort: Math.floor(numberArg('sandbox-port', 1, 65535)),
};

const logFile = path.join(os.tmpdir(), `payonce-flash-sale-${process.pid}.log`);
const logStream = createWriteStream(logFile, { flags: 'a' });
const log = (line: string) => logStream.write(`${new Date().toISOString()} ${line}\n`);

console.error(
  `PayOnce flash sale: ${options.shoppers} shoppers, ${options.stock} units of one SKU, ${options.concurrency} in flight, ` +
    `${options.faultRate * 100}% of charges timing out or losing their answer. Starting two instances behind PgBouncer (log: ${logFile}) …`,
);
let stack: Stack;
try {
  stack = await startStack({
    mode: 'prod',
    build: !args['no-build'],
    distDir: args['dist-dir'],
    instances: 2,
    pgbouncer: true,
    appPort: options.appPort,
    sandboxPort: options.sandboxPort,
    databaseName: 'payonce_flash_sale',
    separateDatabase: true,
    log,
    appEnv: {
      GATEWAY_TIMEOUT_MS: '2000',
      IDEMPOTENCY_LEASE_MS: '7000',
      JOBS_RECONCILE_SECONDS: '1',
      JOBS_OUTBOX_SECONDS: '1',
      // Every shopper comes from this one address: the sale measures the hot row, not the limits.
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

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`${signal}: stopping the stack`);
    void stack.stop().finally(() => process.exit(130));
  });
}
const sql = postgres(stack.databaseUrl, { max: 4, onnotice: () => {} });
let result: SaleResult | undefined;
let exitCode = 1;
try {
  const appUrls = [0, 1].map((i) => `http://127.0.0.1:${options.appPort + i}`);
  await stockTheSku(sql, options.stock);
  const baseline = await takeBaseline(sql);
  result = await runSale({ ...options, appUrls, sandboxUrl: stack.sandboxUrl, sql, log });
  await waitUntilSettled(sql, baseline.at, { quietMs: 0, budgetMs: 120_000 });
  const ledger = await fetchLedger(stack.sandboxUrl);
  const invariants = await checkInvariants({ sql, ledger, baseline, leaseMs: 7000 });
  result.violations.push(...invariants.violations);
  result.stats = invariants.stats;
  await result.checkStock(ledger, baseline.at);
  printSale(result, options);
  if (args.json) await writeFile(args.json, JSON.stringify(result.summary(), null, 2));
  exitCode = result.violations.length > 0 ? 1 : 0;
} catch (error) {
  console.error(`The flash sale stopped: ${(error as Error).stack}`);
} finally {
  console.log(`stack log: ${logFile}`);
  await sql.end({ timeout: 5 });
  await stack.stop();
  await new Promise<void>((resolve) => logStream.end(resolve));
}
process.exit(exitCode);
