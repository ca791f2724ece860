-- 对账 checks each statement line's fee against the gateway's fee contract: a run says whether it did.
ALTER TABLE "reconciliation_runs" ADD COLUMN "fees_checked" boolean DEFAULT false NOT NULL;
