/**
 * LIBRARY BEHAVIOUR RELIED ON — postgres.js (pinned in package.json). The one place the core leans on
 * how the driver schedules statements rather than on what its API promises; everything else in the
 * core uses documented calls only. test/integration/postgres-pipelining.test.ts fails if an upgrade
 * changes any of the three points below, so read it before you bump the driver.
 *
 *   1. Inside `sql.begin(fn)`, every statement runs on the transaction's one connection, written in
 *      the order it was started; the COMMIT that `begin` sends once `fn` has settled comes after
 *      every statement `fn` started.
 *   2. `query.execute()` (documented: "execute the query in the same tick") starts a statement
 *      without awaiting it, so it is on the connection before the COMMIT; postgres.js pipelines what
 *      is queued, so statement and COMMIT leave in one write and cost one round trip together.
 *   3. When that statement fails, PostgreSQL aborts the transaction and answers the COMMIT with a
 *      rollback; the statement's own promise rejects with the server's error (its SQLSTATE intact).
 *
 * That is what lets a phase's fenced closing write cost no round trip of its own: the lease check
 * travels with the COMMIT, and a lost lease turns the COMMIT into a rollback.
 */
import type postgres from 'postgres';

/**
 * Starts `text` on the transaction's connection now, so it goes out ahead of (and with) the COMMIT.
 * Returns its result; the caller must await it only after `sql.begin` has settled (awaiting it inside
 * the transaction would cost the round trip this exists to save).
 */
export function startBeforeCommit(
  tx: postgres.TransactionSql,
  text: string,
  parameters: (string | number | null)[],
): Promise<postgres.RowList<postgres.Row[]>> {
  // prepare: a named statement, parsed once per connection, so later uses are a single Bind/Execute.
  const query = tx.unsafe(text, parameters, { prepare: true });
  query.execute();
  return query;
}
