CREATE TABLE "order_trades" (
	"order_id" uuid NOT NULL,
	"gateway" text NOT NULL,
	"status" text NOT NULL,
	"opened_attempt" integer NOT NULL,
	"opened_at" timestamp with time zone DEFAULT now() NOT NULL,
	"closed_at" timestamp with time zone,
	"last_close_error" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "order_trades_order_id_gateway_pk" PRIMARY KEY("order_id","gateway")
);
--> statement-breakpoint
CREATE TABLE "payment_exceptions" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"kind" text NOT NULL,
	"dedupe_key" text NOT NULL,
	"gateway" text NOT NULL,
	"out_trade_no" text,
	"order_id" uuid,
	"details" jsonb NOT NULL,
	"occurrences" integer DEFAULT 1 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_seen_at" timestamp with time zone DEFAULT now() NOT NULL,
	"resolved_at" timestamp with time zone,
	CONSTRAINT "payment_exceptions_dedupeKey_unique" UNIQUE("dedupe_key")
);
--> statement-breakpoint
CREATE TABLE "refunds" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"order_id" uuid NOT NULL,
	"payment_id" uuid NOT NULL,
	"gateway" text NOT NULL,
	"out_trade_no" text NOT NULL,
	"gateway_trade_no" text NOT NULL,
	"refund_id" text NOT NULL,
	"amount_minor" integer NOT NULL,
	"currency" text NOT NULL,
	"reason" text NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"gateway_refund_id" text,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"lease_until" timestamp with time zone,
	"last_error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"settled_at" timestamp with time zone,
	CONSTRAINT "refunds_paymentId_unique" UNIQUE("payment_id"),
	CONSTRAINT "refunds_refundId_unique" UNIQUE("refund_id"),
	CONSTRAINT "refunds_amount_positive" CHECK ("refunds"."amount_minor" > 0)
);
--> statement-breakpoint
DROP INDEX "payments_one_success_per_order";--> statement-breakpoint
ALTER TABLE "payments" ADD COLUMN "role" text DEFAULT 'payment' NOT NULL;--> statement-breakpoint
ALTER TABLE "order_trades" ADD CONSTRAINT "order_trades_order_id_orders_id_fk" FOREIGN KEY ("order_id") REFERENCES "public"."orders"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "refunds" ADD CONSTRAINT "refunds_order_id_orders_id_fk" FOREIGN KEY ("order_id") REFERENCES "public"."orders"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "refunds" ADD CONSTRAINT "refunds_payment_id_payments_id_fk" FOREIGN KEY ("payment_id") REFERENCES "public"."payments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "order_trades_open_idx" ON "order_trades" USING btree ("order_id") WHERE "order_trades"."status" = 'open';--> statement-breakpoint
CREATE INDEX "refunds_due_idx" ON "refunds" USING btree ("next_attempt_at") WHERE "refunds"."status" in ('pending', 'sent', 'processing');--> statement-breakpoint
CREATE INDEX "refunds_order_idx" ON "refunds" USING btree ("order_id");--> statement-breakpoint
CREATE UNIQUE INDEX "payments_one_success_per_order" ON "payments" USING btree ("order_id") WHERE "payments"."status" = 'succeeded' and "payments"."role" = 'payment';--> statement-breakpoint
-- Orders from before trades were tracked: every gateway an order ever tried may still hold a payable
-- trade, so each is recorded open (paid where it paid the order); the reconciler closes what is left.
INSERT INTO "order_trades" ("order_id", "gateway", "status", "opened_attempt", "opened_at")
SELECT t.order_id, t.gateway,
       CASE WHEN bool_or(t.paid) THEN 'paid' ELSE 'open' END,
       greatest(max(t.attempt), 1),
       min(o.created_at)
  FROM (SELECT p.order_id, p.gateway, p.attempt, p.status = 'succeeded' AS paid FROM "payments" p
        UNION ALL
        SELECT o.id, o.attempt_gateway, o.payment_attempt, false FROM "orders" o WHERE o.attempt_gateway IS NOT NULL) t
  JOIN "orders" o ON o.id = t.order_id
 GROUP BY t.order_id, t.gateway
ON CONFLICT DO NOTHING;
