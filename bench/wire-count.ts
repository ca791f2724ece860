/**
 * What the app process sends to PostgreSQL, counted on the wire for the benchmark (BENCH=1 only; a
 * normal process never loads this file). Installed through postgres.js's documented `socket` option,
 * so the driver is not touched: every write to the socket is scanned, which costs a byte comparison
 * per message (postgres.js's `debug` hook would capture a stack trace per query, which costs more
 * than the guard being measured).
 *
 *   total            statements executed: every Execute and simple Query message written;
 *   begin/commit/    transactions: BEGIN goes as a simple Query, COMMIT and ROLLBACK as (prepared)
 *   rollback         statements, recognised by their text in the Parse that named them;
 *   roundTrips       exchanges the client waits on: every write to the socket that ends with a Sync,
 *                    Flush or simple Query message. A prepared statement costs one; its first use on
 *                    a connection costs two (describe, then execute). Statements sent together
 *                    (postgres.js pipelines what is queued on a connection into one write) share one.
 */
import net from 'node:net';

export interface StatementCount {
  total: number;
  begin: number;
  commit: number;
  rollback: number;
  roundTrips: number;
}

const globalForCount = globalThis as unknown as { __payonceStatements?: StatementCount };

export function statementCount(): StatementCount {
  return (globalForCount.__payonceStatements ??= { total: 0, begin: 0, commit: 0, rollback: 0, roundTrips: 0 });
}

const cString = (chunk: Buffer, start: number): [string, number] => {
  const end = chunk.indexOf(0, start);
  return [chunk.toString('utf8', start, end), end + 1];
};

function classify(text: string): 'begin' | 'commit' | 'rollback' | undefined {
  const word = /^\s*(\w+)/.exec(text)?.[1]?.toLowerCase();
  return word === 'begin' || word === 'commit' || word === 'rollback' ? word : undefined;
}

/** postgres.js `socket` option: a plain TCP (or unix) socket whose writes are counted. */
export function countingSocket(options: { host: string[]; port: number[]; path?: string | false }): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = options.path ? net.connect(options.path) : net.connect(options.port[0]!, options.host[0]!);
    // This connection's statements by name (from Parse), and the one the pending Execute will run.
    const statements = new Map<string, string>();
    let bound: string | undefined;
    socket.once('error', reject);
    socket.once('connect', () => {
      socket.off('error', reject);
      const write = socket.write.bind(socket) as (chunk: unknown, ...rest: unknown[]) => boolean;
      socket.write = ((chunk: unknown, ...rest: unknown[]) => {
        // Frontend messages are a type byte and a length that counts itself (the startup message,
        // which has no type byte, reads as one oversized message and ends the scan).
        if (Buffer.isBuffer(chunk)) {
          const count = statementCount();
          let awaitsAnswer = false;
          for (let i = 0; i + 5 <= chunk.length; i += 1 + chunk.readInt32BE(i + 1)) {
            const type = chunk[i];
            if (i + 1 + chunk.readInt32BE(i + 1) > chunk.length) break;
            if (type === 0x50 /* Parse */) {
              const [name, next] = cString(chunk, i + 5);
              statements.set(name, cString(chunk, next)[0]);
            } else if (type === 0x42 /* Bind */) {
              const [, next] = cString(chunk, i + 5); // portal
              bound = statements.get(cString(chunk, next)[0]);
            } else if (type === 0x45 /* Execute */) {
              count.total++;
              const kind = bound === undefined ? undefined : classify(bound);
              if (kind) count[kind]++;
            } else if (type === 0x51 /* Query */) {
              count.total++;
              const kind = classify(cString(chunk, i + 5)[0]);
              if (kind) count[kind]++;
            }
            if (type === 0x53 /* Sync */ || type === 0x48 /* Flush */ || type === 0x51 /* Query */) awaitsAnswer = true;
          }
          if (awaitsAnswer) count.roundTrips++;
        }
        return write(chunk, ...rest);
      }) as typeof socket.write;
      resolve(socket);
    });
  });
}

/** postgres.js options that count this pool's statements; none over TLS, whose bytes are ciphertext. */
export function countingConnectionOptions(url: string): { socket?: typeof countingSocket } {
  const tls = /[?&]sslmode=(require|verify-ca|verify-full|prefer)/.test(url);
  return tls ? {} : { socket: countingSocket };
}
