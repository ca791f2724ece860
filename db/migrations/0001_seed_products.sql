-- The demo catalogue. Stock is generous so that a long-lived local database never runs dry; the tests
-- measure conservation as a difference, not an absolute.
INSERT INTO "products" ("sku", "name", "price_minor", "currency", "stock") VALUES
  ('TEA-LONGJING', '西湖龙井 · 明前特级 250g', 16800, 'CNY', 100000),
  ('MOONCAKE-BOX', '广式月饼礼盒 · 六只装', 12800, 'CNY', 100000),
  ('MUG-CELADON', '龙泉青瓷马克杯', 6800, 'CNY', 100000)
ON CONFLICT ("sku") DO NOTHING;
