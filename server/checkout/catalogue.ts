import { asc, sql } from 'drizzle-orm';
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

/**
 * Gives an order's stock back (an order expired or voided). Call in the transaction that moved the
 * order to that state, and only when that transition applied: then it happens once.
 */
export async function restockOrder(db: Executor, orderId: string): Promise<void> {
  await db.execute(sql`
    update products p set stock = p.stock + i.quantity
      from order_items i
     where i.order_id = ${orderId} and p.sku = i.sku`);
}
