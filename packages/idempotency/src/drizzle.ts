/**
 * @payonce/idempotency/drizzle: the key table as Drizzle declares it (list `dist/drizzle.js` in
 * drizzle.config.ts `schema`; the fence function is SQL only: ../migrations/*.sql), and the handle an
 * atomic phase writes with when your code uses Drizzle (./prepared-statements.ts).
 */
import { sql } from 'drizzle-orm';
import { check, index, integer, jsonb, pgTable, primaryKey, text, timestamp, uuid } from 'drizzle-orm/pg-core';

export { drizzleTransactionHandle, withPreparedStatements } from './prepared-statements.js';

const timestamptz = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

/** The classic dedupe table, every column kept, plus what a lease and recovery need; keys unique within their scope. */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    /** The record's identity for rows that refer to it (an order's attempt); not indexed, see below. */
    id: uuid().notNull().defaultRandom(),
    /** `customer:{uuid}` or `webhook:{gateway}`: who may see this key's stored answer. */
    scope: text().notNull(),
    /** The client's Idempotency-Key (or the gateway's event id), unique within `scope`. */
    key: text().notNull(),
    requestPath: text().notNull(),
    /** SHA-256 over the path and the canonical JSON of the parsed input. */
    requestHash: text().notNull(),
    responseStatus: integer(),
    responseBody: jsonb(),
    /** When the current owner started (or took over) processing; NULL once released. */
    lockedAt: timestamptz('locked_at'),
    /**
     * Until when the owner may work undisturbed. A request that finds the lease past this point knows
     * the owner died (crash, eviction) and may take the key over; a plain lock never expires.
     */
    leaseExpiresAt: timestamptz('lease_expires_at'),
    /** Fencing token of the current owner: an owner that lost its lease can no longer write. */
    leaseToken: uuid(),
    /**
     * The last atomic phase that committed (`started` = nothing durable yet). A takeover resumes here
     * instead of starting over, so effects already committed are never repeated. Whether the key is
     * answered is `completed_at` alone.
     */
    recoveryPoint: text().notNull().default('started'),
    /** When the answer was stored: set exactly when `responseStatus` is (the CHECK below). */
    completedAt: timestamptz('completed_at'),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    /** Matches Stripe's 24 h window: long enough for any client's retries, short enough to prune. */
    expiresAt: timestamptz('expires_at')
      .notNull()
      .default(sql`now() + interval '24 hours'`),
  },
  // One B-tree, the scoped key: every statement of the guard finds its row by it (and a lookup by id
  // goes through its scope). The cleanup finds expired rows through a BRIN index, a few pages that an
  // insert rarely touches, because expires_at grows with insertion order; a B-tree on it would cost
  // every insert a second index write. No indexed column changes when a key completes, so that
  // UPDATE is HOT.
  (t) => [
    primaryKey({ name: 'idempotency_keys_pkey', columns: [t.scope, t.key] }),
    index('idempotency_keys_expires_at_brin').using('brin', t.expiresAt),
    check('idempotency_keys_completed_with_response', sql`(${t.completedAt} is null) = (${t.responseStatus} is null)`),
  ],
);
