/**
 * The Drizzle behaviour @payonce/idempotency/drizzle (withPreparedStatements) relies on, pinned: Drizzle runs its statements
 * through the client's `unsafe`, so the view that asks for named statements makes each one a single
 * round trip once prepared — at top level, in Drizzle's transactions, and in an idempotency phase's
 * handle. Without the view the same statement costs two (the first case shows the difference).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sql as q } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { countingSocket, statementCount } from '@/bench/wire-count';
import { transactionDatabase } from '@/db/client';
import { withPreparedStatements } from '@payonce/idempotency/drizzle';
import { requireDatabaseUrl } from '@/test/support/stack';

let pool: postgres.Sql;

before(async () => {
  pool = postgres(requireDatabaseUrl(), { max: 1, onnotice: () => {}, socket: countingSocket } as postgres.Options<
    Record<string, postgres.PostgresType>
  >);
  await pool`select 1`;
});
after(async () => {
  await pool?.end({ timeout: 5 });
});

/** Round trips of `fn` the second time it runs (the first prepares its statements). */
async function warmRoundTrips(fn: () => Promise<unknown>): Promise<number> {
  await fn();
  const before = statementCount().roundTrips;
  await fn();
  return statementCount().roundTrips - before;
}

const select = (db: { execute: (query: ReturnType<typeof q>) => Promise<unknown> }) => db.execute(q`select ${42}::int as answer`);

describe('named prepared statements for Drizzle', () => {
  it('1. a parameterised Drizzle statement costs two round trips on the plain client, one through the view', async () => {
    assert.equal(await warmRoundTrips(() => select(drizzle(pool))), 2, 'the plain client describes every time');
    assert.equal(await warmRoundTrips(() => select(drizzle(withPreparedStatements(pool)))), 1);
  });

  it("2. inside Drizzle's transactions and savepoints too", async () => {
    const db = drizzle(withPreparedStatements(pool));
    // BEGIN, the statement, COMMIT.
    assert.equal(await warmRoundTrips(() => db.transaction((tx) => select(tx))), 3);
    // BEGIN, SAVEPOINT, the statement, COMMIT (postgres.js releases nothing: the COMMIT ends both).
    assert.equal(await warmRoundTrips(() => db.transaction((tx) => tx.transaction((inner) => select(inner)))), 4);
  });

  it("3. in an idempotency phase's handle (Drizzle over the phase's transaction)", async () => {
    assert.equal(await warmRoundTrips(() => pool.begin((tx) => select(transactionDatabase(tx)))), 3);
  });
});
