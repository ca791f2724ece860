-- @payonce/idempotency: the key table, its cleanup index and the lease fence.
-- Plain SQL for psql, Flyway or a DBA. Every statement is idempotent (safe to run twice), and the
-- file moves a table made by an earlier version to this one. The same statements as
-- applyIdempotencySchema() from @payonce/idempotency/postgres.

CREATE TABLE IF NOT EXISTS "idempotency_keys" (
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
  );

DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = 'idempotency_keys_scope_key_unique') THEN
      ALTER TABLE "idempotency_keys" DROP CONSTRAINT "idempotency_keys_pkey";
      ALTER TABLE "idempotency_keys" ADD CONSTRAINT "idempotency_keys_pkey" PRIMARY KEY USING INDEX "idempotency_keys_scope_key_unique";
      DROP INDEX IF EXISTS "idempotency_keys_expires_at_idx";
    END IF;
  END $$;

CREATE INDEX IF NOT EXISTS "idempotency_keys_expires_at_brin" ON "idempotency_keys" USING brin ("expires_at");

DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'idempotency_keys_completed_with_response') THEN
      ALTER TABLE "idempotency_keys" ADD CONSTRAINT "idempotency_keys_completed_with_response"
        CHECK (("completed_at" IS NULL) = ("response_status" IS NULL));
    END IF;
  END $$;

CREATE OR REPLACE FUNCTION idempotency_assert_owned(matched bigint) RETURNS void
  LANGUAGE plpgsql AS $$
  BEGIN
    IF matched <> 1 THEN
      RAISE EXCEPTION 'idempotency key lease lost: another request took this key over'
        USING ERRCODE = 'IK001';
    END IF;
  END
  $$;
