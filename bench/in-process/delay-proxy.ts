/**
 * The "across zones" network condition of the in-process set: a user-space TCP proxy that holds every
 * chunk for a fixed one-way delay in each direction, in front of PostgreSQL and redis-server alike
 * (the kernel here has no netem, so the delay cannot be put on the loopback interface).
 *
 * Every chunk that arrives waits in ONE first-in-first-out line with its due time (arrival + delay).
 * The delay is the same for all, so arrival order is due order: one timer serves every connection, and
 * the bytes of a connection leave in the order they came, never reordered by separate timers. Sockets
 * run with noDelay, so Nagle does not bunch what the delay line releases one chunk at a time. A FIN is
 * delayed like data (half-close travels through), an error on either side tears both down.
 *
 * Timers fire on libuv's millisecond clock, so a chunk leaves between `delay` and about `delay` + 1 ms
 * after it came: the delay is a minimum, and the bench measures what the proxy really adds.
 * Connection setup is not delayed: the bench's pools connect once and keep their connections.
 *
 * startDelayProxy() runs the proxy in a child process (this file, forked with tsx): its CPU then
 * stays out of process.cpuUsage(), the bench's Node CPU per call, and is read apart from /proc, while
 * the machine's cores are shared with it by every contender alike. listenDelayed() runs it in the
 * calling process (the self-test uses both).
 */
import { fork } from 'node:child_process';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { stopChild } from '@/scripts/processes';

/** One way: 1 ms each way adds about 2 ms to every round trip, a cross-zone hop within one region. */
export const DEFAULT_ZONE_DELAY_MS = 1;

export interface Upstream {
  host: string;
  port: number;
}

export interface DelayProxy {
  /** A port on 127.0.0.1 per upstream, in the order given. */
  ports: number[];
  delayMs: number;
  stop(): Promise<void>;
}

export interface LocalDelayProxy extends DelayProxy {
  /** Client and upstream sockets not yet closed: 0 once every proxied connection has ended. */
  openSockets(): number;
}

export interface ChildDelayProxy extends DelayProxy {
  /** The child process, whose CPU the bench reads from /proc. */
  pid: number;
}

/** Where one connection's bytes go one way, and whether the destination asked us to wait. */
interface Direction {
  from: net.Socket;
  to: net.Socket;
  waitingForDrain: boolean;
}

/** A chunk, or the FIN (null), waiting in the line. */
interface Held {
  direction: Direction;
  chunk: Buffer | null;
  due: number;
}

/** The one first-in-first-out line every chunk of every connection waits in. */
class DelayLine {
  private readonly held: Held[] = [];
  private next = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly delayMs: number) {}

  hold(direction: Direction, chunk: Buffer | null): void {
    const now = performance.now();
    this.held.push({ direction, chunk, due: now + this.delayMs });
    // Released here too, not only by the timer: data events wake the loop more often than it would.
    this.release(now);
    this.schedule(now);
  }

  cancel(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.held.length = 0;
    this.next = 0;
  }

  private readonly onTimer = () => {
    this.timer = undefined;
    const now = performance.now();
    this.release(now);
    this.schedule(now);
  };

  private schedule(now: number): void {
    if (this.timer || this.next === this.held.length) return;
    // Timers have a 1 ms grain and may fire a little early: release() checks the due time again.
    this.timer = setTimeout(this.onTimer, Math.max(1, Math.ceil(this.held[this.next]!.due - now)));
  }

  private release(now: number): void {
    if (this.next === this.held.length || this.held[this.next]!.due > now) return;
    // Corked, the chunks one destination gets in this pass leave in one write, still in order.
    const corked = new Set<net.Socket>();
    while (this.next < this.held.length && this.held[this.next]!.due <= now) {
      const { direction, chunk } = this.held[this.next++]!;
      const { to } = direction;
      if (to.destroyed) continue;
      if (!corked.has(to)) {
        to.cork();
        corked.add(to);
      }
      if (chunk === null) to.end();
      else if (!to.write(chunk)) waitForDrain(direction);
    }
    for (const socket of corked) socket.uncork();
    // Compact when empty, or now and then, rather than shift() per chunk.
    if (this.next === this.held.length) {
      this.held.length = 0;
      this.next = 0;
    } else if (this.next > 1024 && this.next * 2 > this.held.length) {
      this.held.splice(0, this.next);
      this.next = 0;
    }
  }
}

function waitForDrain(direction: Direction): void {
  if (direction.waitingForDrain) return;
  direction.waitingForDrain = true;
  direction.from.pause();
  direction.to.once('drain', () => {
    direction.waitingForDrain = false;
    direction.from.resume();
  });
}

function relay(line: DelayLine, from: net.Socket, to: net.Socket): void {
  const direction: Direction = { from, to, waitingForDrain: false };
  from.on('data', (chunk: Buffer) => line.hold(direction, chunk));
  from.on('end', () => line.hold(direction, null));
}

function proxyConnection(line: DelayLine, client: net.Socket, upstream: Upstream, live: Set<net.Socket>): void {
  const server = net.connect({ host: upstream.host, port: upstream.port, allowHalfOpen: true });
  for (const socket of [client, server]) {
    socket.setNoDelay(true);
    live.add(socket);
    socket.once('close', () => live.delete(socket));
    // A reset or a refused upstream ends the pair: the other side sees its connection dropped.
    socket.on('error', () => {
      client.destroy();
      server.destroy();
    });
  }
  relay(line, client, server);
  relay(line, server, client);
}

/** The proxy in this process: one listening port per upstream, all behind one delay line. */
export async function listenDelayed(upstreams: Upstream[], delayMs: number = DEFAULT_ZONE_DELAY_MS): Promise<LocalDelayProxy> {
  if (!(delayMs >= 0)) throw new Error(`delay-proxy: the delay must be a number of ms ≥ 0, not ${delayMs}`);
  const line = new DelayLine(delayMs);
  const live = new Set<net.Socket>();
  const servers = upstreams.map((upstream) =>
    net.createServer({ allowHalfOpen: true, noDelay: true }, (client) => proxyConnection(line, client, upstream, live)),
  );
  const ports = await Promise.all(
    servers.map(
      (server) =>
        new Promise<number>((resolve, reject) => {
          server.once('error', reject);
          server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port));
        }),
    ),
  );
  return {
    ports,
    delayMs,
    openSockets: () => live.size,
    async stop() {
      const closed = servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve())));
      for (const socket of live) socket.destroy();
      line.cancel();
      await Promise.all(closed);
    },
  };
}

const THIS_FILE = fileURLToPath(import.meta.url);

/** The proxy in a child process (this file run by tsx), killed with the bench should it die. */
export async function startDelayProxy(upstreams: Upstream[], delayMs: number = DEFAULT_ZONE_DELAY_MS): Promise<ChildDelayProxy> {
  const child = fork(THIS_FILE, [JSON.stringify({ upstreams, delayMs })], {
    execArgv: ['--import', import.meta.resolve('tsx')],
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const onExit = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.once('exit', onExit);
  const stop = async () => {
    await stopChild(child);
    process.removeListener('exit', onExit);
  };
  try {
    const ports = await new Promise<number[]>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('delay-proxy: the child did not listen within 15 s')), 15_000);
      child.once('message', (message) => {
        clearTimeout(timer);
        resolve((message as { ports: number[] }).ports);
      });
      child.once('error', reject);
      child.once('exit', (code, signal) => reject(new Error(`delay-proxy: the child exited (${signal ?? `code ${code}`}) while starting`)));
    });
    return { ports, delayMs, pid: child.pid!, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

async function serveAsChild(): Promise<void> {
  const { upstreams, delayMs } = JSON.parse(process.argv[2] ?? '{}') as { upstreams: Upstream[]; delayMs: number };
  const proxy = await listenDelayed(upstreams, delayMs);
  const stop = () => void proxy.stop().finally(() => process.exit(0));
  process.once('SIGTERM', stop);
  // The parent gone (killed without its exit hook running): nobody will stop us otherwise.
  process.once('disconnect', stop);
  process.send!({ ports: proxy.ports });
}

/**
 * Round trips on one connection: `request` sent, then the time until the reply ends with `replyEnd`;
 * `times` of them, sorted (ms). A Redis PING, an echo: whatever answers each request once.
 */
export async function roundTripsMs(
  port: number,
  options: { request: string; replyEnd: string; times: number; host?: string },
): Promise<number[]> {
  const socket = net.connect({ host: options.host ?? '127.0.0.1', port });
  socket.setNoDelay(true);
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    const times: number[] = [];
    for (let i = 0; i < options.times; i++) {
      const started = performance.now();
      await new Promise<void>((resolve, reject) => {
        let reply = '';
        const onData = (chunk: Buffer) => {
          reply += chunk.toString();
          if (!reply.endsWith(options.replyEnd)) return;
          socket.off('data', onData);
          socket.off('error', reject);
          resolve();
        };
        socket.on('data', onData);
        socket.once('error', reject);
        socket.write(options.request);
      });
      times.push(performance.now() - started);
    }
    return times.sort((a, b) => a - b);
  } finally {
    socket.destroy();
  }
}

if (process.argv[1] === THIS_FILE && process.send) {
  serveAsChild().catch((error: unknown) => {
    console.error(`delay-proxy: ${(error as Error).stack ?? String(error)}`);
    process.exit(1);
  });
}
