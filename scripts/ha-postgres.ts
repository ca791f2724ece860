/**
 * A highly available PostgreSQL on this machine, run by pg_auto_failover — a monitor, a primary and a
 * synchronous standby — started the way scripts/pgbouncer.ts starts PgBouncer: Debian's binaries
 * (`apt-get install postgresql-15-auto-failover pg-auto-failover-cli`), a temporary folder, three
 * ports on 127.0.0.1, and a formation that has settled (one node `primary`, the other `secondary`)
 * before it counts as started. It stops with `stop()`, and its folder goes with it.
 *
 * Why pg_auto_failover rather than Patroni (docs/scaling.md, "When PostgreSQL fails over"): one
 * binary and PostgreSQL itself as the monitor, where Patroni needs a consensus store (etcd) beside
 * it; it keeps the standby synchronous, promotes it only when it has every acknowledged commit, and
 * rejoins the old primary as a standby by itself (pg_rewind).
 *
 * The app reaches it through `url`, a multi-host URL with `target_session_attrs=primary`: postgres.js
 * tries each host and keeps the one not in recovery. (`read-write` is not enough in postgres.js 3.4:
 * it checks only `default_transaction_read_only`, which is off on a hot standby too.)
 *
 * PostgreSQL refuses to run as root: as root, every pg_autoctl runs as the `postgres` user (Debian's
 * PostgreSQL packages create it). pg_autoctl's own state goes in the temporary folder (XDG_CONFIG_HOME,
 * XDG_DATA_HOME), never in the user's home.
 *
 * Failover is tuned for drills: the monitor checks each node every second and fails over after 3 s
 * without an answer (pg_auto_failover's defaults: 5 s checks and 20 s). docs/scaling.md gives both.
 *
 *   npx tsx scripts/ha-postgres.ts [--port 6100] [--async]     # starts one and prints its URL
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { accessSync, chmodSync, chownSync, constants, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';

export interface HaNode {
  name: string;
  port: number;
  pgdata: string;
}

export interface NodeState {
  name: string;
  port: number;
  reported: string;
  goal: string;
}

export interface HaPostgres {
  /** What the app connects to: every node, the primary kept (`target_session_attrs=primary`). */
  url: string;
  /** One node alone (its own host and port), for tools that must reach that node. */
  nodeUrl(node: HaNode, database?: string): string;
  nodes: HaNode[];
  synchronous: boolean;
  /** The monitor's view: each node's reported and goal state. */
  states(): Promise<NodeState[]>;
  /** The node the monitor has as primary, once it reports so. */
  primary(): Promise<HaNode | undefined>;
  /**
   * The node dies: SIGKILL of its postmaster and of its keeper (as a machine lost would). With
   * `keeperToo: false` only the postmaster: the keeper restarts it in place, no failover.
   */
  kill(node: HaNode, options?: { keeperToo?: boolean }): Promise<void>;
  /** Starts a killed node's keeper again: it rejoins the formation as a standby. */
  restart(node: HaNode): Promise<void>;
  /** Waits until `node` is the primary and accepts writes through `url`; the time since `since`. */
  waitForPrimary(node: HaNode, options?: { timeoutMs?: number }): Promise<void>;
  /** Waits until one node is `primary` and every other `secondary` (a formation back to full strength). */
  waitForHealthy(options?: { timeoutMs?: number }): Promise<void>;
  stop(): Promise<void>;
}

export interface HaPostgresOptions {
  /** The monitor's port; the nodes take the next ones. */
  port?: number;
  /** The database the app uses, created on the primary (replicated to the standby). */
  database?: string;
  /** false: the standby is asynchronous (replication-quorum false), to show what that loses. */
  synchronous?: boolean;
  nodes?: number;
  log?: (line: string) => void;
}

const PG_BIN_CANDIDATES = ['/usr/lib/postgresql/15/bin', '/usr/lib/postgresql/16/bin', '/usr/lib/postgresql/17/bin'];

/** pg_autoctl and the PostgreSQL it was built for (pg_ctl's folder), or undefined. */
export function findPgAutoctl(): { pgAutoctl: string; pgBin: string } | undefined {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean), '/usr/bin', '/usr/local/bin'];
  const pgAutoctl = dirs.map((dir) => path.join(dir, 'pg_autoctl')).find(executable);
  const pgBin = PG_BIN_CANDIDATES.find((dir) => executable(path.join(dir, 'pg_ctl')) && hasExtension(dir));
  return pgAutoctl && pgBin ? { pgAutoctl, pgBin } : undefined;
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function hasExtension(pgBin: string): boolean {
  return executable(path.join(pgBin, '..', 'lib', 'pgautofailover.so')) || readable(path.join(pgBin, '..', 'lib', 'pgautofailover.so'));
}

function readable(file: string): boolean {
  try {
    accessSync(file, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}

export const PG_AUTO_FAILOVER_MISSING =
  'pg_auto_failover is not installed. Install it with `sudo apt-get install postgresql-15-auto-failover pg-auto-failover-cli` ' +
  '(Debian/Ubuntu; PostgreSQL 15 server packages come with it).';

/**
 * Timings for drills, each scaled down from pg_auto_failover's defaults by the same rule: the monitor
 * checks each node every second and gives a silent one up after 3 s (defaults 5 s and 20 s); a
 * primary cut off from the monitor and its standby demotes itself after 3 s
 * (network_partition_timeout, default 20 s), and the monitor lets the promoted standby take writes
 * only 5 s after it lost the old primary (primary_demote_timeout, default 30 s) — longer than the
 * old primary's own demotion, so two primaries never take writes at once.
 */
const DRILL_MONITOR_SETTINGS = {
  'pgautofailover.health_check_period': '1000',
  'pgautofailover.health_check_timeout': '1000',
  'pgautofailover.health_check_max_retries': '1',
  'pgautofailover.health_check_retry_delay': '500',
  'pgautofailover.node_considered_unhealthy_timeout': '3000',
  'pgautofailover.primary_demote_timeout': '5000',
};
const DRILL_KEEPER_SETTINGS = { 'timeout.network_partition_timeout': '3' };

export async function startHaPostgres(options: HaPostgresOptions = {}): Promise<HaPostgres> {
  const found = findPgAutoctl();
  if (!found) throw new Error(PG_AUTO_FAILOVER_MISSING);
  const log = options.log ?? (() => {});
  const basePort = options.port ?? 6100;
  const synchronous = options.synchronous ?? true;
  const database = options.database ?? 'payonce';
  const asRoot = process.getuid?.() === 0;
  const osUser = asRoot ? 'postgres' : os.userInfo().username;

  const dir = mkdtempSync(path.join(os.tmpdir(), 'payonce-ha-'));
  if (asRoot) {
    chownSync(dir, uid('postgres'), gid('postgres'));
    chmodSync(dir, 0o700);
  }
  const env = {
    PATH: `${found.pgBin}${path.delimiter}${process.env.PATH ?? ''}`,
    XDG_CONFIG_HOME: path.join(dir, 'config'),
    XDG_DATA_HOME: path.join(dir, 'data'),
    XDG_RUNTIME_DIR: path.join(dir, 'run'),
    PG_CONFIG: path.join(found.pgBin, 'pg_config'),
    HOME: dir,
    LANG: 'C.UTF-8',
  };
  const keepers = new Map<string, ChildProcess>();
  const run = (name: string, args: string[]) => {
    const command = asRoot ? 'runuser' : found.pgAutoctl;
    const argv = asRoot
      ? ['-u', 'postgres', '--', 'env', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), found.pgAutoctl, ...args]
      : args;
    // Its own process group: a node is killed whole, keeper and PostgreSQL together.
    const child = spawn(command, argv, { env: { ...process.env, ...env }, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    for (const stream of [child.stdout!, child.stderr!]) {
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        for (const line of chunk.split('\n')) if (line.trim()) log(`[${name}] ${line}`);
      });
    }
    keepers.set(name, child);
    return child;
  };
  /** One pg_autoctl command run to its end (creating a node: initdb, or a base backup of the primary). */
  const autoctl = (args: string[]) =>
    new Promise<void>((resolve, reject) => {
      const child = run(`pg_autoctl ${args[0]}`, args);
      const timer = setTimeout(() => killGroup(child, 'SIGKILL'), 180_000);
      child.on('exit', (code) => {
        clearTimeout(timer);
        keepers.delete(`pg_autoctl ${args[0]}`);
        if (code === 0) resolve();
        else reject(new Error(`pg_autoctl ${args.join(' ')} failed (exit ${code}); its output is in the log`));
      });
    });

  const monitorData = path.join(dir, 'monitor');
  const monitorUrl = `postgres://autoctl_node@127.0.0.1:${basePort}/pg_auto_failover?sslmode=disable`;
  const nodes: HaNode[] = Array.from({ length: options.nodes ?? 2 }, (_, i) => ({
    name: `node${i + 1}`,
    port: basePort + 1 + i,
    pgdata: path.join(dir, `node${i + 1}`),
  }));
  const nodeArgs = (node: HaNode) => [
    'create',
    'postgres',
    '--pgdata',
    node.pgdata,
    '--pgport',
    String(node.port),
    '--hostname',
    '127.0.0.1',
    '--name',
    node.name,
    '--auth',
    'trust',
    '--no-ssl',
    '--monitor',
    monitorUrl,
  ];
  const monitorSql = () => postgres(monitorUrl, { max: 1, onnotice: () => {}, connect_timeout: 5, idle_timeout: 1 });

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    for (const child of keepers.values()) killGroup(child, 'SIGTERM');
    await sleep(1500);
    for (const child of keepers.values()) killGroup(child, 'SIGKILL');
    for (const pgdata of [monitorData, ...nodes.map((n) => n.pgdata)]) killPostmaster(pgdata);
    rmSync(dir, { recursive: true, force: true });
  };
  const onExit = () => void stop();
  process.once('exit', onExit);

  const states = async (): Promise<NodeState[]> => {
    const sql = monitorSql();
    try {
      return await sql<NodeState[]>`
        select nodename as name, nodeport as port, reportedstate::text as reported, goalstate::text as goal
          from pgautofailover.node order by nodeid`;
    } finally {
      await sql.end({ timeout: 1 });
    }
  };
  const waitUntil = async (what: string, timeoutMs: number, check: () => Promise<boolean>) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (await check().catch(() => false)) return;
      if (Date.now() > deadline) {
        const seen = await states().catch(() => []);
        throw new Error(`pg_auto_failover: ${what} not within ${timeoutMs} ms (nodes: ${JSON.stringify(seen)})`);
      }
      await sleep(200);
    }
  };
  const healthy = async () => {
    const seen = await states();
    return (
      seen.length === nodes.length &&
      seen.filter((s) => s.reported === 'primary' && s.goal === 'primary').length === 1 &&
      seen.filter((s) => s.reported === 'secondary' && s.goal === 'secondary').length === nodes.length - 1
    );
  };

  try {
    log(`starting the monitor on 127.0.0.1:${basePort}`);
    run('monitor', [
      'create',
      'monitor',
      '--pgdata',
      monitorData,
      '--pgport',
      String(basePort),
      '--hostname',
      '127.0.0.1',
      '--auth',
      'trust',
      '--no-ssl',
      '--run',
    ]);
    await waitUntil('the monitor', 60_000, async () => (await states(), true));
    // ALTER SYSTEM needs the superuser: the OS user the monitor runs as.
    const sql = postgres(`postgres://${osUser}@127.0.0.1:${basePort}/pg_auto_failover?sslmode=disable`, { max: 1, onnotice: () => {} });
    try {
      for (const [name, value] of Object.entries(DRILL_MONITOR_SETTINGS)) await sql.unsafe(`alter system set ${name} = '${value}'`);
      await sql`select pg_reload_conf()`;
    } finally {
      await sql.end({ timeout: 1 });
    }
    // The first node becomes the primary; the next ones join it as standbys, one at a time.
    for (const node of nodes) {
      log(`starting ${node.name} on 127.0.0.1:${node.port}`);
      await autoctl(nodeArgs(node));
      for (const [name, value] of Object.entries(DRILL_KEEPER_SETTINGS))
        await autoctl(['config', 'set', '--pgdata', node.pgdata, name, value]);
      run(node.name, ['run', '--pgdata', node.pgdata]);
      await waitUntil(`${node.name} joining`, 120_000, async () => {
        const seen = await states();
        const mine = seen.find((s) => s.name === node.name);
        return mine !== undefined && ['single', 'primary', 'secondary'].includes(mine.reported) && mine.reported === mine.goal;
      });
    }
    if (!synchronous) {
      for (const node of nodes.slice(1)) await autoctl(['set', 'node', 'replication-quorum', 'false', '--pgdata', node.pgdata]);
    }
    await waitUntil('the formation', 120_000, healthy);
  } catch (error) {
    await stop();
    throw error;
  }

  const url = `postgres://${osUser}@${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}/${database}?target_session_attrs=primary`;
  const nodeUrl = (node: HaNode, db = database) => `postgres://${osUser}@127.0.0.1:${node.port}/${db}`;
  const primary = async () => {
    const seen = await states();
    const name = seen.find((s) => s.reported === 'primary' || s.reported === 'wait_primary' || s.reported === 'single')?.name;
    return nodes.find((n) => n.name === name);
  };
  {
    const first = (await primary())!;
    const admin = postgres(nodeUrl(first, 'postgres'), { max: 1, onnotice: () => {} });
    try {
      const [exists] = await admin`select 1 from pg_database where datname = ${database}`;
      if (!exists) await admin.unsafe(`create database "${database.replaceAll('"', '""')}"`);
    } finally {
      await admin.end({ timeout: 2 });
    }
  }
  log(`formation up: ${url} (${synchronous ? 'synchronous' : 'asynchronous'} standby)`);

  return {
    url,
    nodeUrl,
    nodes,
    synchronous,
    states,
    primary,
    async kill(node, { keeperToo = true } = {}) {
      if (keeperToo) {
        const keeper = keepers.get(node.name);
        if (keeper) killGroup(keeper, 'SIGKILL');
      }
      killPostmaster(node.pgdata);
    },
    async restart(node) {
      // The node's configuration is kept in its folder: `pg_autoctl run` picks up where it left off.
      run(node.name, ['run', '--pgdata', node.pgdata]);
    },
    async waitForPrimary(node, { timeoutMs = 60_000 } = {}) {
      await waitUntil(`${node.name} as primary`, timeoutMs, async () => {
        const sql = postgres(nodeUrl(node), { max: 1, onnotice: () => {}, connect_timeout: 2 });
        try {
          const [row] = await sql<{ recovery: boolean }[]>`select pg_is_in_recovery() as recovery`;
          return row?.recovery === false;
        } finally {
          await sql.end({ timeout: 1 });
        }
      });
    },
    waitForHealthy: ({ timeoutMs = 120_000 } = {}) => waitUntil('the formation back to full strength', timeoutMs, healthy),
    async stop() {
      process.off('exit', onExit);
      await stop();
    },
  };
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/** SIGKILL of the postmaster named in the folder's postmaster.pid, if it runs. */
function killPostmaster(pgdata: string): void {
  let pid: number;
  try {
    pid = Number(readFileSync(path.join(pgdata, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return;
  }
  try {
    if (pid > 0) process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

function uid(user: string): number {
  return Number(spawnSync('id', ['-u', user], { encoding: 'utf8' }).stdout.trim());
}

function gid(user: string): number {
  return Number(spawnSync('id', ['-g', user], { encoding: 'utf8' }).stdout.trim());
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const args = process.argv.slice(2);
  const port = args.includes('--port') ? Number(args[args.indexOf('--port') + 1]) : undefined;
  const ha = await startHaPostgres({
    ...(port ? { port } : {}),
    synchronous: !args.includes('--async'),
    log: (line) => console.error(line),
  });
  console.log(ha.url);
  console.error('Ctrl-C stops it.');
  process.once('SIGINT', () => void ha.stop().then(() => process.exit(0)));
}
