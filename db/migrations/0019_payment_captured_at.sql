-- 对账 books a captured authorisation on the day its money was taken, not the day it was held.
ALTER TABLE "payments" ADD COLUMN "captured_at" timestamp with time zone;
--> statement-breakpoint
-- Captures made before: the capture decision's settlement is when the money was taken.
UPDATE "payments" p SET "captured_at" = a."settled_at"
  FROM "authorization_actions" a
 WHERE a."payment_id" = p."id" AND a."status" = 'succeeded' AND a."settled_at" IS NOT NULL
   AND p."status" = 'succeeded' AND p."captured_at" IS NULL;
