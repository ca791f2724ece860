-- The key table with one B-tree. The scoped key becomes the primary key, built from the unique index
-- it already has (no rebuild, no second copy); the uuid id stays as a column, unindexed: rows that
-- refer to a record look it up through its scope. The cleanup's B-tree on expires_at becomes a BRIN
-- index: expires_at grows with insertion order, so a few summary pages serve the cleanup and an
-- insert rarely touches them.
ALTER TABLE "idempotency_keys" DROP CONSTRAINT "idempotency_keys_pkey";--> statement-breakpoint
ALTER TABLE "idempotency_keys" ADD CONSTRAINT "idempotency_keys_pkey" PRIMARY KEY USING INDEX "idempotency_keys_scope_key_unique";--> statement-breakpoint
DROP INDEX "idempotency_keys_expires_at_idx";--> statement-breakpoint
CREATE INDEX "idempotency_keys_expires_at_brin" ON "idempotency_keys" USING brin ("expires_at");
