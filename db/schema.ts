/**
 * PayOnce's tables. Change this file, then `npm run db:generate` writes the migration into
 * db/migrations (committed); start-up applies it.
 *
 * Money is always an integer count of minor units (fen) next to an ISO currency code: floating point
 * never touches an amount.
 *
 * The idempotency core owns its own table (@payonce/idempotency/drizzle); drizzle.config.ts lists
 * both files, so one `npm run db:generate` covers them.
 */
import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
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

/** Anonymous customers, known only by the signed session cookie that carries their id. */
export const customers = pgTable('customers', {
  id: uuid().primaryKey(),
  createdAt: timestamptz('created_at').notNull().defaultNow(),
});

export const products = pgTable(
  'products',
  {
    sku: text().primaryKey(),
    /** The name in Chinese, the shop's language: what orders keep (order_items.name) and receipts show. */
    name: text().notNull(),
    /** The same in English, for the page's English mode; null shows the Chinese name. */
    nameEn: text(),
    priceMinor: integer().notNull(),
    currency: text().notNull(),
    stock: integer().notNull(),
  },
  (t) => [check('products_stock_non_negative', sql`${t.stock} >= 0`), check('products_price_positive', sql`${t.priceMinor} > 0`)],
);

/**
 * `authorized`: the buyer's money is held for the order and not taken yet (authorise, then capture at
 * shipment); `voided`: that hold was released — by the merchant, or lapsed at the gateway — and the
 * stock went back. server/checkout/order-state.ts has every change between them.
 */
export const ORDER_STATUSES = ['awaiting_payment', 'paying', 'authorized', 'paid', 'expired', 'voided'] as const;
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
    /** When the buyer's money came to be held for the order (status `authorized`); the lapse is counted from it. */
    authorizedAt: timestamptz('authorized_at'),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    updatedAt: timestamptz('updated_at').notNull().defaultNow(),
    /**
     * The client address the order was placed from (server/http/rate-limit clientAddress), for the caps on
     * what one address may hold unpaid; null when the request carried none that can be trusted.
     */
    clientAddress: text(),
    /** An order still unpaid at this point expires and gives its stock back (ORDER_TTL_SECONDS). */
    expiresAt: timestamptz('expires_at')
      .notNull()
      .default(sql`now() + interval '30 minutes'`),
  },
  (t) => [
    index('orders_customer_idx').on(t.customerId, t.createdAt),
    // Only open orders are counted against an address's caps, so only they are indexed.
    index('orders_open_by_address_idx')
      .on(t.clientAddress)
      .where(sql`${t.status} in ('awaiting_payment', 'paying') and ${t.clientAddress} is not null`),
    index('orders_open_idx')
      .on(t.status, t.expiresAt)
      .where(sql`${t.status} in ('awaiting_payment', 'paying')`),
    check('orders_amount_positive', sql`${t.amountMinor} > 0`),
    // The statuses of server/checkout/order-state.ts, and no other.
    check('orders_status_known', sql`${t.status} in ('awaiting_payment', 'paying', 'authorized', 'paid', 'expired', 'voided')`),
    // Authorised orders wait for the merchant's capture; the reconciler asks after the old ones (a lapse).
    index('orders_authorized_idx')
      .on(t.authorizedAt)
      .where(sql`${t.status} = 'authorized'`),
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
  (t) => [primaryKey({ columns: [t.orderId, t.sku] }), check('order_items_quantity_positive', sql`${t.quantity} > 0`)],
);

/**
 * `authorized`: the money is held and not taken; it becomes `succeeded` when captured (amount_minor
 * then what was taken) or `voided` when the hold is released or lapses.
 */
export const PAYMENT_STATUSES = ['succeeded', 'declined', 'authorized', 'voided'] as const;
export type PaymentStatus = (typeof PAYMENT_STATUSES)[number];

/**
 * What a successful charge is to its order: `payment` pays it (at most one per order); `excess` is
 * money that must not stay — a second success, or a success for an order that expired or can no
 * longer be paid — and has a refund row from the moment it is recorded.
 */
export const PAYMENT_ROLES = ['payment', 'excess'] as const;
export type PaymentRole = (typeof PAYMENT_ROLES)[number];

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
    /** For an authorisation: what was held. amount_minor is what was taken once it is captured. */
    authorizedMinor: integer(),
    /** What told us: the gateway's response, its notification, a reconciliation query or a close. */
    source: text().$type<PaymentSource>().notNull(),
    /** `payment` for the charge that pays the order; `excess` for money being given back. */
    role: text().$type<PaymentRole>().notNull().default('payment'),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    /**
     * An authorisation's capture: when the money was taken, which is the day the gateway's statement
     * books it on (对账), however long after the hold (created_at) that was.
     */
    capturedAt: timestamptz('captured_at'),
  },
  (t) => [
    // The database's own last line of defence for promise 1: one successful payment per order. A
    // second success is kept too, as `excess`, and refunded.
    // An authorisation holding the money counts as the order's payment: it is captured, or released.
    uniqueIndex('payments_one_success_per_order')
      .on(t.orderId)
      .where(sql`${t.status} in ('succeeded', 'authorized') and ${t.role} = 'payment'`),
    uniqueIndex('payments_gateway_trade_unique')
      .on(t.gateway, t.gatewayTradeNo)
      .where(sql`${t.gatewayTradeNo} is not null and ${t.status} in ('succeeded', 'authorized', 'voided')`),
    index('payments_order_idx').on(t.orderId),
  ],
);

export type PaymentSource = 'response' | 'notification' | 'reconciliation' | 'close';

export const TRADE_STATUSES = ['open', 'closed', 'paid'] as const;
export type TradeState = (typeof TRADE_STATUSES)[number];

/**
 * Every trade an order ever opened at a gateway, and whether it can still take the buyer's money.
 *
 * A trade is `open` from the moment an attempt may have created it (before the gateway call) until a
 * close confirms otherwise: after a decline the gateway keeps it payable (Alipay WAIT_BUYER_PAY,
 * WeChat NOTPAY/PAYERROR, a Stripe PaymentIntent in requires_payment_method), so an order may only
 * start an attempt elsewhere, or expire, once every other open trade is closed. One row per order
 * and gateway: Alipay, WeChat Pay and 2C2P deduplicate on out_trade_no (every attempt is the same
 * trade), and closing Stripe cancels all of the order's PaymentIntents at once.
 */
export const orderTrades = pgTable(
  'order_trades',
  {
    orderId: uuid()
      .notNull()
      .references(() => orders.id),
    gateway: text().notNull(),
    status: text().$type<TradeState>().notNull(),
    /** The attempt that last opened it: a close only settles the trade it observed. */
    openedAttempt: integer().notNull(),
    openedAt: timestamptz('opened_at').notNull().defaultNow(),
    closedAt: timestamptz('closed_at'),
    /** The last close that could not tell (timeout, 5xx, buyer mid-payment): shown, and retried. */
    lastCloseError: text(),
    /**
     * When a close of this trade reversed a payment the buyer made at that instant (Alipay's
     * trade.cancel refunding it). Never cleared: that payment's success notification, however late,
     * must not pay the order (../server/checkout/notifications.ts).
     */
    paymentReversedAt: timestamptz('payment_reversed_at'),
    /**
     * When the reconciler last asked the gateway whether the buyer paid this open trade: it asks again
     * after a quarter of the trade's age, so a waiting buyer is checked often at first and rarely later.
     */
    lastQueriedAt: timestamptz('last_queried_at'),
    updatedAt: timestamptz('updated_at').notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.orderId, t.gateway] }),
    index('order_trades_open_idx')
      .on(t.orderId)
      .where(sql`${t.status} = 'open'`),
  ],
);

export const REFUND_STATUSES = ['pending', 'sent', 'processing', 'succeeded', 'failed'] as const;
/**
 *   pending     recorded, never sent
 *   sent        sent at least once, answer unknown (lost, timed out, crashed before the commit):
 *               the next run asks the gateway by refund id before it sends anything
 *   processing  the gateway accepted it and has not finished (WeChat PROCESSING)
 *   succeeded   final: the money is on its way back
 *   failed      final refusal: a person must look (payment_exceptions has the row)
 */
export type RefundState = (typeof REFUND_STATUSES)[number];
/**
 * `duplicate_charge` and `order_not_payable`: money PayOnce found it must not keep (one refund per
 * excess charge, automatic); `merchant`: an operator gave back all or part of a paid order.
 */
export type RefundReason = 'duplicate_charge' | 'order_not_payable' | 'merchant';

/**
 * Money that must go back, one row per excess charge, written in the transaction that records the
 * charge. `refundId` is fixed here, before any call, and sent every time: each gateway deduplicates
 * refunds on it (Alipay out_request_no, WeChat out_refund_no, Stripe Idempotency-Key, 2C2P's
 * reference), so a retry, a second worker or a crash-and-resume never refunds twice.
 */
export const refunds = pgTable(
  'refunds',
  {
    id: uuid().primaryKey().defaultRandom(),
    orderId: uuid()
      .notNull()
      .references(() => orders.id),
    paymentId: uuid()
      .notNull()
      .references(() => payments.id),
    gateway: text().notNull(),
    outTradeNo: text().notNull(),
    gatewayTradeNo: text().notNull(),
    /** `R` + the order's out_trade_no body + a sequence per order: ≤ 32 characters of [0-9A-Z]. */
    refundId: text().notNull().unique(),
    amountMinor: integer().notNull(),
    currency: text().notNull(),
    reason: text().$type<RefundReason>().notNull(),
    /** A merchant refund: who asked for it (`operator:<username>`, or the back office's token), and why in their words. */
    requestedBy: text(),
    note: text(),
    status: text().$type<RefundState>().notNull().default('pending'),
    gatewayRefundId: text(),
    /** Calls and queries made so far; the backoff grows with it. */
    attempts: integer().notNull().default(0),
    nextAttemptAt: timestamptz('next_attempt_at').notNull().defaultNow(),
    /** A worker holds the refund until then; a crashed worker's refund is picked up after it. */
    leaseUntil: timestamptz('lease_until'),
    lastError: text(),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    settledAt: timestamptz('settled_at'),
  },
  (t) => [
    index('refunds_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`${t.status} in ('pending', 'sent', 'processing')`),
    index('refunds_order_idx').on(t.orderId),
    // One automatic refund per excess charge; a paid order's own payment may be refunded in parts.
    uniqueIndex('refunds_one_automatic_per_payment')
      .on(t.paymentId)
      .where(sql`${t.reason} <> 'merchant'`),
    index('refunds_payment_idx').on(t.paymentId),
    check('refunds_amount_positive', sql`${t.amountMinor} > 0`),
  ],
);

export const AUTHORIZATION_ACTIONS = ['capture', 'release'] as const;
export type AuthorizationAction = (typeof AUTHORIZATION_ACTIONS)[number];
/**
 *   pending    decided, never sent
 *   sent       sent at least once, answer unknown: the next run sends it again with the same
 *              capture id (the gateway's idempotency key) — a capture or release is idempotent there
 *   succeeded  done: captured (amount_minor taken) or released
 *   failed     refused for good (the hold had lapsed before a capture, more than held): recorded
 */
export const AUTHORIZATION_ACTION_STATUSES = ['pending', 'sent', 'succeeded', 'failed'] as const;
export type AuthorizationActionState = (typeof AUTHORIZATION_ACTION_STATUSES)[number];
export type AuthorizationActionReason = 'merchant' | 'excess_authorization';

/**
 * What is to become of an authorisation (a payment in status `authorized`): captured — all or part —
 * or released. One per authorisation (payment_id unique): two operators, a double click or a retry all
 * find the first decision, so the gateway is asked to capture once with one capture id. Written in
 * the transaction that decides it; the authorization worker (server/jobs/authorization-worker.ts)
 * carries it out, as the refund worker does refunds.
 */
export const authorizationActions = pgTable(
  'authorization_actions',
  {
    id: uuid().primaryKey().defaultRandom(),
    orderId: uuid()
      .notNull()
      .references(() => orders.id),
    paymentId: uuid()
      .notNull()
      .unique()
      .references(() => payments.id),
    gateway: text().notNull(),
    outTradeNo: text().notNull(),
    gatewayTradeNo: text().notNull(),
    action: text().$type<AuthorizationAction>().notNull(),
    /** A capture: how much to take (≤ what is held; the rest is released with it). Null for a release. */
    amountMinor: integer(),
    currency: text().notNull(),
    /** Ours, fixed when decided and sent every time: the gateway's idempotency key is made from it. */
    captureId: text().notNull().unique(),
    reason: text().$type<AuthorizationActionReason>().notNull(),
    /** Who decided: the merchant's credential label, or `payonce` for an excess authorisation. */
    decidedBy: text().notNull(),
    status: text().$type<AuthorizationActionState>().notNull().default('pending'),
    /** What the gateway took, once captured. */
    capturedMinor: integer(),
    attempts: integer().notNull().default(0),
    nextAttemptAt: timestamptz('next_attempt_at').notNull().defaultNow(),
    leaseUntil: timestamptz('lease_until'),
    lastError: text(),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    settledAt: timestamptz('settled_at'),
  },
  (t) => [
    index('authorization_actions_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`${t.status} in ('pending', 'sent')`),
    index('authorization_actions_order_idx').on(t.orderId),
    check('authorization_actions_capture_amount', sql`(${t.action} = 'capture') = (${t.amountMinor} is not null and ${t.amountMinor} > 0)`),
  ],
);

export const OPERATOR_ROLES = ['viewer', 'refunder', 'admin'] as const;
/**
 *   viewer    reads orders, payments, the journal and reconciliation reports
 *   refunder  also refunds, captures and releases
 *   admin     also resolves reconciliation mismatches and manages operators
 */
export type OperatorRole = (typeof OPERATOR_ROLES)[number];

/**
 * The merchant's people (customer service, finance, on-call), apart from shoppers: their own
 * accounts, their own sessions and cookie. Created by `npm run operator -- add …`; never deleted
 * (the journal names them), disabled instead.
 */
export const operators = pgTable(
  'operators',
  {
    id: uuid().primaryKey().defaultRandom(),
    /** Lower case [a-z0-9._-], 3–64: what they sign in with and what the journal names. */
    username: text().notNull().unique(),
    role: text().$type<OperatorRole>().notNull(),
    /** scrypt, its parameters and salt with it (server/operators/passwords.ts): never the password. */
    passwordHash: text().notNull(),
    passwordChangedAt: timestamptz('password_changed_at').notNull().defaultNow(),
    disabledAt: timestamptz('disabled_at'),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
  },
  (t) => [
    check('operators_role_known', sql`${t.role} in ('viewer', 'refunder', 'admin')`),
    check('operators_username_shape', sql`${t.username} ~ '^[a-z0-9._-]{3,64}$'`),
  ],
);

/**
 * Operators' sign-ins. The cookie carries a random token; only its SHA-256 is stored, so a copy of
 * this table opens no session. A session ends at `expires_at` (absolute), after an idle spell, at
 * sign-out, or when its operator is disabled or changes password.
 */
export const operatorSessions = pgTable(
  'operator_sessions',
  {
    tokenHash: text().primaryKey(),
    operatorId: uuid()
      .notNull()
      .references(() => operators.id),
    createdAt: timestamptz('created_at').notNull().defaultNow(),
    lastSeenAt: timestamptz('last_seen_at').notNull().defaultNow(),
    expiresAt: timestamptz('expires_at').notNull(),
    endedAt: timestamptz('ended_at'),
  },
  (t) => [index('operator_sessions_operator_idx').on(t.operatorId), index('operator_sessions_expires_idx').on(t.expiresAt)],
);

/**
 * 对账: one row per reconciliation of one gateway's statement for one day (server/reconciliation).
 * A day may be reconciled again (a statement corrected, a run that failed); the newest run says
 * where the day stands.
 */
export const reconciliationRuns = pgTable(
  'reconciliation_runs',
  {
    id: uuid().primaryKey().defaultRandom(),
    gateway: text().notNull(),
    /** `YYYY-MM-DD` in the gateway's own time zone (Beijing for Alipay and WeChat Pay, UTC for Stripe). */
    statementDate: text().notNull(),
    /** `clean`, `mismatches`, `no_statement` (the gateway has none for the day), `failed` (could not fetch it). */
    status: text().$type<'clean' | 'mismatches' | 'no_statement' | 'failed'>().notNull(),
    lines: integer().notNull().default(0),
    matched: integer().notNull().default(0),
    mismatches: integer().notNull().default(0),
    /** The statement's fees, net of what refunds gave back. */
    feesMinor: bigint({ mode: 'number' }).notNull().default(0),
    /** Whether every line's fee was checked against the gateway's fee contract (ALIPAY_FEE, …); false: summed only. */
    feesChecked: boolean().notNull().default(false),
    error: text(),
    /** Who ran it: the scheduled job, or `cli:<os user>`. */
    by: text().notNull(),
    startedAt: timestamptz('started_at').notNull(),
    finishedAt: timestamptz('finished_at').notNull().defaultNow(),
  },
  (t) => [index('reconciliation_runs_day_idx').on(t.gateway, t.statementDate, t.finishedAt)],
);

/**
 * What a reconciliation could not match, for a person to resolve: one row per gateway, day, kind and
 * reference, however often the day is reconciled again (`last_run_id` is the newest run that still
 * saw it). A resolution says who and what, and is journaled.
 */
export const reconciliationMismatches = pgTable(
  'reconciliation_mismatches',
  {
    id: uuid().primaryKey().defaultRandom(),
    gateway: text().notNull(),
    statementDate: text().notNull(),
    kind: text().notNull(),
    reference: text().notNull(),
    outTradeNo: text(),
    orderId: uuid(),
    ours: jsonb(),
    theirs: jsonb(),
    firstRunId: uuid().notNull(),
    lastRunId: uuid().notNull(),
    firstSeenAt: timestamptz('first_seen_at').notNull().defaultNow(),
    resolvedAt: timestamptz('resolved_at'),
    resolvedBy: text(),
    resolution: text(),
  },
  (t) => [
    uniqueIndex('reconciliation_mismatches_one_per_reference').on(t.gateway, t.statementDate, t.kind, t.reference),
    index('reconciliation_mismatches_open_idx')
      .on(t.statementDate)
      .where(sql`${t.resolvedAt} is null`),
  ],
);

/**
 * What needs a person: a verified notification whose amount, currency or order does not match, a
 * refund the gateway refused for good. Recorded once per dedupe key, never dropped.
 */
export const paymentExceptions = pgTable('payment_exceptions', {
  id: uuid().primaryKey().defaultRandom(),
  kind: text().$type<'amount_mismatch' | 'unknown_order' | 'refund_failed'>().notNull(),
  dedupeKey: text().notNull().unique(),
  gateway: text().notNull(),
  outTradeNo: text(),
  orderId: uuid(),
  details: jsonb().notNull(),
  occurrences: integer().notNull().default(1),
  createdAt: timestamptz('created_at').notNull().defaultNow(),
  lastSeenAt: timestamptz('last_seen_at').notNull().defaultNow(),
  resolvedAt: timestamptz('resolved_at'),
});

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

/**
 * The payment journal: an append-only, hash-chained record of everything that happened to an order's
 * money — each request and what the guard made of it, each gateway call and answer, each notification,
 * close, refund and email. Each row is written in the same transaction as the effect it records (an
 * event that changes nothing else, such as a replay, is a transaction of its own), so the journal
 * never claims an effect that rolled back.
 *
 * Rows form one chain per stream (`order:{orderId}`, or `gateway:{id}` for what belongs to no order):
 * `hash` = sha256(previous row's hash ‖ this row's canonical content), so editing or deleting a row
 * breaks every link after it, and `npm run audit` names the first broken one. One chain per order,
 * not one for the whole table, so that orders never queue behind each other for the chain's head.
 * Rows are only ever appended through append_payment_event() (migration 0005); a trigger refuses
 * UPDATE, DELETE and TRUNCATE, and key cleanup never touches this table.
 */
export const paymentEvents = pgTable(
  'payment_events',
  {
    id: bigint({ mode: 'number' }).primaryKey().generatedAlwaysAsIdentity(),
    stream: text().notNull(),
    /** 1, 2, 3… within the stream: a gap is a deleted row. */
    seq: integer().notNull(),
    orderId: uuid(),
    /** clock_timestamp(), so that events of one transaction keep their order in time. */
    at: timestamptz('at').notNull(),
    kind: text().notNull(),
    data: jsonb().notNull(),
    prevHash: text().notNull(),
    hash: text().notNull(),
  },
  (t) => [uniqueIndex('payment_events_stream_seq_idx').on(t.stream, t.seq), index('payment_events_order_idx').on(t.orderId)],
);

/**
 * Request counters for the rate limits on the mutations (server/http/rate-limit): one row per bucket
 * (`session:{customerId}`, `address:{client address}`), holding the hits of its current fixed window.
 * In PostgreSQL, not in memory, so the limits hold across app instances. A bucket's row is reset by
 * the first hit of a new window; rows whose window has ended are deleted by the key-cleanup job.
 */
export const rateLimits = pgTable(
  'rate_limits',
  {
    bucket: text().primaryKey(),
    windowStart: timestamptz('window_start').notNull(),
    /** When the window frees: Retry-After counts down to it, and cleanup deletes the row after it. */
    windowEndsAt: timestamptz('window_ends_at').notNull(),
    hits: integer().notNull(),
  },
  (t) => [index('rate_limits_window_ends_at_idx').on(t.windowEndsAt)],
);
