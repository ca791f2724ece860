ALTER TABLE "order_trades" ADD COLUMN "payment_reversed_at" timestamp with time zone;--> statement-breakpoint
-- A close that reversed a payment was marked only by its error text, and a later close's answer
-- overwrote it: keep it for good.
UPDATE "order_trades" SET "payment_reversed_at" = "updated_at" WHERE "last_close_error" LIKE 'CANCEL_REFUNDED%';
