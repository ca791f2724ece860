/**
 * The idempotency core: claim, replay, lease, complete, release. Framework-free — it imports nothing
 * from next, @trpc, react or the app — so it can be lifted into any checkout (docs/adopt.md).
 *
 *   engine        ./execute.ts      executeIdempotent (one-phase or phases), OwnedKey.atomicPhase, respond
 *                 ./decide.ts       the guard's branches as one pure function; ./replay-cache.ts
 *   storage       ./store.ts        the IdempotencyStore interface; ./postgres-store.ts on postgres.js,
 *                                   ./memory-store.ts in one process (tests, demos)
 *   table         ./schema.ts       Drizzle declaration (imported by drizzle.config.ts only, so the core
 *                                   needs no drizzle-orm); ./schema-sql.ts the same as SQL + the fence
 *   adapters      ./fetch.ts        withIdempotency(handler) for Route Handlers and fetch servers;
 *                 server/trpc/idempotency.ts, the tRPC adapter (outside: it imports @trpc)
 */
export * from './errors';
export * from './execute';
export { withIdempotency, type FetchIdempotencyConfig, type GuardedRequestContext } from './fetch';
export { canonicalJson, requestFingerprint } from './fingerprint';
export { MAX_KEY_LENGTH, parseIdempotencyKey } from './key';
export { createMemoryIdempotencyStore, MemoryTransaction, type MemoryStoreOptions } from './memory-store';
export { createPostgresIdempotencyStore, type PostgresStoreOptions } from './postgres-store';
export { ReplayCache } from './replay-cache';
export { decide, type Decision } from './decide';
export { applyIdempotencySchema, IDEMPOTENCY_SCHEMA_SQL } from './schema-sql';
export type * from './store';
