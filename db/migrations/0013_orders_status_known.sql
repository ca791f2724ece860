-- No path ever set an order `failed`, and the status is gone. A row left in it (there should be none)
-- is an order that is over and paid nothing: it becomes `expired`, and gives its stock back as an
-- expiry does.
UPDATE "products" p SET "stock" = p."stock" + held."quantity"
  FROM (SELECT i."sku", sum(i."quantity")::int AS "quantity"
          FROM "order_items" i JOIN "orders" o ON o."id" = i."order_id"
         WHERE o."status" = 'failed' GROUP BY i."sku") held
 WHERE p."sku" = held."sku";--> statement-breakpoint
UPDATE "orders" SET "status" = 'expired' WHERE "status" = 'failed';--> statement-breakpoint
ALTER TABLE "orders" ADD CONSTRAINT "orders_status_known" CHECK ("orders"."status" in ('awaiting_payment', 'paying', 'paid', 'expired'));
