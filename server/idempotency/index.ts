/**
 * The idempotency core: claim, replay, lease, complete, release. Framework-free — it imports nothing
 * from next or @trpc — so it can be lifted into any checkout. Adapters: server/trpc/idempotency.ts
 * (procedures) and server/checkout/notifications.ts (gateway webhooks).
 */
export * from './errors';
export * from './execute';
export { canonicalJson, requestFingerprint } from './fingerprint';
export { MAX_KEY_LENGTH, parseIdempotencyKey } from './key';
export { createPostgresIdempotencyStore } from './postgres-store';
export type * from './store';
