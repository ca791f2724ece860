/**
 * @payonce/idempotency/postgres: the store on a postgres.js pool, and the table it needs as SQL.
 *
 *   const store = createPostgresIdempotencyStore(sql, { transactionHandle: (tx) => drizzle(tx) });
 *   await applyIdempotencySchema(sql); // or run migrations/*.sql with your own migration tool
 */
export { createPostgresIdempotencyStore, type PostgresStoreOptions } from './postgres-store.js';
export { applyIdempotencySchema, IDEMPOTENCY_SCHEMA_SQL } from './schema-sql.js';
export { startBeforeCommit } from './postgres-pipelining.js';
