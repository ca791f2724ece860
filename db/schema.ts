/**
 * PayOnce's tables. Change this file, then `npm run db:generate` writes the migration into
 * db/migrations (committed); start-up applies it.
 *
 * Money is always an integer count of minor units (fen) next to an ISO currency code: floating point
 * never touches an amount.
 */
import { sql } from 'drizzle-orm';
import {
  check,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';

const timestamptz = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

/**
 * The dedupe table of the seed, every column kept, plus what a lease and recovery need.
 *
 * A key is unique within its scope, never globally: `customer:{id}` for API calls (two customers can
 * both send "abc" and never see each other's answer) and `webhook:{gateway}` for notifications.
 */
export const idempotencyKeys = pgTable(
  'idempotency_keys',
  {
    id: uuid().primaryKey().defaultRandom(),
    /** `customer:{uuid}` or `webhook:{gateway}`: who may see this key's stored answer. */
    scope: text().notNull(),
    /** The client's Idempotency-Key (or the gateway's event id), unique within `scope`. */
    key: text().notNull(),
    requestPath: text().notNull(),
    /** SHA-256 over the path and the canonical JSON of the parsed input. */
    requestHash: text().notNull(),
    responseStatus: integer(),
    responseBody: jsonb(),
    /** When the current owner started (or took over) processing; NULL once released. */
    lockedAt: timestamptz('locked_at'),
    /**
     * Until when the owner may work undisturbed. A request that finds the lease past this point knows
     * the owner died (crash, eviction) and may take the key over; the seed's lock never expired.
     */
    leaseExpiresAt: timestamptz('lease_expires_at'),
    /** Fencing token of the current owner: an owner that lost its lease can no longer write. */
    leaseToken: uuid(),
    /**
     * The last atomic phase that committed (`started` = nothing durable yet). A takeover resumes here
     * instead of starting over, so effects already committed are never repeated.
     */
    recoveryPoint: text().notNull().default('started'),
    completedAt: timestamptz('completed_at'),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    /** Matches Stripe's 24 h window: long enough for any client's retries, short enough to prune. */
    expiresAt: timestamptz('expires_at')
      .notNull()
      .default(sql`now() + interval '24 hours'`),
  },
  (t) => [
    uniqueIndex('idempotency_keys_scope_key_unique').on(t.scope, t.key),
    index('idempotency_keys_expires_at_idx').on(t.expiresAt),
  ],
);

/** Anonymous customers, known only by the signed session cookie that carries their id. */
export const customers = pgTable('customers', {
  id: uuid().primaryKey(),
  createdAt: timestamptz('created_at').notNull().defaultNow(),
});

export const products = pgTable(
  'products',
  {
    sku: text().primaryKey(),
    name: text().notNull(),
    priceMinor: integer().notNull(),
    currency: text().notNull(),
    stock: integer().notNull(),
  },
  (t) => [
    check('products_stock_non_negative', sql`${t.stock} >= 0`),
    check('products_price_positive', sql`${t.priceMinor} > 0`),
  ],
);

export const ORDER_STATUSES = ['awaiting_payment', 'paying', 'paid', 'failed', 'expired'] as const;
export type OrderStatus = (typeof ORDER_STATUSES)[number];

export const orders = pgTable(
  'orders',
  {
    id: uuid().primaryKey(),
    customerId: uuid()
      .notNull()
      .references(() => customers.id),
    /**
     * The merchant reference every gateway deduplicates on, fixed when the order is created and kept
     * for every attempt. Short and alphanumeric so that Alipay (≤64, no hyphen), WeChat Pay (6–32) and
     * 2C2P (≤20 for QR) all accept the same value.
     */
    outTradeNo: text().notNull().unique(),
    amountMinor: integer().notNull(),
    currency: text().notNull(),
    status: text().$type<OrderStatus>().notNull().default('awaiting_payment'),
    /** How many payment attempts have started; a retry of one attempt keeps its number. */
    paymentAttempt: integer().notNull().default(0),
    /**
     * The idempotency key that owns the attempt in flight (status `paying`). Any other key gets
     * ORDER_PAYMENT_IN_PROGRESS: two tabs or two gateways hold different keys, only the order sees both.
     */
    attemptKeyId: uuid(),
    attemptGateway: text(),
    attemptStartedAt: timestamptz('attempt_started_at'),
    paidAt: timestamptz('paid_at'),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    updatedAt: timestamptz('updated_at').notNull().defaultNow(),
    /** An order still unpaid at this point expires and gives its stock back. */
    expiresAt: timestamptz('expires_at')
      .notNull()
      .default(sql`now() + interval '30 minutes'`),
  },
  (t) => [
    index('orders_customer_idx').on(t.customerId, t.createdAt),
    index('orders_open_idx')
      .on(t.status, t.expiresAt)
      .where(sql`${t.status} in ('awaiting_payment', 'paying')`),
    check('orders_amount_positive', sql`${t.amountMinor} > 0`),
  ],
);

export const orderItems = pgTable(
  'order_items',
  {
    orderId: uuid()
      .notNull()
      .references(() => orders.id),
    sku: text()
      .notNull()
      .references(() => products.sku),
    name: text().notNull(),
    quantity: integer().notNull(),
    unitPriceMinor: integer().notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.orderId, t.sku] }),
    check('order_items_quantity_positive', sql`${t.quantity} > 0`),
  ],
);

export const PAYMENT_STATUSES = ['succeeded', 'declined'] as const;
export type PaymentStatus = (typeof PAYMENT_STATUSES)[number];

export const payments = pgTable(
  'payments',
  {
    id: uuid().primaryKey().defaultRandom(),
    orderId: uuid()
      .notNull()
      .references(() => orders.id),
    gateway: text().notNull(),
    outTradeNo: text().notNull(),
    attempt: integer().notNull(),
    amountMinor: integer().notNull(),
    currency: text().notNull(),
    status: text().$type<PaymentStatus>().notNull(),
    gatewayTradeNo: text(),
    declineCode: text(),
    declineMessage: text(),
    /** What told us: the gateway's response, its notification, or a reconciliation query. */
    source: text().$type<'response' | 'notification' | 'reconciliation'>().notNull(),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
  },
  (t) => [
    // The database's own last line of defence for promise 1: one successful payment per order.
    uniqueIndex('payments_one_success_per_order')
      .on(t.orderId)
      .where(sql`${t.status} = 'succeeded'`),
    uniqueIndex('payments_gateway_trade_unique')
      .on(t.gateway, t.gatewayTradeNo)
      .where(sql`${t.gatewayTradeNo} is not null and ${t.status} = 'succeeded'`),
    index('payments_order_idx').on(t.orderId),
  ],
);

/**
 * Transactional outbox: a side effect (the confirmation email) is written in the same transaction as
 * the state change that causes it, and `dedupeKey` makes a second write of the same effect a no-op.
 */
export const outbox = pgTable(
  'outbox',
  {
    id: uuid().primaryKey().defaultRandom(),
    topic: text().notNull(),
    dedupeKey: text().notNull().unique(),
    payload: jsonb().notNull(),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    deliveredAt: timestamptz('delivered_at'),
    attempts: integer().notNull().default(0),
  },
  (t) => [
    index('outbox_pending_idx')
      .on(t.createdAt)
      .where(sql`${t.deliveredAt} is null`),
  ],
);

/**
 * The demo's mail server: the outbox relay "sends" confirmation emails here, and /mail lists them.
 * `outboxId` is unique, so a message can be delivered at most once per outbox row.
 */
export const mailSink = pgTable('mail_sink', {
  id: uuid().primaryKey().defaultRandom(),
  outboxId: uuid()
    .notNull()
    .unique()
    .references(() => outbox.id),
  recipient: text().notNull(),
  subject: text().notNull(),
  body: text().notNull(),
  sentAt: timestamptz('sent_at').notNull().defaultNow(),
});
