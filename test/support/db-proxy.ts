/**
 * A TCP proxy between the app's pool and PostgreSQL that can fail the way a network or a failover
 * does, for tests of what the app does then:
 *
 * - `refuse()`: every open connection is cut and the port stops listening, so new connections are
 *   refused (the server is gone); `accept()` listens again on the same port.
 * - `loseNextCommit('answer', marker)`: the next COMMIT on a connection that sent `marker` (e.g. an
 *   idempotency key, a parameter of a statement of the transaction) after the call reaches the
 *   server and commits, and its answer never comes back — the connection is cut instead.
 *   `loseNextCommit('commit', marker)`: the connection is cut before that COMMIT is passed on, so
 *   nothing commits. To the app both look the same: a COMMIT in doubt.
 *
 * COMMIT is recognised in the client's messages (CommitSpotter), however postgres.js sends it at the
 * end of `sql.begin`.
 */
import net from 'node:net';

export interface DatabaseProxy {
  /** DATABASE_URL with its host and port replaced by the proxy's. */
  url: string;
  refuse(): Promise<void>;
  accept(): Promise<void>;
  loseNextCommit(what: 'answer' | 'commit', marker: string): Promise<void>;
  /** Forgets a loseNextCommit that has not happened. */
  disarm(): void;
  /** How many COMMITs were lost so far. */
  readonly commitsLost: number;
  close(): Promise<void>;
}

/**
 * Reads the client's side of the protocol message by message, and says whether a chunk carries a
 * COMMIT: a simple query `commit`, or an extended-protocol Bind of a statement whose text is `commit`
 * (postgres.js prepares it once per connection, then sends only its name).
 */
class CommitSpotter {
  #buffer = Buffer.alloc(0);
  #startup = true;
  #commitStatements = new Set<string>();

  carriesCommit(chunk: Buffer): boolean {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    let commit = false;
    for (;;) {
      const header = this.#startup ? 0 : 1;
      if (this.#buffer.length < header + 4) return commit;
      const length = this.#buffer.readInt32BE(header);
      if (this.#buffer.length < header + length) return commit;
      const message = this.#buffer.subarray(0, header + length);
      this.#buffer = this.#buffer.subarray(header + length);
      if (this.#startup) {
        // An SSLRequest (80877103) is followed by the real startup message.
        this.#startup = message.length >= 8 && message.readInt32BE(4) === 80877103;
        continue;
      }
      commit = this.#read(String.fromCharCode(message[0]!), message.subarray(5)) || commit;
    }
  }

  #read(type: string, body: Buffer): boolean {
    const strings = () => body.toString('latin1').split('\0');
    if (type === 'Q') return isCommit(strings()[0]!);
    if (type === 'P') {
      const [name, text] = strings();
      if (isCommit(text!)) this.#commitStatements.add(name!);
      else this.#commitStatements.delete(name!);
      return false;
    }
    if (type === 'B') return this.#commitStatements.has(strings()[1]!);
    return false;
  }
}

const isCommit = (text: string) => /^\s*commit\s*;?\s*$/i.test(text);

export async function startDatabaseProxy(databaseUrl: string): Promise<DatabaseProxy> {
  const upstream = new URL(databaseUrl);
  const upstreamPort = Number(upstream.port || 5432);
  const upstreamHost = upstream.hostname || '127.0.0.1';
  let armed: { what: 'answer' | 'commit'; marker: string; done: () => void; generation: number } | undefined;
  let generation = 0;
  let lost = 0;
  const open = new Set<net.Socket>();

  const server = net.createServer((client) => {
    const backend = net.connect(upstreamPort, upstreamHost);
    open.add(client).add(backend);
    const cut = () => {
      client.destroy();
      backend.destroy();
    };
    let swallowing = false;
    // The arming in which this connection sent the marker: its next COMMIT in that arming is the one.
    let marked = -1;
    const spotter = new CommitSpotter();
    client.on('data', (chunk) => {
      const commit = spotter.carriesCommit(chunk);
      if (armed && chunk.toString('latin1').includes(armed.marker)) marked = armed.generation;
      if (!armed || marked !== armed.generation || !commit) return void backend.write(chunk);
      const { what, done } = armed;
      armed = undefined;
      lost++;
      if (what === 'commit') {
        cut();
        done();
        return;
      }
      swallowing = true;
      backend.write(chunk);
      // The server's answer (CommandComplete … ReadyForQuery) is dropped, and the line cut after it.
      backend.once('data', () => {
        cut();
        done();
      });
    });
    backend.on('data', (chunk) => {
      if (!swallowing) client.write(chunk);
    });
    for (const socket of [client, backend]) {
      socket.on('error', cut);
      socket.on('close', () => {
        open.delete(socket);
        cut();
      });
    }
  });
  const listen = (on: number) => new Promise<void>((resolve) => server.listen(on, '127.0.0.1', resolve));
  const stopListening = () => new Promise<void>((resolve) => server.close(() => resolve()));
  await listen(0);
  const port = (server.address() as net.AddressInfo).port;
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);

  return {
    url: url.toString(),
    async refuse() {
      const stopped = stopListening();
      for (const socket of open) socket.destroy();
      await stopped;
    },
    accept: () => listen(port),
    loseNextCommit(what, marker) {
      return new Promise<void>((resolve) => (armed = { what, marker, done: resolve, generation: ++generation }));
    },
    disarm() {
      armed = undefined;
    },
    get commitsLost() {
      return lost;
    },
    async close() {
      for (const socket of open) socket.destroy();
      if (server.listening) await stopListening();
    },
  };
}
