/**
 * Starts what PayOnce needs to run, in order: a database (embedded unless DATABASE_URL is set), the
 * schema, the PSP sandbox (its own process) and the Next app (its own process), wired together by
 * environment variables only — exactly as separate deployments would be.
 *
 * Used by `npm run dev`, `npm start` and the browser tests' web server.
 *
 * With STACK_PGBOUNCER=1 (or `pgbouncer: true`) the app instances reach the database through a
 * PgBouncer in transaction-pooling mode that the stack starts in front of it, as several instances
 * behind one pooler would in production: `STACK_PGBOUNCER=1 npm start -- --instances 3`
 * (docs/scaling.md).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ensureDatabase, startEmbeddedPostgres, type EmbeddedDatabase } from '@/db/embedded';
import { runMigrations } from '@/db/migrate';
import { demoMode } from '@/server/demo/mode';
import { sandboxCredentialsToEnv } from '@/server/payments/sandbox-credentials';
import { buildOnce } from './build-once';
import { startPgBouncer, type PgBouncer } from './pgbouncer';
import { stopChild } from './processes';
import { registerStripeWebhookEndpoint } from './stripe-listen';

export interface StackOptions {
  appPort: number;
  sandboxPort: number;
  /** `dev` = next dev (hot reload); `prod` = next start on an existing build. */
  mode: 'dev' | 'prod';
  /** Database name on the embedded cluster (with DATABASE_URL set, see `separateDatabase`). */
  databaseName?: string;
  /**
   * With DATABASE_URL set: use a database named `databaseName` on that server instead of the one
   * the URL names. Two stacks sharing one database would share one sandbox ledger, and each
   * sandbox would deliver the other's notifications.
   */
  separateDatabase?: boolean;
  sandboxTimeScale?: number;
  /**
   * Extra environment for the app process (e.g. a shorter lease for drills). The switches that open
   * the app's non-customer surfaces live here too: PAYONCE_DEMO=1 (demo mode), CHECKOUT_FAULTS=1,
   * METRICS_TOKEN or METRICS_PUBLIC=1 (see server/demo/mode.ts and server/metrics/access.ts).
   */
  appEnv?: Record<string, string>;
  distDir?: string;
  /** With mode `prod`: build first even if a build exists (otherwise only when there is none). */
  build?: boolean;
  /** With mode `prod`: how many app processes, on appPort, appPort + 1, … (default 1). */
  instances?: number;
  /**
   * The app instances (their requests, jobs and start-up migrations) go through a PgBouncer in
   * transaction-pooling mode that the stack starts in front of the database, with
   * DATABASE_POOLING=transaction (scripts/pgbouncer.ts). The sandbox — the PSP's own system — and the
   * stack's own migration before anything starts stay on the direct connection. Default:
   * STACK_PGBOUNCER (1 on; 0 or unset off); STACK_PGBOUNCER_PORT and STACK_PGBOUNCER_PASSWORD fix its
   * port and its clients' password (otherwise a free port and a random password).
   */
  pgbouncer?: boolean;
  /**
   * The app instances' database, when it is not the sandbox's: a highly available PostgreSQL
   * (scripts/ha-postgres.ts, a multi-host URL) that fails over under the app while the PSP's ledger
   * stays where it is. Migrated before the apps start.
   */
  appDatabaseUrl?: string;
  /** PgBouncer's pool sizes (scripts/pgbouncer.ts DEFAULT_POOL_SIZES otherwise). */
  pgbouncerPool?: { poolSize?: number; reservePoolSize?: number };
  log?: (line: string) => void;
}

export interface Stack {
  /** The database itself (the stack's tools and the sandbox use it). */
  databaseUrl: string;
  /** What the app instances connect to: PgBouncer's URL with `pgbouncer`, else databaseUrl. */
  appDatabaseUrl: string;
  /** The stack's PgBouncer, when it runs one (its admin console: SHOW POOLS, SHOW STATS). */
  pgbouncer?: { url: string; adminUrl: string; port: number };
  appUrl: string;
  sandboxUrl: string;
  /** The app runs in demo mode (PAYONCE_DEMO=1 from `appEnv` or the inherited environment). */
  demo: boolean;
  stop(): Promise<void>;
}

export async function resolveDatabase(
  databaseName: string,
  log: (line: string) => void,
  separateDatabase = false,
): Promise<{ url: string; embedded?: EmbeddedDatabase }> {
  if (process.env.DATABASE_URL && separateDatabase) {
    const url = new URL(process.env.DATABASE_URL);
    await ensureDatabase(url.toString(), databaseName);
    url.pathname = `/${databaseName}`;
    return { url: url.toString() };
  }
  if (process.env.DATABASE_URL) return { url: process.env.DATABASE_URL };
  const embedded = await startEmbeddedPostgres({ log: (line) => log(`[postgres] ${line}`) });
  await ensureDatabase(embedded.adminUrl, databaseName);
  return { url: embedded.urlFor(databaseName), embedded };
}

/** STACK_PGBOUNCER: 1 or 0, anything else is a typo rather than "off". */
export function pgbouncerFromEnv(raw = process.env.STACK_PGBOUNCER): boolean {
  const value = raw?.trim() ?? '';
  if (value === '1') return true;
  if (value === '0' || value === '') return false;
  throw new Error(`STACK_PGBOUNCER=${JSON.stringify(raw)} is not valid: expected 1 (through PgBouncer) or 0`);
}

const tsxBin = 'node_modules/.bin/tsx';
const nextBin = 'node_modules/.bin/next';

/** The last lines each process printed, to explain a start that never became ready. */
const recentOutput = new Map<string, string[]>();

function run(name: string, command: string, args: string[], env: NodeJS.ProcessEnv, log: (line: string) => void): ChildProcess {
  const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const recent: string[] = [];
  recentOutput.set(name, recent);
  const forward = (chunk: Buffer) => {
    for (const line of chunk.toString().split('\n')) {
      if (!line.trim()) continue;
      log(`[${name}] ${line}`);
      recent.push(line);
      if (recent.length > 40) recent.shift();
    }
  };
  child.stdout?.on('data', forward);
  child.stderr?.on('data', forward);
  return child;
}

export async function waitForHttp(url: string, child: ChildProcess | undefined, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = '';
  while (Date.now() < deadline) {
    if (child && child.exitCode !== null) throw new Error(`${url}: the process exited with code ${child.exitCode}`);
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(30_000) });
      if (response.ok) return;
      lastError = `HTTP ${response.status}`;
    } catch (error) {
      lastError = (error as Error).message;
    }
    await sleep(250);
  }
  throw new Error(`${url} did not become ready within ${timeoutMs / 1000}s (${lastError})`);
}

export async function startStack(options: StackOptions): Promise<Stack> {
  const log = options.log ?? ((line: string) => console.log(line));
  const usePgBouncer = options.pgbouncer ?? pgbouncerFromEnv();
  const database = await resolveDatabase(options.databaseName ?? 'payonce', log, options.separateDatabase);
  const children: ChildProcess[] = [];
  let bouncer: PgBouncer | undefined;
  let stopping = false;
  const stop = async () => {
    stopping = true;
    await Promise.all(children.reverse().map(stopChild));
    await bouncer?.stop();
    await database.embedded?.stop();
  };

  try {
    await runMigrations(database.url);
    if (options.appDatabaseUrl) await runMigrations(options.appDatabaseUrl);
    if (usePgBouncer && !options.appDatabaseUrl) {
      const port = process.env.STACK_PGBOUNCER_PORT ? Number(process.env.STACK_PGBOUNCER_PORT) : undefined;
      bouncer = await startPgBouncer({
        upstreamUrl: database.url,
        port,
        password: process.env.STACK_PGBOUNCER_PASSWORD || undefined,
        ...options.pgbouncerPool,
        log: (line) => log(`[pgbouncer] ${line}`),
      });
    }
    const appDatabaseUrl = options.appDatabaseUrl ?? bouncer?.url ?? database.url;

    const sandboxUrl = `http://127.0.0.1:${options.sandboxPort}`;
    const sandbox = run(
      'sandbox',
      tsxBin,
      ['sandbox/main.ts'],
      {
        ...process.env,
        DATABASE_URL: database.url,
        PSP_SANDBOX_PORT: String(options.sandboxPort),
        SANDBOX_TIME_SCALE: String(options.sandboxTimeScale ?? process.env.SANDBOX_TIME_SCALE ?? 0.05),
      },
      log,
    );
    children.push(sandbox);
    await waitForHttp(`${sandboxUrl}/health`, sandbox, 30_000);

    // Like copying keys from each gateway's developer console: the sandbox made them on first start.
    const credentials = (await (await fetch(`${sandboxUrl}/sandbox/credentials`)).json()) as Parameters<typeof sandboxCredentialsToEnv>[0];

    const appUrl = `http://127.0.0.1:${options.appPort}`;
    const gatewayEnv = sandboxCredentialsToEnv(credentials);
    // Stripe sends events only to registered endpoints: register the app's, as `stripe listen` would.
    const stripeWebhookSecret = await registerStripeWebhookEndpoint(gatewayEnv, appUrl);
    if (stripeWebhookSecret) gatewayEnv.STRIPE_WEBHOOK_SECRET = stripeWebhookSecret;
    // A production build refuses to start without SESSION_SECRET (instrumentation.ts). This is a
    // local runner, so when none is set it makes one for this run, shared by all its instances and
    // their restarts: sessions last as long as the stack. Dev mode keeps its secret under .data/.
    const sessionSecret = options.mode === 'prod' && !process.env.SESSION_SECRET ? randomBytes(32).toString('base64url') : undefined;
    if (sessionSecret) log('[stack] SESSION_SECRET is not set: using a random one for this run');
    const appEnv: NodeJS.ProcessEnv = {
      ...process.env,
      ...(sessionSecret ? { SESSION_SECRET: sessionSecret } : {}),
      DATABASE_URL: appDatabaseUrl,
      // Behind a transaction pooler the app sends no named prepared statements (db/client.ts).
      ...(bouncer ? { DATABASE_POOLING: 'transaction' } : {}),
      PORT: String(options.appPort),
      PUBLIC_BASE_URL: appUrl,
      PSP_SANDBOX_URL: sandboxUrl,
      ...gatewayEnv,
      NEXT_TELEMETRY_DISABLED: '1',
      ...(options.distDir ? { NEXT_DIST_DIR: options.distDir } : {}),
      // `next start` leaves SIGTERM to the app, which drains before it exits (server/http/drain.ts).
      ...(options.mode === 'prod' ? { NEXT_MANUAL_SIG_HANDLE: 'true' } : {}),
      ...options.appEnv,
    };
    const distDir = options.distDir ?? '.next';
    const build = async () => {
      log(`[build] next build into ${distDir}`);
      const builder = run('build', nextBin, ['build'], appEnv, log);
      const code = await new Promise<number | null>((resolve) => builder.once('exit', resolve));
      if (code !== 0) throw new Error(`next build failed with code ${code}`);
    };
    // STACK_BUILD_ONCE=<run id>: the stacks of one run share one build (scripts/build-once.ts).
    const runId = process.env.STACK_BUILD_ONCE;
    if (options.mode === 'prod' && runId) await buildOnce(distDir, runId, build, log);
    else if (options.mode === 'prod' && (options.build || !existsSync(path.join(distDir, 'BUILD_ID')))) await build();
    // The supervisor: like Kubernetes restarting a Pod, an app process that dies (a crash drill's
    // SIGKILL, an out-of-memory kill) is started again, on the same port, with the same environment.
    let restarts = 0;
    const startApp = (instance: number): ChildProcess => {
      const port = options.appPort + instance;
      const nextArgs = [options.mode === 'dev' ? 'dev' : 'start', '--port', String(port), '--hostname', '127.0.0.1'];
      const name = instance === 0 ? 'app' : `app#${instance + 1}`;
      const child = run(name, nextBin, nextArgs, { ...appEnv, PORT: String(port) }, log);
      children.push(child);
      child.once('exit', (code, signal) => {
        children.splice(children.indexOf(child), 1);
        if (stopping) return;
        restarts++;
        log(`[supervisor] ${name} exited (${signal ?? `code ${code}`}); restarting it (restart #${restarts})`);
        setTimeout(() => {
          if (!stopping) startApp(instance);
        }, 200);
      });
      return child;
    };
    // Further instances (stateless, on the next ports) share the database and the sandbox, as
    // instances behind a load balancer would. Dev mode runs one: two dev servers share one build.
    const instances = options.mode === 'dev' ? 1 : Math.max(1, options.instances ?? 1);
    // One after another: each instance migrates and sets up its job queues as it starts, and a
    // ready first instance leaves the others nothing to race over. The first request also compiles
    // the route in dev mode, hence the generous wait.
    for (let instance = 0; instance < instances; instance++) {
      const app = startApp(instance);
      try {
        await waitForHttp(`http://127.0.0.1:${options.appPort + instance}/api/health`, app, 180_000);
      } catch (error) {
        const name = instance === 0 ? 'app' : `app#${instance + 1}`;
        const output = (recentOutput.get(name) ?? []).join('\n');
        throw new Error(`${(error as Error).message}\n--- the last lines ${name} printed ---\n${output}`);
      }
    }

    return {
      databaseUrl: database.url,
      appDatabaseUrl,
      ...(bouncer ? { pgbouncer: { url: bouncer.url, adminUrl: bouncer.adminUrl, port: bouncer.port } } : {}),
      appUrl,
      sandboxUrl,
      demo: demoMode(appEnv),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
