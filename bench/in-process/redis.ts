/**
 * The benchmark's own redis-server for the Redis-backed peers: started on a free loopback port with
 * no persistence (`--save "" --appendonly no`) in a temporary folder, waited on until it answers
 * PING, and killed at the end — also on SIGINT or an error (the caller's `finally`, and a last-resort
 * `exit` hook that kills it synchronously). Nothing of a redis-server already on the machine is used.
 *
 * REDIS_SERVER names another binary; without it, /usr/bin/redis-server or the first on PATH.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort, stopChild } from '@/scripts/processes';

export interface RedisServer {
  url: string;
  port: number;
  pid: number;
  version: string;
  stop(): Promise<void>;
}

/** The redis-server binary to run, or null when there is none on this machine. */
export function findRedisServer(): string | null {
  const candidates = process.env.REDIS_SERVER
    ? [process.env.REDIS_SERVER]
    : ['/usr/bin/redis-server', ...(process.env.PATH ?? '').split(path.delimiter).map((dir) => path.join(dir, 'redis-server'))];
  for (const candidate of candidates) {
    try {
      accessSync(candidate, fsConstants.X_OK);
      return candidate;
    } catch {
      // not this one
    }
  }
  return null;
}

function redisVersion(binary: string): string {
  try {
    const out = execFileSync(binary, ['--version'], { encoding: 'utf8', timeout: 5000 });
    return /v=(\S+)/.exec(out)?.[1] ?? out.trim();
  } catch {
    return 'unknown';
  }
}

/** One RESP round trip on a fresh socket: the server's first reply line to `command`, or null. */
function ask(port: number, command: string): Promise<string | null> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    let reply = '';
    const done = (value: string | null) => {
      socket.destroy();
      resolve(value);
    };
    socket.setTimeout(1000, () => done(null));
    socket.once('error', () => done(null));
    socket.once('connect', () => socket.write(command));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) done(reply);
    });
  });
}

async function waitUntilAnswers(port: number, child: ChildProcess, recent: string[], timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`redis-server exited (${child.signalCode ?? `code ${child.exitCode}`}) while starting:\n${recent.join('\n')}`);
    }
    if ((await ask(port, 'PING\r\n'))?.startsWith('+PONG')) return;
    await sleep(50);
  }
  throw new Error(`redis-server did not answer PING on port ${port} within ${timeoutMs / 1000} s:\n${recent.join('\n')}`);
}

/**
 * Starts a private redis-server, or returns null (with the reason logged) when the binary is missing.
 * Any other failure to start throws.
 */
export async function startRedis(log: (line: string) => void): Promise<RedisServer | null> {
  const binary = findRedisServer();
  if (!binary) {
    log('redis-server not found (looked at REDIS_SERVER, /usr/bin/redis-server and PATH): the Redis-backed peers are SKIPPED');
    return null;
  }
  const dir = await mkdtemp(path.join(os.tmpdir(), 'payonce-bench-redis-'));
  const port = await freePort();
  const child = spawn(
    binary,
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no'],
    { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const recent: string[] = [];
  const keep = (chunk: Buffer) => {
    for (const line of chunk.toString().split('\n')) {
      if (!line.trim()) continue;
      recent.push(line);
      if (recent.length > 30) recent.shift();
    }
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  // Should this process end without reaching stop() (process.exit from elsewhere), the server goes too.
  const onExit = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.once('exit', onExit);
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await stopChild(child);
    process.removeListener('exit', onExit);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    await waitUntilAnswers(port, child, recent);
  } catch (error) {
    await stop();
    throw error;
  }
  const version = redisVersion(binary);
  log(`redis-server ${version} on 127.0.0.1:${port} (pid ${child.pid}, no persistence, ${dir})`);
  return { url: `redis://127.0.0.1:${port}`, port, pid: child.pid!, version, stop };
}
