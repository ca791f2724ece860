/**
 * The delay proxy of the "across zones" condition: it must add its delay to every round trip (a proxy
 * that forwards at once would make that condition a second loopback run without anyone noticing),
 * keep each connection's bytes in order, carry a half-close through, and leave no socket behind.
 *
 *   node --import tsx --test bench/in-process/delay-proxy.test.ts
 *
 * DELAY_PROXY_TEST_DELAY_MS changes the delay the proxy is started with, not what is expected of it:
 * `DELAY_PROXY_TEST_DELAY_MS=0` must make the delay tests fail.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_ZONE_DELAY_MS, listenDelayed, roundTripsMs, startDelayProxy } from './delay-proxy';

/** What the tests expect: each way, so a round trip must take at least twice this. */
const EXPECTED_DELAY_MS = 5;
const startedDelayMs = Number(process.env.DELAY_PROXY_TEST_DELAY_MS ?? EXPECTED_DELAY_MS);

function listen(onConnection: (socket: net.Socket) => void, options: net.ServerOpts = {}): Promise<net.Server> {
  const server = net.createServer(options, onConnection);
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}
const portOf = (server: net.Server) => (server.address() as net.AddressInfo).port;
const closed = (server: net.Server) => new Promise<void>((resolve) => server.close(() => resolve()));

async function until(condition: () => boolean, what: string, timeoutMs = 2000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

describe('delay proxy', () => {
  let echo: net.Server;
  before(async () => {
    echo = await listen((socket) => socket.pipe(socket));
  });
  after(() => closed(echo));

  it('adds its delay each way to every round trip', async () => {
    const proxy = await listenDelayed([{ host: '127.0.0.1', port: portOf(echo) }], startedDelayMs);
    try {
      const direct = await roundTripsMs(portOf(echo), { request: 'ping\n', replyEnd: '\n', times: 20 });
      const proxied = await roundTripsMs(proxy.ports[0]!, { request: 'ping\n', replyEnd: '\n', times: 20 });
      assert.ok(proxied[0]! >= 2 * EXPECTED_DELAY_MS, `the fastest round trip took ${proxied[0]!.toFixed(2)} ms`);
      const added = proxied[10]! - direct[10]!;
      assert.ok(added >= 2 * EXPECTED_DELAY_MS, `the median round trip gained ${added.toFixed(2)} ms`);
    } finally {
      await proxy.stop();
    }
  });

  it('in a child process with the default delay (what the bench runs) adds it too', async () => {
    assert.equal(DEFAULT_ZONE_DELAY_MS, 1);
    const proxy = await startDelayProxy([{ host: '127.0.0.1', port: portOf(echo) }]);
    try {
      const proxied = await roundTripsMs(proxy.ports[0]!, { request: 'ping\n', replyEnd: '\n', times: 50 });
      assert.ok(proxied[0]! >= 2 * DEFAULT_ZONE_DELAY_MS, `the fastest round trip took ${proxied[0]!.toFixed(3)} ms`);
    } finally {
      await proxy.stop();
    }
  });

  it("keeps a connection's bytes in order, however they arrive", async () => {
    const proxy = await listenDelayed([{ host: '127.0.0.1', port: portOf(echo) }], 1);
    const socket = net.connect({ host: '127.0.0.1', port: proxy.ports[0]! });
    socket.setNoDelay(true);
    try {
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
      let sent = '';
      for (let burst = 0; burst < 200; burst++) {
        for (let i = 0; i < 10; i++) {
          const piece = `${burst}.${i};`;
          sent += piece;
          socket.write(piece);
        }
        // Bursts spread over a few milliseconds, so chunks are held with different due times.
        if (burst % 20 === 0) await sleep(1);
        else await new Promise((resolve) => setImmediate(resolve));
      }
      await until(() => received.length >= sent.length, 'the echo of every byte');
      assert.equal(received, sent);
    } finally {
      socket.destroy();
      await proxy.stop();
    }
  });

  it('carries a half-close through and leaves no socket open', async () => {
    // The upstream answers only once the client has finished sending, then closes its side.
    const upstream = await listen(
      (socket) => {
        let request = '';
        socket.on('data', (chunk: Buffer) => (request += chunk.toString()));
        socket.on('end', () => socket.end(`got:${request}`));
      },
      { allowHalfOpen: true },
    );
    const proxy = await listenDelayed([{ host: '127.0.0.1', port: portOf(upstream) }], 2);
    try {
      const socket = net.connect({ host: '127.0.0.1', port: proxy.ports[0]!, allowHalfOpen: true });
      const reply = await new Promise<string>((resolve, reject) => {
        let text = '';
        socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
        socket.on('end', () => resolve(text));
        socket.on('error', reject);
        socket.end('hello');
      });
      assert.equal(reply, 'got:hello');
      await until(() => socket.closed, 'the client socket to close');
      await until(() => proxy.openSockets() === 0, 'the proxy to close both of its sockets');
    } finally {
      await proxy.stop();
      await closed(upstream);
    }
  });

  it('drops the client when the upstream refuses', async () => {
    const gone = await listen(() => {});
    const port = portOf(gone);
    await closed(gone);
    const proxy = await listenDelayed([{ host: '127.0.0.1', port }], 1);
    try {
      const socket = net.connect({ host: '127.0.0.1', port: proxy.ports[0]! });
      socket.on('error', () => {});
      await until(() => socket.closed, 'the client to be dropped');
      await until(() => proxy.openSockets() === 0, 'the proxy to close both of its sockets');
    } finally {
      await proxy.stop();
    }
  });
});
