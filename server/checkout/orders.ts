/**
 * Orders: created once per order-creation key, with stock taken in the same transaction, and read
 * back only by the customer who owns them.
 */
import { randomUUID } from 'node:crypto';
import { and, asc, eq, inArray, sql } from 'drizzle-orm';
import type { Executor, Transaction } from '@/db/client';
import { customers, orderItems, orders, orderTrades, payments, products, refunds, type OrderStatus } from '@/db/schema';
import { respond, type Responded, type StoredResponse } from '@payonce/idempotency';
import { envFrom, type RawEnv } from '@/server/config/env';
import { CheckoutError } from './refusals';
import { journal } from './journal';
import { outTradeNoFor } from './out-trade-no';

export interface OrderLineInput {
  sku: string;
  quantity: number;
}

export interface CreatedOrder {
  orderId: string;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  status: OrderStatus;
}

/**
 * How much one customer, and one client address, may hold in unpaid orders (awaiting_payment or
 * paying), whose stock stays taken until they are paid or expire: without a cap, anonymous sessions
 * are free and a script could empty a SKU for half an hour at no cost. A session is only a cookie, so
 * a script that makes a new one per order walks around the customer's caps; the address caps hold it
 * at what one machine may take. 0 switches a cap off.
 */
export interface OrderCaps {
  openOrders: number;
  heldUnitsPerSku: number;
  /** Unpaid orders from one client address (server/http/rate-limit clientAddress), across its sessions. */
  openOrdersPerAddress: number;
  heldUnitsPerSkuPerAddress: number;
}

/**
 * A shopper pays an order or abandons it; five unpaid at once is already a lot of tabs. Twenty units
 * of one product is more than a household buys from this catalogue (a mug, a tin of tea, a box of
 * mooncakes); a bulk buyer gets a higher OPEN_ORDER_HELD_UNITS_PER_SKU. One address: a household or
 * an office behind one NAT is several shoppers at once, so six customers' worth of orders and five of
 * units — and nobody behind it can hoard more than that by opening new sessions.
 */
export const DEFAULT_ORDER_CAPS: OrderCaps = {
  openOrders: 5,
  heldUnitsPerSku: 20,
  openOrdersPerAddress: 30,
  heldUnitsPerSkuPerAddress: 100,
};

/** OPEN_ORDERS_PER_CUSTOMER, OPEN_ORDER_HELD_UNITS_PER_SKU and their _PER_ADDRESS twins (server/config/env.ts). */
export function orderCapsFromEnv(env?: RawEnv): OrderCaps {
  const config = envFrom(env);
  return {
    openOrders: config.OPEN_ORDERS_PER_CUSTOMER,
    heldUnitsPerSku: config.OPEN_ORDER_HELD_UNITS_PER_SKU,
    openOrdersPerAddress: config.OPEN_ORDERS_PER_ADDRESS,
    heldUnitsPerSkuPerAddress: config.OPEN_ORDER_HELD_UNITS_PER_SKU_PER_ADDRESS,
  };
}

/** What else an order is created with, besides its customer and lines. */
export interface CreateOrderOptions {
  caps?: OrderCaps;
  /** The client's address (server/http/rate-limit clientAddress), kept on the order for the address caps. */
  address?: string;
  /** How long the order may stay unpaid (ORDER_TTL_SECONDS); the column's 30 minutes otherwise. */
  ttlSeconds?: number;
}

/**
 * checkout.createOrder in one atomic phase — the order, its lines and the stock it takes — which
 * also carries the key's claim and its answer: one transaction, no round trip for the guard.
 */
export function createOrder(
  customerId: string,
  items: OrderLineInput[],
  options: CreateOrderOptions = {},
): (tx: Transaction) => Promise<Responded<StoredResponse<CreatedOrder, 201>>> {
  const skus = items.map((item) => item.sku);
  if (new Set(skus).size !== skus.length) {
    throw new CheckoutError('DUPLICATE_SKU', 'Each SKU may appear only once in an order.');
  }

  return (tx) => orderPhase(tx, customerId, items, skus, options);
}

async function orderPhase(tx: Transaction, customerId: string, items: OrderLineInput[], skus: string[], options: CreateOrderOptions) {
  await tx.insert(customers).values({ id: customerId }).onConflictDoNothing();
  await enforceCaps(tx, customerId, items, options);

  // The cart is priced and checked by a plain read, which waits on no lock: in a flash sale everyone
  // after the last unit is told 已售罄 at once, instead of queueing on the product's row lock behind
  // the orders still taking stock (docs/scaling.md, "A flash sale").
  const catalogue = await readCart(tx, items, skus);
  const lines = items.map((item) => {
    const product = catalogue.find((row) => row.sku === item.sku)!;
    return { ...item, name: product.name, unitPriceMinor: product.priceMinor };
  });
  const amountMinor = lines.reduce((sum, line) => sum + line.unitPriceMinor * line.quantity, 0);
  const currency = catalogue[0]!.currency;

  const orderId = randomUUID();
  const outTradeNo = outTradeNoFor(orderId);
  await tx.insert(orders).values({
    id: orderId,
    customerId,
    outTradeNo,
    amountMinor,
    currency,
    clientAddress: options.address ?? null,
    ...(options.ttlSeconds ? { expiresAt: sql`now() + make_interval(secs => ${options.ttlSeconds})` } : {}),
  });
  await tx.insert(orderItems).values(lines.map((line) => ({ orderId, ...line })));
  await journal(tx, {
    orderId,
    kind: 'order.created',
    data: { outTradeNo, amountMinor, currency, items: items.map((item) => ({ sku: item.sku, quantity: item.quantity })) },
  });
  // Last, so that the product's row is locked only from here to the COMMIT that follows.
  await takeStock(tx, lines);

  const created: CreatedOrder = { orderId, outTradeNo, amountMinor, currency, status: 'awaiting_payment' };
  return respond(201, created);
}

async function enforceCaps(tx: Transaction, customerId: string, items: OrderLineInput[], options: CreateOrderOptions): Promise<void> {
  const { caps, address } = options;
  if (caps && (caps.openOrders > 0 || caps.heldUnitsPerSku > 0)) {
    await enforceHoldCaps(
      tx,
      items,
      { kind: 'customer', id: customerId },
      { openOrders: caps.openOrders, unitsPerSku: caps.heldUnitsPerSku },
    );
  }
  if (caps && address && (caps.openOrdersPerAddress > 0 || caps.heldUnitsPerSkuPerAddress > 0)) {
    await enforceHoldCaps(
      tx,
      items,
      { kind: 'address', id: address },
      { openOrders: caps.openOrdersPerAddress, unitsPerSku: caps.heldUnitsPerSkuPerAddress },
    );
  }
}

type CartProduct = { sku: string; name: string; priceMinor: number; currency: string; stock: number };

/**
 * The cart's products as they are now: UNKNOWN_SKU, MIXED_CURRENCIES, SOLD_OUT (已售罄: a product
 * with none left) or OUT_OF_STOCK (fewer than asked) refuse the order before any lock is taken.
 */
async function readCart(tx: Transaction, items: OrderLineInput[], skus: string[]): Promise<CartProduct[]> {
  const rows: CartProduct[] = await tx
    .select({ sku: products.sku, name: products.name, priceMinor: products.priceMinor, currency: products.currency, stock: products.stock })
    .from(products)
    .where(inArray(products.sku, skus));
  const unknown = skus.filter((sku) => !rows.some((row) => row.sku === sku));
  if (unknown.length > 0) throw new CheckoutError('UNKNOWN_SKU', `Unknown product: ${unknown.join(', ')}.`);
  if (new Set(rows.map((row) => row.currency)).size !== 1) {
    throw new CheckoutError('MIXED_CURRENCIES', 'All products of one order must share a currency.');
  }
  refuseIfShort(items, rows);
  return rows;
}

function refuseIfShort(items: OrderLineInput[], rows: { sku: string; stock: number }[]): void {
  const short = items
    .map((item) => ({ item, stock: rows.find((row) => row.sku === item.sku)?.stock ?? 0 }))
    .filter(({ item, stock }) => stock < item.quantity);
  const gone = short.filter(({ stock }) => stock === 0).map(({ item }) => item.sku);
  if (gone.length > 0) throw new CheckoutError('SOLD_OUT', `Sold out: ${gone.join(', ')}.`);
  if (short.length > 0) throw new CheckoutError('OUT_OF_STOCK', 'Not enough stock for one of the products.');
}

/**
 * Takes the stock in one statement, at the price the order was written with: a line whose product
 * lacks stock (or whose price changed since the read) updates no row, and the CHECK on
 * products.stock is the backstop. Throwing rolls the whole order back.
 */
async function takeStock(tx: Transaction, lines: { sku: string; quantity: number; unitPriceMinor: number }[]): Promise<void> {
  const wanted = lines.map((line) => ({ sku: line.sku, quantity: line.quantity, price: line.unitPriceMinor }));
  const taken = await tx.execute<{ sku: string }>(sql`
    update products p set stock = p.stock - v.quantity
      from jsonb_to_recordset(${JSON.stringify(wanted)}::jsonb) as v(sku text, quantity int, price int)
     where p.sku = v.sku and p.stock >= v.quantity and p.price_minor = v.price
    returning p.sku`);
  if (taken.length === lines.length) return;
  // The last units went to the orders that held the row's lock before this one, or the price moved.
  const now = await tx
    .select({ sku: products.sku, stock: products.stock, priceMinor: products.priceMinor })
    .from(products)
    .where(
      inArray(
        products.sku,
        lines.map((line) => line.sku),
      ),
    );
  refuseIfShort(lines, now);
  throw new CheckoutError('PRICE_CHANGED', 'A price changed while the order was placed; nothing was taken. Order again.');
}

/** Whose unpaid orders a cap counts: one customer's, or every order from one client address. */
type Holder = { kind: 'customer'; id: string } | { kind: 'address'; id: string };

/**
 * Refuses an order that would take its holder past a cap (nothing created: the caller's transaction
 * rolls back). The holder is locked first — the customer's row, or a transaction-scoped advisory lock
 * on the address — so that two createOrders of one holder cannot both pass the check. A customer past
 * a cap gets 409 (their own orders are in the way); an address gets 429 with Retry-After, as a rate
 * limit: the shopper behind it did nothing but share a network with whoever holds the stock.
 */
async function enforceHoldCaps(
  tx: Transaction,
  items: OrderLineInput[],
  holder: Holder,
  caps: { openOrders: number; unitsPerSku: number },
) {
  const owns = holder.kind === 'customer' ? sql`customer_id = ${holder.id}` : sql`client_address = ${holder.id}`;
  if (holder.kind === 'customer') await tx.execute(sql`select 1 from customers where id = ${holder.id} for update`);
  else await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`payonce.address:${holder.id}`}, 0))`);
  const [held] = await tx.execute<{ open_orders: number; units: Record<string, number> | null }>(sql`
    with open_orders as (
      select id from orders where ${owns} and status in ('awaiting_payment', 'paying')
    )
    select (select count(*)::int from open_orders) as open_orders,
           (select jsonb_object_agg(i.sku, i.units)
              from (select sku, sum(quantity)::int as units from order_items
                     where order_id in (select id from open_orders) group by sku) i) as units`);
  const openOrders = held?.open_orders ?? 0;
  const over = caps.unitsPerSku > 0 ? items.find((item) => (held?.units?.[item.sku] ?? 0) + item.quantity > caps.unitsPerSku) : undefined;
  if (holder.kind === 'address') {
    if ((caps.openOrders > 0 && openOrders >= caps.openOrders) || over) {
      throw new CheckoutError(
        'ADDRESS_HOLD_LIMIT',
        over
          ? `Unpaid orders from this network already hold ${caps.unitsPerSku} units of ${over.sku}, the most allowed: retry later.`
          : `This network already has ${caps.openOrders} unpaid orders, the most allowed: retry later.`,
      );
    }
    return;
  }
  if (caps.openOrders > 0 && openOrders >= caps.openOrders) {
    throw new CheckoutError('TOO_MANY_OPEN_ORDERS', `At most ${caps.openOrders} unpaid orders at a time: pay one or let it expire first.`);
  }
  if (over) {
    throw new CheckoutError('STOCK_HOLD_LIMIT', `At most ${caps.unitsPerSku} units of ${over.sku} across unpaid orders at a time.`);
  }
}

export interface OrderView {
  orderId: string;
  outTradeNo: string;
  status: OrderStatus;
  amountMinor: number;
  currency: string;
  paymentAttempts: number;
  createdAt: string;
  paidAt: string | null;
  /** When the buyer's money came to be held (authorise, then capture); null when it never was. */
  authorizedAt: string | null;
  /** `name` as ordered (Chinese, kept with the order); `nameEn` the catalogue's English name now. */
  items: { sku: string; name: string; nameEn: string | null; quantity: number; unitPriceMinor: number }[];
  payments: {
    gateway: string;
    attempt: number;
    status: string;
    amountMinor: number;
    currency: string;
    gatewayTradeNo: string | null;
    declineCode: string | null;
    declineMessage: string | null;
    source: string;
    /** `payment` pays the order; `excess` is money that must not stay, refunded (see `refunds`). */
    role: string;
    /** An authorisation (capture later): what was held; `amountMinor` is what was taken once captured. */
    authorizedMinor: number | null;
    createdAt: string;
  }[];
  /** Money given back: one refund per excess charge, with where it stands. */
  refunds: {
    gateway: string;
    refundId: string;
    gatewayTradeNo: string;
    amountMinor: number;
    currency: string;
    reason: string;
    status: string;
    createdAt: string;
    settledAt: string | null;
  }[];
  /** Every trade the order opened at a gateway, and whether it could still take money. */
  trades: { gateway: string; status: string; closedAt: string | null }[];
}

/**
 * Another customer's order answers exactly like a missing one: 404, nothing revealed. `customerId`
 * null reads any order: only demo mode's 幕后 view does that.
 */
export async function getOrder(db: Executor, customerId: string | null, orderId: string): Promise<OrderView> {
  const [order] = await db
    .select()
    .from(orders)
    .where(and(eq(orders.id, orderId), customerId === null ? undefined : eq(orders.customerId, customerId)));
  if (!order) throw new CheckoutError('ORDER_NOT_FOUND', 'No such order.');
  const [items, paymentRows, refundRows, tradeRows] = await Promise.all([
    db
      .select({
        sku: orderItems.sku,
        name: orderItems.name,
        nameEn: products.nameEn,
        quantity: orderItems.quantity,
        unitPriceMinor: orderItems.unitPriceMinor,
      })
      .from(orderItems)
      .leftJoin(products, eq(products.sku, orderItems.sku))
      .where(eq(orderItems.orderId, orderId))
      .orderBy(asc(orderItems.sku)),
    db.select().from(payments).where(eq(payments.orderId, orderId)).orderBy(asc(payments.createdAt)),
    db.select().from(refunds).where(eq(refunds.orderId, orderId)).orderBy(asc(refunds.createdAt)),
    db.select().from(orderTrades).where(eq(orderTrades.orderId, orderId)).orderBy(asc(orderTrades.openedAt)),
  ]);
  return {
    orderId: order.id,
    outTradeNo: order.outTradeNo,
    status: order.status,
    amountMinor: order.amountMinor,
    currency: order.currency,
    paymentAttempts: order.paymentAttempt,
    createdAt: order.createdAt.toISOString(),
    paidAt: order.paidAt?.toISOString() ?? null,
    authorizedAt: order.authorizedAt?.toISOString() ?? null,
    items,
    payments: paymentRows.map((p) => ({
      gateway: p.gateway,
      attempt: p.attempt,
      status: p.status,
      amountMinor: p.amountMinor,
      currency: p.currency,
      gatewayTradeNo: p.gatewayTradeNo,
      declineCode: p.declineCode,
      declineMessage: p.declineMessage,
      source: p.source,
      role: p.role,
      authorizedMinor: p.authorizedMinor,
      createdAt: p.createdAt.toISOString(),
    })),
    refunds: refundRows.map((r) => ({
      gateway: r.gateway,
      refundId: r.refundId,
      gatewayTradeNo: r.gatewayTradeNo,
      amountMinor: r.amountMinor,
      currency: r.currency,
      reason: r.reason,
      status: r.status,
      createdAt: r.createdAt.toISOString(),
      settledAt: r.settledAt?.toISOString() ?? null,
    })),
    trades: tradeRows.map((t) => ({ gateway: t.gateway, status: t.status, closedAt: t.closedAt?.toISOString() ?? null })),
  };
}
