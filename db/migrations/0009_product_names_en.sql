ALTER TABLE "products" ADD COLUMN "name_en" text;--> statement-breakpoint
UPDATE "products" SET "name_en" = 'West Lake Longjing tea · pre-Qingming, special grade, 250 g' WHERE "sku" = 'TEA-LONGJING';--> statement-breakpoint
UPDATE "products" SET "name_en" = 'Cantonese mooncake gift box · six pieces' WHERE "sku" = 'MOONCAKE-BOX';--> statement-breakpoint
UPDATE "products" SET "name_en" = 'Longquan celadon mug' WHERE "sku" = 'MUG-CELADON';
