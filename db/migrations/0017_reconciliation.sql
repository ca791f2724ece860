-- 对账: each reconciliation of a gateway's daily statement, and what it could not match (server/reconciliation).
CREATE TABLE "reconciliation_mismatches" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"gateway" text NOT NULL,
	"statement_date" text NOT NULL,
	"kind" text NOT NULL,
	"reference" text NOT NULL,
	"out_trade_no" text,
	"order_id" uuid,
	"ours" jsonb,
	"theirs" jsonb,
	"first_run_id" uuid NOT NULL,
	"last_run_id" uuid NOT NULL,
	"first_seen_at" timestamp with time zone DEFAULT now() NOT NULL,
	"resolved_at" timestamp with time zone,
	"resolved_by" text,
	"resolution" text
);
--> statement-breakpoint
CREATE TABLE "reconciliation_runs" (
	"id" uuid PRIMARY KEY DEFAULT gen_random_uuid() NOT NULL,
	"gateway" text NOT NULL,
	"statement_date" text NOT NULL,
	"status" text NOT NULL,
	"lines" integer DEFAULT 0 NOT NULL,
	"matched" integer DEFAULT 0 NOT NULL,
	"mismatches" integer DEFAULT 0 NOT NULL,
	"fees_minor" bigint DEFAULT 0 NOT NULL,
	"error" text,
	"by" text NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"finished_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX "reconciliation_mismatches_one_per_reference" ON "reconciliation_mismatches" USING btree ("gateway","statement_date","kind","reference");--> statement-breakpoint
CREATE INDEX "reconciliation_mismatches_open_idx" ON "reconciliation_mismatches" USING btree ("statement_date") WHERE "reconciliation_mismatches"."resolved_at" is null;--> statement-breakpoint
CREATE INDEX "reconciliation_runs_day_idx" ON "reconciliation_runs" USING btree ("gateway","statement_date","finished_at");