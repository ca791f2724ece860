/**
 * The driver behaviour the idempotency store relies on (@payonce/idempotency, src/postgres-pipelining.ts),
 * pinned: if a postgres.js upgrade changes any of it, these fail before a fence silently costs a
 * round trip, runs after the COMMIT, or stops rolling a phase back.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import { applyIdempotencySchema } from '@payonce/idempotency/postgres';
import { startBeforeCommit } from '@payonce/idempotency/postgres';

// Self-contained (postgres.js and the core only), so it travels with the core into another app.
const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is not set');
let sql: postgres.Sql;

/** Exchanges the client waited on: socket writes ending in Sync (S), Flush (H) or a simple Query (Q). */
let roundTrips = 0;
function countingSocket(options: { host: string[]; port: number[]; path?: string | false }): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = options.path ? net.connect(options.path) : net.connect(options.port[0]!, options.host[0]!);
    socket.once('error', reject);
    socket.once('connect', () => {
      const write = socket.write.bind(socket) as (chunk: unknown, ...rest: unknown[]) => boolean;
      socket.write = ((chunk: unknown, ...rest: unknown[]) => {
        if (Buffer.isBuffer(chunk)) {
          let last: number | undefined;
          for (let i = 0; i + 5 <= chunk.length; i += 1 + chunk.readInt32BE(i + 1)) last = chunk[i];
          if (last === 0x53 || last === 0x48 || last === 0x51) roundTrips++;
        }
        return write(chunk, ...rest);
      }) as typeof socket.write;
      resolve(socket);
    });
  });
}
const tag = () => `pipelining-${Math.random().toString(36).slice(2)}`;
const rowsTagged = async (value: string) =>
  (await sql<{ n: number }[]>`select count(*)::int as n from pipelining_probe where tag = ${value}`)[0]!.n;

before(async () => {
  // One connection on the counting socket, so every statement of a test is on the wire we watch.
  sql = postgres(url, { max: 1, onnotice: () => {}, socket: countingSocket } as postgres.Options<Record<string, postgres.PostgresType>>);
  await applyIdempotencySchema(sql); // the fence function, idempotency_assert_owned
  await sql`create table if not exists pipelining_probe (id serial primary key, tag text not null)`;
});
after(async () => {
  await sql?.end({ timeout: 5 });
});

/** One transaction: an awaited INSERT, then a statement started before the COMMIT and not awaited. */
async function phase(value: string, closing: [string, (string | number | null)[]]) {
  let started: Promise<postgres.RowList<postgres.Row[]>> | undefined;
  let insideXact = '';
  await sql.begin(async (tx) => {
    await tx.unsafe('insert into pipelining_probe (tag) values ($1)', [value], { prepare: true });
    const [row] = await tx.unsafe<{ xact: string }[]>('select pg_current_xact_id()::text as xact', [], { prepare: true });
    insideXact = row!.xact;
    started = startBeforeCommit(tx, ...closing);
    started.catch(() => {});
  });
  return { started: started!, insideXact };
}

describe('postgres.js behaviour the idempotency store relies on', () => {
  it('1. a statement started before the COMMIT runs inside the transaction, ahead of the COMMIT', async () => {
    const { started, insideXact } = await phase(tag(), ['select pg_current_xact_id()::text as xact', []]);
    const [closing] = await started;
    assert.equal(closing!.xact, insideXact, 'the closing statement ran in the same transaction');
  });

  it('2. it leaves in one write with the COMMIT: one round trip for both', async () => {
    const closing: [string, (string | number | null)[]] = ['select $1::int as n', [1]];
    await phase(tag(), closing); // every statement prepared on the connection
    const before = roundTrips;
    const { started } = await phase(tag(), closing);
    await started;
    // BEGIN, INSERT, SELECT, then the closing statement and the COMMIT together.
    assert.equal(roundTrips - before, 4);
  });

  it('3. when it fails, the COMMIT rolls the transaction back and its promise carries the SQLSTATE', async () => {
    const value = tag();
    const { started } = await phase(value, ['select idempotency_assert_owned($1::bigint)', [0]]);
    await assert.rejects(started, (error: { code?: string }) => error.code === 'IK001');
    assert.equal(await rowsTagged(value), 0, 'nothing of the transaction was kept');

    const kept = tag();
    const ok = await phase(kept, ['select idempotency_assert_owned($1::bigint)', [1]]);
    await ok.started;
    assert.equal(await rowsTagged(kept), 1, 'with the fence satisfied, the transaction commits');
  });
});
