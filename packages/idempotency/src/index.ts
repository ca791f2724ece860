/**
 * @payonce/idempotency: claim, replay, lease, complete, release. Framework-free — this entry imports
 * no database driver, web framework or tRPC — so it runs wherever a checkout does.
 *
 *   engine        ./execute.ts      executeIdempotent (one-phase or phases), OwnedKey.atomicPhase, respond
 *                 ./decide.ts       the guard's branches as one pure function; ./replay-cache.ts
 *   storage       ./store.ts        the IdempotencyStore interface; ./memory-store.ts in one process (tests, demos)
 *
 * The rest are subpath exports, each with the one dependency it needs:
 *   @payonce/idempotency/postgres   the store on postgres.js, and the table as SQL (./schema-sql.ts)
 *   @payonce/idempotency/pg         the store on node-postgres (pg)
 *   @payonce/idempotency/drizzle    the table as Drizzle declares it, for drizzle-kit
 *   @payonce/idempotency/fetch      withIdempotency(handler) for Route Handlers and fetch servers
 *   @payonce/idempotency/trpc       the tRPC middleware: idempotentOnePhase, idempotentPhases
 *   @payonce/idempotency/migrations/0001_idempotency_keys.sql   the table for a DBA or Flyway
 */
export * from './errors.js';
export * from './execute.js';
export { canonicalJson, requestFingerprint } from './fingerprint.js';
export { MAX_KEY_LENGTH, parseIdempotencyKey } from './key.js';
export { createMemoryIdempotencyStore, MemoryTransaction, type MemoryStoreOptions } from './memory-store.js';
export { ReplayCache } from './replay-cache.js';
export { decide, type Decision } from './decide.js';
export type * from './store.js';
