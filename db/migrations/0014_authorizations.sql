-- Authorise, then capture (Stripe's capture_method manual): an order can be `authorized` (the money
-- held) and `voided` (the hold released, stock back); a payment `authorized` then `succeeded` or
-- `voided`; one decision per authorisation in authorization_actions. The two unique indexes are
-- rebuilt to count an authorisation as the order's payment; the migration runs in one transaction.
CREATE TABLE "authorization_actions" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"order_id" uuid NOT NULL,
	"payment_id" uuid NOT NULL,
	"gateway" text NOT NULL,
	"out_trade_no" text NOT NULL,
	"gateway_trade_no" text NOT NULL,
	"action" text NOT NULL,
	"amount_minor" integer,
	"currency" text NOT NULL,
	"capture_id" text NOT NULL,
	"reason" text NOT NULL,
	"decided_by" text NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"captured_minor" integer,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"lease_until" timestamp with time zone,
	"last_error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"settled_at" timestamp with time zone,
	CONSTRAINT "authorization_actions_paymentId_unique" UNIQUE("payment_id"),
	CONSTRAINT "authorization_actions_captureId_unique" UNIQUE("capture_id"),
	CONSTRAINT "authorization_actions_capture_amount" CHECK (("authorization_actions"."action" = 'capture') = ("authorization_actions"."amount_minor" is not null and "authorization_actions"."amount_minor" > 0))
);
--> statement-breakpoint
ALTER TABLE "orders" DROP CONSTRAINT "orders_status_known";--> statement-breakpoint
DROP INDEX "payments_one_success_per_order";--> statement-breakpoint
DROP INDEX "payments_gateway_trade_unique";--> statement-breakpoint
ALTER TABLE "orders" ADD COLUMN "authorized_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "payments" ADD COLUMN "authorized_minor" integer;--> statement-breakpoint
ALTER TABLE "authorization_actions" ADD CONSTRAINT "authorization_actions_order_id_orders_id_fk" FOREIGN KEY ("order_id") REFERENCES "public"."orders"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "authorization_actions" ADD CONSTRAINT "authorization_actions_payment_id_payments_id_fk" FOREIGN KEY ("payment_id") REFERENCES "public"."payments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "authorization_actions_due_idx" ON "authorization_actions" USING btree ("next_attempt_at") WHERE "authorization_actions"."status" in ('pending', 'sent');--> statement-breakpoint
CREATE INDEX "authorization_actions_order_idx" ON "authorization_actions" USING btree ("order_id");--> statement-breakpoint
CREATE INDEX "orders_authorized_idx" ON "orders" USING btree ("authorized_at") WHERE "orders"."status" = 'authorized';--> statement-breakpoint
CREATE UNIQUE INDEX "payments_one_success_per_order" ON "payments" USING btree ("order_id") WHERE "payments"."status" in ('succeeded', 'authorized') and "payments"."role" = 'payment';--> statement-breakpoint
CREATE UNIQUE INDEX "payments_gateway_trade_unique" ON "payments" USING btree ("gateway","gateway_trade_no") WHERE "payments"."gateway_trade_no" is not null and "payments"."status" in ('succeeded', 'authorized', 'voided');--> statement-breakpoint
ALTER TABLE "orders" ADD CONSTRAINT "orders_status_known" CHECK ("orders"."status" in ('awaiting_payment', 'paying', 'authorized', 'paid', 'expired', 'voided'));