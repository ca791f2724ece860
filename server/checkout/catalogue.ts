import { asc } from 'drizzle-orm';
import type { Executor } from '@/db/client';
import { products } from '@/db/schema';

export interface Product {
  sku: string;
  name: string;
  /** The name in English, or null where the catalogue has none (the page shows `name`). */
  nameEn: string | null;
  priceMinor: number;
  currency: string;
  stock: number;
}

export async function listProducts(db: Executor): Promise<Product[]> {
  return db
    .select({
      sku: products.sku,
      name: products.name,
      nameEn: products.nameEn,
      priceMinor: products.priceMinor,
      currency: products.currency,
      stock: products.stock,
    })
    .from(products)
    .orderBy(asc(products.sku));
}
