/**
 * The benchmark's own PayOnce: a production build of the app with BENCH=1 (the bench procedures and
 * the statement counter) and without background jobs (no reconciler or relay adding load), the PSP
 * sandbox, and PostgreSQL — embedded, or DATABASE_URL. Ports and build folder are the benchmark's
 * own, so it runs beside a developer's `npm run dev` and the browser tests.
 *
 * With `--pgbouncer` the app reaches PostgreSQL through a PgBouncer in transaction-pooling mode that
 * the stack starts (scripts/pgbouncer.ts, DATABASE_POOLING=transaction); the benchmark's own
 * connection, which fills and counts tables, stays direct. docs/scaling.md has both runs side by side.
 */
import os from 'node:os';
import postgres from 'postgres';
import { DEFAULT_POOL_SIZES } from '@/scripts/pgbouncer';
import { startStack, type Stack } from '@/scripts/stack';

export const BENCH_APP_PORT = Number(process.env.BENCH_APP_PORT ?? 3400);
export const BENCH_SANDBOX_PORT = Number(process.env.BENCH_SANDBOX_PORT ?? 4410);
export const BENCH_DIST_DIR = '.next-bench';

/** The PgBouncer of the stack this process started, for machineInfo. */
let benchPgBouncer: Stack['pgbouncer'];

/** `pgbouncer`: through a PgBouncer in transaction mode (unset: STACK_PGBOUNCER decides, off by default). */
export async function startBenchStack(options: { build: boolean; verbose: boolean; pgbouncer?: boolean }): Promise<Stack> {
  const started = Date.now();
  const stack = await startStack({
    pgbouncer: options.pgbouncer,
    appPort: BENCH_APP_PORT,
    sandboxPort: BENCH_SANDBOX_PORT,
    mode: 'prod',
    build: options.build,
    distDir: BENCH_DIST_DIR,
    databaseName: 'payonce_bench',
    // Real-time notification retries: nothing the sandbox schedules competes with a measurement.
    sandboxTimeScale: 1,
    // One session creates every order and leaves them unpaid, as fast as it can: limits and caps off.
    appEnv: {
      BENCH: '1',
      PAYONCE_JOBS: 'off',
      RATE_LIMIT_SESSION_PER_MINUTE: '0',
      RATE_LIMIT_ADDRESS_PER_MINUTE: '0',
      OPEN_ORDERS_PER_CUSTOMER: '0',
      OPEN_ORDER_HELD_UNITS_PER_SKU: '0',
      OPEN_ORDERS_PER_ADDRESS: '0',
      OPEN_ORDER_HELD_UNITS_PER_SKU_PER_ADDRESS: '0',
    },
    log: (line) => {
      if (options.verbose || /^\[(build|supervisor)\]|error|Error/.test(line)) console.error(line);
    },
  });
  benchPgBouncer = stack.pgbouncer;
  console.error(
    `[bench] stack up in ${((Date.now() - started) / 1000).toFixed(1)} s: app ${stack.appUrl}, sandbox ${stack.sandboxUrl}` +
      (stack.pgbouncer ? `, the app through PgBouncer on :${stack.pgbouncer.port} (transaction pooling)` : ''),
  );
  return stack;
}

/** The session cookie of one anonymous customer: every key of the run is scoped to it. */
export async function sessionCookie(appUrl: string): Promise<string> {
  const response = await fetch(`${appUrl}/api/trpc/checkout.products`);
  await response.arrayBuffer();
  const cookie = response.headers.getSetCookie()[0]?.split(';')[0];
  if (!response.ok || !cookie) throw new Error(`no session cookie from ${appUrl} (HTTP ${response.status})`);
  return cookie;
}

export interface MachineInfo {
  cpuModel: string;
  cores: number;
  ramGiB: number;
  os: string;
  node: string;
  postgres: string;
  database: 'embedded' | 'DATABASE_URL';
  databaseHost: string;
  sharedBuffers: string;
  synchronousCommit: string;
  appDbPoolMax: number;
  /** The app's path to PostgreSQL: direct, or through PgBouncer (its version, mode and pool). */
  pgbouncer: string | null;
  loadGenerator: string;
  loadAverage: { start: number[]; end?: number[] };
}

export async function machineInfo(sql: postgres.Sql, databaseUrl: string): Promise<MachineInfo> {
  const [pg] = await sql<{ version: string; shared_buffers: string; synchronous_commit: string }[]>`
    select current_setting('server_version') as version, current_setting('shared_buffers') as shared_buffers,
           current_setting('synchronous_commit') as synchronous_commit`;
  const url = new URL(databaseUrl);
  const pgbouncer = benchPgBouncer ? await pgbouncerVersion(benchPgBouncer.adminUrl) : null;
  return {
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    ramGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    postgres: pg?.version ?? 'unknown',
    database: process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded',
    // The report prints this as "DATABASE_URL at …": through PgBouncer it says so there.
    databaseHost: `${url.hostname}:${url.port || 5432}${url.pathname}${pgbouncer ? `, the app through ${pgbouncer}` : ''}`,
    sharedBuffers: pg?.shared_buffers ?? 'unknown',
    synchronousCommit: pg?.synchronous_commit ?? 'unknown',
    appDbPoolMax: Number(process.env.DB_POOL_MAX ?? 10),
    pgbouncer,
    loadGenerator: 'autocannon 8, in the bench process, on the same machine as the app and PostgreSQL',
    loadAverage: { start: os.loadavg().map((n) => Math.round(n * 100) / 100) },
  };
}

/** "PgBouncer 1.18.0 (transaction pooling, 8 + 2 server connections)", from its admin console. */
async function pgbouncerVersion(adminUrl: string): Promise<string> {
  // The admin console speaks the simple protocol only: no type fetch, no parameters.
  const admin = postgres(adminUrl, { max: 1, prepare: false, fetch_types: false, onnotice: () => {} });
  try {
    const [row] = await admin.unsafe<{ version: string }[]>('show version');
    const version = row?.version ?? 'PgBouncer';
    return `${version} (transaction pooling, ${DEFAULT_POOL_SIZES.poolSize} + ${DEFAULT_POOL_SIZES.reservePoolSize} server connections)`;
  } finally {
    await admin.end({ timeout: 1 });
  }
}
