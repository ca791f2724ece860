/**
 * A socket for postgres.js behind a transaction pooler that cannot take its pipelined descriptions
 * (PgBouncer before 1.21, DATABASE_POOLING=transaction).
 *
 * Without named statements, postgres.js describes a statement with parameters before it binds it:
 * Parse, Describe, Flush — no Sync. When its pool is exhausted it also sends a query on a busy
 * connection before the previous one's answer. PgBouncer hands the server connection back to its
 * pool at the ReadyForQuery that ends the previous query outside a transaction, so a description
 * sent behind it is answered to nobody ("got packet from server when not linked" in its log) and that
 * query never completes (test/integration/pgbouncer.test.ts reproduces it).
 *
 * This socket holds such a write — one that ends in Flush and carries no Sync — until every Sync
 * and simple Query sent before it has had its ReadyForQuery; everything written after a held write
 * waits behind it, so the order on the wire never changes. Everything else goes out at once:
 * pipelined statements that end in Sync (PgBouncer counts those), and everything inside a
 * transaction that has not reached such a description.
 */
import net from 'node:net';

const SYNC = 0x53;
const QUERY = 0x51;
const FLUSH = 0x48;
const READY_FOR_QUERY = 0x5a;

type SocketOptions = { host: string[]; port: number[]; path?: string | false };
/** postgres.js's `socket` option: called per connection with its options, returns a connected socket. */
export type SocketFactory = (options: SocketOptions) => Promise<net.Socket>;

/** The pooler-safe socket: over `inner`'s sockets when given (e.g. a counting socket), else plain TCP. */
export function poolerSafeSocket(inner?: SocketFactory): SocketFactory {
  return async (options) => {
    const socket = inner ? await inner(options) : await connect(options);
    gate(socket);
    return socket;
  };
}

function connect(options: SocketOptions): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = options.path ? net.connect(options.path) : net.connect(options.port[0]!, options.host[0]!);
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
  });
}

function gate(socket: net.Socket): void {
  const write = socket.write.bind(socket) as (chunk: Buffer, ...rest: unknown[]) => boolean;
  let unanswered = 0; // Syncs and Queries sent whose ReadyForQuery has not come back
  const held: [Buffer, unknown[]][] = [];
  let startup = true;

  /**
   * Sends what may go now: up to the write's last Sync at once; a description at its end only once
   * nothing is unanswered. Whatever must wait goes to the front of `held`; false if something did.
   */
  const send = (chunk: Buffer, rest: unknown[]): boolean => {
    const { syncs, describeFrom } = answersAwaited(chunk);
    const head = describeFrom === undefined ? chunk : chunk.subarray(0, describeFrom);
    if (head.length > 0) {
      unanswered += syncs;
      write(head, ...(describeFrom === undefined ? rest : []));
    }
    if (describeFrom === undefined) return true;
    const tail = chunk.subarray(describeFrom);
    if (unanswered > 0) {
      held.unshift([tail, rest]);
      return false;
    }
    write(tail, ...rest);
    return true;
  };

  socket.write = ((chunk: unknown, ...rest: unknown[]) => {
    // The startup message (no type byte) and the authentication exchange are never held.
    if (!Buffer.isBuffer(chunk) || startup) return write(chunk as Buffer, ...rest);
    if (held.length > 0) held.push([chunk, rest]);
    else send(chunk, rest);
    return true;
  }) as typeof socket.write;

  const reader = new MessageReader((type) => {
    if (type !== READY_FOR_QUERY) return;
    // The first ReadyForQuery ends the start-up: from here on every write is a typed message.
    if (startup) startup = false;
    else unanswered = Math.max(0, unanswered - 1);
    while (held.length > 0 && unanswered === 0) {
      const [chunk, rest] = held.shift()!;
      if (!send(chunk, rest)) break;
    }
  });
  socket.prependListener('data', (data: Buffer) => reader.read(data));
}

/**
 * The Syncs and Queries in a write, and where its trailing description starts: the messages after
 * the last Sync or Query, when they end in a Flush (Parse, Describe, Flush).
 */
function answersAwaited(chunk: Buffer): { syncs: number; describeFrom: number | undefined } {
  let syncs = 0;
  let afterLastSync = 0;
  let last = -1;
  for (let i = 0; i + 5 <= chunk.length; i += 1 + chunk.readInt32BE(i + 1)) {
    const type = chunk[i]!;
    if (type === SYNC || type === QUERY) {
      syncs++;
      afterLastSync = i + 1 + chunk.readInt32BE(i + 1);
    }
    last = type;
  }
  const describes = last === FLUSH && afterLastSync < chunk.length;
  return { syncs, describeFrom: describes ? afterLastSync : undefined };
}

/** Splits the server's byte stream into messages (a type byte and a length that counts itself). */
class MessageReader {
  #pending: Buffer = Buffer.alloc(0);

  constructor(private readonly onMessage: (type: number) => void) {}

  read(data: Buffer): void {
    this.#pending = this.#pending.length === 0 ? data : Buffer.concat([this.#pending, data]);
    let offset = 0;
    while (this.#pending.length - offset >= 5) {
      const length = this.#pending.readInt32BE(offset + 1);
      if (this.#pending.length - offset < 1 + length) break;
      this.onMessage(this.#pending[offset]!);
      offset += 1 + length;
    }
    this.#pending = this.#pending.subarray(offset);
  }
}
