/**
 * The core's table and fence function as plain SQL, for apps that do not generate migrations from
 * ./drizzle.ts: `applyIdempotencySchema(sql)` at start-up, or run ../migrations/*.sql. Every statement
 * is idempotent. The package's schema test keeps the three equal.
 */
import type postgres from 'postgres';

export const IDEMPOTENCY_SCHEMA_SQL = [
  `CREATE TABLE IF NOT EXISTS "idempotency_keys" (
    "id" uuid DEFAULT gen_random_uuid() NOT NULL,
    "scope" text NOT NULL,
    "key" text NOT NULL,
    "request_path" text NOT NULL,
    "request_hash" text NOT NULL,
    "response_status" integer,
    "response_body" jsonb,
    "locked_at" timestamp with time zone,
    "lease_expires_at" timestamp with time zone,
    "lease_token" uuid,
    "recovery_point" text DEFAULT 'started' NOT NULL,
    "completed_at" timestamp with time zone,
    "created_at" timestamp with time zone DEFAULT now() NOT NULL,
    "expires_at" timestamp with time zone DEFAULT now() + interval '24 hours' NOT NULL,
    CONSTRAINT "idempotency_keys_pkey" PRIMARY KEY ("scope","key"),
    CONSTRAINT "idempotency_keys_completed_with_response" CHECK (("completed_at" IS NULL) = ("response_status" IS NULL))
  )`,
  // A table made by an earlier version (a uuid primary key, a unique index on the scoped key and a
  // B-tree on expires_at) is moved to one B-tree, as db/migrations/0010 does.
  `DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = 'idempotency_keys_scope_key_unique') THEN
      ALTER TABLE "idempotency_keys" DROP CONSTRAINT "idempotency_keys_pkey";
      ALTER TABLE "idempotency_keys" ADD CONSTRAINT "idempotency_keys_pkey" PRIMARY KEY USING INDEX "idempotency_keys_scope_key_unique";
      DROP INDEX IF EXISTS "idempotency_keys_expires_at_idx";
    END IF;
  END $$`,
  `CREATE INDEX IF NOT EXISTS "idempotency_keys_expires_at_brin" ON "idempotency_keys" USING brin ("expires_at")`,
  // A key is answered exactly when it holds its answer: completed_at and response_status are set and
  // cleared together (a table made by an earlier version gains the constraint; its rows already hold it).
  `DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'idempotency_keys_completed_with_response') THEN
      ALTER TABLE "idempotency_keys" ADD CONSTRAINT "idempotency_keys_completed_with_response"
        CHECK (("completed_at" IS NULL) = ("response_status" IS NULL));
    END IF;
  END $$`,
  // The fence of an atomic phase: its closing UPDATE passes the rows it matched (0 once the key was
  // taken over). Raising, not returning no row, lets it travel with the COMMIT: the error aborts the
  // transaction, so the COMMIT rolls back everything the phase did.
  `CREATE OR REPLACE FUNCTION idempotency_assert_owned(matched bigint) RETURNS void
  LANGUAGE plpgsql AS $$
  BEGIN
    IF matched <> 1 THEN
      RAISE EXCEPTION 'idempotency key lease lost: another request took this key over'
        USING ERRCODE = 'IK001';
    END IF;
  END
  $$`,
];

/** Any fixed 64-bit number: every starter of every app instance waits on the same one. */
const SCHEMA_LOCK_ID = '7240100110099002';

/**
 * Creates the table, its indexes and the fence function if they are missing. Two instances starting
 * together would race on CREATE … IF NOT EXISTS (it is not atomic against a concurrent creator), so
 * the statements run under a transaction-scoped advisory lock.
 */
export async function applyIdempotencySchema(sql: postgres.Sql): Promise<void> {
  await sql.begin(async (tx) => {
    await tx.unsafe(`select pg_advisory_xact_lock(${SCHEMA_LOCK_ID})`);
    for (const statement of IDEMPOTENCY_SCHEMA_SQL) await tx.unsafe(statement);
  });
}
