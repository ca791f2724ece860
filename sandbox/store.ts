/**
 * The sandbox's persistent state: its own schema `psp_sandbox`, created idempotently at start-up.
 *
 * Everything that a real gateway would remember lives here, not in process memory: signing keys,
 * trades, the charge ledger and the notification schedule. That is what lets the sandbox be restarted
 * (or run as two processes) without losing a trade or a pending notification, and what makes
 * `GET /ledger` trustworthy as the ground truth the tests and drills count.
 *
 * The sandbox shares no code with the app: it only talks to it over HTTP, like a real gateway.
 */
import { randomInt } from 'node:crypto';
import postgres from 'postgres';
import { generateRsaKeyPair } from './keys';

export type Sql = postgres.Sql;
export type Tx = postgres.TransactionSql;
/** Anything that runs a query: the pool or an open transaction. */
export type Queryable = Sql | Tx;

/** A fixed key for the start-up advisory lock (any constant works; this one spells "pspsbx"). */
const SCHEMA_LOCK_KEY = 0x707370736278;

const SCHEMA_SQL = `
CREATE SCHEMA IF NOT EXISTS psp_sandbox;

-- The gateway's own signing key, one per emulated gateway ("Alipay platform key").
CREATE TABLE IF NOT EXISTS psp_sandbox.platform_keys (
  gateway          text PRIMARY KEY,
  private_key_pem  text NOT NULL,
  public_key_pem   text NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now()
);

-- Merchant apps. The private key is kept only because the sandbox doubles as the developer console
-- that hands it out (GET /sandbox/credentials); the gateway itself only ever uses the public key.
CREATE TABLE IF NOT EXISTS psp_sandbox.alipay_apps (
  app_id               text PRIMARY KEY,
  seller_id            text NOT NULL,
  app_private_key_pem  text NOT NULL,
  app_public_key_pem   text NOT NULL,
  created_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS psp_sandbox.alipay_trades (
  app_id            text NOT NULL REFERENCES psp_sandbox.alipay_apps (app_id),
  out_trade_no      text NOT NULL,
  trade_no          text NOT NULL UNIQUE,
  subject           text NOT NULL,
  total_amount_fen  bigint NOT NULL CHECK (total_amount_fen > 0),
  status            text NOT NULL
                    CHECK (status IN ('WAIT_BUYER_PAY', 'TRADE_SUCCESS', 'TRADE_FINISHED', 'TRADE_CLOSED')),
  buyer_id          text,
  buyer_logon_id    text,
  notify_url        text,
  gmt_create        timestamptz NOT NULL DEFAULT now(),
  gmt_payment       timestamptz,
  gmt_close         timestamptz,
  PRIMARY KEY (app_id, out_trade_no)
);

-- Every charge attempt, successful or declined.
CREATE TABLE IF NOT EXISTS psp_sandbox.charges (
  id                bigserial PRIMARY KEY,
  gateway           text NOT NULL,
  merchant_id       text NOT NULL,
  out_trade_no      text NOT NULL,
  amount_minor      bigint NOT NULL,
  currency          text NOT NULL,
  status            text NOT NULL CHECK (status IN ('succeeded', 'declined')),
  gateway_trade_no  text,
  decline_code      text,
  buyer_id          text,
  created_at        timestamptz NOT NULL DEFAULT now()
);
-- Belt and braces under the per-trade lock: for gateways that deduplicate by the merchant's order
-- number (Alipay, WeChat Pay, 2C2P), the database itself refuses a second successful charge, so a bug
-- in the sandbox's locking can only surface as an error. Stripe has no such rule: a second
-- PaymentIntent for a paid order really charges again, and the ledger must show that double charge.
DROP INDEX IF EXISTS psp_sandbox.charges_one_success_per_order;
CREATE UNIQUE INDEX IF NOT EXISTS charges_one_success_per_trade
  ON psp_sandbox.charges (gateway, merchant_id, out_trade_no) WHERE status = 'succeeded' AND gateway <> 'stripe';
CREATE INDEX IF NOT EXISTS charges_by_out_trade_no ON psp_sandbox.charges (out_trade_no, id);

-- Every refund the merchant asked for, one row per (gateway, merchant, refund id): the gateways'
-- own idempotency rule for refunds (Alipay out_request_no, WeChat out_refund_no, Stripe's refund
-- idempotency key, 2C2P's refund reference), so the same id can never refund twice.
CREATE TABLE IF NOT EXISTS psp_sandbox.refunds (
  id                 bigserial PRIMARY KEY,
  gateway            text NOT NULL,
  merchant_id        text NOT NULL,
  out_trade_no       text NOT NULL,
  gateway_trade_no   text NOT NULL,
  refund_id          text NOT NULL,
  gateway_refund_id  text NOT NULL,
  amount_minor       bigint NOT NULL CHECK (amount_minor > 0),
  currency           text NOT NULL,
  status             text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
  created_at         timestamptz NOT NULL DEFAULT now(),
  settled_at         timestamptz,
  UNIQUE (gateway, merchant_id, refund_id)
);
CREATE INDEX IF NOT EXISTS refunds_by_out_trade_no ON psp_sandbox.refunds (out_trade_no, id);
CREATE INDEX IF NOT EXISTS refunds_by_charge ON psp_sandbox.refunds (gateway, gateway_trade_no);

-- One row per notification (the thing Alipay retries); its schedule is polled by every sandbox
-- process, so delivery survives restarts and never depends on an in-memory timer.
CREATE TABLE IF NOT EXISTS psp_sandbox.notifications (
  id               bigserial PRIMARY KEY,
  gateway          text NOT NULL,
  merchant_id      text NOT NULL,
  out_trade_no     text NOT NULL,
  notify_id        text NOT NULL UNIQUE,
  notify_url       text NOT NULL,
  fields           jsonb NOT NULL,
  deliveries       integer NOT NULL DEFAULT 0,
  state            text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'acknowledged', 'exhausted')),
  next_attempt_at  timestamptz NOT NULL DEFAULT now(),
  lease_until      timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS notifications_due
  ON psp_sandbox.notifications (next_attempt_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS notifications_by_trade
  ON psp_sandbox.notifications (gateway, merchant_id, out_trade_no);

-- Every delivery attempt, scheduled or sent by the test tool, with what the receiver answered.
CREATE TABLE IF NOT EXISTS psp_sandbox.notification_attempts (
  id               bigserial PRIMARY KEY,
  notification_id  bigint REFERENCES psp_sandbox.notifications (id),
  gateway          text NOT NULL,
  out_trade_no     text NOT NULL,
  source           text NOT NULL CHECK (source IN ('schedule', 'tool')),
  http_status      integer,
  response_body    text,
  error            text,
  acknowledged     boolean NOT NULL,
  at               timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS notification_attempts_by_trade
  ON psp_sandbox.notification_attempts (out_trade_no, id);

-- What the daily statements say that the ledger does not (POST /sandbox/statements/discrepancies,
-- sandbox/statements.ts): kept here so a restarted sandbox still serves the same statements. The
-- index is made only when missing: CREATE INDEX locks its table even when there is nothing to do,
-- and a running sandbox on the same database would wait on a start-up that takes that lock.
CREATE TABLE IF NOT EXISTS psp_sandbox.statement_discrepancies (
  id                bigserial PRIMARY KEY,
  gateway           text NOT NULL CHECK (gateway IN ('alipay', 'wechatpay', 'stripe', '2c2p')),
  bill_date         date NOT NULL,
  kind              text NOT NULL
                    CHECK (kind IN ('unknown_payment', 'missing_payment', 'amount_differs', 'missing_refund', 'fee_differs')),
  merchant_id       text,
  out_trade_no      text,
  refund_id         text,
  amount_minor      bigint,
  currency          text,
  gateway_trade_no  text,
  at                timestamptz,
  created_at        timestamptz NOT NULL DEFAULT now()
);
DO $$
BEGIN
  IF to_regclass('psp_sandbox.statement_discrepancies_by_day') IS NULL THEN
    CREATE INDEX statement_discrepancies_by_day ON psp_sandbox.statement_discrepancies (gateway, bill_date);
  END IF;
  -- Tables made before fee_differs: widen the kind rule, only when it lacks the kind (ALTER TABLE,
  -- like CREATE INDEX, locks the table even when there is nothing to do).
  IF NOT EXISTS (SELECT 1 FROM pg_constraint
                  WHERE conrelid = 'psp_sandbox.statement_discrepancies'::regclass
                    AND conname = 'statement_discrepancies_kind_check'
                    AND pg_get_constraintdef(oid) LIKE '%fee_differs%') THEN
    ALTER TABLE psp_sandbox.statement_discrepancies DROP CONSTRAINT IF EXISTS statement_discrepancies_kind_check;
    ALTER TABLE psp_sandbox.statement_discrepancies ADD CONSTRAINT statement_discrepancies_kind_check
      CHECK (kind IN ('unknown_payment', 'missing_payment', 'amount_differs', 'missing_refund', 'fee_differs'));
  END IF;
END
$$;
`;

export function openSql(databaseUrl: string): Sql {
  return postgres(databaseUrl, {
    // Enough for 50 concurrent trade.pay calls to queue without starving the notifier.
    max: 10,
    onnotice: () => {},
    // bigint columns (fen, ids) come back as strings; callers convert explicitly.
  });
}

export interface AlipayIdentity {
  appId: string;
  sellerId: string;
  appPrivateKeyPem: string;
  appPublicKeyPem: string;
  platformPrivateKeyPem: string;
  platformPublicKeyPem: string;
}

function randomDigits(count: number): string {
  let out = '';
  for (let i = 0; i < count; i += 1) out += String(randomInt(10));
  return out;
}

/**
 * Creates the shared schema, then runs `setUp` (each gateway module's own DDL and key loading) in the
 * same transaction.
 *
 * Guarded by a transaction-scoped advisory lock: two sandbox processes starting at once would
 * otherwise race on CREATE TABLE IF NOT EXISTS (which is not concurrency-safe in PostgreSQL) and each
 * generate their own "first" key pair.
 */
export async function migrate<T>(sql: Sql, setUp: (tx: Tx) => Promise<T>): Promise<T> {
  const result = await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${SCHEMA_LOCK_KEY})`;
    await tx.unsafe(SCHEMA_SQL).simple();
    return { value: await setUp(tx) };
  });
  return result.value as T;
}

/** Alipay's platform key and the merchant app, created on the very first start and kept. */
export async function loadOrCreateAlipayIdentity(tx: Tx): Promise<AlipayIdentity> {
  {
    const existingPlatform = await tx<{ private_key_pem: string; public_key_pem: string }[]>`
      SELECT private_key_pem, public_key_pem FROM psp_sandbox.platform_keys WHERE gateway = 'alipay'`;
    let platform = existingPlatform[0];
    if (!platform) {
      const pair = await generateRsaKeyPair();
      await tx`
        INSERT INTO psp_sandbox.platform_keys (gateway, private_key_pem, public_key_pem)
        VALUES ('alipay', ${pair.privateKeyPem}, ${pair.publicKeyPem})`;
      platform = { private_key_pem: pair.privateKeyPem, public_key_pem: pair.publicKeyPem };
    }

    const existingApp = await tx<
      { app_id: string; seller_id: string; app_private_key_pem: string; app_public_key_pem: string }[]
    >`SELECT app_id, seller_id, app_private_key_pem, app_public_key_pem
        FROM psp_sandbox.alipay_apps ORDER BY created_at, app_id LIMIT 1`;
    let app = existingApp[0];
    if (!app) {
      const pair = await generateRsaKeyPair();
      // Alipay app ids are 16 digits starting with the year they were created; seller ids (PIDs) are
      // 16 digits starting with 2088.
      app = {
        app_id: `2021${randomDigits(12)}`,
        seller_id: `2088${randomDigits(12)}`,
        app_private_key_pem: pair.privateKeyPem,
        app_public_key_pem: pair.publicKeyPem,
      };
      await tx`
        INSERT INTO psp_sandbox.alipay_apps (app_id, seller_id, app_private_key_pem, app_public_key_pem)
        VALUES (${app.app_id}, ${app.seller_id}, ${app.app_private_key_pem}, ${app.app_public_key_pem})`;
    }

    return {
      appId: app.app_id,
      sellerId: app.seller_id,
      appPrivateKeyPem: app.app_private_key_pem,
      appPublicKeyPem: app.app_public_key_pem,
      platformPrivateKeyPem: platform.private_key_pem,
      platformPublicKeyPem: platform.public_key_pem,
    };
  }
}

// ---------------------------------------------------------------------------------------------
// Ledger

export interface ChargeRecord {
  gateway: string;
  merchantId: string;
  outTradeNo: string;
  amountMinor: bigint;
  currency: string;
  status: 'succeeded' | 'declined';
  gatewayTradeNo: string | null;
  declineCode: string | null;
  buyerId: string | null;
}

export async function recordCharge(db: Queryable, charge: ChargeRecord): Promise<void> {
  await db`
    INSERT INTO psp_sandbox.charges
      (gateway, merchant_id, out_trade_no, amount_minor, currency, status, gateway_trade_no,
       decline_code, buyer_id)
    VALUES (${charge.gateway}, ${charge.merchantId}, ${charge.outTradeNo}, ${charge.amountMinor.toString()},
            ${charge.currency}, ${charge.status}, ${charge.gatewayTradeNo}, ${charge.declineCode},
            ${charge.buyerId})`;
}

export interface RefundRecord {
  gateway: string;
  merchantId: string;
  outTradeNo: string;
  gatewayTradeNo: string;
  refundId: string;
  gatewayRefundId: string;
  amountMinor: bigint;
  currency: string;
  status: 'pending' | 'succeeded' | 'failed';
}

export interface StoredRefund extends RefundRecord {
  createdAt: Date;
}

interface RefundDbRow {
  gateway: string;
  merchant_id: string;
  out_trade_no: string;
  gateway_trade_no: string;
  refund_id: string;
  gateway_refund_id: string;
  amount_minor: string;
  currency: string;
  status: 'pending' | 'succeeded' | 'failed';
  created_at: Date;
}

function toStoredRefund(row: RefundDbRow): StoredRefund {
  return {
    gateway: row.gateway,
    merchantId: row.merchant_id,
    outTradeNo: row.out_trade_no,
    gatewayTradeNo: row.gateway_trade_no,
    refundId: row.refund_id,
    gatewayRefundId: row.gateway_refund_id,
    amountMinor: BigInt(row.amount_minor),
    currency: row.currency,
    status: row.status,
    createdAt: row.created_at,
  };
}

/**
 * Records a refund, or finds the one already recorded under the same (gateway, merchant, refund id):
 * `created` is false for a repeat, whose stored row is returned unchanged. Call it inside the
 * transaction that holds the charge's lock, after checking the refundable balance
 * (refundedMinor), so two refunds of one charge can never both pass the check.
 */
export async function recordRefund(db: Queryable, refund: RefundRecord): Promise<{ created: boolean; refund: StoredRefund }> {
  const inserted = await db<RefundDbRow[]>`
    INSERT INTO psp_sandbox.refunds
      (gateway, merchant_id, out_trade_no, gateway_trade_no, refund_id, gateway_refund_id, amount_minor,
       currency, status, settled_at)
    VALUES (${refund.gateway}, ${refund.merchantId}, ${refund.outTradeNo}, ${refund.gatewayTradeNo},
            ${refund.refundId}, ${refund.gatewayRefundId}, ${refund.amountMinor.toString()}, ${refund.currency},
            ${refund.status}, ${refund.status === 'pending' ? null : new Date()})
    ON CONFLICT (gateway, merchant_id, refund_id) DO NOTHING
    RETURNING gateway, merchant_id, out_trade_no, gateway_trade_no, refund_id, gateway_refund_id,
              amount_minor, currency, status, created_at`;
  if (inserted[0]) return { created: true, refund: toStoredRefund(inserted[0]) };
  const existing = await findRefund(db, refund.gateway, refund.merchantId, refund.refundId);
  if (!existing) throw new Error(`refund ${refund.refundId} conflicted but cannot be read`);
  return { created: false, refund: existing };
}

export async function findRefund(db: Queryable, gateway: string, merchantId: string, refundId: string): Promise<StoredRefund | undefined> {
  const rows = await db<RefundDbRow[]>`
    SELECT gateway, merchant_id, out_trade_no, gateway_trade_no, refund_id, gateway_refund_id, amount_minor,
           currency, status, created_at
      FROM psp_sandbox.refunds
     WHERE gateway = ${gateway} AND merchant_id = ${merchantId} AND refund_id = ${refundId}`;
  return rows[0] ? toStoredRefund(rows[0]) : undefined;
}

/** The refunds of one charge (for list/query endpoints), oldest first. */
export async function refundsOfCharge(db: Queryable, gateway: string, merchantId: string, gatewayTradeNo: string): Promise<StoredRefund[]> {
  const rows = await db<RefundDbRow[]>`
    SELECT gateway, merchant_id, out_trade_no, gateway_trade_no, refund_id, gateway_refund_id, amount_minor,
           currency, status, created_at
      FROM psp_sandbox.refunds
     WHERE gateway = ${gateway} AND merchant_id = ${merchantId} AND gateway_trade_no = ${gatewayTradeNo}
     ORDER BY id`;
  return rows.map(toStoredRefund);
}

/** What has been refunded (or is being refunded) of one charge: pending and succeeded refunds count. */
export async function refundedMinor(db: Queryable, gateway: string, merchantId: string, gatewayTradeNo: string): Promise<bigint> {
  const rows = await db<{ total: string }[]>`
    SELECT coalesce(sum(amount_minor), 0)::text AS total
      FROM psp_sandbox.refunds
     WHERE gateway = ${gateway} AND merchant_id = ${merchantId} AND gateway_trade_no = ${gatewayTradeNo}
       AND status IN ('pending', 'succeeded')`;
  return BigInt(rows[0]?.total ?? '0');
}

/** Moves a pending refund to its final state (a no-op when it is already final). */
export async function settleRefund(
  db: Queryable,
  gateway: string,
  merchantId: string,
  refundId: string,
  status: 'succeeded' | 'failed',
): Promise<void> {
  await db`
    UPDATE psp_sandbox.refunds SET status = ${status}, settled_at = now()
     WHERE gateway = ${gateway} AND merchant_id = ${merchantId} AND refund_id = ${refundId} AND status = 'pending'`;
}

export interface LedgerRefund {
  gateway: string;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  status: 'pending' | 'succeeded' | 'failed';
  refundId: string;
  gatewayRefundId: string;
  gatewayTradeNo: string;
  createdAt: string;
}

export interface LedgerCharge {
  gateway: string;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  status: 'succeeded' | 'declined';
  gatewayTradeNo: string | null;
  createdAt: string;
}

export interface LedgerNotification {
  gateway: string;
  outTradeNo: string;
  attempt: number;
  acknowledged: boolean;
  at: string;
}

export interface Ledger {
  charges: LedgerCharge[];
  notifications: LedgerNotification[];
  refunds: LedgerRefund[];
}

export async function readLedger(sql: Sql, outTradeNo: string | null): Promise<Ledger> {
  const charges = await sql<
    {
      gateway: string;
      out_trade_no: string;
      amount_minor: string;
      currency: string;
      status: 'succeeded' | 'declined';
      gateway_trade_no: string | null;
      created_at: Date;
    }[]
  >`
    SELECT gateway, out_trade_no, amount_minor, currency, status, gateway_trade_no, created_at
      FROM psp_sandbox.charges
     WHERE ${outTradeNo}::text IS NULL OR out_trade_no = ${outTradeNo}
     ORDER BY id`;
  // `attempt` numbers every delivery of one order's notifications (scheduled and tool-sent alike) in
  // the order they were sent, so "3 attempts, the last acknowledged" reads straight off the ledger.
  const notifications = await sql<{ gateway: string; out_trade_no: string; attempt: string; acknowledged: boolean; at: Date }[]>`
    SELECT gateway, out_trade_no, acknowledged, at,
           row_number() OVER (PARTITION BY gateway, out_trade_no ORDER BY at, id) AS attempt
      FROM psp_sandbox.notification_attempts
     WHERE ${outTradeNo}::text IS NULL OR out_trade_no = ${outTradeNo}
     ORDER BY at, id`;
  const refunds = await sql<RefundDbRow[]>`
    SELECT gateway, merchant_id, out_trade_no, gateway_trade_no, refund_id, gateway_refund_id, amount_minor,
           currency, status, created_at
      FROM psp_sandbox.refunds
     WHERE ${outTradeNo}::text IS NULL OR out_trade_no = ${outTradeNo}
     ORDER BY id`;
  return {
    refunds: refunds.map((row) => ({
      gateway: row.gateway,
      outTradeNo: row.out_trade_no,
      amountMinor: Number(row.amount_minor),
      currency: row.currency,
      status: row.status,
      refundId: row.refund_id,
      gatewayRefundId: row.gateway_refund_id,
      gatewayTradeNo: row.gateway_trade_no,
      createdAt: row.created_at.toISOString(),
    })),
    charges: charges.map((row) => ({
      gateway: row.gateway,
      outTradeNo: row.out_trade_no,
      // Integer fen as a JS number: exact below 2^53, far above the 100,000,000.00 yuan cap.
      amountMinor: Number(row.amount_minor),
      currency: row.currency,
      status: row.status,
      gatewayTradeNo: row.gateway_trade_no,
      createdAt: row.created_at.toISOString(),
    })),
    notifications: notifications.map((row) => ({
      gateway: row.gateway,
      outTradeNo: row.out_trade_no,
      attempt: Number(row.attempt),
      acknowledged: row.acknowledged,
      at: row.at.toISOString(),
    })),
  };
}

// ---------------------------------------------------------------------------------------------
// Notification schedule

export interface NotificationRow {
  id: string;
  gateway: string;
  merchantId: string;
  outTradeNo: string;
  notifyId: string;
  notifyUrl: string;
  fields: Record<string, string>;
  deliveries: number;
}

interface NotificationDbRow {
  id: string;
  gateway: string;
  merchant_id: string;
  out_trade_no: string;
  notify_id: string;
  notify_url: string;
  fields: Record<string, string>;
  deliveries: number;
}

function toNotificationRow(row: NotificationDbRow): NotificationRow {
  return {
    id: row.id,
    gateway: row.gateway,
    merchantId: row.merchant_id,
    outTradeNo: row.out_trade_no,
    notifyId: row.notify_id,
    notifyUrl: row.notify_url,
    fields: row.fields,
    deliveries: row.deliveries,
  };
}

/**
 * Enqueues a notification due now. Called inside the charge's transaction (an outbox): the
 * notification exists if and only if the charge committed.
 */
export async function enqueueNotification(
  db: Queryable,
  notification: {
    gateway: string;
    merchantId: string;
    outTradeNo: string;
    notifyId: string;
    notifyUrl: string;
    fields: Record<string, string>;
  },
): Promise<void> {
  await db`
    INSERT INTO psp_sandbox.notifications
      (gateway, merchant_id, out_trade_no, notify_id, notify_url, fields)
    VALUES (${notification.gateway}, ${notification.merchantId}, ${notification.outTradeNo},
            ${notification.notifyId}, ${notification.notifyUrl}, ${db.json(notification.fields)})`;
}

/** The most recent notification of one order, if any (used by the notification test tool). */
export async function findNotification(
  db: Queryable,
  gateway: string,
  merchantId: string,
  outTradeNo: string,
): Promise<NotificationRow | undefined> {
  const rows = await db<NotificationDbRow[]>`
    SELECT id, gateway, merchant_id, out_trade_no, notify_id, notify_url, fields, deliveries
      FROM psp_sandbox.notifications
     WHERE gateway = ${gateway} AND merchant_id = ${merchantId} AND out_trade_no = ${outTradeNo}
     ORDER BY id DESC LIMIT 1`;
  const row = rows[0];
  return row ? toNotificationRow(row) : undefined;
}

export interface ClaimedNotification extends NotificationRow {
  /** PostgreSQL's clock at the claim: the base of the next retry, so app and DB clocks never mix. */
  claimedAt: Date;
}

/**
 * Claims due notifications by giving each a lease.
 *
 * `FOR UPDATE SKIP LOCKED` lets several sandbox processes poll the same table without ever claiming
 * the same row twice; the lease (rather than a row lock held for the whole delivery) keeps no
 * transaction open across an HTTP call, and if a process dies mid-delivery the lease simply runs out
 * and another poll delivers again (at-least-once, as Alipay itself is).
 */
export async function claimDueNotifications(sql: Sql, limit: number, leaseSeconds: number): Promise<ClaimedNotification[]> {
  const rows = await sql<(NotificationDbRow & { claimed_at: Date })[]>`
    UPDATE psp_sandbox.notifications n
       SET lease_until = now() + make_interval(secs => ${leaseSeconds})
     WHERE n.id IN (
             SELECT id FROM psp_sandbox.notifications
              WHERE state = 'pending'
                AND next_attempt_at <= now()
                AND (lease_until IS NULL OR lease_until < now())
              ORDER BY next_attempt_at
              LIMIT ${limit}
                FOR UPDATE SKIP LOCKED)
    RETURNING n.id, n.gateway, n.merchant_id, n.out_trade_no, n.notify_id, n.notify_url, n.fields,
              n.deliveries, now() AS claimed_at`;
  return rows.map((row) => ({ ...toNotificationRow(row), claimedAt: row.claimed_at }));
}

export interface DeliveryResult {
  httpStatus: number | null;
  responseBody: string | null;
  error: string | null;
  acknowledged: boolean;
  startedAt: Date;
}

/**
 * Records one scheduled delivery and moves the schedule on, in one transaction: acknowledged →
 * done; otherwise the next attempt after `nextDelayMs`, or exhausted when there is none.
 */
export async function completeScheduledDelivery(
  sql: Sql,
  notification: ClaimedNotification,
  result: DeliveryResult,
  nextDelayMs: number | null,
): Promise<void> {
  await sql.begin(async (tx) => {
    await insertAttempt(tx, notification, 'schedule', result);
    const state = result.acknowledged ? 'acknowledged' : nextDelayMs === null ? 'exhausted' : 'pending';
    const nextAt = new Date(notification.claimedAt.getTime() + (nextDelayMs ?? 0));
    await tx`
      UPDATE psp_sandbox.notifications
         SET deliveries = deliveries + 1,
             state = ${state},
             next_attempt_at = ${nextAt},
             lease_until = NULL
       WHERE id = ${notification.id}`;
  });
}

export async function insertAttempt(
  db: Queryable,
  notification: { id: string | null; gateway: string; outTradeNo: string },
  source: 'schedule' | 'tool',
  result: DeliveryResult,
): Promise<void> {
  await db`
    INSERT INTO psp_sandbox.notification_attempts
      (notification_id, gateway, out_trade_no, source, http_status, response_body, error, acknowledged, at)
    VALUES (${notification.id}, ${notification.gateway}, ${notification.outTradeNo}, ${source},
            ${result.httpStatus}, ${result.responseBody}, ${result.error}, ${result.acknowledged},
            ${result.startedAt})`;
}
