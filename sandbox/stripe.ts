/**
 * The sandbox's Stripe: the v1 PaymentIntents API on its real paths, close enough that the official
 * stripe-node SDK (23.1) talks to it unchanged — `new Stripe(secretKey, { host, port, protocol: 'http' })`.
 *
 *   POST /v1/payment_intents                  create (confirm=true charges at once)
 *   POST /v1/payment_intents/{id}/confirm     confirm, e.g. again after a decline with another card — also
 *                                             with the publishable key and client_secret, as Stripe.js does
 *   POST /v1/payment_intents/{id}/cancel      cancel an unpaid PaymentIntent (a succeeded, processing or
 *                                             canceled one: 400 payment_intent_unexpected_state)
 *   GET  /v1/payment_intents/{id}             retrieve
 *   POST /v1/payment_intents/{id}             update: amount, currency, payment method, capture method until it is
 *                                             charged; metadata, description, receipt_email always (stripe-updates.ts)
 *   GET  /v1/payment_intents                  list, newest first (created[gte…], starting_after, ending_before, limit)
 *   GET  /v1/payment_intents/search           search: metadata['out_trade_no']:'PO…' (see stripe-search.ts)
 *   POST /v1/refunds                          refund a succeeded PaymentIntent (payment_intent or charge,
 *                                             amount, reason, metadata); refund.created + charge.refunded
 *   GET  /v1/refunds                          list, newest first (payment_intent, charge, starting_after, limit)
 *   GET  /v1/refunds/{id}                     retrieve; POST updates its metadata (refund.updated)
 *   GET  /v1/charges[/{id}]                   a PaymentIntent's charge attempts: list (payment_intent, both cursors) /
 *                                             retrieve (stripe-charges.ts)
 *   GET  /v1/balance_transactions[/{id}]      the balance: list / retrieve, from the ledger (stripe-balance.ts)
 *   expand[]                                  on PaymentIntents, refunds and charges, and data.… in their lists
 *                                             (stripe-expand.ts)
 *   GET  /v1/events[/{id}]                    list (30 days, both cursors, type/types/created filters) / retrieve (stripe-events.ts)
 *   POST /v1/webhook_endpoints                create an endpoint (url, enabled_events); its secret is in this answer only
 *   GET  /v1/webhook_endpoints[/{id}]         list / retrieve; POST /{id} updates (disabled, …); DELETE /{id}
 *   GET  /stripe-js/v3/ (+ /elements/card)    the sandbox's Stripe.js and its card iframe (stripe-js.ts)
 *   POST /sandbox/stripe/notify               the notification test tool (not Stripe's)
 *   POST /sandbox/stripe/buyer-pays           the buyer confirms the order's open PaymentIntent (not Stripe's)
 *   POST /sandbox/stripe/accounts             opens another merchant's test account (not Stripe's)
 *
 * What it keeps of Stripe's rules (docs/gateways.md):
 *  - Authentication: each test account owns a secret key (sk_test_…) and a publishable key
 *    (pk_test_…); a key no account owns is the 401 Stripe answers for an invalid API key (type
 *    invalid_request_error, "Invalid API Key provided: sk_test_****…"). Every object, endpoint and
 *    event belongs to one account and is invisible to the others. Idempotency keys are scoped to the key.
 *  - Publishable keys do what Stripe.js does and nothing else: confirm a PaymentIntent and read it
 *    back, each with that PaymentIntent's client_secret (a wrong one is a 400
 *    payment_intent_invalid_parameter), the key as Bearer or as Stripe.js's `key` parameter; the
 *    answer shows the client-side subset of the PaymentIntent. Anything else is a 401 "This API call
 *    cannot be made with a publishable API key".
 *  - Idempotency (https://docs.stripe.com/api/idempotent_requests): a POST's status and body are
 *    stored once the endpoint starts executing — declines (402) and 500s included — and replayed for
 *    24 h with `Idempotent-Replayed: true`. Validation failures and concurrent duplicates are not
 *    stored. The same key with other parameters, or on another endpoint, is a 400 idempotency_error;
 *    a duplicate that arrives while the first is executing is a 409 idempotency_key_in_use with
 *    `Stripe-Should-Retry: true`. Keys live in PostgreSQL; the execution, its ledger rows, its events
 *    and the stored response commit in one transaction, so a crash stores nothing and a retry runs anew.
 *  - PaymentIntents: a decline leaves the PaymentIntent in `requires_payment_method` (confirmable
 *    again with another card); a success is `succeeded` with a `latest_charge`, and confirming it
 *    again is a 400 payment_intent_unexpected_state. Stripe does NOT deduplicate on our
 *    out_trade_no: a second PaymentIntent for a paid order is charged (the double charge the app must
 *    prevent), serialized per out_trade_no in PostgreSQL so the ledger counts it exactly.
 *  - Refunds (https://docs.stripe.com/api/refunds): only a succeeded PaymentIntent can be refunded, in
 *    one or more parts up to what it received (400 amount_too_large; charge_already_refunded once all
 *    of it is back); an unknown one is a 404 resource_missing. Stripe deduplicates refunds by the
 *    Idempotency-Key alone — metadata[refund_id] is the merchant's note, which the ledger files the
 *    refund under. Test-mode card refunds succeed at once, so no refund.updated follows.
 *  - Webhooks: payment_intent.created / succeeded / payment_failed / canceled, charge.succeeded /
 *    failed / refunded and refund.created events (each stored for GET /v1/events), POSTed as JSON with `Stripe-Signature: t=…,v1=HMAC-SHA256(whsec, "t.body")`; any 2xx
 *    acknowledges; retried for ~3 days. As on Stripe, where events go is account configuration only:
 *    every enabled endpoint whose enabled_events ('*' or a list) takes the type gets it, signed with
 *    that endpoint's own secret. An account with no endpoint gets no deliveries, whatever a
 *    PaymentIntent's metadata says. Events carry no `account`: Stripe sets it for Connect only.
 *
 * Files: stripe-form.ts (the bracket-notation encoding), stripe-objects.ts (the JSON Stripe answers
 * with), stripe-cards.ts (test cards), stripe-search.ts (the search query language), stripe-lists.ts
 * (cursor pagination), stripe-charges.ts, stripe-expand.ts, stripe-updates.ts,
 * stripe-webhooks.ts (signing, the retry schedule and the notification test tool) and stripe-js.ts
 * (Stripe.js and the card iframe).
 */
import { createHash, randomBytes } from 'node:crypto';
import type postgres from 'postgres';
import type { SandboxGatewayModule, SandboxRequest, SandboxResponse } from './gateway-module';
import { json, readBuyerPays } from './gateway-module';
import { enqueueNotification, recordCharge, recordRefund, refundedMinor, type Sql, type Tx } from './store';
import { cardByNumber, cardByPaymentMethodId, stripeTestBuyers, type TestCard } from './stripe-cards';
import {
  paramsHash,
  parseStripeForm,
  readBoolean,
  readHash,
  readInteger,
  readString,
  readStringArray,
  rejectUnknown,
  StripeParamError,
  type FormHash,
} from './stripe-form';
import {
  ACCOUNT_API_VERSION,
  base62,
  chargeObject,
  errorBody,
  eventObject,
  newId,
  newRequestId,
  OUT_TRADE_NO_KEY,
  paymentIntentObject,
  paymentMethodObject,
  REFUND_ID_KEY,
  refundObject,
  unixNow,
  type ChargeObject,
  type EventDataObject,
  type EventType,
  type LastPaymentError,
  type PaymentMethodObject,
  type NewPaymentIntent,
  type PaymentIntentObject,
  type PaymentIntentStatus,
  publicPaymentIntent,
  type PublicPaymentIntent,
  type RefundObject,
  type StripeErrorBody,
} from './stripe-objects';
import { parseSearchQuery, SearchQueryError, type SearchClause } from './stripe-search';
import { handleChallenge, newChallenge, type ChallengeOutcome, type ChallengeResult, type ChallengeView } from './stripe-authentication';
import { handleStripeJs, STRIPE_JS_PATH } from './stripe-js';
import { handleNotifyTool, stripeNotifier } from './stripe-webhooks';
import { EVENTS_SCHEMA_SQL, listEvents, retrieveEvent, unknownEnabledEvent } from './stripe-events';
import { CHARGES_SCHEMA_SQL, listCharges, retrieveCharge, savePaymentMethod } from './stripe-charges';
import { readExpand, type ExpandRoot } from './stripe-expand';
import {
  expandBody,
  listBalanceTransactions,
  retrieveBalanceTransaction,
  withChargeBalanceTransactions,
  withChargeBalanceTransactionsText,
} from './stripe-balance';
import { isBackwards, pageOf, readCursor, type Cursor } from './stripe-lists';
import { amountTooSmallMessage, minimumCharge } from './stripe-amounts';
import { feeContract } from './statements';
import { applyMetadata, refusedField, refusedFieldMessage, type MetadataPatch, type PaymentField } from './stripe-updates';

const GATEWAY = 'stripe';

// ---------------------------------------------------------------------------------------------
// Schema

const SCHEMA_SQL = `
-- The sandbox's Stripe test accounts, each owning its keys. The oldest is the one the "Dashboard"
-- (GET /sandbox/credentials) hands out; POST /sandbox/stripe/accounts opens more (another merchant).
CREATE TABLE IF NOT EXISTS psp_sandbox.stripe_accounts (
  account_id       text PRIMARY KEY,
  secret_key       text NOT NULL UNIQUE,
  publishable_key  text NOT NULL,
  webhook_secret   text NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now()
);

-- PaymentIntents as the API renders them (object), plus what is filtered, locked or kept private.
CREATE TABLE IF NOT EXISTS psp_sandbox.stripe_payment_intents (
  id            text PRIMARY KEY,
  -- Insertion order: "newest first" for list and search, and their pagination cursor.
  seq           bigserial NOT NULL UNIQUE,
  account_id    text NOT NULL,
  out_trade_no  text,
  status        text NOT NULL,
  object        jsonb NOT NULL,
  -- The card attached but not yet confirmed (status requires_confirmation): what confirm will charge.
  card_number   text,
  card_alias    text,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS stripe_payment_intents_by_out_trade_no
  ON psp_sandbox.stripe_payment_intents (account_id, out_trade_no);
CREATE INDEX IF NOT EXISTS stripe_payment_intents_newest
  ON psp_sandbox.stripe_payment_intents (account_id, seq DESC);

-- Every charge attempt (Stripe's Charge objects). in_shared_ledger = false marks a second successful
-- charge for one out_trade_no: Stripe makes it, but psp_sandbox.charges refuses a second success row.
CREATE TABLE IF NOT EXISTS psp_sandbox.stripe_charges (
  id                text PRIMARY KEY,
  payment_intent    text NOT NULL,
  account_id        text NOT NULL,
  out_trade_no      text NOT NULL,
  amount            bigint NOT NULL,
  currency          text NOT NULL,
  status            text NOT NULL CHECK (status IN ('succeeded', 'failed')),
  failure_code      text,
  decline_code      text,
  payment_method    text NOT NULL,
  in_shared_ledger  boolean NOT NULL,
  created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS stripe_charges_by_out_trade_no ON psp_sandbox.stripe_charges (out_trade_no, created_at);

-- Every event, with the exact JSON text that is delivered (and re-signed on each delivery).
CREATE TABLE IF NOT EXISTS psp_sandbox.stripe_events (
  id              text PRIMARY KEY,
  account_id      text NOT NULL,
  type            text NOT NULL,
  payment_intent  text NOT NULL,
  out_trade_no    text NOT NULL,
  payload         text NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS stripe_events_by_out_trade_no ON psp_sandbox.stripe_events (out_trade_no, type, created_at);

-- Refunds as the API renders them. The money side of each one is also in psp_sandbox.refunds (the
-- shared ledger), recorded in the same transaction; this table is what GET /v1/refunds reads.
CREATE TABLE IF NOT EXISTS psp_sandbox.stripe_refunds (
  id              text PRIMARY KEY,
  -- Insertion order: "newest first" for list, and its pagination cursor.
  seq             bigserial NOT NULL UNIQUE,
  account_id      text NOT NULL,
  payment_intent  text NOT NULL,
  charge          text NOT NULL,
  status          text NOT NULL,
  object          jsonb NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS stripe_refunds_by_payment_intent
  ON psp_sandbox.stripe_refunds (account_id, payment_intent, seq DESC);

-- Webhook endpoints (POST /v1/webhook_endpoints): the account's own delivery configuration. Each has
-- its own signing secret, returned only by create. Deleted endpoints are removed.
CREATE TABLE IF NOT EXISTS psp_sandbox.stripe_webhook_endpoints (
  id              text PRIMARY KEY,
  seq             bigserial NOT NULL UNIQUE,
  account_id      text NOT NULL,
  url             text NOT NULL,
  secret          text NOT NULL,
  enabled_events  jsonb NOT NULL,
  status          text NOT NULL CHECK (status IN ('enabled', 'disabled')),
  object          jsonb NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS stripe_webhook_endpoints_by_account
  ON psp_sandbox.stripe_webhook_endpoints (account_id, seq DESC);

-- 3-D Secure challenges: one per confirm of a card that asks for authentication. Only the newest
-- pending one of a PaymentIntent can settle it; a later confirm supersedes the earlier challenge.
CREATE TABLE IF NOT EXISTS psp_sandbox.stripe_authentications (
  id              text PRIMARY KEY,
  account_id      text NOT NULL,
  payment_intent  text NOT NULL,
  status          text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'canceled', 'superseded')),
  return_url      text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  settled_at      timestamptz
);

-- Added to tables made by earlier versions. Each change is made only when missing: ALTER TABLE and
-- CREATE INDEX lock their table even when there is nothing to do, and a running sandbox on the same
-- database (tests start several) would deadlock with a start-up that takes those locks.
DO $$
BEGIN
  -- An authorisation (capture_method manual, status requires_capture) lapses at capture_before.
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'psp_sandbox'
                   AND table_name = 'stripe_payment_intents' AND column_name = 'capture_before') THEN
    ALTER TABLE psp_sandbox.stripe_payment_intents ADD COLUMN capture_before timestamptz;
  END IF;
  IF to_regclass('psp_sandbox.stripe_payment_intents_to_lapse') IS NULL THEN
    CREATE INDEX stripe_payment_intents_to_lapse
      ON psp_sandbox.stripe_payment_intents (capture_before) WHERE status = 'requires_capture';
  END IF;
  -- An authorised charge is captured = false until the merchant captures it (amount_captured then);
  -- buyer_id is what the shared ledger files its capture under.
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'psp_sandbox'
                   AND table_name = 'stripe_charges' AND column_name = 'captured') THEN
    ALTER TABLE psp_sandbox.stripe_charges
      ADD COLUMN captured boolean NOT NULL DEFAULT true,
      ADD COLUMN amount_captured bigint,
      ADD COLUMN buyer_id text;
  END IF;
  IF to_regclass('psp_sandbox.stripe_authentications_by_intent') IS NULL THEN
    CREATE INDEX stripe_authentications_by_intent
      ON psp_sandbox.stripe_authentications (payment_intent) WHERE status = 'pending';
  END IF;
END
$$;

-- Stripe's idempotency layer: one stored response per (secret key, Idempotency-Key), kept 24 h.
CREATE TABLE IF NOT EXISTS psp_sandbox.stripe_idempotency_keys (
  scope            text NOT NULL,
  key              text NOT NULL,
  endpoint         text NOT NULL,
  params_hash      text NOT NULL,
  response_status  integer NOT NULL,
  response_body    text NOT NULL,
  request_id       text NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  expires_at       timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS stripe_idempotency_keys_expiry ON psp_sandbox.stripe_idempotency_keys (expires_at);
`;

/** Stripe prunes keys "after they're at least 24 hours old". */
const IDEMPOTENCY_KEY_TTL = '24 hours';
const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** Expired keys are deleted in bounded batches (at start-up and now and then), never in one long DELETE. */
const CLEANUP_BATCH = 500;

// ---------------------------------------------------------------------------------------------
// Account

export interface StripeIdentity {
  accountId: string;
  secretKey: string;
  publishableKey: string;
  webhookSecret: string;
}

/** An account as psp_sandbox.stripe_accounts holds it. */
interface AccountRow {
  account_id: string;
  secret_key: string;
  publishable_key: string;
  webhook_secret: string;
}

function identityOf(row: AccountRow): StripeIdentity {
  return { accountId: row.account_id, secretKey: row.secret_key, publishableKey: row.publishable_key, webhookSecret: row.webhook_secret };
}

async function loadOrCreateIdentity(tx: Tx): Promise<StripeIdentity> {
  const rows = await tx<AccountRow[]>`
    SELECT account_id, secret_key, publishable_key, webhook_secret
      FROM psp_sandbox.stripe_accounts ORDER BY created_at, account_id LIMIT 1`;
  const row = rows[0];
  if (row) {
    return identityOf(row);
  }
  return openAccount(tx);
}

/** A new test account, shaped like real ones: acct_1 + 15, keys sk_test_51 / pk_test_51 + the account's suffix + random, whsec_ + 32. */
async function openAccount(db: Sql | Tx): Promise<StripeIdentity> {
  const suffix = base62(15);
  const identity: StripeIdentity = {
    accountId: `acct_1${suffix}`,
    secretKey: `sk_test_51${suffix}${base62(82)}`,
    publishableKey: `pk_test_51${suffix}${base62(82)}`,
    webhookSecret: `whsec_${base62(32)}`,
  };
  await db`
    INSERT INTO psp_sandbox.stripe_accounts (account_id, secret_key, publishable_key, webhook_secret)
    VALUES (${identity.accountId}, ${identity.secretKey}, ${identity.publishableKey}, ${identity.webhookSecret})`;
  return identity;
}

/** The account that owns an API key, and which kind of key it is; undefined for a key no account owns. */
async function accountByKey(sql: Sql, key: string): Promise<{ identity: StripeIdentity; publishable: boolean } | undefined> {
  const [row] = await sql<AccountRow[]>`
    SELECT account_id, secret_key, publishable_key, webhook_secret
      FROM psp_sandbox.stripe_accounts WHERE secret_key = ${key} OR publishable_key = ${key} LIMIT 1`;
  if (!row) return undefined;
  return {
    identity: {
      accountId: row.account_id,
      secretKey: row.secret_key,
      publishableKey: row.publishable_key,
      webhookSecret: row.webhook_secret,
    },
    publishable: row.publishable_key === key,
  };
}

async function deleteExpiredKeys(db: Sql | Tx): Promise<void> {
  await db`
    DELETE FROM psp_sandbox.stripe_idempotency_keys
     WHERE ctid IN (SELECT ctid FROM psp_sandbox.stripe_idempotency_keys
                     WHERE expires_at <= now() LIMIT ${CLEANUP_BATCH})`;
}

// ---------------------------------------------------------------------------------------------
// Requests and answers

interface StripeContext {
  sql: Sql;
  identity: StripeIdentity;
  wakeNotifier(): void;
  deliveryTimeoutMs: number;
  searchLagMs: number;
  /** How long an authorisation can be captured (Stripe: 7 days for online card payments), time-scaled. */
  authorizationWindowMs: number;
}

interface ApiCall {
  requestId: string;
  /** The Stripe-Version the response is rendered in (the request's, or the account's). */
  apiVersion: string;
  /** sha256 of the secret key: idempotency keys are per key, and no secret is stored for them. */
  scope: string;
  idempotencyKey: string | null;
  /** Made with a publishable key (Stripe.js): answers show the client-side view of a PaymentIntent. */
  publishable: boolean;
  /** The sandbox as the caller reached it: where a 3-D Secure challenge is served. */
  baseUrl: string;
  /** expand[] of the request, checked against the object it answers with (sandbox/stripe-expand.ts). */
  expand?: { root: ExpandRoot; paths: string[] };
}

/**
 * A request the sandbox makes on Stripe's side (a buyer's confirm, a challenge answered, an
 * authorisation lapsing): no merchant key, no Idempotency-Key, the account's API version.
 */
function sandboxCall(baseUrl = ''): ApiCall {
  return { requestId: newRequestId(), apiVersion: ACCOUNT_API_VERSION, scope: '', idempotencyKey: null, publishable: false, baseUrl };
}

interface ApiAnswer {
  status: number;
  body: unknown;
}

/** An answer thrown from deep inside validation or execution. */
class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly error: StripeErrorBody,
  ) {
    super(error.message);
  }

  answer(): ApiAnswer {
    return { status: this.status, body: errorBody(this.error) };
  }
}

function invalidRequest(message: string, extra: Partial<StripeErrorBody> = {}, status = 400): ApiError {
  return new ApiError(status, { type: 'invalid_request_error', message, ...extra });
}

function fromParamError(err: StripeParamError): ApiError {
  return invalidRequest(err.message, {
    ...(err.param !== undefined ? { param: err.param } : {}),
    ...(err.code !== undefined ? { code: err.code } : {}),
  });
}

function render(call: ApiCall, status: number, body: string, extra: Record<string, string> = {}): SandboxResponse {
  return {
    status,
    headers: {
      'content-type': 'application/json',
      'request-id': call.requestId,
      'stripe-version': call.apiVersion,
      ...(call.idempotencyKey !== null ? { 'idempotency-key': call.idempotencyKey } : {}),
      // Publishable-key calls come from browsers on the merchant's origin (retrievePaymentIntent).
      ...(call.publishable ? { 'access-control-allow-origin': '*' } : {}),
      ...extra,
    },
    // Stripe pretty-prints its JSON; so does the sandbox. Charges name their balance transaction.
    body: withChargeBalanceTransactionsText(body),
  };
}

function renderAnswer(call: ApiCall, answer: ApiAnswer, extra: Record<string, string> = {}): SandboxResponse {
  return render(call, answer.status, JSON.stringify(answer.body, null, 2), extra);
}

function unrecognizedUrl(method: string, path: string): ApiError {
  return invalidRequest(
    `Unrecognized request URL (${method}: ${path}). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.`,
    {},
    404,
  );
}

function noSuchIntent(id: string, param = 'intent'): ApiError {
  return invalidRequest(`No such payment_intent: '${id}'`, { code: 'resource_missing', param }, 404);
}

/**
 * How Stripe shows a key in its errors: the key's kind (sk_test_, pk_live_, …) and its last four
 * characters, the rest as asterisks ("sk_test_****…LDER"). A key that would hide fewer than 8 of its
 * own characters (after its kind, if it has one) shows none of them, so a mistyped or truncated
 * secret is never echoed back [unverified: where Stripe draws that line].
 */
function maskKey(key: string): string {
  const kind = /^(?:sk|pk|rk)_(?:test|live)_/.exec(key)?.[0] ?? '';
  const rest = key.slice(kind.length);
  const shown = rest.length >= 12 ? rest.slice(-4) : '';
  return `${kind}${'*'.repeat(rest.length - shown.length)}${shown}`;
}

interface Authenticated {
  identity: StripeIdentity;
  /** The key used: idempotency keys are scoped to it. */
  key: string;
  /** A publishable key (pk_…): only what Stripe.js does with a client secret is allowed. */
  publishable: boolean;
}

const PUBLISHABLE_KEY_REFUSAL =
  'This API call cannot be made with a publishable API key. Please use a secret API key. You can find a list of your API keys at https://dashboard.stripe.com/account/apikeys.';

/**
 * Bearer (what stripe-node sends), Basic with the key as user name (what curl -u sends), or — as
 * Stripe.js sends its publishable key — a `key` form or query parameter. The key must belong to an
 * account: an unknown one is the 401 Stripe answers for an invalid API key, whose type is
 * invalid_request_error (not authentication_error: that is the SDK's class name for any 401).
 */
async function authenticate(sql: Sql, headers: SandboxRequest['headers'], paramKey: string | undefined): Promise<Authenticated | ApiError> {
  const header = headers.authorization ?? '';
  let key = '';
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(header);
  const basic = /^Basic\s+(\S+)\s*$/i.exec(header);
  if (bearer) key = bearer[1] ?? '';
  else if (basic)
    key =
      Buffer.from(basic[1] ?? '', 'base64')
        .toString('utf8')
        .split(':')[0] ?? '';
  else if (header === '' && paramKey !== undefined) key = paramKey;
  if (key === '') {
    return invalidRequest(
      "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/.",
      {},
      401,
    );
  }
  const found = /^[sp]k_test_[A-Za-z0-9_]+$/.test(key) ? await accountByKey(sql, key) : undefined;
  if (!found) return invalidRequest(`Invalid API Key provided: ${maskKey(key)}`, {}, 401);
  return { identity: found.identity, key, publishable: found.publishable };
}

// ---------------------------------------------------------------------------------------------
// Parameters

/** Stripe's presentment currencies (lowercase ISO 4217). */
const CURRENCIES = new Set(
  (
    'usd aed afn all amd ang aoa ars aud awg azn bam bbd bdt bgn bif bmd bnd bob brl bsd bwp byn bzd cad cdf chf ' +
    'clp cny cop crc cve czk djf dkk dop dzd egp etb eur fjd fkp gbp gel gip gmd gnf gtq gyd hkd hnl htg huf idr ' +
    'ils inr isk jmd jpy kes kgs khr kmf krw kyd kzt lak lbp lkr lrd lsl mad mdl mga mkd mmk mnt mop mur mvr mwk ' +
    'mxn myr mzn nad ngn nio nok npr nzd pab pen pgk php pkr pln pyg qar ron rsd rub rwf sar sbd scr sek sgd shp ' +
    'sle sos srd std szl thb tjs top try ttd twd tzs uah ugx uyu uzs vnd vuv wst xaf xcd xof xpf yer zar zmw'
  ).split(' '),
);
/** Stripe's ceiling: "Amount must be no more than 99999999" (eight digits in the smallest unit). */
const MAX_AMOUNT = 99_999_999;
const METADATA_MAX_KEYS = 50;
const METADATA_MAX_KEY_LENGTH = 40;
const METADATA_MAX_VALUE_LENGTH = 500;

const RETURN_URL_MESSAGE =
  'A `return_url` must be specified because this Payment Intent is configured to automatically accept the payment ' +
  'methods enabled in the Dashboard, some of which may require a full page redirect to succeed. If you do not want ' +
  'to accept redirect-based payment methods, set `automatic_payment_methods[enabled]` to `true` and ' +
  '`automatic_payment_methods[allow_redirects]` to `never` when creating Setup Intents and Payment Intents.';

function param<T>(read: () => T): T {
  try {
    return read();
  } catch (err) {
    if (err instanceof StripeParamError) throw fromParamError(err);
    throw err;
  }
}

function isAbsoluteHttpUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return url.protocol === 'http:' || url.protocol === 'https:';
  } catch {
    return false;
  }
}

function readMetadata(params: FormHash): Record<string, string> {
  const hash = param(() => readHash(params.metadata, 'metadata')) ?? {};
  const out: Record<string, string> = {};
  const keys = Object.keys(hash);
  if (keys.length > METADATA_MAX_KEYS) {
    throw invalidRequest(`Invalid metadata: metadata can have up to ${METADATA_MAX_KEYS} keys, but you passed in ${keys.length} keys.`, {
      param: 'metadata',
    });
  }
  for (const key of keys) {
    const name = `metadata[${key}]`;
    const value = param(() => readString(hash[key], name)) ?? '';
    if (key.length > METADATA_MAX_KEY_LENGTH) {
      throw invalidRequest(`Invalid metadata: metadata keys must be at most ${METADATA_MAX_KEY_LENGTH} characters long.`, { param: name });
    }
    if (value.length > METADATA_MAX_VALUE_LENGTH) {
      throw invalidRequest(`Invalid metadata: metadata values must be at most ${METADATA_MAX_VALUE_LENGTH} characters long.`, {
        param: name,
      });
    }
    if (value === '') continue; // an empty value unsets the key
    out[key] = value;
  }
  return out;
}

/** The card behind a payment method: a documented test PaymentMethod or raw test card data. */
interface ResolvedCard {
  card: TestCard;
  /** `pm_card_visa` when one was named; null for payment_method_data. */
  alias: string | null;
}

function readCard(params: FormHash): ResolvedCard | null {
  const paymentMethod = param(() => readString(params.payment_method, 'payment_method'));
  const data = param(() => readHash(params.payment_method_data, 'payment_method_data'));
  if (paymentMethod !== undefined && data !== undefined) {
    throw invalidRequest('You cannot provide both payment_method and payment_method_data.', { param: 'payment_method_data' });
  }
  if (paymentMethod !== undefined) {
    const card = cardByPaymentMethodId(paymentMethod);
    if (!card) {
      // [unverified] whether Stripe stores this answer; the sandbox refuses before creating anything.
      throw invalidRequest(`No such PaymentMethod: '${paymentMethod}'`, { code: 'resource_missing', param: 'payment_method' });
    }
    return { card, alias: paymentMethod };
  }
  if (data === undefined) return null;
  param(() => rejectUnknown(data, ['type', 'card', 'billing_details', 'metadata'], 'payment_method_data'));
  const type = param(() => readString(data.type, 'payment_method_data[type]'));
  if (type !== 'card') {
    throw invalidRequest('The PayOnce sandbox emulates card payments only: payment_method_data[type] must be card.', {
      param: 'payment_method_data[type]',
    });
  }
  const cardData = param(() => readHash(data.card, 'payment_method_data[card]'));
  if (!cardData)
    throw invalidRequest('Missing required param: payment_method_data[card].', {
      code: 'parameter_missing',
      param: 'payment_method_data[card]',
    });
  param(() => rejectUnknown(cardData, ['number', 'exp_month', 'exp_year', 'cvc'], 'payment_method_data[card]'));
  const number = param(() => readString(cardData.number, 'payment_method_data[card][number]')) ?? '';
  const card = cardByNumber(number);
  if (!card) {
    throw new ApiError(402, {
      type: 'card_error',
      code: 'incorrect_number',
      message: 'Your card number is incorrect. The PayOnce sandbox accepts Stripe’s documented test card numbers only.',
      param: 'payment_method_data[card][number]',
    });
  }
  return { card, alias: null };
}

interface CreateInput {
  intent: NewPaymentIntent;
  card: ResolvedCard | null;
  confirm: boolean;
  returnUrl: string | null;
  useStripeSdk: boolean;
}

const CREATE_PARAMS = [
  'amount',
  'currency',
  'metadata',
  'description',
  'payment_method',
  'payment_method_data',
  'allowed_payment_method_types',
  'payment_method_types',
  'automatic_payment_methods',
  'confirm',
  'return_url',
  'receipt_email',
  'use_stripe_sdk',
  'capture_method',
] as const;

const CAPTURE_METHODS = ['automatic', 'automatic_async', 'manual'] as const;
type CaptureMethod = (typeof CAPTURE_METHODS)[number];

function readCaptureMethod(params: FormHash): CaptureMethod {
  const value = param(() => readString(params.capture_method, 'capture_method'));
  if (value === undefined) return 'automatic_async';
  if (!(CAPTURE_METHODS as readonly string[]).includes(value)) {
    throw invalidRequest(`Invalid capture_method: must be one of ${CAPTURE_METHODS.join(', ')}`, { param: 'capture_method' });
  }
  return value as CaptureMethod;
}

function checkAmountRange(amount: number): void {
  if (amount < 1) {
    throw invalidRequest('This value must be greater than or equal to 1.', { code: 'parameter_invalid_integer', param: 'amount' });
  }
  if (amount > MAX_AMOUNT) {
    throw invalidRequest(`Amount must be no more than ${MAX_AMOUNT}`, { code: 'amount_too_large', param: 'amount' });
  }
}

/** Stripe's minimum charge in the currency (stripe-amounts.ts): 400 amount_too_small below it. */
function checkMinimum(amount: number, currency: string): void {
  const minimum = minimumCharge(currency);
  if (minimum !== undefined && amount < minimum) {
    throw invalidRequest(amountTooSmallMessage(currency, minimum), { code: 'amount_too_small', param: 'amount' });
  }
}

function readCurrency(text: string): string {
  const currency = text.toLowerCase();
  if (!CURRENCIES.has(currency)) {
    throw invalidRequest(`Invalid currency: ${text}. Stripe currently supports these currencies: ${[...CURRENCIES].join(', ')}`, {
      param: 'currency',
    });
  }
  return currency;
}

/** The API version that removed `payment_method_types` as a parameter (changelog 2026-09-30.endive). */
const NO_PAYMENT_METHOD_TYPES_SINCE = '2026-09-30';

function validateCreate(params: FormHash, apiVersion: string): CreateInput {
  param(() => rejectUnknown(params, CREATE_PARAMS));
  const amount = param(() => readInteger(params.amount, 'amount'));
  if (amount === undefined) throw invalidRequest('Missing required param: amount.', { code: 'parameter_missing', param: 'amount' });
  checkAmountRange(amount);
  const currencyText = param(() => readString(params.currency, 'currency'));
  if (currencyText === undefined)
    throw invalidRequest('Missing required param: currency.', { code: 'parameter_missing', param: 'currency' });
  const currency = readCurrency(currencyText);
  checkMinimum(amount, currency);
  const metadata = readMetadata(params);
  const description = param(() => readString(params.description, 'description')) ?? null;
  if (description !== null && description.length > 1000) {
    throw invalidRequest('Invalid string: description must be at most 1000 characters', { param: 'description' });
  }
  const receiptEmail = param(() => readString(params.receipt_email, 'receipt_email')) || null;
  const returnUrl = param(() => readString(params.return_url, 'return_url')) || null;
  if (returnUrl !== null && !isAbsoluteHttpUrl(returnUrl))
    throw invalidRequest('Not a valid URL', { param: 'return_url', code: 'url_invalid' });
  const confirm = param(() => readBoolean(params.confirm, 'confirm')) ?? false;

  const legacyTypes = param(() => readStringArray(params.payment_method_types, 'payment_method_types'));
  const allowedTypes = param(() => readStringArray(params.allowed_payment_method_types, 'allowed_payment_method_types'));
  const apmHash = param(() => readHash(params.automatic_payment_methods, 'automatic_payment_methods'));
  if (legacyTypes !== undefined && apiVersion.slice(0, 10) >= NO_PAYMENT_METHOD_TYPES_SINCE) {
    throw invalidRequest(
      `payment_method_types is no longer supported on API version ${apiVersion}. Use allowed_payment_method_types, or dynamic payment methods, instead.`,
      { code: 'payment_method_types_no_longer_supported', param: 'payment_method_types' },
    );
  }
  const chosen = [
    ['allowed_payment_method_types', allowedTypes],
    ['automatic_payment_methods', apmHash],
    ['payment_method_types', legacyTypes],
  ].filter(([, value]) => value !== undefined);
  if (chosen.length > 1) {
    throw invalidRequest(`You may only specify one of these parameters: ${chosen.map(([name]) => name).join(', ')}.`, {
      code: 'parameters_exclusive',
      param: String(chosen[1]?.[0]),
    });
  }
  // allowed_payment_method_types "silently filters out incompatible methods": the sandbox has cards only.
  if (allowedTypes !== undefined && !allowedTypes.includes('card')) {
    throw invalidRequest('The PayOnce sandbox emulates card payments only: allowed_payment_method_types must include card.', {
      param: 'allowed_payment_method_types',
    });
  }
  if (legacyTypes !== undefined && (legacyTypes.length === 0 || legacyTypes.some((t) => t !== 'card'))) {
    throw invalidRequest('The PayOnce sandbox emulates card payments only: payment_method_types may only contain card.', {
      param: 'payment_method_types',
    });
  }
  let automaticPaymentMethods: NewPaymentIntent['automaticPaymentMethods'] = null;
  if (apmHash !== undefined) {
    param(() => rejectUnknown(apmHash, ['enabled', 'allow_redirects'], 'automatic_payment_methods'));
    const enabled = param(() => readBoolean(apmHash.enabled, 'automatic_payment_methods[enabled]'));
    if (enabled === undefined) {
      throw invalidRequest('Missing required param: automatic_payment_methods[enabled].', {
        code: 'parameter_missing',
        param: 'automatic_payment_methods[enabled]',
      });
    }
    const redirects = param(() => readString(apmHash.allow_redirects, 'automatic_payment_methods[allow_redirects]')) ?? 'always';
    if (redirects !== 'always' && redirects !== 'never') {
      throw invalidRequest(`Invalid automatic_payment_methods[allow_redirects]: must be one of always, never`, {
        param: 'automatic_payment_methods[allow_redirects]',
      });
    }
    automaticPaymentMethods = enabled ? { enabled: true, allow_redirects: redirects } : null;
  } else if (allowedTypes === undefined && legacyTypes === undefined) {
    // Without a list of types a PaymentIntent uses the Dashboard's payment methods ("dynamic payment
    // methods", the default since API version 2023-08-16), some of which redirect.
    automaticPaymentMethods = { enabled: true, allow_redirects: 'always' };
  }
  const card = readCard(params);
  if (confirm && !card) {
    // [unverified] code: Stripe's message, with parameter_missing as the nearest documented code.
    throw invalidRequest(
      "You cannot confirm this PaymentIntent because it's missing a payment method. You can either update the PaymentIntent with a payment method and then confirm it again, or confirm it again directly with a payment method.",
      { code: 'parameter_missing', param: 'payment_method' },
    );
  }
  if (confirm && automaticPaymentMethods?.allow_redirects === 'always' && returnUrl === null) {
    throw invalidRequest(RETURN_URL_MESSAGE, { param: 'return_url' });
  }
  return {
    intent: {
      amount,
      currency,
      description,
      metadata,
      automaticPaymentMethods,
      allowedPaymentMethodTypes: allowedTypes ?? null,
      receiptEmail,
      status: card ? 'requires_confirmation' : 'requires_payment_method',
      captureMethod: readCaptureMethod(params),
    },
    card,
    confirm,
    returnUrl,
    useStripeSdk: param(() => readBoolean(params.use_stripe_sdk, 'use_stripe_sdk')) ?? false,
  };
}

interface ConfirmInput {
  card: ResolvedCard | null;
  returnUrl: string | null;
  /** The caller handles next actions itself (Stripe.js, the mobile SDKs): next_action use_stripe_sdk. */
  useStripeSdk: boolean;
  /** What a publishable-key caller proves it may act on this PaymentIntent with. */
  clientSecret: string | null;
}

/** What Stripe.js adds to a confirm besides the card; accepted from publishable-key callers only. */
const STRIPE_JS_CONFIRM_PARAMS = ['client_secret', 'expected_payment_method_type'];

function validateConfirm(params: FormHash, publishable: boolean): ConfirmInput {
  const allowed = ['payment_method', 'payment_method_data', 'return_url', 'receipt_email', 'use_stripe_sdk'];
  param(() => rejectUnknown(params, publishable ? [...allowed, ...STRIPE_JS_CONFIRM_PARAMS] : allowed));
  const clientSecret = publishable ? requireClientSecret(params) : null;
  const returnUrl = param(() => readString(params.return_url, 'return_url')) || null;
  if (returnUrl !== null && !isAbsoluteHttpUrl(returnUrl))
    throw invalidRequest('Not a valid URL', { param: 'return_url', code: 'url_invalid' });
  param(() => readString(params.receipt_email, 'receipt_email'));
  const useStripeSdk = param(() => readBoolean(params.use_stripe_sdk, 'use_stripe_sdk')) ?? false;
  return { card: readCard(params), returnUrl, useStripeSdk, clientSecret };
}

/** [unverified] wording: Stripe refuses a publishable-key call on a PaymentIntent without its client secret. */
function requireClientSecret(params: FormHash): string {
  const secret = param(() => readString(params.client_secret, 'client_secret'));
  if (!secret) {
    throw invalidRequest('Missing required param: client_secret.', { code: 'parameter_missing', param: 'client_secret' });
  }
  return secret;
}

/** Stripe's answer when the client secret is not this PaymentIntent's (a 400, not a 404). */
function checkClientSecret(intent: PaymentIntentObject, clientSecret: string): void {
  if (clientSecret !== intent.client_secret) {
    throw invalidRequest('The client_secret provided does not match the client_secret associated with the PaymentIntent.', {
      code: 'payment_intent_invalid_parameter',
      param: 'client_secret',
    });
  }
}

/** A PaymentIntent as the caller may see it: publishable-key callers get Stripe.js's subset. */
function viewOf(call: ApiCall, intent: PaymentIntentObject): PaymentIntentObject | PublicPaymentIntent {
  return call.publishable ? publicPaymentIntent(intent) : intent;
}

const CANCELLATION_REASONS = ['duplicate', 'fraudulent', 'requested_by_customer', 'abandoned'];

function validateCancel(params: FormHash): { reason: string | null } {
  param(() => rejectUnknown(params, ['cancellation_reason']));
  const reason = param(() => readString(params.cancellation_reason, 'cancellation_reason')) ?? null;
  if (reason !== null && !CANCELLATION_REASONS.includes(reason)) {
    throw invalidRequest(`Invalid cancellation_reason: must be one of ${CANCELLATION_REASONS.join(', ')}`, {
      param: 'cancellation_reason',
    });
  }
  return { reason };
}

// ---------------------------------------------------------------------------------------------
// PaymentIntents in PostgreSQL

interface IntentRow {
  seq: string;
  object: PaymentIntentObject;
  card_number: string | null;
  card_alias: string | null;
}

/** The ledger files a PaymentIntent under its metadata.out_trade_no, or under its own id without one. */
function ledgerOutTradeNo(intent: PaymentIntentObject): string {
  return intent.metadata[OUT_TRADE_NO_KEY] ?? intent.id;
}

function jsonb(tx: Tx, value: unknown) {
  return tx.json(value as postgres.JSONValue);
}

/**
 * Serializes every charge of one merchant order (out_trade_no) across requests and sandbox processes.
 * An advisory lock rather than a row lock: several PaymentIntents (and not-yet-created ones) can carry
 * the same out_trade_no, so no single row stands for the order. Released at commit.
 */
async function lockOrder(tx: Tx, accountId: string, outTradeNo: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(hashtextextended(${`stripe:${accountId}:${outTradeNo}`}, 0))`;
}

async function selectIntent(db: Sql | Tx, accountId: string, id: string, forUpdate: boolean): Promise<IntentRow | undefined> {
  const rows = forUpdate
    ? await db<IntentRow[]>`
        SELECT seq, object, card_number, card_alias FROM psp_sandbox.stripe_payment_intents
         WHERE id = ${id} AND account_id = ${accountId} FOR UPDATE`
    : await db<IntentRow[]>`
        SELECT seq, object, card_number, card_alias FROM psp_sandbox.stripe_payment_intents
         WHERE id = ${id} AND account_id = ${accountId}`;
  return rows[0];
}

async function insertIntent(tx: Tx, accountId: string, intent: PaymentIntentObject, card: ResolvedCard | null): Promise<void> {
  await tx`
    INSERT INTO psp_sandbox.stripe_payment_intents
      (id, account_id, out_trade_no, status, object, card_number, card_alias)
    VALUES (${intent.id}, ${accountId}, ${intent.metadata[OUT_TRADE_NO_KEY] ?? null}, ${intent.status},
            ${jsonb(tx, intent)}, ${card?.card.number ?? null}, ${card?.alias ?? null})`;
}

async function saveIntent(tx: Tx, intent: PaymentIntentObject, card: ResolvedCard | null): Promise<void> {
  await tx`
    UPDATE psp_sandbox.stripe_payment_intents
       SET status = ${intent.status}, object = ${jsonb(tx, intent)}, card_number = ${card?.card.number ?? null},
           card_alias = ${card?.alias ?? null}, updated_at = now()
     WHERE id = ${intent.id}`;
}

// ---------------------------------------------------------------------------------------------
// Execution: what runs once per idempotency key

interface Executed {
  answer: ApiAnswer;
  /** A notification was enqueued: poke the notifier once the transaction has committed. */
  wake: boolean;
}

function isUniqueViolation(err: unknown, constraint: string): boolean {
  return (
    typeof err === 'object' &&
    err !== null &&
    (err as { code?: unknown }).code === '23505' &&
    (err as { constraint_name?: unknown }).constraint_name === constraint
  );
}

/**
 * Stores the event and enqueues one delivery to every enabled webhook endpoint of the account that
 * subscribes to its type (enabled_events '*' or the type itself), each signed with that endpoint's
 * own secret — Stripe's model: endpoints are account configuration, not per request, and an account
 * without one gets the event in GET /v1/events only.
 */
async function emitEvent(
  ctx: StripeContext,
  tx: Tx,
  call: ApiCall,
  intent: PaymentIntentObject,
  type: EventType,
  object: EventDataObject = intent,
): Promise<boolean> {
  const sent = await storeEvent(ctx, tx, call, intent, type, object);
  // A charge attempt is also a Charge of its own, with its own event (Stripe sends both, unordered).
  const charge = chargeEventOf(intent, type);
  return charge ? (await storeEvent(ctx, tx, call, intent, charge.type, charge.object)) || sent : sent;
}

/** The Charge event that goes with a PaymentIntent's outcome: its latest charge, succeeded or failed. */
function chargeEventOf(intent: PaymentIntentObject, type: EventType): { type: EventType; object: ChargeObject } | undefined {
  const id = intent.latest_charge;
  if (id === null) return undefined;
  // An authorisation's charge succeeds when authorised; its capture sends charge.captured instead.
  const authorised = type === 'payment_intent.amount_capturable_updated';
  if (authorised || (type === 'payment_intent.succeeded' && intent.capture_method !== 'manual')) {
    return { type: 'charge.succeeded', object: chargeObject({ id, intent, amountRefunded: 0, created: unixNow() }) };
  }
  const error = intent.last_payment_error;
  if (type !== 'payment_intent.payment_failed' || !error || error.charge !== id) return undefined;
  const failed = {
    code: error.code,
    declineCode: error.decline_code ?? error.code,
    message: error.message,
    paymentMethod: error.payment_method.id,
  };
  return { type: 'charge.failed', object: chargeObject({ id, intent, amountRefunded: 0, created: unixNow(), failed }) };
}

async function storeEvent(
  ctx: StripeContext,
  tx: Tx,
  call: ApiCall,
  intent: PaymentIntentObject,
  type: EventType,
  object: EventDataObject,
): Promise<boolean> {
  const accountId = ctx.identity.accountId;
  const endpoints = await tx<{ id: string; url: string; secret: string; enabled_events: string[] }[]>`
    SELECT id, url, secret, enabled_events FROM psp_sandbox.stripe_webhook_endpoints
     WHERE account_id = ${accountId} AND status = 'enabled' ORDER BY seq`;
  const targets = endpoints.filter((e) => e.enabled_events.includes('*') || e.enabled_events.includes(type));
  const event = eventObject({
    type,
    // A snapshot: the event shows the object as it was when the event happened.
    object: withChargeBalanceTransactions(structuredClone(object)),
    requestId: call.requestId,
    idempotencyKey: call.idempotencyKey,
    pendingWebhooks: targets.length,
  });
  const payload = JSON.stringify(event, null, 2);
  const outTradeNo = ledgerOutTradeNo(intent);
  await tx`
    INSERT INTO psp_sandbox.stripe_events (id, account_id, type, payment_intent, out_trade_no, payload)
    VALUES (${event.id}, ${accountId}, ${type}, ${intent.id}, ${outTradeNo}, ${payload})`;
  for (const target of targets) {
    await enqueueNotification(tx, {
      gateway: GATEWAY,
      merchantId: accountId,
      outTradeNo,
      // One schedule per endpoint; the event id (what receivers dedupe on) is the same in each.
      notifyId: `${event.id}:${target.id}`,
      notifyUrl: target.url,
      fields: { event: payload, secret: target.secret },
    });
  }
  return targets.length > 0;
}

/**
 * Money taken: the shared ledger's succeeded charge (at confirm, or at the capture of an
 * authorisation, for the amount captured). False when the ledger already holds a success for this
 * out_trade_no from another PaymentIntent: Stripe knows nothing of out_trade_no and charges again, and
 * the double charge stays visible in stripe_charges.
 */
async function ledgerCapture(
  tx: Tx,
  accountId: string,
  intent: PaymentIntentObject,
  amountMinor: bigint,
  buyerId: string,
): Promise<boolean> {
  const outTradeNo = ledgerOutTradeNo(intent);
  const entry = {
    gateway: GATEWAY,
    merchantId: accountId,
    outTradeNo,
    amountMinor,
    currency: intent.currency.toUpperCase(),
    gatewayTradeNo: intent.id,
    buyerId,
  };
  try {
    await tx.savepoint((sp) => recordCharge(sp, { ...entry, status: 'succeeded', declineCode: null }));
    return true;
  } catch (err) {
    if (!isUniqueViolation(err, 'charges_one_success_per_order')) throw err;
    console.error(
      `[psp-sandbox] stripe: DOUBLE CHARGE: out_trade_no ${outTradeNo} already had a succeeded charge; PaymentIntent ${intent.id} was charged as well (see psp_sandbox.stripe_charges).`,
    );
    return false;
  }
}

/** One charge attempt on a PaymentIntent: the card decides, the ledger records, an event goes out. */
async function chargeIntent(
  ctx: StripeContext,
  tx: Tx,
  call: ApiCall,
  intent: PaymentIntentObject,
  resolved: ResolvedCard,
): Promise<Executed> {
  const accountId = ctx.identity.accountId;
  const outTradeNo = ledgerOutTradeNo(intent);
  await lockOrder(tx, accountId, outTradeNo);
  const now = unixNow();
  const paymentMethod = paymentMethodObject(newId('pm'), resolved.card, now);
  await savePaymentMethod(tx, accountId, paymentMethod);
  const chargeId = newId('ch');
  const decline = resolved.card.decline;
  const ledgerEntry = {
    gateway: GATEWAY,
    merchantId: accountId,
    outTradeNo,
    amountMinor: BigInt(intent.amount),
    currency: intent.currency.toUpperCase(),
    gatewayTradeNo: intent.id,
    buyerId: resolved.alias ?? `card_${resolved.card.number.slice(-4)}`,
  };

  // A charge ends any challenge still open on this PaymentIntent (a buyer who gave another card).
  await supersedeChallenges(tx, intent.id);
  intent.next_action = null;
  const manual = intent.capture_method === 'manual';
  let inSharedLedger = true;
  if (decline) {
    await recordCharge(tx, { ...ledgerEntry, status: 'declined', declineCode: decline.declineCode });
    intent.status = 'requires_payment_method';
    // After a failure the PaymentIntent drops the card; the error keeps it for the merchant to see.
    intent.payment_method = null;
    intent.latest_charge = chargeId;
    intent.last_payment_error = {
      type: 'card_error',
      code: decline.code,
      decline_code: decline.declineCode,
      message: decline.message,
      charge: chargeId,
      doc_url: `https://docs.stripe.com/error-codes/${decline.code.replaceAll('_', '-')}`,
      payment_method: paymentMethod,
    };
  } else if (manual) {
    // Authorised only: no money moves until the capture, so the shared ledger waits for it.
    intent.status = 'requires_capture';
    intent.amount_capturable = intent.amount;
    intent.payment_method = paymentMethod.id;
    intent.latest_charge = chargeId;
    intent.last_payment_error = null;
  } else {
    inSharedLedger = await ledgerCapture(tx, accountId, intent, BigInt(intent.amount), ledgerEntry.buyerId);
    intent.status = 'succeeded';
    intent.amount_received = intent.amount;
    intent.payment_method = paymentMethod.id;
    intent.latest_charge = chargeId;
    intent.last_payment_error = null;
  }
  await tx`
    INSERT INTO psp_sandbox.stripe_charges
      (id, payment_intent, account_id, out_trade_no, amount, currency, status, failure_code, decline_code,
       payment_method, in_shared_ledger, captured, amount_captured, buyer_id)
    VALUES (${chargeId}, ${intent.id}, ${accountId}, ${outTradeNo}, ${intent.amount}, ${intent.currency},
            ${decline ? 'failed' : 'succeeded'}, ${decline?.code ?? null}, ${decline?.declineCode ?? null},
            ${paymentMethod.id}, ${inSharedLedger}, ${!manual || decline !== null}, ${decline || manual ? null : intent.amount},
            ${ledgerEntry.buyerId})`;
  if (manual && !decline) {
    await tx`
      UPDATE psp_sandbox.stripe_payment_intents
         SET capture_before = now() + ${ctx.authorizationWindowMs} * interval '1 millisecond'
       WHERE id = ${intent.id}`;
  }
  await saveIntent(tx, intent, null);
  const eventType = decline
    ? 'payment_intent.payment_failed'
    : manual
      ? 'payment_intent.amount_capturable_updated'
      : 'payment_intent.succeeded';
  const wake = await emitEvent(ctx, tx, call, intent, eventType);

  if (!decline) return { answer: { status: 200, body: viewOf(call, intent) }, wake };
  return {
    answer: {
      status: 402,
      body: errorBody({
        ...intent.last_payment_error!,
        payment_intent: viewOf(call, intent),
        request_log_url: `https://dashboard.stripe.com/test/logs/${call.requestId}?t=${now}`,
      }),
    },
    wake,
  };
}

// ---------------------------------------------------------------------------------------------
// 3-D Secure (https://docs.stripe.com/payments/3d-secure): a card that asks for authentication is
// not charged by confirm. The PaymentIntent waits in requires_action with a next_action naming the
// challenge; the buyer completes it (the card is charged then, and may still be declined), fails it
// or abandons it (requires_payment_method with payment_intent_authentication_failure).

/** How the caller will show the challenge: a redirect back to its return_url, or its own SDK. */
interface ChallengeRoute {
  returnUrl: string | null;
  useStripeSdk: boolean;
}

/** Confirms with a card: charged now, or held for authentication when the card asks for it. */
async function confirmCard(
  ctx: StripeContext,
  tx: Tx,
  call: ApiCall,
  intent: PaymentIntentObject,
  resolved: ResolvedCard,
  route: ChallengeRoute,
): Promise<Executed> {
  if (resolved.card.authentication === 'required') return requireAuthentication(ctx, tx, call, intent, resolved, route);
  return chargeIntent(ctx, tx, call, intent, resolved);
}

/** Ends every pending challenge of a PaymentIntent: only the newest confirm's challenge may settle it. */
async function supersedeChallenges(tx: Tx, intentId: string): Promise<void> {
  await tx`
    UPDATE psp_sandbox.stripe_authentications SET status = 'superseded', settled_at = now()
     WHERE payment_intent = ${intentId} AND status = 'pending'`;
}

async function requireAuthentication(
  ctx: StripeContext,
  tx: Tx,
  call: ApiCall,
  intent: PaymentIntentObject,
  resolved: ResolvedCard,
  route: ChallengeRoute,
): Promise<Executed> {
  await supersedeChallenges(tx, intent.id);
  // Without a return_url there is nowhere to redirect to: Stripe answers use_stripe_sdk then too.
  const useSdk = route.useStripeSdk || route.returnUrl === null;
  const challenge = newChallenge(call.baseUrl);
  await tx`
    INSERT INTO psp_sandbox.stripe_authentications (id, account_id, payment_intent, status, return_url)
    VALUES (${challenge.id}, ${ctx.identity.accountId}, ${intent.id}, 'pending', ${useSdk ? null : route.returnUrl})`;
  intent.status = 'requires_action';
  const paymentMethod = paymentMethodObject(newId('pm'), resolved.card, unixNow());
  await savePaymentMethod(tx, ctx.identity.accountId, paymentMethod);
  intent.payment_method = paymentMethod.id;
  intent.last_payment_error = null;
  intent.next_action = useSdk
    ? {
        type: 'use_stripe_sdk',
        use_stripe_sdk: { type: 'three_d_secure_redirect', stripe_js: challenge.embeddedUrl, source: challenge.sourceId },
      }
    : { type: 'redirect_to_url', redirect_to_url: { url: challenge.pageUrl, return_url: route.returnUrl } };
  // The card stays with the PaymentIntent: completing the challenge charges it.
  await saveIntent(tx, intent, resolved);
  const wake = await emitEvent(ctx, tx, call, intent, 'payment_intent.requires_action');
  return { answer: { status: 200, body: viewOf(call, intent) }, wake };
}

/** Stripe's error when authentication fails or is abandoned (the PaymentIntent can be paid again). */
function authenticationFailure(paymentMethod: PaymentMethodObject): LastPaymentError {
  return {
    type: 'invalid_request_error',
    code: 'payment_intent_authentication_failure',
    message:
      'The provided PaymentMethod has failed authentication. You can provide payment_method_data or a new PaymentMethod to attempt to fulfill this PaymentIntent again.',
    doc_url: 'https://docs.stripe.com/error-codes/payment-intent-authentication-failure',
    payment_method: paymentMethod,
  };
}

/**
 * The buyer's answer to one challenge, under the PaymentIntent's lock: only a pending challenge of a
 * PaymentIntent still in requires_action settles anything, so a stale window (superseded by a newer
 * confirm, or the PaymentIntent canceled or paid meanwhile) changes nothing.
 */
async function settleChallenge(base: StripeContext, challengeId: string, outcome: ChallengeOutcome): Promise<ChallengeResult | undefined> {
  let wake = false;
  const result = await base.sql.begin(async (tx): Promise<ChallengeResult | undefined> => {
    const [challenge] = await tx<{ account_id: string; payment_intent: string; return_url: string | null }[]>`
      SELECT account_id, payment_intent, return_url FROM psp_sandbox.stripe_authentications WHERE id = ${challengeId}`;
    if (!challenge) return undefined;
    const identity = await accountById(tx, challenge.account_id);
    if (!identity) return undefined;
    const ctx: StripeContext = { ...base, identity };
    const row = await lockIntent(ctx, tx, challenge.payment_intent);
    const intent = row.object;
    const [pending] = await tx<{ status: string }[]>`
      SELECT status FROM psp_sandbox.stripe_authentications WHERE id = ${challengeId} FOR UPDATE`;
    const view = { intent, returnUrl: challenge.return_url };
    if (pending?.status !== 'pending' || intent.status !== 'requires_action') return { settled: false, ...view };
    const call = sandboxCall();
    const card = row.card_number ? cardByNumber(row.card_number) : undefined;
    // requireAuthentication keeps the card with the PaymentIntent for as long as it waits.
    if (!card) throw new Error(`PaymentIntent ${intent.id} awaits authentication without a card`);
    if (outcome === 'complete') {
      await tx`UPDATE psp_sandbox.stripe_authentications SET status = 'succeeded', settled_at = now() WHERE id = ${challengeId}`;
      const executed = await chargeIntent(ctx, tx, call, intent, { card, alias: row.card_alias });
      wake = executed.wake;
      return { settled: true, ...view };
    }
    await tx`
      UPDATE psp_sandbox.stripe_authentications SET status = ${outcome === 'cancel' ? 'canceled' : 'failed'}, settled_at = now()
       WHERE id = ${challengeId}`;
    const paymentMethod = paymentMethodObject(intent.payment_method ?? newId('pm'), card, unixNow());
    intent.last_payment_error = authenticationFailure(paymentMethod);
    intent.status = 'requires_payment_method';
    intent.payment_method = null;
    intent.next_action = null;
    await saveIntent(tx, intent, null);
    wake = await emitEvent(ctx, tx, call, intent, 'payment_intent.payment_failed');
    return { settled: true, ...view };
  });
  if (wake) base.wakeNotifier();
  return result;
}

/** What the challenge page shows before the buyer answers; undefined for an unknown challenge. */
async function readChallenge(base: StripeContext, challengeId: string): Promise<ChallengeView | undefined> {
  const [row] = await base.sql<{ status: string; object: PaymentIntentObject; card_number: string | null }[]>`
    SELECT a.status, i.object, i.card_number
      FROM psp_sandbox.stripe_authentications a
      JOIN psp_sandbox.stripe_payment_intents i ON i.id = a.payment_intent
     WHERE a.id = ${challengeId}`;
  if (!row) return undefined;
  return {
    pending: row.status === 'pending' && row.object.status === 'requires_action',
    intent: row.object,
    amountText: formatAmount(row.object.amount, row.object.currency),
    last4: row.card_number?.slice(-4) ?? null,
  };
}

async function accountById(tx: Tx, accountId: string): Promise<StripeIdentity | undefined> {
  const [row] = await tx<AccountRow[]>`
    SELECT account_id, secret_key, publishable_key, webhook_secret FROM psp_sandbox.stripe_accounts WHERE account_id = ${accountId}`;
  if (!row) return undefined;
  return identityOf(row);
}

async function executeCreate(ctx: StripeContext, tx: Tx, call: ApiCall, input: CreateInput): Promise<Executed> {
  const intent = paymentIntentObject(input.intent, unixNow());
  await insertIntent(tx, ctx.identity.accountId, intent, input.card);
  const created = await emitEvent(ctx, tx, call, intent, 'payment_intent.created');
  if (!input.confirm || !input.card) return { answer: { status: 200, body: intent }, wake: created };
  const charged = await confirmCard(ctx, tx, call, intent, input.card, { returnUrl: input.returnUrl, useStripeSdk: input.useStripeSdk });
  return { ...charged, wake: charged.wake || created };
}

const CONFIRMABLE: ReadonlySet<PaymentIntentStatus> = new Set(['requires_payment_method', 'requires_confirmation', 'requires_action']);
/**
 * What the API reference lists as cancelable: "requires_payment_method, requires_capture,
 * requires_confirmation, requires_action or, in rare cases, processing". The rare cases are some
 * asynchronous payment methods; a card payment that is processing cannot be canceled, and this
 * sandbox has cards only, so `processing` is refused while the message still lists it as Stripe does.
 */
const CANCELABLE_IN_MESSAGE: ReadonlySet<PaymentIntentStatus> = new Set([
  'requires_payment_method',
  'requires_capture',
  'requires_confirmation',
  'requires_action',
  'processing',
]);
const CANCELABLE: ReadonlySet<PaymentIntentStatus> = new Set([
  'requires_payment_method',
  'requires_capture',
  'requires_confirmation',
  'requires_action',
]);

function unexpectedState(
  call: ApiCall,
  intent: PaymentIntentObject,
  action: 'confirm' | 'cancel' | 'capture',
  allowed: ReadonlySet<PaymentIntentStatus>,
): ApiAnswer {
  const done = { confirm: 'confirmed', cancel: 'canceled', capture: 'captured' }[action];
  const message =
    action === 'capture'
      ? `This PaymentIntent could not be captured because it has a status of ${intent.status}. Only a PaymentIntent with one of the following statuses may be captured: ${[...allowed].join(', ')}.`
      : `You cannot ${action} this PaymentIntent because it has a status of ${intent.status}. Only a PaymentIntent with one of the following statuses may be ${done}: ${[...allowed].join(', ')}.`;
  return {
    status: 400,
    body: errorBody({
      type: 'invalid_request_error',
      code: 'payment_intent_unexpected_state',
      message,
      payment_intent: viewOf(call, intent),
    }),
  };
}

/** Loads a PaymentIntent under its order's lock and a row lock, so the status check cannot go stale. */
async function lockIntent(ctx: StripeContext, tx: Tx, id: string): Promise<IntentRow> {
  const accountId = ctx.identity.accountId;
  const found = await selectIntent(tx, accountId, id, false);
  if (!found) throw noSuchIntent(id);
  await lockOrder(tx, accountId, ledgerOutTradeNo(found.object));
  const row = await selectIntent(tx, accountId, id, true);
  if (!row) throw noSuchIntent(id);
  return row;
}

async function executeConfirm(ctx: StripeContext, tx: Tx, call: ApiCall, id: string, input: ConfirmInput): Promise<Executed> {
  const row = await lockIntent(ctx, tx, id);
  const intent = row.object;
  if (input.clientSecret !== null) checkClientSecret(intent, input.clientSecret);
  if (!CONFIRMABLE.has(intent.status)) return { answer: unexpectedState(call, intent, 'confirm', CONFIRMABLE), wake: false };
  const attached = row.card_number ? cardByNumber(row.card_number) : undefined;
  const resolved = input.card ?? (attached ? { card: attached, alias: row.card_alias } : null);
  if (!resolved) {
    return {
      answer: {
        status: 400,
        body: errorBody({
          type: 'invalid_request_error',
          code: 'payment_intent_unexpected_state',
          message:
            "You cannot confirm this PaymentIntent because it's missing a payment method. You can either update the PaymentIntent with a payment method and then confirm it again, or confirm it again directly with a payment method.",
          payment_intent: viewOf(call, intent),
        }),
      },
      wake: false,
    };
  }
  if (intent.automatic_payment_methods?.allow_redirects === 'always' && input.returnUrl === null) {
    return { answer: invalidRequest(RETURN_URL_MESSAGE, { param: 'return_url' }).answer(), wake: false };
  }
  return confirmCard(ctx, tx, call, intent, resolved, { returnUrl: input.returnUrl, useStripeSdk: input.useStripeSdk });
}

async function executeCancel(ctx: StripeContext, tx: Tx, call: ApiCall, id: string, input: { reason: string | null }): Promise<Executed> {
  const row = await lockIntent(ctx, tx, id);
  const intent = row.object;
  // Canceling a canceled PaymentIntent is refused too (400, status canceled): callers read the status.
  if (!CANCELABLE.has(intent.status)) return { answer: unexpectedState(call, intent, 'cancel', CANCELABLE_IN_MESSAGE), wake: false };
  intent.status = 'canceled';
  intent.canceled_at = unixNow();
  intent.cancellation_reason = input.reason;
  intent.next_action = null;
  // Canceling an authorisation releases the hold: nothing left to capture.
  intent.amount_capturable = 0;
  await supersedeChallenges(tx, intent.id);
  await saveIntent(tx, intent, null);
  const wake = await emitEvent(ctx, tx, call, intent, 'payment_intent.canceled');
  return { answer: { status: 200, body: intent }, wake };
}

// ---------------------------------------------------------------------------------------------
// Capture (https://docs.stripe.com/api/payment_intents/capture): an authorisation (capture_method
// manual, status requires_capture) is captured once, in full or in part — the rest is released —
// or canceled, or lapses at the end of its window (canceled, cancellation_reason automatic). Only
// the capture moves money: the shared ledger records the amount captured.

const CAPTURABLE: ReadonlySet<PaymentIntentStatus> = new Set(['requires_capture']);

function validateCapture(params: FormHash): { amountToCapture: number | null } {
  param(() => rejectUnknown(params, ['amount_to_capture', 'metadata', 'final_capture']));
  const amount = param(() => readInteger(params.amount_to_capture, 'amount_to_capture'));
  if (amount !== undefined && amount < 1) {
    throw invalidRequest('This value must be greater than or equal to 1.', {
      code: 'parameter_invalid_integer',
      param: 'amount_to_capture',
    });
  }
  const finalCapture = param(() => readBoolean(params.final_capture, 'final_capture'));
  if (finalCapture === false) {
    // Multicapture is an IC+ feature Stripe enables per account; this account does not have it.
    throw invalidRequest('Multicapture is not available for this account: final_capture must be true.', { param: 'final_capture' });
  }
  if (params.metadata !== undefined) readMetadata(params);
  return { amountToCapture: amount ?? null };
}

async function executeCapture(
  ctx: StripeContext,
  tx: Tx,
  call: ApiCall,
  id: string,
  input: { amountToCapture: number | null },
): Promise<Executed> {
  const row = await lockIntent(ctx, tx, id);
  const intent = row.object;
  let wake = false;
  if (intent.status === 'requires_capture' && (await authorizationLapsed(tx, intent.id))) {
    wake = await lapseAuthorization(ctx, tx, intent);
  }
  if (!CAPTURABLE.has(intent.status)) return { answer: unexpectedState(call, intent, 'capture', CAPTURABLE), wake };
  const capturable = Number(intent.amount_capturable ?? 0);
  const amount = input.amountToCapture ?? capturable;
  if (amount > capturable) {
    throw invalidRequest(
      `The amount to capture (${formatAmount(amount, intent.currency)}) must be less than or equal to the amount capturable (${formatAmount(capturable, intent.currency)}).`,
      { code: 'amount_too_large', param: 'amount_to_capture' },
    );
  }
  const chargeId = intent.latest_charge;
  const [charge] = await tx<{ buyer_id: string | null }[]>`
    SELECT buyer_id FROM psp_sandbox.stripe_charges WHERE id = ${chargeId ?? ''}`;
  const inSharedLedger = await ledgerCapture(tx, ctx.identity.accountId, intent, BigInt(amount), charge?.buyer_id ?? 'card');
  await tx`
    UPDATE psp_sandbox.stripe_charges SET captured = true, amount_captured = ${amount}, in_shared_ledger = ${inSharedLedger}
     WHERE id = ${chargeId ?? ''}`;
  intent.status = 'succeeded';
  intent.amount_received = amount;
  intent.amount_capturable = 0;
  await saveIntent(tx, intent, null);
  await tx`UPDATE psp_sandbox.stripe_payment_intents SET capture_before = NULL WHERE id = ${intent.id}`;
  const succeeded = await emitEvent(ctx, tx, call, intent, 'payment_intent.succeeded');
  const captured = await emitEvent(
    ctx,
    tx,
    call,
    intent,
    'charge.captured',
    chargeObject({ id: chargeId ?? '', intent, amountRefunded: 0, created: unixNow() }),
  );
  return { answer: { status: 200, body: intent }, wake: wake || succeeded || captured };
}

async function authorizationLapsed(tx: Tx, intentId: string): Promise<boolean> {
  const [row] = await tx<{ lapsed: boolean }[]>`
    SELECT capture_before IS NOT NULL AND capture_before <= now() AS lapsed
      FROM psp_sandbox.stripe_payment_intents WHERE id = ${intentId}`;
  return row?.lapsed ?? false;
}

/** The authorisation's window has passed: the hold is released and the PaymentIntent canceled. */
async function lapseAuthorization(ctx: StripeContext, tx: Tx, intent: PaymentIntentObject): Promise<boolean> {
  intent.status = 'canceled';
  intent.canceled_at = unixNow();
  intent.cancellation_reason = 'automatic';
  intent.amount_capturable = 0;
  await saveIntent(tx, intent, null);
  await tx`UPDATE psp_sandbox.stripe_payment_intents SET capture_before = NULL WHERE id = ${intent.id}`;
  const call = sandboxCall();
  return emitEvent(ctx, tx, call, intent, 'payment_intent.canceled');
}

/**
 * Lapses every authorisation past its window (a few at a time, each under its order's lock), as
 * Stripe does on its own clock: run before each API request, so a merchant who reads or captures a
 * lapsed PaymentIntent finds it canceled, and its payment_intent.canceled event goes out.
 */
async function lapseDueAuthorizations(base: StripeContext): Promise<void> {
  const due = await base.sql<{ id: string; account_id: string }[]>`
    SELECT id, account_id FROM psp_sandbox.stripe_payment_intents
     WHERE status = 'requires_capture' AND capture_before <= now()
     ORDER BY capture_before LIMIT 20`;
  for (const { id, account_id: accountId } of due) await lapseIfDue(base, id, accountId);
}

async function lapseIfDue(base: StripeContext, id: string, accountId: string): Promise<void> {
  const wake = await base.sql.begin(async (tx) => {
    const identity = await accountById(tx, accountId);
    if (!identity) return false;
    const ctx: StripeContext = { ...base, identity };
    const row = await lockIntent(ctx, tx, id);
    if (row.object.status !== 'requires_capture' || !(await authorizationLapsed(tx, id))) return false;
    return lapseAuthorization(ctx, tx, row.object);
  });
  if (wake) base.wakeNotifier();
}

// ---------------------------------------------------------------------------------------------
// Refunds (https://docs.stripe.com/api/refunds/create)

const REFUND_REASONS = ['duplicate', 'fraudulent', 'requested_by_customer'];
/** Stripe's zero-decimal currencies: their amounts are whole units already. */
const ZERO_DECIMAL = new Set('bif clp djf gnf jpy kmf krw mga pyg rwf ugx vnd vuv xaf xof xpf'.split(' '));

/** How Stripe's refund errors show an amount, e.g. "CN¥12.30" [unverified]: the sandbox writes "CNY 12.30". */
function formatAmount(amount: number, currency: string): string {
  const units = ZERO_DECIMAL.has(currency) ? String(amount) : (amount / 100).toFixed(2);
  return `${currency.toUpperCase()} ${units}`;
}

interface RefundInput {
  paymentIntent: string | null;
  charge: string | null;
  amount: number | null;
  reason: string | null;
  metadata: Record<string, string>;
}

function validateRefund(params: FormHash): RefundInput {
  param(() => rejectUnknown(params, ['payment_intent', 'charge', 'amount', 'reason', 'metadata']));
  const paymentIntent = param(() => readString(params.payment_intent, 'payment_intent')) || null;
  const charge = param(() => readString(params.charge, 'charge')) || null;
  if (paymentIntent === null && charge === null) {
    // What Stripe answers when neither is sent (an empty payment_intent included).
    throw invalidRequest('Missing required param: charge.', { code: 'parameter_missing', param: 'charge' });
  }
  if (paymentIntent !== null && charge !== null) {
    // [unverified] wording; Stripe takes one of the two.
    throw invalidRequest('You cannot specify both `charge` and `payment_intent`: pass one of them.', { param: 'payment_intent' });
  }
  const amount = param(() => readInteger(params.amount, 'amount')) ?? null;
  if (amount !== null && amount < 1) {
    throw invalidRequest('This value must be greater than or equal to 1.', { code: 'parameter_invalid_integer', param: 'amount' });
  }
  const reason = param(() => readString(params.reason, 'reason')) || null;
  if (reason !== null && !REFUND_REASONS.includes(reason)) {
    throw invalidRequest(`Invalid reason: must be one of ${REFUND_REASONS.join(', ')}`, { param: 'reason' });
  }
  return { paymentIntent, charge, amount, reason, metadata: readMetadata(params) };
}

/**
 * One refund of a PaymentIntent's charge, under the order's lock and the PaymentIntent's row lock, so
 * two refunds of one charge can never both pass the balance check. Stripe's only deduplication of
 * refunds is the Idempotency-Key (runPost); metadata[refund_id] is the merchant's note, filed in the
 * shared ledger as the refund id.
 */
async function executeRefund(ctx: StripeContext, tx: Tx, call: ApiCall, input: RefundInput): Promise<Executed> {
  const accountId = ctx.identity.accountId;
  let intentId = input.paymentIntent;
  if (input.charge !== null) {
    const [charge] = await tx<{ payment_intent: string; status: string }[]>`
      SELECT payment_intent, status FROM psp_sandbox.stripe_charges WHERE id = ${input.charge} AND account_id = ${accountId}`;
    if (!charge) throw invalidRequest(`No such charge: '${input.charge}'`, { code: 'resource_missing', param: 'charge' }, 404);
    if (charge.status !== 'succeeded') {
      // [unverified] wording: a failed charge moved no money, so there is nothing to give back.
      throw invalidRequest(`Charge ${input.charge} has failed and cannot be refunded.`, { param: 'charge' });
    }
    intentId = charge.payment_intent;
  }
  if (intentId === null) throw new Error('validateRefund lets neither charge nor payment_intent through');
  if (!(await selectIntent(tx, accountId, intentId, false))) throw noSuchIntent(intentId, 'payment_intent');
  const row = await lockIntent(ctx, tx, intentId);
  const intent = row.object;
  const chargeId = intent.latest_charge;
  if (intent.status !== 'succeeded' || chargeId === null) {
    // [unverified] wording; the status and the refusal (400 invalid_request_error) are Stripe's.
    throw invalidRequest(`This PaymentIntent (${intent.id}) does not have a successful charge to refund.`, { param: 'payment_intent' });
  }
  const charged = intent.amount_received;
  const alreadyRefunded = Number(await refundedMinor(tx, GATEWAY, accountId, intent.id));
  const remaining = charged - alreadyRefunded;
  if (remaining <= 0) {
    throw invalidRequest(`Charge ${chargeId} has already been refunded.`, { code: 'charge_already_refunded' });
  }
  const amount = input.amount ?? remaining;
  if (amount > remaining) {
    throw invalidRequest(
      `Refund amount (${formatAmount(amount, intent.currency)}) is greater than unrefunded amount on charge (${formatAmount(remaining, intent.currency)})`,
      { code: 'amount_too_large', param: 'amount' },
    );
  }

  // Card refunds in test mode succeed at once (https://docs.stripe.com/testing#refunds).
  const refund = refundObject({
    amount,
    currency: intent.currency,
    charge: chargeId,
    paymentIntent: intent.id,
    reason: input.reason,
    metadata: input.metadata,
    status: 'succeeded',
    created: unixNow(),
  });
  await tx`
    INSERT INTO psp_sandbox.stripe_refunds (id, account_id, payment_intent, charge, status, object)
    VALUES (${refund.id}, ${accountId}, ${intent.id}, ${chargeId}, ${refund.status}, ${jsonb(tx, refund)})`;
  const ledgerEntry = {
    gateway: GATEWAY,
    merchantId: accountId,
    outTradeNo: ledgerOutTradeNo(intent),
    gatewayTradeNo: intent.id,
    refundId: input.metadata[REFUND_ID_KEY] ?? refund.id,
    gatewayRefundId: refund.id,
    amountMinor: BigInt(amount),
    currency: intent.currency.toUpperCase(),
    status: 'succeeded' as const,
  };
  const recorded = await recordRefund(tx, ledgerEntry);
  if (!recorded.created) {
    // Stripe refunds again when the same metadata[refund_id] comes with another Idempotency-Key: it
    // knows nothing of our refund ids. The ledger keeps the second refund (money really went back)
    // under a distinct id, and says so loudly.
    await recordRefund(tx, { ...ledgerEntry, refundId: `${ledgerEntry.refundId}:${refund.id}` });
    console.error(
      `[psp-sandbox] stripe: DUPLICATE REFUND: metadata[refund_id] ${ledgerEntry.refundId} was refunded again as ${refund.id} under another Idempotency-Key.`,
    );
  }
  let wake = await emitEvent(ctx, tx, call, intent, 'refund.created', refund);
  const charge = chargeObject({ id: chargeId, intent, amountRefunded: alreadyRefunded + amount, created: intent.created });
  wake = (await emitEvent(ctx, tx, call, intent, 'charge.refunded', charge)) || wake;
  return { answer: { status: 200, body: refund }, wake };
}

// ---------------------------------------------------------------------------------------------
// Updates (https://docs.stripe.com/api/payment_intents/update, /api/refunds/update): what each
// status allows is in stripe-updates.ts. No event follows a PaymentIntent's update (Stripe has no
// payment_intent.updated); a refund's sends refund.updated.

interface IntentUpdateInput {
  amount?: number;
  currency?: string;
  description?: string | null;
  receiptEmail?: string | null;
  captureMethod?: CaptureMethod;
  metadata?: MetadataPatch;
  card: ResolvedCard | null;
}

/** `metadata[k]=` removes k, `metadata=` removes every key; the rest merges into what is there. */
function readMetadataPatch(params: FormHash): MetadataPatch | undefined {
  if (params.metadata === undefined) return undefined;
  if (params.metadata === '') return { clear: true, set: {}, unset: [] };
  const set = readMetadata(params);
  const hash = param(() => readHash(params.metadata, 'metadata')) ?? {};
  return { clear: false, set, unset: Object.keys(hash).filter((key) => hash[key] === '') };
}

function validateIntentUpdate(params: FormHash): IntentUpdateInput {
  param(() =>
    rejectUnknown(params, [
      'amount',
      'currency',
      'metadata',
      'description',
      'receipt_email',
      'payment_method',
      'payment_method_data',
      'capture_method',
    ]),
  );
  const amount = param(() => readInteger(params.amount, 'amount'));
  if (amount !== undefined) checkAmountRange(amount);
  const currencyText = param(() => readString(params.currency, 'currency'));
  const currency = currencyText === undefined ? undefined : readCurrency(currencyText);
  const description = param(() => readString(params.description, 'description'));
  const receiptEmail = param(() => readString(params.receipt_email, 'receipt_email'));
  const metadata = readMetadataPatch(params);
  return {
    ...(amount !== undefined ? { amount } : {}),
    ...(currency !== undefined ? { currency } : {}),
    ...(description !== undefined ? { description: description || null } : {}),
    ...(receiptEmail !== undefined ? { receiptEmail: receiptEmail || null } : {}),
    ...(params.capture_method !== undefined ? { captureMethod: readCaptureMethod(params) } : {}),
    ...(metadata !== undefined ? { metadata } : {}),
    card: readCard(params),
  };
}

function sentPaymentFields(input: IntentUpdateInput): Set<PaymentField> {
  const sent = new Set<PaymentField>();
  if (input.amount !== undefined) sent.add('amount');
  if (input.currency !== undefined) sent.add('currency');
  if (input.card !== null) sent.add('payment_method');
  if (input.captureMethod !== undefined) sent.add('capture_method');
  return sent;
}

/**
 * Changing what a PaymentIntent charges while it waits for 3-D Secure ends that challenge: the buyer
 * must authenticate the new payment, so it waits for confirmation again [unverified: Stripe's exact
 * status after such an update].
 */
async function executeIntentUpdate(ctx: StripeContext, tx: Tx, call: ApiCall, id: string, input: IntentUpdateInput): Promise<Executed> {
  const row = await lockIntent(ctx, tx, id);
  const intent = row.object;
  const sent = sentPaymentFields(input);
  const refused = refusedField(intent.status, sent);
  if (refused) {
    const error = { code: 'payment_intent_unexpected_state', param: refused, payment_intent: intent };
    return { answer: invalidRequest(refusedFieldMessage(refused, intent.status), error).answer(), wake: false };
  }
  if (input.amount !== undefined || input.currency !== undefined) {
    checkMinimum(input.amount ?? intent.amount, input.currency ?? intent.currency);
  }
  if (input.amount !== undefined) intent.amount = input.amount;
  if (input.currency !== undefined) intent.currency = input.currency;
  if (input.description !== undefined) intent.description = input.description;
  if (input.receiptEmail !== undefined) intent.receipt_email = input.receiptEmail;
  if (input.captureMethod !== undefined) intent.capture_method = input.captureMethod;
  if (input.metadata !== undefined) intent.metadata = applyMetadata(intent.metadata, input.metadata);
  const attached = row.card_number ? cardByNumber(row.card_number) : undefined;
  let card: ResolvedCard | null = attached ? { card: attached, alias: row.card_alias } : null;
  if (input.card !== null) {
    card = input.card;
    const paymentMethod = paymentMethodObject(newId('pm'), card.card, unixNow());
    await savePaymentMethod(tx, ctx.identity.accountId, paymentMethod);
    intent.payment_method = paymentMethod.id;
  }
  if (sent.size > 0 && intent.status !== 'requires_payment_method') {
    await supersedeChallenges(tx, intent.id);
    intent.next_action = null;
    intent.status = card ? 'requires_confirmation' : 'requires_payment_method';
  } else if (input.card !== null) {
    intent.status = 'requires_confirmation';
  }
  await saveIntent(tx, intent, card);
  return { answer: { status: 200, body: intent }, wake: false };
}

function validateRefundUpdate(params: FormHash): { metadata: MetadataPatch | undefined } {
  param(() => rejectUnknown(params, ['metadata']));
  return { metadata: readMetadataPatch(params) };
}

async function executeRefundUpdate(
  ctx: StripeContext,
  tx: Tx,
  call: ApiCall,
  id: string,
  input: { metadata: MetadataPatch | undefined },
): Promise<Executed> {
  const accountId = ctx.identity.accountId;
  const [row] = await tx<{ object: RefundObject }[]>`
    SELECT object FROM psp_sandbox.stripe_refunds WHERE id = ${id} AND account_id = ${accountId} FOR UPDATE`;
  if (!row) throw invalidRequest(`No such refund: '${id}'`, { code: 'resource_missing', param: 'id' }, 404);
  const refund = row.object;
  if (input.metadata === undefined) return { answer: { status: 200, body: refund }, wake: false };
  refund.metadata = applyMetadata(refund.metadata, input.metadata);
  await tx`UPDATE psp_sandbox.stripe_refunds SET object = ${jsonb(tx, refund)} WHERE id = ${id}`;
  const intent = await selectIntent(tx, accountId, refund.payment_intent, false);
  if (!intent) throw new Error(`refund ${id} of an unknown PaymentIntent ${refund.payment_intent}`);
  const wake = await emitEvent(ctx, tx, call, intent.object, 'refund.updated', refund);
  return { answer: { status: 200, body: refund }, wake };
}

// ---------------------------------------------------------------------------------------------
// Webhook endpoints (https://docs.stripe.com/api/webhook_endpoints)

interface EndpointObject {
  id: string;
  object: 'webhook_endpoint';
  api_version: string | null;
  application: null;
  created: number;
  description: string | null;
  enabled_events: string[];
  livemode: false;
  metadata: Record<string, string>;
  status: 'enabled' | 'disabled';
  url: string;
}

interface EndpointInput {
  url?: string;
  enabledEvents?: string[];
  description?: string | null;
  metadata?: Record<string, string>;
  apiVersion?: string | null;
  disabled?: boolean;
}

function readEnabledEvents(params: FormHash): string[] | undefined {
  const events = param(() => readStringArray(params.enabled_events, 'enabled_events'));
  if (events === undefined) return undefined;
  if (events.length === 0)
    throw invalidRequest('Invalid enabled_events: must contain at least one event type.', { param: 'enabled_events' });
  events.forEach((event, i) => {
    const unknown = unknownEnabledEvent(i, event);
    if (unknown) throw fromParamError(unknown);
  });
  return [...new Set(events)];
}

function readEndpointUrl(params: FormHash): string | undefined {
  const url = param(() => readString(params.url, 'url'));
  if (url !== undefined && !isAbsoluteHttpUrl(url))
    throw invalidRequest('Invalid URL: URL must be publicly accessible.', { param: 'url', code: 'url_invalid' });
  return url;
}

function validateEndpointCreate(params: FormHash): EndpointInput {
  param(() => rejectUnknown(params, ['url', 'enabled_events', 'description', 'metadata', 'api_version', 'connect']));
  const url = readEndpointUrl(params);
  if (url === undefined) throw invalidRequest('Missing required param: url.', { code: 'parameter_missing', param: 'url' });
  const enabledEvents = readEnabledEvents(params);
  if (enabledEvents === undefined) {
    throw invalidRequest('Missing required param: enabled_events.', { code: 'parameter_missing', param: 'enabled_events' });
  }
  if (param(() => readBoolean(params.connect, 'connect'))) {
    throw invalidRequest('The PayOnce sandbox does not emulate Connect: connect must be false.', { param: 'connect' });
  }
  return {
    url,
    enabledEvents,
    description: param(() => readString(params.description, 'description')) || null,
    metadata: readMetadata(params),
    apiVersion: param(() => readString(params.api_version, 'api_version')) || null,
  };
}

function validateEndpointUpdate(params: FormHash): EndpointInput {
  param(() => rejectUnknown(params, ['url', 'enabled_events', 'description', 'metadata', 'disabled']));
  const description = param(() => readString(params.description, 'description'));
  const disabled = param(() => readBoolean(params.disabled, 'disabled'));
  return {
    ...(params.url !== undefined ? { url: readEndpointUrl(params) } : {}),
    ...(params.enabled_events !== undefined ? { enabledEvents: readEnabledEvents(params) } : {}),
    ...(description !== undefined ? { description: description || null } : {}),
    ...(params.metadata !== undefined ? { metadata: readMetadata(params) } : {}),
    ...(disabled !== undefined ? { disabled } : {}),
  };
}

function noSuchEndpoint(id: string): ApiError {
  return invalidRequest(`No such webhook endpoint: '${id}'`, { code: 'resource_missing', param: 'id' }, 404);
}

/** The endpoint's secret is in the create answer only ("Only returned at creation"). */
async function executeEndpointCreate(ctx: StripeContext, tx: Tx, input: EndpointInput): Promise<Executed> {
  const endpoint: EndpointObject = {
    id: newId('we'),
    object: 'webhook_endpoint',
    api_version: input.apiVersion ?? null,
    application: null,
    created: unixNow(),
    description: input.description ?? null,
    enabled_events: input.enabledEvents ?? [],
    livemode: false,
    metadata: input.metadata ?? {},
    status: 'enabled',
    url: input.url ?? '',
  };
  const secret = `whsec_${base62(32)}`;
  await tx`
    INSERT INTO psp_sandbox.stripe_webhook_endpoints (id, account_id, url, secret, enabled_events, status, object)
    VALUES (${endpoint.id}, ${ctx.identity.accountId}, ${endpoint.url}, ${secret}, ${jsonb(tx, endpoint.enabled_events)},
            ${endpoint.status}, ${jsonb(tx, endpoint)})`;
  return { answer: { status: 200, body: { ...endpoint, secret } }, wake: false };
}

async function executeEndpointUpdate(ctx: StripeContext, tx: Tx, id: string, input: EndpointInput): Promise<Executed> {
  const [row] = await tx<{ object: EndpointObject }[]>`
    SELECT object FROM psp_sandbox.stripe_webhook_endpoints
     WHERE id = ${id} AND account_id = ${ctx.identity.accountId} FOR UPDATE`;
  if (!row) throw noSuchEndpoint(id);
  const endpoint = row.object;
  if (input.url !== undefined) endpoint.url = input.url;
  if (input.enabledEvents !== undefined) endpoint.enabled_events = input.enabledEvents;
  if (input.description !== undefined) endpoint.description = input.description;
  if (input.metadata !== undefined) endpoint.metadata = input.metadata;
  if (input.disabled !== undefined) endpoint.status = input.disabled ? 'disabled' : 'enabled';
  await tx`
    UPDATE psp_sandbox.stripe_webhook_endpoints
       SET url = ${endpoint.url}, enabled_events = ${jsonb(tx, endpoint.enabled_events)}, status = ${endpoint.status},
           object = ${jsonb(tx, endpoint)}
     WHERE id = ${id}`;
  return { answer: { status: 200, body: endpoint }, wake: false };
}

async function listEndpoints(ctx: StripeContext, params: FormHash): Promise<ApiAnswer> {
  param(() => rejectUnknown(params, ['limit', 'starting_after', 'ending_before']));
  const limit = readLimit(params);
  const cursor = param(() => readCursor(params));
  let seq: string | null = null;
  if (cursor) {
    const [row] = await ctx.sql<{ seq: string }[]>`
      SELECT seq FROM psp_sandbox.stripe_webhook_endpoints WHERE id = ${cursor.id} AND account_id = ${ctx.identity.accountId}`;
    if (!row) throw invalidRequest(`No such webhook endpoint: '${cursor.id}'`, { code: 'resource_missing', param: cursor.param });
    seq = row.seq;
  }
  const rows = await ctx.sql<{ object: EndpointObject }[]>`
    SELECT object FROM psp_sandbox.stripe_webhook_endpoints
     WHERE account_id = ${ctx.identity.accountId} AND ${afterCursor(ctx.sql, seq, cursor)}
     ORDER BY ${newestFirst(ctx.sql, cursor)} LIMIT ${limit + 1}`;
  const page = pageOf(rows, limit, cursor);
  return {
    status: 200,
    body: { object: 'list', data: page.data.map((row) => row.object), has_more: page.hasMore, url: '/v1/webhook_endpoints' },
  };
}

async function retrieveEndpoint(ctx: StripeContext, id: string, params: FormHash): Promise<ApiAnswer> {
  param(() => rejectUnknown(params, []));
  const [row] = await ctx.sql<{ object: EndpointObject }[]>`
    SELECT object FROM psp_sandbox.stripe_webhook_endpoints WHERE id = ${id} AND account_id = ${ctx.identity.accountId}`;
  if (!row) throw noSuchEndpoint(id);
  return { status: 200, body: row.object };
}

/** Deleting stops every delivery still scheduled to it, as a deleted endpoint on Stripe receives nothing more. */
async function deleteEndpoint(ctx: StripeContext, id: string, params: FormHash): Promise<ApiAnswer> {
  param(() => rejectUnknown(params, []));
  const deleted = await ctx.sql.begin(async (tx) => {
    const rows = await tx<{ id: string }[]>`
      DELETE FROM psp_sandbox.stripe_webhook_endpoints WHERE id = ${id} AND account_id = ${ctx.identity.accountId} RETURNING id`;
    if (rows.length === 0) return false;
    await tx`
      UPDATE psp_sandbox.notifications SET state = 'exhausted'
       WHERE gateway = ${GATEWAY} AND state = 'pending' AND notify_id LIKE ${`%:${id}`}`;
    return true;
  });
  if (!deleted) throw noSuchEndpoint(id);
  return { status: 200, body: { id, object: 'webhook_endpoint', deleted: true } };
}

// ---------------------------------------------------------------------------------------------
// Stripe's idempotency layer

interface KeyRow {
  endpoint: string;
  params_hash: string;
  response_status: number;
  response_body: string;
  request_id: string;
  expired: boolean;
}

function scopeOf(secretKey: string): string {
  return createHash('sha256').update(secretKey).digest('hex');
}

/**
 * Runs one POST under Stripe's idempotency rules, in ONE transaction: a transaction-scoped try-lock on
 * the key answers concurrent duplicates with 409 at once; the stored response, the PaymentIntent, the
 * ledger rows and the events commit together. Nothing is stored for a validation failure, a conflict,
 * or a failure of the database itself (then nothing happened, and a retry runs anew).
 */
async function runPost<I>(
  ctx: StripeContext,
  call: ApiCall,
  endpoint: string,
  params: FormHash,
  validate: (params: FormHash) => I,
  execute: (tx: Tx, input: I) => Promise<Executed>,
): Promise<SandboxResponse> {
  const key = call.idempotencyKey;
  // handleApi takes expand[] out of the parameters; it is still part of what a key was used with.
  const hash = paramsHash(call.expand ? { ...params, expand: call.expand.paths } : params);
  let wake = false;
  /** A stored answer for this key, replayed — or refused when the request is not the same one. */
  const answerFromStore = (row: KeyRow): SandboxResponse => {
    if (row.endpoint !== endpoint) {
      return renderAnswer(call, {
        status: 400,
        body: errorBody({
          type: 'idempotency_error',
          message: `Keys for idempotent requests can only be used for the same endpoint they were first used for ('${row.endpoint}' vs '${endpoint}'). Try using a key other than '${key}' if you meant to execute a different request.`,
        }),
      });
    }
    if (row.params_hash !== hash) {
      return renderAnswer(call, {
        status: 400,
        body: errorBody({
          type: 'idempotency_error',
          message: `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`,
        }),
      });
    }
    return render(call, row.response_status, row.response_body, {
      'idempotent-replayed': 'true',
      'original-request': row.request_id,
      // A stored 500 comes back as it is; retrying it cannot change it.
      ...(row.response_status >= 500 ? { 'stripe-should-retry': 'false' } : {}),
    });
  };
  const readKey = async (db: Sql | Tx): Promise<KeyRow | undefined> => {
    const [row] = await db<KeyRow[]>`
      SELECT endpoint, params_hash, response_status, response_body, request_id, expires_at <= now() AS expired
        FROM psp_sandbox.stripe_idempotency_keys WHERE scope = ${call.scope} AND key = ${key}`;
    return row;
  };

  // A stored answer never changes: replays need no lock (so a burst of retries cannot collide).
  if (key !== null) {
    const stored = await readKey(ctx.sql);
    if (stored && !stored.expired) return answerFromStore(stored);
  }

  const response = await ctx.sql.begin(async (tx): Promise<SandboxResponse> => {
    if (key !== null) {
      const [lock] = await tx<{ locked: boolean }[]>`
        SELECT pg_try_advisory_xact_lock(hashtextextended(${`stripe-idem:${call.scope}:${key}`}, 0)) AS locked`;
      if (!lock?.locked) {
        // The SDK retries 409s by itself; the header says so explicitly, as Stripe's does.
        return renderAnswer(
          call,
          {
            status: 409,
            body: errorBody({
              type: 'invalid_request_error',
              code: 'idempotency_key_in_use',
              message: `There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): ${key}. Please try again later.`,
            }),
          },
          { 'stripe-should-retry': 'true' },
        );
      }
      // Read again under the lock: the first request may have finished in between.
      const row = await readKey(tx);
      if (row && !row.expired) return answerFromStore(row);
      // An expired key counts as absent (Stripe: "a new request is generated if a key is reused after
      // the original is pruned").
      if (row) await tx`DELETE FROM psp_sandbox.stripe_idempotency_keys WHERE scope = ${call.scope} AND key = ${key}`;
    }

    let input: I;
    try {
      input = validate(params);
    } catch (err) {
      if (err instanceof ApiError) return renderAnswer(call, err.answer());
      throw err;
    }

    // From here on the endpoint is executing: whatever it answers is stored, 500s included.
    let executed: Executed;
    try {
      executed = await tx.savepoint((sp) => execute(sp, input));
    } catch (err) {
      if (err instanceof ApiError) {
        executed = { answer: err.answer(), wake: false };
      } else {
        console.error('[psp-sandbox] stripe %s failed:', endpoint, err);
        executed = { answer: { status: 500, body: errorBody({ type: 'api_error', message: 'An unknown error occurred' }) }, wake: false };
      }
    }
    // Expanded inside the transaction, so the answer (and what a replay returns) shows the objects as written.
    if (call.expand && executed.answer.status === 200) {
      const expanded = await expandBody(tx, ctx.identity.accountId, executed.answer.body, call.expand.root, call.expand.paths);
      executed = { ...executed, answer: { ...executed.answer, body: expanded } };
    }
    const body = JSON.stringify(executed.answer.body, null, 2);
    if (key !== null) {
      await tx`
        INSERT INTO psp_sandbox.stripe_idempotency_keys
          (scope, key, endpoint, params_hash, response_status, response_body, request_id, expires_at)
        VALUES (${call.scope}, ${key}, ${endpoint}, ${hash}, ${executed.answer.status}, ${body}, ${call.requestId},
                now() + ${IDEMPOTENCY_KEY_TTL}::interval)`;
    }
    wake = executed.wake;
    return render(call, executed.answer.status, body, {
      ...(key !== null ? { 'original-request': call.requestId } : {}),
      ...(executed.answer.status >= 500 && key !== null ? { 'stripe-should-retry': 'false' } : {}),
    });
  });
  if (wake) ctx.wakeNotifier();
  if (key !== null && Math.random() < 0.01) void deleteExpiredKeys(ctx.sql).catch(() => {});
  return response;
}

// ---------------------------------------------------------------------------------------------
// Reads: retrieve, list, search

const MAX_LIMIT = 100;

function readLimit(params: FormHash): number {
  const limit = param(() => readInteger(params.limit, 'limit')) ?? 10;
  if (limit < 1 || limit > MAX_LIMIT) {
    throw invalidRequest(`Invalid limit: must be between 1 and ${MAX_LIMIT}`, { param: 'limit' });
  }
  return limit;
}

function clauseSql(sql: Sql, clause: SearchClause): postgres.Fragment {
  let base: postgres.Fragment;
  switch (clause.field.kind) {
    case 'metadata':
      base = sql`(object -> 'metadata' ->> ${clause.field.key}) = ${String(clause.value)}`;
      break;
    case 'status':
      base = sql`status = ${String(clause.value)}`;
      break;
    case 'currency':
      base = sql`lower(object ->> 'currency') = lower(${String(clause.value)})`;
      break;
    case 'amount': {
      const amount = Number(clause.value);
      const column = sql`(object ->> 'amount')::bigint`;
      switch (clause.operator) {
        case ':':
          base = sql`${column} = ${amount}`;
          break;
        case '>':
          base = sql`${column} > ${amount}`;
          break;
        case '<':
          base = sql`${column} < ${amount}`;
          break;
        case '>=':
          base = sql`${column} >= ${amount}`;
          break;
        case '<=':
          base = sql`${column} <= ${amount}`;
          break;
      }
      break;
    }
  }
  // `-field:value` also matches objects without the field at all.
  return clause.negated ? sql`(${base}) IS NOT TRUE` : base;
}

async function search(ctx: StripeContext, params: FormHash): Promise<ApiAnswer> {
  param(() => rejectUnknown(params, ['query', 'limit', 'page']));
  const text = param(() => readString(params.query, 'query'));
  if (text === undefined) throw invalidRequest('Missing required param: query.', { code: 'parameter_missing', param: 'query' });
  let clauses: SearchClause[];
  let join: 'AND' | 'OR';
  try {
    ({ clauses, join } = parseSearchQuery(text));
  } catch (err) {
    if (err instanceof SearchQueryError) throw invalidRequest(err.message, { param: 'query' });
    throw err;
  }
  const limit = readLimit(params);
  const page = param(() => readString(params.page, 'page'));
  const before = page === undefined ? null : /^page_(\d+)$/.exec(page)?.[1];
  if (before === undefined) throw invalidRequest(`Invalid page: ${page}`, { param: 'page' });

  const sql = ctx.sql;
  const [first, ...rest] = clauses.map((clause) => clauseSql(sql, clause));
  if (!first) throw invalidRequest('Invalid search query: the query is empty.', { param: 'query' });
  const where = rest.reduce((acc, fragment) => (join === 'AND' ? sql`${acc} AND ${fragment}` : sql`${acc} OR ${fragment}`), first);
  // Stripe's search is eventually consistent ("searchable in less than a minute"); searchLagMs keeps
  // new PaymentIntents out of it for that long, so callers cannot quietly rely on read-after-write.
  const rows = await sql<{ seq: string; object: PaymentIntentObject }[]>`
    SELECT seq, object FROM psp_sandbox.stripe_payment_intents
     WHERE account_id = ${ctx.identity.accountId}
       AND created_at <= now() - make_interval(secs => ${ctx.searchLagMs / 1000})
       AND (${before}::bigint IS NULL OR seq < ${before}::bigint)
       AND (${where})
     ORDER BY seq DESC
     LIMIT ${limit + 1}`;
  const data = rows.slice(0, limit);
  const hasMore = rows.length > limit;
  return {
    status: 200,
    body: {
      object: 'search_result',
      data: data.map((row) => row.object),
      has_more: hasMore,
      next_page: hasMore ? `page_${data.at(-1)?.seq ?? ''}` : null,
      url: '/v1/payment_intents/search',
    },
  };
}

function readCreatedFilter(params: FormHash): { gt: number | null; gte: number | null; lt: number | null; lte: number | null } {
  const created = params.created;
  const out = { gt: null as number | null, gte: null as number | null, lt: null as number | null, lte: null as number | null };
  if (created === undefined) return out;
  if (typeof created === 'string') {
    const exact = param(() => readInteger(created, 'created')) ?? null;
    return { gt: null, gte: exact, lt: null, lte: exact };
  }
  const hash = param(() => readHash(created, 'created')) ?? {};
  param(() => rejectUnknown(hash, ['gt', 'gte', 'lt', 'lte'], 'created'));
  for (const bound of ['gt', 'gte', 'lt', 'lte'] as const) out[bound] = param(() => readInteger(hash[bound], `created[${bound}]`)) ?? null;
  return out;
}

/** The rows beyond a list's cursor in its direction of travel (stripe-lists.ts); every row without one. */
function afterCursor(sql: Sql, seq: string | null, cursor: Cursor | undefined): postgres.Fragment {
  if (seq === null) return sql`true`;
  return isBackwards(cursor) ? sql`seq > ${seq}::bigint` : sql`seq < ${seq}::bigint`;
}

/** A list's order in its direction of travel: pageOf shows ending_before's ascending page newest first again. */
function newestFirst(sql: Sql, cursor: Cursor | undefined): postgres.Fragment {
  return isBackwards(cursor) ? sql`seq ASC` : sql`seq DESC`;
}

/** List is strongly consistent (unlike search): the way to find a PaymentIntent created seconds ago. */
async function list(ctx: StripeContext, params: FormHash): Promise<ApiAnswer> {
  param(() => rejectUnknown(params, ['limit', 'starting_after', 'ending_before', 'created']));
  const limit = readLimit(params);
  const created = readCreatedFilter(params);
  const cursor = param(() => readCursor(params));
  let seq: string | null = null;
  if (cursor) {
    const row = await selectIntent(ctx.sql, ctx.identity.accountId, cursor.id, false);
    if (!row) throw invalidRequest(`No such payment_intent: '${cursor.id}'`, { code: 'resource_missing', param: cursor.param });
    seq = row.seq;
  }
  const rows = await ctx.sql<{ object: PaymentIntentObject }[]>`
    SELECT object FROM psp_sandbox.stripe_payment_intents
     WHERE account_id = ${ctx.identity.accountId}
       AND ${afterCursor(ctx.sql, seq, cursor)}
       AND (${created.gt}::bigint IS NULL OR (object ->> 'created')::bigint > ${created.gt}::bigint)
       AND (${created.gte}::bigint IS NULL OR (object ->> 'created')::bigint >= ${created.gte}::bigint)
       AND (${created.lt}::bigint IS NULL OR (object ->> 'created')::bigint < ${created.lt}::bigint)
       AND (${created.lte}::bigint IS NULL OR (object ->> 'created')::bigint <= ${created.lte}::bigint)
     ORDER BY ${newestFirst(ctx.sql, cursor)}
     LIMIT ${limit + 1}`;
  const page = pageOf(rows, limit, cursor);
  return {
    status: 200,
    body: { object: 'list', data: page.data.map((row) => row.object), has_more: page.hasMore, url: '/v1/payment_intents' },
  };
}

async function retrieve(ctx: StripeContext, call: ApiCall, id: string, params: FormHash): Promise<ApiAnswer> {
  // client_secret is what publishable-key callers must send; with a secret key it changes nothing.
  param(() => rejectUnknown(params, ['client_secret']));
  const clientSecret = call.publishable ? requireClientSecret(params) : null;
  const row = await selectIntent(ctx.sql, ctx.identity.accountId, id, false);
  if (!row) throw noSuchIntent(id);
  if (clientSecret !== null) checkClientSecret(row.object, clientSecret);
  return { status: 200, body: viewOf(call, row.object) };
}

/** GET /v1/refunds: newest first, filtered by payment_intent or charge; strongly consistent like every list. */
async function listRefunds(ctx: StripeContext, params: FormHash): Promise<ApiAnswer> {
  param(() => rejectUnknown(params, ['payment_intent', 'charge', 'limit', 'starting_after', 'ending_before']));
  const limit = readLimit(params);
  const accountId = ctx.identity.accountId;
  const paymentIntent = param(() => readString(params.payment_intent, 'payment_intent')) ?? null;
  const charge = param(() => readString(params.charge, 'charge')) ?? null;
  // [unverified] that an unknown PaymentIntent filter is a 404 rather than an empty list.
  if (paymentIntent !== null && !(await selectIntent(ctx.sql, accountId, paymentIntent, false)))
    throw noSuchIntent(paymentIntent, 'payment_intent');
  const cursor = param(() => readCursor(params));
  let seq: string | null = null;
  if (cursor) {
    const [row] = await ctx.sql<{ seq: string }[]>`
      SELECT seq FROM psp_sandbox.stripe_refunds WHERE id = ${cursor.id} AND account_id = ${accountId}`;
    if (!row) throw invalidRequest(`No such refund: '${cursor.id}'`, { code: 'resource_missing', param: cursor.param });
    seq = row.seq;
  }
  const rows = await ctx.sql<{ object: RefundObject }[]>`
    SELECT object FROM psp_sandbox.stripe_refunds
     WHERE account_id = ${accountId}
       AND (${paymentIntent}::text IS NULL OR payment_intent = ${paymentIntent}::text)
       AND (${charge}::text IS NULL OR charge = ${charge}::text)
       AND ${afterCursor(ctx.sql, seq, cursor)}
     ORDER BY ${newestFirst(ctx.sql, cursor)}
     LIMIT ${limit + 1}`;
  const page = pageOf(rows, limit, cursor);
  return { status: 200, body: { object: 'list', data: page.data.map((row) => row.object), has_more: page.hasMore, url: '/v1/refunds' } };
}

async function retrieveRefund(ctx: StripeContext, id: string, params: FormHash): Promise<ApiAnswer> {
  param(() => rejectUnknown(params, []));
  const [row] = await ctx.sql<{ object: RefundObject }[]>`
    SELECT object FROM psp_sandbox.stripe_refunds WHERE id = ${id} AND account_id = ${ctx.identity.accountId}`;
  if (!row) throw invalidRequest(`No such refund: '${id}'`, { code: 'resource_missing', param: 'id' }, 404);
  return { status: 200, body: row.object };
}

// ---------------------------------------------------------------------------------------------
// The v1 API entry point

type Route =
  | { kind: 'create' }
  | { kind: 'list' }
  | { kind: 'search' }
  | { kind: 'retrieve'; id: string }
  | { kind: 'confirm'; id: string }
  | { kind: 'cancel'; id: string }
  | { kind: 'capture'; id: string }
  | { kind: 'refund' }
  | { kind: 'list_refunds' }
  | { kind: 'retrieve_refund'; id: string }
  | { kind: 'create_endpoint' }
  | { kind: 'list_endpoints' }
  | { kind: 'retrieve_endpoint'; id: string }
  | { kind: 'update_endpoint'; id: string }
  | { kind: 'delete_endpoint'; id: string }
  | { kind: 'list_events' }
  | { kind: 'retrieve_event'; id: string }
  | { kind: 'update'; id: string }
  | { kind: 'update_refund'; id: string }
  | { kind: 'list_charges' }
  | { kind: 'retrieve_charge'; id: string }
  | { kind: 'list_balance_transactions' }
  | { kind: 'retrieve_balance_transaction'; id: string };

function matchRoute(method: string, path: string): Route | undefined {
  if (path === '/v1/balance_transactions') return method === 'GET' ? { kind: 'list_balance_transactions' } : undefined;
  const balance = /^\/v1\/balance_transactions\/([^/]+)$/.exec(path);
  if (balance) return method === 'GET' ? { kind: 'retrieve_balance_transaction', id: decodeURIComponent(balance[1] ?? '') } : undefined;
  if (path === '/v1/events') return method === 'GET' ? { kind: 'list_events' } : undefined;
  const event = /^\/v1\/events\/([^/]+)$/.exec(path);
  if (event) return method === 'GET' ? { kind: 'retrieve_event', id: decodeURIComponent(event[1] ?? '') } : undefined;
  if (path === '/v1/webhook_endpoints') {
    if (method === 'POST') return { kind: 'create_endpoint' };
    if (method === 'GET') return { kind: 'list_endpoints' };
    return undefined;
  }
  const endpoint = /^\/v1\/webhook_endpoints\/([^/]+)$/.exec(path);
  if (endpoint) {
    const id = decodeURIComponent(endpoint[1] ?? '');
    if (method === 'GET') return { kind: 'retrieve_endpoint', id };
    if (method === 'POST') return { kind: 'update_endpoint', id };
    if (method === 'DELETE') return { kind: 'delete_endpoint', id };
    return undefined;
  }
  if (path === '/v1/refunds') {
    if (method === 'POST') return { kind: 'refund' };
    if (method === 'GET') return { kind: 'list_refunds' };
    return undefined;
  }
  const refund = /^\/v1\/refunds\/([^/]+)$/.exec(path);
  if (refund) {
    const id = decodeURIComponent(refund[1] ?? '');
    if (method === 'GET') return { kind: 'retrieve_refund', id };
    return method === 'POST' ? { kind: 'update_refund', id } : undefined;
  }
  if (path === '/v1/charges') return method === 'GET' ? { kind: 'list_charges' } : undefined;
  const charge = /^\/v1\/charges\/([^/]+)$/.exec(path);
  if (charge) return method === 'GET' ? { kind: 'retrieve_charge', id: decodeURIComponent(charge[1] ?? '') } : undefined;
  if (path === '/v1/payment_intents') {
    if (method === 'POST') return { kind: 'create' };
    if (method === 'GET') return { kind: 'list' };
    return undefined;
  }
  if (path === '/v1/payment_intents/search') return method === 'GET' ? { kind: 'search' } : undefined;
  const match = /^\/v1\/payment_intents\/([^/]+)(?:\/(confirm|cancel|capture))?$/.exec(path);
  if (!match) return undefined;
  const id = decodeURIComponent(match[1] ?? '');
  const action = match[2];
  if (action === undefined) {
    if (method === 'GET') return { kind: 'retrieve', id };
    return method === 'POST' ? { kind: 'update', id } : undefined;
  }
  if (method !== 'POST') return undefined;
  if (action === 'capture') return { kind: 'capture', id };
  return action === 'confirm' ? { kind: 'confirm', id } : { kind: 'cancel', id };
}

/** The object (or list of them) a route answers with, which expand[] starts from; undefined: no expand here. */
function expandRootOf(route: Route): ExpandRoot | undefined {
  switch (route.kind) {
    case 'create':
    case 'confirm':
    case 'cancel':
    case 'capture':
    case 'retrieve':
    case 'update':
      return { type: 'payment_intent', list: false };
    case 'list':
    case 'search':
      return { type: 'payment_intent', list: true };
    case 'refund':
    case 'retrieve_refund':
    case 'update_refund':
      return { type: 'refund', list: false };
    case 'list_refunds':
      return { type: 'refund', list: true };
    case 'retrieve_charge':
      return { type: 'charge', list: false };
    case 'list_charges':
      return { type: 'charge', list: true };
    default:
      return undefined;
  }
}

function headerValue(headers: SandboxRequest['headers'], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

async function handleApi(base: StripeContext, request: SandboxRequest): Promise<SandboxResponse> {
  const rawKey = headerValue(request.headers, 'idempotency-key');
  const call: ApiCall = {
    requestId: newRequestId(),
    apiVersion: headerValue(request.headers, 'stripe-version') || ACCOUNT_API_VERSION,
    scope: '',
    // Stripe ignores Idempotency-Key on GET and DELETE ("it has no effect").
    idempotencyKey: request.method === 'POST' && rawKey ? rawKey : null,
    publishable: false,
    baseUrl: request.baseUrl,
  };
  try {
    // Parsed before authenticating only to find Stripe.js's `key` parameter; a malformed body is
    // refused after authentication, as before.
    let params: FormHash | undefined;
    let paramError: unknown;
    try {
      params = parseStripeForm(request.method === 'POST' ? request.body : request.url.search.slice(1));
    } catch (err) {
      paramError = err;
    }
    const paramKey = typeof params?.key === 'string' ? params.key : undefined;
    const auth = await authenticate(base.sql, request.headers, paramKey);
    if (auth instanceof ApiError) return renderAnswer({ ...call, idempotencyKey: null }, auth.answer());
    const ctx: StripeContext = { ...base, identity: auth.identity };
    call.scope = scopeOf(auth.key);
    call.publishable = auth.publishable;
    const connected = headerValue(request.headers, 'stripe-account');
    if (connected && connected !== ctx.identity.accountId) {
      return renderAnswer(call, {
        status: 403,
        body: errorBody({
          type: 'invalid_request_error',
          code: 'account_invalid',
          message: `The provided key '${maskKey(auth.key)}' does not have access to account '${connected}' (or that account does not exist). The PayOnce sandbox does not emulate Connect.`,
        }),
      });
    }
    if (call.idempotencyKey !== null && call.idempotencyKey.length > MAX_IDEMPOTENCY_KEY_LENGTH) {
      const tooLong = invalidRequest(
        `Invalid Idempotency-Key: it must be at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters long (yours has ${call.idempotencyKey.length}).`,
      );
      return renderAnswer({ ...call, idempotencyKey: null }, tooLong.answer());
    }
    const path = request.url.pathname;
    const route = matchRoute(request.method, path);
    if (!route) throw unrecognizedUrl(request.method, path);
    // A publishable key is public (it is in every checkout page): it may only confirm a PaymentIntent
    // and read it back, and only with that PaymentIntent's client secret — what Stripe.js does.
    if (call.publishable && route.kind !== 'confirm' && route.kind !== 'retrieve') {
      return renderAnswer({ ...call, idempotencyKey: null }, invalidRequest(PUBLISHABLE_KEY_REFUSAL, {}, 401).answer());
    }

    const contentType = (headerValue(request.headers, 'content-type') ?? '').toLowerCase();
    if (
      request.method === 'POST' &&
      request.body !== '' &&
      contentType !== '' &&
      !contentType.startsWith('application/x-www-form-urlencoded')
    ) {
      throw invalidRequest(`Invalid request: Stripe's v1 API takes application/x-www-form-urlencoded bodies, not ${contentType}.`);
    }
    if (paramError !== undefined || params === undefined) {
      if (paramError instanceof StripeParamError) throw fromParamError(paramError);
      throw paramError;
    }
    if (call.publishable) delete params.key;
    const root = call.publishable ? undefined : expandRootOf(route);
    if (root && params.expand !== undefined) {
      call.expand = { root, paths: param(() => readExpand(params, root)) };
      delete params.expand;
    }
    const input = params;
    /** A read's answer, expanded as the request asked. */
    const read = async (answer: Promise<ApiAnswer>): Promise<SandboxResponse> => {
      const done = await answer;
      if (!call.expand || done.status !== 200) return renderAnswer(call, done);
      const body = await expandBody(ctx.sql, ctx.identity.accountId, done.body, call.expand.root, call.expand.paths);
      return renderAnswer(call, { status: 200, body });
    };
    const endpoint = `${request.method} ${path}`;

    switch (route.kind) {
      case 'create':
        return await runPost(
          ctx,
          call,
          endpoint,
          input,
          (p) => validateCreate(p, call.apiVersion),
          (tx, validated) => executeCreate(ctx, tx, call, validated),
        );
      case 'confirm':
        return await runPost(
          ctx,
          call,
          endpoint,
          input,
          (p) => validateConfirm(p, call.publishable),
          (tx, validated) => executeConfirm(ctx, tx, call, route.id, validated),
        );
      case 'cancel':
        return await runPost(ctx, call, endpoint, input, validateCancel, (tx, validated) =>
          executeCancel(ctx, tx, call, route.id, validated),
        );
      case 'capture':
        return await runPost(ctx, call, endpoint, input, validateCapture, (tx, validated) =>
          executeCapture(ctx, tx, call, route.id, validated),
        );
      case 'refund':
        return await runPost(ctx, call, endpoint, input, validateRefund, (tx, validated) => executeRefund(ctx, tx, call, validated));
      case 'update':
        return await runPost(ctx, call, endpoint, input, validateIntentUpdate, (tx, validated) =>
          executeIntentUpdate(ctx, tx, call, route.id, validated),
        );
      case 'update_refund':
        return await runPost(ctx, call, endpoint, input, validateRefundUpdate, (tx, validated) =>
          executeRefundUpdate(ctx, tx, call, route.id, validated),
        );
      case 'list_refunds':
        return await read(listRefunds(ctx, input));
      case 'retrieve_refund':
        return await read(retrieveRefund(ctx, route.id, input));
      case 'retrieve':
        return await read(retrieve(ctx, call, route.id, input));
      case 'list':
        return await read(list(ctx, input));
      case 'search':
        return await read(search(ctx, input));
      case 'list_charges':
        return await read(listCharges(ctx.sql, ctx.identity.accountId, input));
      case 'retrieve_charge':
        return await read(retrieveCharge(ctx.sql, ctx.identity.accountId, route.id, input));
      case 'create_endpoint':
        return await runPost(ctx, call, endpoint, input, validateEndpointCreate, (tx, validated) =>
          executeEndpointCreate(ctx, tx, validated),
        );
      case 'update_endpoint':
        return await runPost(ctx, call, endpoint, input, validateEndpointUpdate, (tx, validated) =>
          executeEndpointUpdate(ctx, tx, route.id, validated),
        );
      case 'list_endpoints':
        return renderAnswer(call, await listEndpoints(ctx, input));
      case 'retrieve_endpoint':
        return renderAnswer(call, await retrieveEndpoint(ctx, route.id, input));
      case 'delete_endpoint':
        return renderAnswer(call, await deleteEndpoint(ctx, route.id, input));
      case 'list_events':
        return renderAnswer(call, await listEvents(ctx.sql, ctx.identity.accountId, input));
      case 'retrieve_event':
        return renderAnswer(call, await retrieveEvent(ctx.sql, ctx.identity.accountId, route.id, input));
      case 'list_balance_transactions':
        return renderAnswer(call, await listBalanceTransactions(ctx.sql, ctx.identity.accountId, input));
      case 'retrieve_balance_transaction':
        return renderAnswer(call, await retrieveBalanceTransaction(ctx.sql, ctx.identity.accountId, route.id, input));
      default: {
        const unreachable: never = route;
        throw new Error(`unhandled route ${JSON.stringify(unreachable)}`);
      }
    }
  } catch (err) {
    if (err instanceof ApiError) return renderAnswer(call, err.answer());
    // The database failed before anything was stored: a plain 500 the SDK may retry, which runs anew.
    console.error('[psp-sandbox] stripe %s %s failed:', request.method, request.url.pathname, err);
    return renderAnswer(call, { status: 500, body: errorBody({ type: 'api_error', message: 'An unknown error occurred' }) });
  }
}

/** The account whose PaymentIntent for `outTradeNo` is the newest; undefined when none has one. */
async function ownerOfOrder(sql: Sql, outTradeNo: string): Promise<StripeIdentity | undefined> {
  const [row] = await sql<AccountRow[]>`
    SELECT a.account_id, a.secret_key, a.publishable_key, a.webhook_secret
      FROM psp_sandbox.stripe_payment_intents p JOIN psp_sandbox.stripe_accounts a USING (account_id)
     WHERE p.out_trade_no = ${outTradeNo} ORDER BY p.seq DESC LIMIT 1`;
  if (!row) return undefined;
  return identityOf(row);
}

// ---------------------------------------------------------------------------------------------
// POST /sandbox/stripe/buyer-pays — the buyer finishing the payment on Stripe's side

/**
 * The buyer confirms the order's newest PaymentIntent that can still take a card — what completing
 * 3-D Secure, Stripe's hosted page or a saved-card step does on the real Stripe — with the card of
 * that test buyer. It runs exactly the charge a confirm runs: a ledger row, the PaymentIntent's new
 * state and its payment_intent.succeeded / payment_failed webhook. A decline leaves it confirmable
 * again, as on Stripe; a canceled or succeeded PaymentIntent cannot be paid (409 TRADE_NOT_PAYABLE).
 */
async function handleBuyerPays(base: StripeContext, request: SandboxRequest): Promise<SandboxResponse> {
  const read = readBuyerPays(request);
  if ('answer' in read) return read.answer;
  const { outTradeNo, buyer } = read.input;
  // The buyer pays whichever merchant's PaymentIntent the order is: the account of its newest one.
  const ctx = { ...base, identity: (await ownerOfOrder(base.sql, outTradeNo)) ?? base.identity };
  const accountId = ctx.identity.accountId;
  const card = cardByPaymentMethodId(stripeTestBuyers()[buyer]);
  if (!card) throw new Error(`no test card for buyer ${buyer}`);
  // The buyer's confirm is a request of its own on Stripe (made with the publishable key): no
  // Idempotency-Key of the merchant's.
  const call = sandboxCall(request.baseUrl);
  let wake = false;
  const paid = await ctx.sql.begin(async (tx) => {
    await lockOrder(tx, accountId, outTradeNo);
    const [open] = await tx<{ id: string }[]>`
      SELECT id FROM psp_sandbox.stripe_payment_intents
       WHERE account_id = ${accountId} AND out_trade_no = ${outTradeNo}
         AND status IN ('requires_payment_method', 'requires_confirmation', 'requires_action')
       ORDER BY seq DESC LIMIT 1`;
    if (!open) {
      const [any] = await tx<{ count: string }[]>`
        SELECT count(*)::text AS count FROM psp_sandbox.stripe_payment_intents
         WHERE account_id = ${accountId} AND out_trade_no = ${outTradeNo}`;
      return { payable: false as const, known: Number(any?.count ?? '0') > 0 };
    }
    const row = await lockIntent(ctx, tx, open.id);
    const executed = await chargeIntent(ctx, tx, call, row.object, { card, alias: stripeTestBuyers()[buyer] });
    wake = executed.wake;
    return { payable: true as const, intentId: row.object.id, succeeded: executed.answer.status === 200 };
  });
  if (wake) ctx.wakeNotifier();
  if (!paid.payable) {
    return json(409, {
      code: 'TRADE_NOT_PAYABLE',
      message: paid.known
        ? `no PaymentIntent with metadata.out_trade_no ${outTradeNo} can be confirmed: each one has succeeded or is canceled`
        : `no Stripe PaymentIntent with metadata.out_trade_no ${outTradeNo}`,
    });
  }
  return json(200, { gateway: GATEWAY, outTradeNo, status: paid.succeeded ? 'succeeded' : 'declined', gatewayTradeNo: paid.intentId });
}

// ---------------------------------------------------------------------------------------------
// POST /sandbox/stripe/lapse-authorization {"paymentIntent"} — the end of an authorisation's window, now

/**
 * Ends an authorisation's window now, as the issuer would after 7 days (not Stripe's API: a test
 * tool, like buyer-pays). The PaymentIntent is canceled (cancellation_reason automatic) and its
 * payment_intent.canceled event goes out; 409 when it is not awaiting capture.
 */
async function handleLapseNow(ctx: StripeContext, request: SandboxRequest): Promise<SandboxResponse> {
  if (request.method !== 'POST') return json(405, { code: 'METHOD_NOT_ALLOWED', message: 'use POST' });
  let id: unknown;
  try {
    id = (JSON.parse(request.body) as { paymentIntent?: unknown }).paymentIntent;
  } catch {
    return json(400, { code: 'BAD_REQUEST', message: 'the body is not valid JSON' });
  }
  if (typeof id !== 'string' || !/^pi_[A-Za-z0-9]+$/.test(id)) {
    return json(400, { code: 'BAD_REQUEST', message: 'paymentIntent: a PaymentIntent id (pi_…)' });
  }
  const [moved] = await ctx.sql<{ account_id: string }[]>`
    UPDATE psp_sandbox.stripe_payment_intents SET capture_before = now()
     WHERE id = ${id} AND status = 'requires_capture' RETURNING account_id`;
  if (!moved) return json(409, { code: 'NOT_AWAITING_CAPTURE', message: `PaymentIntent ${id} is not awaiting capture` });
  await lapseIfDue(ctx, id, moved.account_id);
  return json(200, { paymentIntent: id, status: 'canceled' });
}

// ---------------------------------------------------------------------------------------------
// POST /sandbox/stripe/accounts — another merchant's account (not Stripe's)

/**
 * Opens another test account with keys of its own, as signing up again on Stripe would: its
 * PaymentIntents, endpoints and events are invisible to every other account's keys. For tests of what
 * a merchant must ignore (another account's objects and events).
 */
async function handleOpenAccount(ctx: StripeContext, request: SandboxRequest): Promise<SandboxResponse> {
  if (request.method !== 'POST') return json(405, { code: 'METHOD_NOT_ALLOWED', message: 'use POST' });
  const identity = await openAccount(ctx.sql);
  return json(201, {
    accountId: identity.accountId,
    secretKey: identity.secretKey,
    publishableKey: identity.publishableKey,
    webhookSecret: identity.webhookSecret,
  });
}

// ---------------------------------------------------------------------------------------------
// The module

export interface StripeModuleOptions {
  /**
   * How long a new PaymentIntent stays out of search results. Stripe's search is eventually
   * consistent (new data is searchable "in less than a minute", up to an hour during outages);
   * 0 (the default) makes it immediate. Tests set it to prove a caller does not depend on search alone.
   */
  searchLagMs?: number;
  /** How long an authorisation can be captured; default Stripe's 7 days × SANDBOX_TIME_SCALE. */
  authorizationWindowMs?: number;
}

/** "Card payments … must be captured within 7 days" (https://docs.stripe.com/payments/place-a-hold-on-a-payment-method). */
const AUTHORIZATION_WINDOW_MS = 7 * 24 * 3600 * 1000;

export function createStripeModule(options: StripeModuleOptions = {}): SandboxGatewayModule {
  const searchLagMs = options.searchLagMs ?? 0;
  return {
    gateway: GATEWAY,
    schemaSql: SCHEMA_SQL + EVENTS_SCHEMA_SQL + CHARGES_SCHEMA_SQL,
    async setUp(tx, moduleContext) {
      const identity = await loadOrCreateIdentity(tx);
      await deleteExpiredKeys(tx);
      const ctx: StripeContext = {
        sql: moduleContext.sql,
        identity,
        wakeNotifier: moduleContext.wakeNotifier,
        deliveryTimeoutMs: moduleContext.deliveryTimeoutMs,
        searchLagMs,
        authorizationWindowMs: options.authorizationWindowMs ?? AUTHORIZATION_WINDOW_MS * moduleContext.timeScale,
      };
      return {
        notifier: stripeNotifier(identity.webhookSecret),
        // Stripe's own failure before executing: 500 api_error in its error envelope, with a request id
        // (stripe-node raises StripeAPIError and retries a 500 with the same Idempotency-Key).
        systemError: () => ({
          status: 500,
          headers: { 'content-type': 'application/json', 'request-id': `req_${randomBytes(7).toString('hex')}` },
          body: JSON.stringify(errorBody({ type: 'api_error', message: 'An unknown error occurred' }), null, 2),
        }),
        rateLimited: () => rateLimitedAnswer(),
        credentials: (baseUrl) => {
          const url = new URL(baseUrl);
          const protocol = url.protocol === 'https:' ? 'https' : 'http';
          return {
            secretKey: identity.secretKey,
            webhookSecret: identity.webhookSecret,
            accountId: identity.accountId,
            host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
            port: Number(url.port || (protocol === 'https' ? 443 : 80)),
            protocol,
            testBuyers: stripeTestBuyers(),
            publishableKey: identity.publishableKey,
            jsUrl: `${baseUrl}${STRIPE_JS_PATH}`,
            // The fees this account's balance transactions show, for 对账 to check them against (statements.ts).
            feeContract: feeContract('stripe'),
          };
        },
        async handle(request) {
          const path = request.url.pathname;
          if (path === '/sandbox/stripe/notify') {
            return handleNotifyTool(
              {
                sql: ctx.sql,
                accountId: identity.accountId,
                webhookSecret: identity.webhookSecret,
                deliveryTimeoutMs: ctx.deliveryTimeoutMs,
              },
              request,
            );
          }
          if (path === '/sandbox/stripe/buyer-pays') return handleBuyerPays(ctx, request);
          if (path === '/sandbox/stripe/accounts') return handleOpenAccount(ctx, request);
          if (path === '/sandbox/stripe/lapse-authorization') return handleLapseNow(ctx, request);
          const challenge = await handleChallenge(request, {
            read: (id) => readChallenge(ctx, id),
            settle: (id, outcome) => settleChallenge(ctx, id, outcome),
          });
          if (challenge) return challenge;
          const stripeJs = handleStripeJs(request);
          if (stripeJs) return stripeJs;
          // /v1/… is Stripe's namespace on the sandbox's port: unknown paths get Stripe's own 404.
          if (path === '/v1' || path.startsWith('/v1/')) {
            await lapseDueAuthorizations(ctx);
            return handleApi(ctx, request);
          }
          return undefined;
        },
      };
    },
  };
}

/**
 * Stripe's answer over a rate limit (https://docs.stripe.com/rate-limits): 429, type
 * invalid_request_error, code rate_limit, and which limiter said no in Stripe-Rate-Limited-Reason.
 * No Retry-After (Stripe documents none) and no Stripe-Should-Retry: true — that header marks the
 * lock_timeout 429s, which stripe-node retries by itself; a rate limit is left to the caller's own
 * backoff [unverified: that Stripe omits the header on rate limits].
 */
function rateLimitedAnswer(): SandboxResponse {
  const body = errorBody({
    type: 'invalid_request_error',
    code: 'rate_limit',
    message: 'Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.',
  });
  return {
    status: 429,
    headers: { 'content-type': 'application/json', 'request-id': newRequestId(), 'stripe-rate-limited-reason': 'global-rate' },
    body: JSON.stringify(body, null, 2),
  };
}

export const stripeModule: SandboxGatewayModule = createStripeModule();
