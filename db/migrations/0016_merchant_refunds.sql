-- Merchant refunds: a paid order's payment may be refunded in parts by operators (reason merchant, who
-- asked and why); an excess charge still has exactly one automatic refund.
ALTER TABLE "refunds" DROP CONSTRAINT "refunds_paymentId_unique";--> statement-breakpoint
ALTER TABLE "refunds" ADD COLUMN "requested_by" text;--> statement-breakpoint
ALTER TABLE "refunds" ADD COLUMN "note" text;--> statement-breakpoint
CREATE UNIQUE INDEX "refunds_one_automatic_per_payment" ON "refunds" USING btree ("payment_id") WHERE "refunds"."reason" <> 'merchant';--> statement-breakpoint
CREATE INDEX "refunds_payment_idx" ON "refunds" USING btree ("payment_id");