/**
 * @payonce/idempotency/pg: the store on a node-postgres (`pg`) pool, sending the same SQL to the same
 * table as @payonce/idempotency/postgres. Create the table with migrations/*.sql and your own migration
 * tool, or run each of IDEMPOTENCY_SCHEMA_SQL (from @payonce/idempotency/postgres) with `pool.query`.
 *
 *   const store = createPgIdempotencyStore(pool, { transactionHandle: (client) => drizzle(client) });
 */
export { createPgIdempotencyStore, type PgStoreOptions } from './pg-store.js';
