/**
 * Helpers for the servers the local stacks and the bench start as child processes (the app, the
 * sandbox, PgBouncer, redis-server).
 */
import type { ChildProcess } from 'node:child_process';
import net from 'node:net';

/** A port nothing listens on right now (the kernel's pick), on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port ? resolve(port) : reject(new Error('no free port'))));
    });
  });
}

/**
 * SIGTERM (an immediate shutdown for PgBouncer and redis-server; SIGINT would make PgBouncer wait for
 * every client), then SIGKILL after 5 s; resolves once the process has exited.
 */
export function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
