import { randomUUID } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { defineConfig } from '@playwright/test';
import { embeddedDatabaseUrl } from './db/embedded';
import { findPgBouncer, pgbouncerUser } from './scripts/pgbouncer';

/**
 * Browser tests and failure drills. `npx playwright test` starts two stacks of its own (database,
 * PSP sandbox, app) on ports of their own, so it runs beside a developer's `npm run dev`:
 *
 *   checkout  e2e/*.spec.ts        the app as users get it: not in demo mode, so no fault
 *                                  injection, no /mail, no /api/metrics, whatever the shell sets
 *   drills    e2e/drills/*.spec.ts the app in demo mode (PAYONCE_DEMO=1: fault injection on), a
 *                                  short lease and fast jobs, supervised so a crash drill's
 *                                  SIGKILL is followed by a restart; its two instances reach
 *                                  PostgreSQL through a PgBouncer in transaction-pooling mode
 *                                  whenever pgbouncer is installed (DRILL_PGBOUNCER=0: direct)
 *   capture   e2e/capture/*.spec.ts authorise, then capture: Stripe payments only hold the money
 *                                  (STRIPE_CAPTURE_METHOD=manual) and the merchant's API captures
 *                                  or releases it (MERCHANT_API_TOKEN); demo mode, fast jobs
 *
 * One drill for one gateway: npx playwright test --project=drills -g "crash.*alipay"
 * One checkout spec: npx playwright test e2e/buyer-steps.spec.ts (or npm run test:e2e -- <spec>):
 * only the stacks of the projects a run can reach are started, and a checkout spec alone runs on
 * `next dev`, with no build to wait for. A run that reaches more than one project makes one production
 * build (.next-e2e), which every stack starts on (scripts/build-once.ts).
 *
 * Ports (each overridable, so two checkouts of the project can run their tests side by side):
 *   checkout  app E2E_APP_PORT (3100), sandbox E2E_SANDBOX_PORT (4110)
 *   drills    app DRILL_APP_PORT (3200) and the next port for its second instance, sandbox
 *             DRILL_SANDBOX_PORT (4210), PgBouncer DRILL_PGBOUNCER_PORT (6232)
 *   capture   app CAPTURE_APP_PORT (3300), sandbox CAPTURE_SANDBOX_PORT (4310)
 *
 * The browser: CHROMIUM_PATH if set, else the system Chromium where there is one (Debian's
 * /usr/bin/chromium), else Playwright's own download (`npx playwright install chromium`).
 */
const APP_PORT = Number(process.env.E2E_APP_PORT ?? 3100);
const SANDBOX_PORT = Number(process.env.E2E_SANDBOX_PORT ?? 4110);
const DRILL_APP_PORT = Number(process.env.DRILL_APP_PORT ?? 3200);
const DRILL_SANDBOX_PORT = Number(process.env.DRILL_SANDBOX_PORT ?? 4210);
process.env.PSP_SANDBOX_URL = `http://127.0.0.1:${SANDBOX_PORT}`;
process.env.DRILL_SANDBOX_URL = `http://127.0.0.1:${DRILL_SANDBOX_PORT}`;
// The drills' second app instance (same database and sandbox) for the two-instance drill.
process.env.DRILL_SECOND_APP_URL = `http://127.0.0.1:${DRILL_APP_PORT + 1}`;
const CAPTURE_APP_PORT = Number(process.env.CAPTURE_APP_PORT ?? 3300);
const CAPTURE_SANDBOX_PORT = Number(process.env.CAPTURE_SANDBOX_PORT ?? 4310);
process.env.CAPTURE_SANDBOX_URL = `http://127.0.0.1:${CAPTURE_SANDBOX_PORT}`;
/** The capture stack's merchant API token: the specs act as the merchant's back office with it. */
process.env.CAPTURE_MERCHANT_TOKEN ??= `capture-drills-${randomUUID()}`;

// Each checkout of the project that runs its browser tests beside another on one PostgreSQL server
// (DATABASE_URL) gives its stacks databases of their own: E2E_DATABASE_PREFIX=payonce_mine_.
const DATABASE_PREFIX = process.env.E2E_DATABASE_PREFIX ?? 'payonce_';

// The drills read their ground truth from the drills' stack database over their own connection
// (e2e/drills/ground-truth.ts): the one scripts/stack.ts gives `--database`, on the DATABASE_URL
// server or the embedded one.
/** A stack's database: on the embedded server, or beside DATABASE_URL's. */
function stackDatabaseUrl(stackName: string): string {
  const name = `${DATABASE_PREFIX}${stackName}`;
  if (!process.env.DATABASE_URL) return embeddedDatabaseUrl(name);
  const url = new URL(process.env.DATABASE_URL);
  url.pathname = `/${encodeURIComponent(name)}`;
  return url.toString();
}
process.env.DRILL_DATABASE_URL = stackDatabaseUrl('drills');
process.env.CAPTURE_DATABASE_URL = stackDatabaseUrl('capture');

// The drills' app instances share one database through PgBouncer in transaction-pooling mode, as
// instances behind one pooler do in production (docs/scaling.md) — whenever pgbouncer is installed
// (CI installs it), so every drill runs through it at no extra cost; DRILL_PGBOUNCER=0 runs them
// direct, DRILL_PGBOUNCER=1 insists. Its admin console lets the two-instance drill see the traffic:
// a fixed port and password, loopback only, like the embedded PostgreSQL's.
const DRILL_PGBOUNCER = (process.env.DRILL_PGBOUNCER ?? (findPgBouncer() ? '1' : '0')) === '1';
const DRILL_PGBOUNCER_PORT = Number(process.env.DRILL_PGBOUNCER_PORT ?? 6232);
const DRILL_PGBOUNCER_PASSWORD = 'payonce-drills';
process.env.DRILL_PGBOUNCER_ADMIN_URL = DRILL_PGBOUNCER
  ? `postgres://${encodeURIComponent(pgbouncerUser(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1'))}:${DRILL_PGBOUNCER_PASSWORD}@127.0.0.1:${DRILL_PGBOUNCER_PORT}/pgbouncer`
  : '';

// One knob for the drills' clocks (DRILL_TIME_SCALE, default 0.5): the gateway timeout, the
// idempotency and refund leases, the close grace, the refund backoff, and the gateway delays the
// drills arm to outlast a timeout (e2e/drills/drill.ts `drillMs`). They scale together, so every
// bound server/config/env.ts checks still holds — a lease outlasts one gateway call's three tries — and a
// drill waits out half the time. 1: the clocks the drills were first written with. Race windows (a
// slow gateway while a second tab pays, a paused request while the page reloads) are not clocks: they
// stay as they are.
const DRILL_TIME_SCALE = Number(process.env.DRILL_TIME_SCALE ?? 0.5);
if (!(DRILL_TIME_SCALE >= 0.25 && DRILL_TIME_SCALE <= 1)) {
  throw new Error(`DRILL_TIME_SCALE=${process.env.DRILL_TIME_SCALE}: a number from 0.25 to 1`);
}
process.env.DRILL_TIME_SCALE = String(DRILL_TIME_SCALE);
const drillMs = (ms: number) => String(Math.round(ms * DRILL_TIME_SCALE));

const systemChromium = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const executablePath = process.env.CHROMIUM_PATH || systemChromium;

const stack = (name: string, appPort: number, sandboxPort: number, flags: string, env: Record<string, string> = {}) => ({
  command: `node_modules/.bin/tsx scripts/dev.ts ${flags} --port ${appPort} --sandbox-port ${sandboxPort} --database ${DATABASE_PREFIX}${name} --dist-dir ${flags.includes('--prod') ? '.next-e2e' : '.next-e2e-dev'}`,
  url: `http://127.0.0.1:${appPort}/api/health`,
  reuseExistingServer: !process.env.CI,
  timeout: 240_000,
  stdout: 'ignore' as const,
  stderr: 'pipe' as const,
  env,
});

// One production build for the run, shared by every stack: whichever starts first builds it, the
// others wait and start on it (STACK_BUILD_ONCE, scripts/build-once.ts). Checkout specs run alone
// use `next dev` instead.
process.env.STACK_BUILD_ONCE ??= randomUUID();
// Playwright passes its own environment on: empty values switch off whatever a developer's shell
// turned on (server/demo/mode.ts, server/demo/faults.ts, server/metrics/access.ts).
const checkoutStack = (prod: boolean) =>
  stack('e2e', APP_PORT, SANDBOX_PORT, prod ? '--prod' : '', {
    PAYONCE_DEMO: '',
    CHECKOUT_FAULTS: '',
    METRICS_TOKEN: '',
    METRICS_PUBLIC: '',
    // Every test's browser is one machine (127.0.0.1) leaving declined and abandoned orders open for
    // half an hour: the address's limits would end the run, and have tests of their own
    // (test/hostile/rate-limits.test.ts). The session's limits and caps stay on.
    RATE_LIMIT_ADDRESS_PER_MINUTE: '0',
    OPEN_ORDERS_PER_ADDRESS: '0',
    OPEN_ORDER_HELD_UNITS_PER_SKU_PER_ADDRESS: '0',
  });
// A production build: a dev server would reload the page when it comes back after a crash.
const drillsStack = stack('drills', DRILL_APP_PORT, DRILL_SANDBOX_PORT, '--prod --instances 2', {
  // Demo mode: fault injection for the drills, and /mail and /api/metrics for looking around a
  // failed drill's stack; the page's fault switchboard (switchboard.spec).
  PAYONCE_DEMO: '1',
  // A crashed request's lease runs out in 16 s × DRILL_TIME_SCALE, not the production 30 s: the
  // shortest that still outlasts one gateway call (its SDK may try 3 times; server/config/env.ts refuses less).
  GATEWAY_TIMEOUT_MS: drillMs(5000),
  IDEMPOTENCY_LEASE_MS: drillMs(16000),
  JOBS_RECONCILE_SECONDS: '2',
  JOBS_OUTBOX_SECONDS: '1',
  JOBS_REFUND_SECONDS: '1',
  REFUND_BACKOFF_MS: drillMs(500),
  // A refund worker killed mid-call leaves its claim for this long (production: 60 s); it must
  // outlast one refund call, tries included.
  REFUND_LEASE_MS: drillMs(20000),
  // An order whose trade cannot be closed waits this long past its expiry before it expires
  // anyway (production: 10 minutes), so the late-payment refund drills take seconds.
  ORDER_EXPIRY_CLOSE_GRACE_MS: drillMs(3000),
  // Drills replay and retry keys in tight loops from one session and one address; the limits
  // have tests of their own (test/hostile/rate-limits.test.ts).
  RATE_LIMIT_SESSION_PER_MINUTE: '0',
  RATE_LIMIT_ADDRESS_PER_MINUTE: '0',
  OPEN_ORDERS_PER_ADDRESS: '0',
  OPEN_ORDER_HELD_UNITS_PER_SKU_PER_ADDRESS: '0',
  // Through PgBouncer (scripts/stack.ts): the instances get DATABASE_POOLING=transaction.
  STACK_PGBOUNCER: DRILL_PGBOUNCER ? '1' : '0',
  STACK_PGBOUNCER_PORT: String(DRILL_PGBOUNCER_PORT),
  STACK_PGBOUNCER_PASSWORD: DRILL_PGBOUNCER_PASSWORD,
});

const captureStack = stack('capture', CAPTURE_APP_PORT, CAPTURE_SANDBOX_PORT, '--prod', {
  PAYONCE_DEMO: '1',
  STRIPE_CAPTURE_METHOD: 'manual',
  MERCHANT_API_TOKEN: process.env.CAPTURE_MERCHANT_TOKEN,
  GATEWAY_TIMEOUT_MS: drillMs(5000),
  IDEMPOTENCY_LEASE_MS: drillMs(16000),
  JOBS_RECONCILE_SECONDS: '2',
  JOBS_OUTBOX_SECONDS: '1',
  JOBS_REFUND_SECONDS: '1',
  REFUND_BACKOFF_MS: drillMs(500),
  REFUND_LEASE_MS: drillMs(20000),
  RATE_LIMIT_SESSION_PER_MINUTE: '0',
  RATE_LIMIT_ADDRESS_PER_MINUTE: '0',
  OPEN_ORDERS_PER_ADDRESS: '0',
  OPEN_ORDER_HELD_UNITS_PER_SKU_PER_ADDRESS: '0',
});

/** Options of `playwright test` that take a value in the next argument (not a test-file filter). */
const VALUE_OPTIONS = new Set([
  '-c',
  '--config',
  '-g',
  '--grep',
  '--grep-invert',
  '-j',
  '--workers',
  '--project',
  '--reporter',
  '--retries',
  '--repeat-each',
  '--timeout',
  '--max-failures',
  '--shard',
  '--output',
  '--trace',
  '--global-timeout',
  '--tsconfig',
]);

function specFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return specFiles(full);
    return entry.name.endsWith('.spec.ts') ? [full] : [];
  });
}

/**
 * Which projects this run can reach, from the command line as Playwright reads it: `--project`
 * names them; file filters (regular expressions over the test files' paths) reach the projects whose
 * files they match. A worker process, or anything unparseable, reaches all three.
 */
type ProjectName = 'checkout' | 'drills' | 'capture';
function reachableProjects(argv: string[]): Set<ProjectName> {
  const all = new Set<ProjectName>(['checkout', 'drills', 'capture']);
  const testAt = argv.indexOf('test');
  if (testAt < 0) return all;
  const projects: string[] = [];
  const filters: string[] = [];
  for (let i = testAt + 1; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg.startsWith('--project=')) projects.push(...arg.slice('--project='.length).split(','));
    else if (arg === '--project') projects.push(...(argv[++i] ?? '').split(','));
    else if (VALUE_OPTIONS.has(arg)) i++;
    else if (!arg.startsWith('-')) filters.push(arg);
  }
  const reached = new Set<ProjectName>(projects.length ? (projects.filter((p) => all.has(p as ProjectName)) as ProjectName[]) : all);
  if (filters.length === 0) return reached;
  const matches = (file: string) =>
    filters.some((filter) => {
      try {
        return new RegExp(filter).test(file) || new RegExp(filter).test(path.resolve(file));
      } catch {
        return file.includes(filter);
      }
    });
  const drills = specFiles('e2e/drills');
  const capture = specFiles('e2e/capture');
  const checkout = specFiles('e2e').filter((file) => !drills.includes(file) && !capture.includes(file));
  if (!checkout.some(matches)) reached.delete('checkout');
  if (!drills.some(matches)) reached.delete('drills');
  if (!capture.some(matches)) reached.delete('capture');
  return reached;
}

const reachable = reachableProjects(process.argv);

export default defineConfig({
  timeout: 90_000,
  expect: { timeout: 20_000 },
  // The two projects run side by side, each on its own stack; within a project tests run one at a
  // time (its one app and database: the drills count charges and arm process-wide faults).
  workers: 2,
  forbidOnly: !!process.env.CI,
  reporter: [['list'], ['html', { open: 'never' }]],
  use: {
    locale: 'zh-CN',
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
    launchOptions: executablePath
      ? {
          executablePath,
          args: ['--no-sandbox', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
        }
      : {},
  },
  projects: [
    {
      name: 'checkout',
      workers: 1,
      testDir: 'e2e',
      testIgnore: ['drills/**', 'capture/**'],
      use: { browserName: 'chromium', baseURL: `http://127.0.0.1:${APP_PORT}` },
    },
    {
      name: 'drills',
      workers: 1,
      testDir: 'e2e/drills',
      use: { browserName: 'chromium', baseURL: `http://127.0.0.1:${DRILL_APP_PORT}` },
    },
    {
      name: 'capture',
      workers: 1,
      testDir: 'e2e/capture',
      use: { browserName: 'chromium', baseURL: `http://127.0.0.1:${CAPTURE_APP_PORT}` },
    },
  ],
  webServer: [
    // The checkout stack runs on `next dev` only when it is the run's one stack: a production build is
    // shared by every stack that starts (scripts/build-once.ts).
    ...(reachable.has('checkout') ? [checkoutStack(reachable.has('drills') || reachable.has('capture'))] : []),
    ...(reachable.has('drills') ? [drillsStack] : []),
    ...(reachable.has('capture') ? [captureStack] : []),
  ],
});
