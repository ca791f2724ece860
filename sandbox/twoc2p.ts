/**
 * The sandbox's 2C2P: an emulation of PGW v4.3's server-to-server API on its real paths.
 *
 *   POST /payment/4.3/paymentToken     {"payload":"<JWT>"} → {"payload":"<JWT>"} | {respCode,respDesc}
 *   POST /payment/4.3/payment          Do Payment, in either of two envelopes (below)
 *   POST /payment/4.3/paymentInquiry   {"payload":"<JWT>"} → {"payload":"<JWT>"} | {respCode,respDesc}
 *   POST /payment/4.3/cancelTransaction  cancel an unpaid invoice and every payment token of it (below)
 *   POST /2C2PFrontend/PaymentAction/2.0/action  the Payment Maintenance API: refunds and refund status
 *                                      (XML in JWE in JWS, sandbox/twoc2p-maintenance.ts)
 *   GET  /payment/4.3/hosted/<paymentToken>  the hosted payment page webPaymentUrl points to (card form)
 *   POST /payment/4.3/hosted/<paymentToken>  the buyer submits it (form-urlencoded card fields)
 *   GET  /sandbox/2c2p/pay?paymentToken=     older webPaymentUrl form: redirects to the hosted page
 *   POST /sandbox/2c2p/notify          the notification test tool
 *   POST /sandbox/2c2p/buyer-pays      the buyer submits the hosted payment page now (test tool)
 *   GET  /sandbox/2c2p/settlement-report  the daily reconciliation report (twoc2p-settlement.ts)
 *
 * JWTs are HS256 over the merchant's secret key. Every error of the envelope or of validation comes
 * back as plain JSON `{respCode, respDesc}` with HTTP 200, as 2C2P does (e.g. 9042 for a JWT signed
 * with another secret, 6103 for something that is not a JWT); business answers are signed.
 *
 * Do Payment: 2C2P documents it as plain JSON (`{paymentToken, payment:{…}}`; the payment token is
 * the credential) answered with plain JSON — 2000 "transaction completed, do a payment inquiry" or
 * the failure code — after which the merchant reads the signed result with paymentInquiry. Our
 * gateways.md describes it with a JWT envelope instead. The sandbox accepts both: a plain request is
 * answered the documented way (what the adapter uses, so it works against the real 2C2P unchanged);
 * a `{"payload":"<JWT>"}` request is verified with the merchant's secret and answered with a signed
 * JWT carrying the full result (0000 + tranRef, referenceNo, approvalCode … or the 4xxx decline).
 *
 * Cancel Transaction: 2C2P documents `POST …/canceltransaction` with plain JSON `{paymentToken, clientID,
 * locale}` answered `{invoiceNo, respCode:"2000", respDesc}` ("completed, do a payment inquiry"), and
 * warns on the same page that it "is not working anymore" for cancelling payments; its Payment
 * Maintenance API voids by invoiceNo instead. The sandbox takes both shapes on the path above: the
 * documented plain form (the token is the credential; it cancels that token's invoice) and the JWT
 * envelope `{merchantID, invoiceNo}` signed with the merchant secret (what the adapter uses: it
 * needs no payment token, which PayOnce does not keep), answered signed. Cancelling cancels the
 * invoice, so every payment token of it dies with it; paymentInquiry then answers 0003 "Transaction is
 * cancelled", Do Payment on any of its tokens answers 0003, and a new paymentToken for the invoiceNo
 * is 9015 (invoice numbers stay unique; a cancelled invoice is final, like Alipay's TRADE_CLOSED)
 * [unverified: 2C2P does not document either answer]. Cancelling again answers success again; a paid
 * invoice is refused with 9015 (the sandbox's code for "the invoice is already paid") [unverified]; an
 * unknown invoiceNo is 2002. A declined payment leaves the invoice open: another card (or a new
 * token for the same amount) can still pay it until it is cancelled, as on the hosted payment page.
 *
 * Paths ignore case, as 2C2P's do: clients generated from its OpenAPI description post to
 * /payment/4.3/paymenttoken, its pages write /paymentToken; both reach the same API.
 *
 * Hosted payment page (webPaymentUrl, the buyer's redirect step): a card form for the token's invoice
 * listing the test cards below. A submission is a Do Payment on that token, under the same invoice lock,
 * with the same ledger row and backend notification. An approval sends the browser back to the
 * invoice's frontendReturnUrl by an auto-submitting form POST carrying `paymentResponse` (base64 JSON
 * {invoiceNo, channelCode, respCode, respDesc}, 2C2P's "Payment Response (Frontend)"); a decline shows
 * the 4xxx code and the form again (the invoice stays payable); a paid, cancelled or expired
 * (paymentExpiry) token's page says so with HTTP 409.
 *
 * Test cards (the sandbox's own choice, mapped onto ISO 8583 decline reasons as 2C2P's 4xxx codes do):
 *   4111111111111111 — ok: approved.
 *   4000000000024051 — insufficient_funds: 4051 Insufficient funds.
 *   4000000000094062 — account_restricted: 4062 Restricted card.
 * Any other Luhn-valid number is 4005 Do not honor; a Luhn-invalid one 4014 Invalid card number.
 * Expiry and CVV are optional; an expiry in the past is 4054 Expired card.
 */
import { createHash, randomBytes, randomInt } from 'node:crypto';
import { z } from 'zod';
import { hostedTestCards, renderClosedPage, renderPaymentPage, renderReturnPage, type HostedInvoice } from './twoc2p-hosted';
import { TWOC2P_SETTLEMENT_PATH, twoC2pSettlementReport } from './twoc2p-settlement';
import { feeContract } from './statements';
import { json, readBuyerPays, type SandboxGatewayModule, type SandboxRequest, type SandboxResponse } from './gateway-module';
import { generateRsaKeyPair } from './keys';
import { postNotification, type GatewayNotifier } from './notifier';
import {
  enqueueNotification,
  findNotification,
  findRefund,
  insertAttempt,
  recordCharge,
  recordRefund,
  refundedMinor,
  refundsOfCharge,
  type DeliveryResult,
  type StoredRefund,
  type Queryable,
  type Sql,
  type Tx,
} from './store';
import {
  canonicalJson,
  CURRENCY_EXPONENT,
  DecimalLiteral,
  formatAmount,
  luhnValid,
  maskCard,
  parseAmount,
  peekJwt,
  RESP_DESC,
  signJwt,
  transactionDateTime,
  verifyJwt,
  type Claims,
  type RespCode,
} from './twoc2p-wire';
import {
  isMaintenancePath,
  MAINTENANCE_PATH,
  MAINTENANCE_SCHEMA_SQL,
  maintenanceApi,
  maintenanceMerchant,
  maintenanceOperation,
  maintenanceSystemError,
  type InvoiceRefunds,
  type MaintenanceKeyRow,
  type MaintenanceLedger,
  type MaintenanceMerchant,
  type MaintenanceRefundRequest,
  type Refusal as MaintenanceRefusal,
} from './twoc2p-maintenance';

const GATEWAY = '2c2p';
const API_PREFIX = '/payment/4.3/';

// ---------------------------------------------------------------------------------------------
// Test cards

export type TestBuyerName = 'ok' | 'insufficient_funds' | 'account_restricted';

export const TWOC2P_TEST_CARDS: Readonly<Record<TestBuyerName, string>> = {
  ok: '4111111111111111',
  insufficient_funds: '4000000000024051',
  account_restricted: '4000000000094062',
};

const CARD_DECLINES: Readonly<Record<string, RespCode>> = {
  [TWOC2P_TEST_CARDS.insufficient_funds]: '4051',
  [TWOC2P_TEST_CARDS.account_restricted]: '4062',
};

function cardOutcome(cardNo: string, expiry: { month: number; year: number } | null, now: Date): RespCode {
  if (!luhnValid(cardNo)) return '4014';
  if (expiry) {
    // A card is valid through the last day of its expiry month.
    const endOfMonth = Date.UTC(expiry.year, expiry.month, 1);
    if (endOfMonth <= now.getTime()) return '4054';
  }
  if (cardNo === TWOC2P_TEST_CARDS.ok) return '0000';
  return CARD_DECLINES[cardNo] ?? '4005';
}

// ---------------------------------------------------------------------------------------------
// Schema

const SCHEMA_SQL = `
CREATE TABLE IF NOT EXISTS psp_sandbox.twoc2p_merchants (
  merchant_id  text PRIMARY KEY,
  -- Kept because the sandbox doubles as the merchant portal that hands the secret out.
  secret_key   text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now()
);

-- One row per (merchant, invoiceNo): what 2C2P keeps an invoice number unique on.
CREATE TABLE IF NOT EXISTS psp_sandbox.twoc2p_invoices (
  merchant_id          text NOT NULL REFERENCES psp_sandbox.twoc2p_merchants (merchant_id),
  invoice_no           text NOT NULL,
  description          text NOT NULL,
  amount_minor         bigint NOT NULL CHECK (amount_minor > 0),
  currency_code        text NOT NULL,
  payment_channels     text[],
  backend_return_url   text,
  frontend_return_url  text,
  status               text NOT NULL CHECK (status IN ('open', 'paid', 'cancelled')),
  created_at           timestamptz NOT NULL DEFAULT now(),
  paid_at              timestamptz,
  cancelled_at         timestamptz,
  PRIMARY KEY (merchant_id, invoice_no)
);
-- Databases created before cancelTransaction existed: widen the status rule (idempotent).
ALTER TABLE psp_sandbox.twoc2p_invoices ADD COLUMN IF NOT EXISTS cancelled_at timestamptz;
ALTER TABLE psp_sandbox.twoc2p_invoices DROP CONSTRAINT IF EXISTS twoc2p_invoices_status_check;
ALTER TABLE psp_sandbox.twoc2p_invoices
  ADD CONSTRAINT twoc2p_invoices_status_check CHECK (status IN ('open', 'paid', 'cancelled'));

CREATE TABLE IF NOT EXISTS psp_sandbox.twoc2p_payment_tokens (
  payment_token  text PRIMARY KEY,
  merchant_id    text NOT NULL,
  invoice_no     text NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (merchant_id, invoice_no) REFERENCES psp_sandbox.twoc2p_invoices (merchant_id, invoice_no)
);
-- The request's paymentExpiry: after it, this token (its hosted page and Do Payment) takes no money.
-- NULL: no expiry asked for (2C2P's own 30-minute token validity is not emulated, see paymentTokenApi).
ALTER TABLE psp_sandbox.twoc2p_payment_tokens ADD COLUMN IF NOT EXISTS expires_at timestamptz;

-- paymentToken's idempotencyID: the first successful answer (its signed JWT, byte for byte),
-- replayed for the same request.
CREATE TABLE IF NOT EXISTS psp_sandbox.twoc2p_idempotency (
  merchant_id     text NOT NULL,
  idempotency_id  text NOT NULL,
  request_hash    text NOT NULL,
  response_jwt    text NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (merchant_id, idempotency_id)
);

-- tranRef comes from a sequence: unique across restarts and sandbox processes.
CREATE SEQUENCE IF NOT EXISTS psp_sandbox.twoc2p_tran_ref_seq START 3000001;
-- refundReferenceNo, likewise. Refunds themselves live in the shared psp_sandbox.refunds ledger.
CREATE SEQUENCE IF NOT EXISTS psp_sandbox.twoc2p_refund_ref_seq START 7000001;

-- Every Do Payment that reached the "card host", approved or declined.
CREATE TABLE IF NOT EXISTS psp_sandbox.twoc2p_transactions (
  tran_ref        text PRIMARY KEY,
  merchant_id     text NOT NULL,
  invoice_no      text NOT NULL,
  payment_token   text NOT NULL,
  resp_code       text NOT NULL,
  channel_code    text NOT NULL,
  card_no_masked  text NOT NULL,
  reference_no    text NOT NULL,
  approval_code   text,
  eci             text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (merchant_id, invoice_no) REFERENCES psp_sandbox.twoc2p_invoices (merchant_id, invoice_no)
);
-- Under the per-invoice lock, the database itself refuses a second approval for one invoice.
CREATE UNIQUE INDEX IF NOT EXISTS twoc2p_one_approval_per_invoice
  ON psp_sandbox.twoc2p_transactions (merchant_id, invoice_no) WHERE resp_code = '0000';
CREATE INDEX IF NOT EXISTS twoc2p_transactions_by_invoice
  ON psp_sandbox.twoc2p_transactions (merchant_id, invoice_no, created_at);
`;

// ---------------------------------------------------------------------------------------------
// Rows

interface MerchantRow {
  merchant_id: string;
  secret_key: string;
}

interface InvoiceRow {
  merchant_id: string;
  invoice_no: string;
  description: string;
  amount_minor: string;
  currency_code: string;
  payment_channels: string[] | null;
  backend_return_url: string | null;
  frontend_return_url: string | null;
  status: 'open' | 'paid' | 'cancelled';
  paid_at: Date | null;
}

interface TransactionRow {
  tran_ref: string;
  merchant_id: string;
  invoice_no: string;
  resp_code: string;
  channel_code: string;
  card_no_masked: string;
  reference_no: string;
  approval_code: string | null;
  eci: string | null;
  created_at: Date;
}

const INVOICE_COLUMNS =
  'merchant_id, invoice_no, description, amount_minor, currency_code, payment_channels, backend_return_url, frontend_return_url, status, paid_at';

async function selectInvoice(db: Queryable, merchantId: string, invoiceNo: string): Promise<InvoiceRow | undefined> {
  const rows = await db<InvoiceRow[]>`
    SELECT ${db.unsafe(INVOICE_COLUMNS)} FROM psp_sandbox.twoc2p_invoices
     WHERE merchant_id = ${merchantId} AND invoice_no = ${invoiceNo}`;
  return rows[0];
}

/** The transaction an inquiry reports: the approval if there is one, else the latest attempt. */
async function reportedTransaction(db: Queryable, merchantId: string, invoiceNo: string): Promise<TransactionRow | undefined> {
  const rows = await db<TransactionRow[]>`
    SELECT tran_ref, merchant_id, invoice_no, resp_code, channel_code, card_no_masked, reference_no,
           approval_code, eci, created_at
      FROM psp_sandbox.twoc2p_transactions
     WHERE merchant_id = ${merchantId} AND invoice_no = ${invoiceNo}
     -- tranRef comes from a sequence taken under the invoice lock, so it orders one invoice's
     -- transactions exactly (created_at is the transaction's start, which may precede the lock wait).
     ORDER BY (resp_code = '0000') DESC, tran_ref::bigint DESC
     LIMIT 1`;
  return rows[0];
}

/**
 * Serializes everything that touches one invoice across requests and sandbox processes. An advisory
 * lock rather than SELECT … FOR UPDATE: on the first paymentToken the row does not exist yet.
 */
async function lockInvoice(tx: Tx, merchantId: string, invoiceNo: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(hashtextextended(${`2c2p:invoice:${merchantId}:${invoiceNo}`}, 0))`;
}

async function lockIdempotencyId(tx: Tx, merchantId: string, idempotencyId: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(hashtextextended(${`2c2p:idempotency:${merchantId}:${idempotencyId}`}, 0))`;
}

function exponentOf(currency: string): number {
  return CURRENCY_EXPONENT[currency] ?? 2;
}

function randomDigits(count: number): string {
  let out = '';
  for (let i = 0; i < count; i += 1) out += String(randomInt(10));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Answers

/** An unsigned error, HTTP 200 like every 2C2P answer. */
function plainError(code: RespCode, detail?: string): SandboxResponse {
  return json(200, { respCode: code, respDesc: detail ? `${RESP_DESC[code]}: ${detail}` : RESP_DESC[code] });
}

function signed(claims: Claims, secretKey: string): SandboxResponse {
  return json(200, { payload: signJwt(claims, secretKey) });
}

class Refusal {
  constructor(
    readonly code: RespCode,
    readonly detail?: string,
  ) {}
  response(): SandboxResponse {
    return plainError(this.code, this.detail);
  }
}

// ---------------------------------------------------------------------------------------------
// Context

interface Context {
  sql: Sql;
  merchant: MerchantRow;
  /** Every merchant's secret (there is one per install), for the synchronous notification signer. */
  secrets: ReadonlyMap<string, string>;
  wakeNotifier(): void;
  deliveryTimeoutMs: number;
  /** Every merchant's Payment Maintenance keys, loaded at start-up (the envelope is opened synchronously). */
  maintenance: readonly MaintenanceMerchant[];
}

/**
 * The Payment Maintenance keys of every merchant, made on first use: the merchant's pair (the console
 * generates it, as the merchant would and then upload its public half) and 2C2P's own pair.
 */
async function loadOrCreateMaintenanceKeys(tx: Tx): Promise<MaintenanceKeyRow[]> {
  const missing = await tx<{ merchant_id: string }[]>`
    SELECT merchant_id FROM psp_sandbox.twoc2p_merchants
     WHERE merchant_private_key IS NULL OR merchant_public_key IS NULL OR twoc2p_private_key IS NULL OR twoc2p_public_key IS NULL`;
  for (const { merchant_id } of missing) {
    const [merchantKeys, twoc2pKeys] = await Promise.all([generateRsaKeyPair(), generateRsaKeyPair()]);
    await tx`
      UPDATE psp_sandbox.twoc2p_merchants
         SET merchant_private_key = ${merchantKeys.privateKeyPem}, merchant_public_key = ${merchantKeys.publicKeyPem},
             twoc2p_private_key = ${twoc2pKeys.privateKeyPem}, twoc2p_public_key = ${twoc2pKeys.publicKeyPem}
       WHERE merchant_id = ${merchant_id}`;
  }
  return tx<MaintenanceKeyRow[]>`
    SELECT merchant_id, merchant_private_key, merchant_public_key, twoc2p_private_key, twoc2p_public_key
      FROM psp_sandbox.twoc2p_merchants ORDER BY created_at, merchant_id`;
}

async function loadOrCreateMerchant(tx: Tx): Promise<{ merchant: MerchantRow; all: MerchantRow[] }> {
  let all: MerchantRow[] = [
    ...(await tx<MerchantRow[]>`
      SELECT merchant_id, secret_key FROM psp_sandbox.twoc2p_merchants ORDER BY created_at, merchant_id`),
  ];
  if (all.length === 0) {
    // A 15-digit merchant ID like 2C2P's older ones (764 = Thailand), and a 256-bit secret written as
    // 64 upper-case hex characters, the form 2C2P's merchant portal shows.
    const merchant = { merchant_id: `764${randomDigits(12)}`, secret_key: randomBytes(32).toString('hex').toUpperCase() };
    await tx`INSERT INTO psp_sandbox.twoc2p_merchants (merchant_id, secret_key)
             VALUES (${merchant.merchant_id}, ${merchant.secret_key})`;
    all = [merchant];
  }
  const merchant = all[0];
  if (!merchant) throw new Error('no 2C2P merchant');
  return { merchant, all };
}

async function findMerchant(sql: Sql, merchantId: unknown): Promise<MerchantRow | undefined> {
  if (typeof merchantId !== 'string' || merchantId === '') return undefined;
  const rows = await sql<MerchantRow[]>`
    SELECT merchant_id, secret_key FROM psp_sandbox.twoc2p_merchants WHERE merchant_id = ${merchantId}`;
  return rows[0];
}

/** The merchant a paymentToken or paymentInquiry JWT names in its merchantID claim. */
async function merchantOf(sql: Sql, claims: Claims): Promise<MerchantRow | Refusal | undefined> {
  if (claims.merchantID === undefined || claims.merchantID === null || claims.merchantID === '') {
    return new Refusal('9005', 'merchantID');
  }
  return findMerchant(sql, claims.merchantID);
}

// ---------------------------------------------------------------------------------------------
// The JWT envelope

function parseBody(body: string): Record<string, unknown> | Refusal {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return new Refusal('9004', 'the body is not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return new Refusal('9004', 'the body must be a JSON object');
  }
  return parsed as Record<string, unknown>;
}

/**
 * Opens `{"payload":"<JWT>"}`: reads the claims unverified only to find the merchant whose secret
 * must verify them, then verifies. Order of refusals: not a JWT (6103), unknown merchant (9007 —
 * 2C2P's "invalid merchant", the documented code nearest to an unknown merchantID [unverified]),
 * wrong secret (9042).
 */
async function openEnvelope(
  body: Record<string, unknown>,
  merchantFor: (claims: Claims) => Promise<MerchantRow | Refusal | undefined>,
): Promise<{ claims: Claims; merchant: MerchantRow } | Refusal> {
  const token = body.payload;
  if (token === undefined || token === null || token === '') return new Refusal('9005', 'payload');
  if (typeof token !== 'string') return new Refusal('6103');
  const peeked = peekJwt(token);
  if (!peeked) return new Refusal('6103');
  const merchant = await merchantFor(peeked);
  if (merchant instanceof Refusal) return merchant;
  if (!merchant) return new Refusal('9007');
  const verified = await verifyJwt(token, merchant.secret_key);
  switch (verified.kind) {
    case 'verified':
      return { claims: verified.claims, merchant };
    case 'bad_signature':
      return new Refusal('9042');
    case 'invalid':
      return new Refusal('6103');
  }
}

// ---------------------------------------------------------------------------------------------
// Claim readers

function readString(claims: Claims, key: string, opts: { required: boolean; max: number }): string | undefined | Refusal {
  const value = claims[key];
  if (value === undefined || value === null || value === '') {
    return opts.required ? new Refusal('9005', key) : undefined;
  }
  if (typeof value !== 'string') return new Refusal('9004', key);
  if ([...value].length > opts.max) return new Refusal('9006', key);
  return value;
}

function readUrl(claims: Claims, key: string): string | undefined | Refusal {
  const value = readString(claims, key, { required: false, max: 2048 });
  if (typeof value !== 'string') return value;
  try {
    const url = new URL(value);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return new Refusal('9004', key);
  } catch {
    return new Refusal('9004', key);
  }
  return value;
}

const ALPHANUMERIC_RE = /^[A-Za-z0-9]+$/;
const PAYMENT_EXPIRY_RE = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;

interface TokenRequest {
  invoiceNo: string;
  description: string;
  amountMinor: bigint;
  currencyCode: string;
  idempotencyId: string | undefined;
  paymentChannels: string[] | null;
  backendReturnUrl: string | undefined;
  frontendReturnUrl: string | undefined;
  /** paymentExpiry as an instant; undefined when the merchant set none. */
  paymentExpiresAt: Date | undefined;
  /** SHA-256 of the request's claims, normalized: what a replay of an idempotencyID must match. */
  fingerprint: string;
}

function readTokenRequest(claims: Claims): TokenRequest | Refusal {
  // paymentChannel first: the invoiceNo limit depends on it.
  let paymentChannels: string[] | null = null;
  const channels = claims.paymentChannel;
  if (channels !== undefined && channels !== null) {
    if (!Array.isArray(channels) || !channels.every((c) => typeof c === 'string' && /^[A-Z0-9]{1,6}$/.test(c))) {
      return new Refusal('9004', 'paymentChannel');
    }
    paymentChannels = channels.length > 0 ? (channels as string[]) : null;
  }

  const invoiceNo = readString(claims, 'invoiceNo', { required: true, max: 50 });
  if (typeof invoiceNo !== 'string') return invoiceNo ?? new Refusal('9005', 'invoiceNo');
  if (!ALPHANUMERIC_RE.test(invoiceNo)) return new Refusal('9004', 'invoiceNo must be alphanumeric');
  // AN50 in general, "limited to 20 alphanumeric when requesting for QR payment". The limit is checked
  // when the request names QR; a token without channels allows every channel, but enforcing 20 there
  // would refuse valid card-only invoices, so 50 is the rule and 20 applies once QR is asked for.
  if (paymentChannels?.includes('QR') && invoiceNo.length > 20) {
    return new Refusal('9006', 'invoiceNo is limited to 20 characters for QR payments');
  }

  const description = readString(claims, 'description', { required: true, max: 250 });
  if (typeof description !== 'string') return description ?? new Refusal('9005', 'description');

  const currencyCode = readString(claims, 'currencyCode', { required: true, max: 3 });
  if (typeof currencyCode !== 'string') return currencyCode ?? new Refusal('9005', 'currencyCode');
  if (!/^[A-Z]{3}$/.test(currencyCode) || CURRENCY_EXPONENT[currencyCode] === undefined) return new Refusal('9010');

  if (claims.amount === undefined || claims.amount === null || claims.amount === '') return new Refusal('9005', 'amount');
  const amountMinor = parseAmount(claims.amount, exponentOf(currencyCode));
  if (amountMinor === null) return new Refusal('9009');

  const idempotencyId = readString(claims, 'idempotencyID', { required: false, max: 100 });
  if (idempotencyId instanceof Refusal) return idempotencyId;
  const backendReturnUrl = readUrl(claims, 'backendReturnUrl');
  if (backendReturnUrl instanceof Refusal) return backendReturnUrl;
  const frontendReturnUrl = readUrl(claims, 'frontendReturnUrl');
  if (frontendReturnUrl instanceof Refusal) return frontendReturnUrl;
  // The token (its hosted page and Do Payment) takes no money after paymentExpiry. 2C2P does not say
  // in which zone the value is read [unverified]: the sandbox reads it in UTC+8, the zone it writes
  // transactionDateTime in. An expiry already past is refused, as an invalid one is.
  const paymentExpiry = readString(claims, 'paymentExpiry', { required: false, max: 19 });
  if (paymentExpiry instanceof Refusal) return paymentExpiry;
  let paymentExpiresAt: Date | undefined;
  if (paymentExpiry !== undefined) {
    if (!PAYMENT_EXPIRY_RE.test(paymentExpiry)) return new Refusal('9008');
    const at = new Date(`${paymentExpiry.replace(' ', 'T')}+08:00`);
    if (Number.isNaN(at.getTime()) || at.getTime() <= Date.now()) return new Refusal('9008');
    paymentExpiresAt = at;
  }
  const request3DS = claims.request3DS;
  if (request3DS !== undefined && request3DS !== 'Y' && request3DS !== 'N' && request3DS !== 'F') {
    return new Refusal('9004', 'request3DS');
  }

  // Everything the merchant sent, minus JWT time claims (which legitimately differ between retries),
  // with the amount normalized so that 168 and "168.00000" are the same request.
  const { iat: _iat, exp: _exp, nbf: _nbf, jti: _jti, ...rest } = claims;
  const fingerprint = createHash('sha256')
    .update(canonicalJson({ ...rest, amount: amountMinor.toString() }))
    .digest('hex');

  return {
    invoiceNo,
    description,
    amountMinor,
    currencyCode,
    idempotencyId,
    paymentChannels,
    backendReturnUrl,
    frontendReturnUrl,
    paymentExpiresAt,
    fingerprint,
  };
}

// ---------------------------------------------------------------------------------------------
// POST /payment/4.3/paymentToken

function newPaymentToken(): string {
  // Shaped like 2C2P's: "kSA" and standard base64.
  return `kSA${randomBytes(60).toString('base64')}`;
}

const HOSTED_PREFIX = '/payment/4.3/hosted/';

/**
 * The hosted payment page of one token. 2C2P's own webPaymentUrl carries the token percent-encoded in
 * the page's path (…/payment/4.1/#/token/kSA…%2f…%3d); the sandbox's does the same, in the path proper
 * so that the server sees it.
 */
function webPaymentUrl(baseUrl: string, paymentToken: string): string {
  return `${baseUrl}${HOSTED_PREFIX}${encodeURIComponent(paymentToken)}`;
}

async function paymentTokenApi(ctx: Context, body: string, baseUrl: string): Promise<SandboxResponse> {
  const parsed = parseBody(body);
  if (parsed instanceof Refusal) return parsed.response();
  const opened = await openEnvelope(parsed, (claims) => merchantOf(ctx.sql, claims));
  if (opened instanceof Refusal) return opened.response();
  const { merchant } = opened;
  const request = readTokenRequest(opened.claims);
  if (request instanceof Refusal) return request.response();

  const answer = await ctx.sql.begin(async (tx): Promise<string | Refusal> => {
    // Lock order: idempotencyID, then invoice (Do Payment takes only the invoice lock): no cycles.
    if (request.idempotencyId !== undefined) {
      await lockIdempotencyId(tx, merchant.merchant_id, request.idempotencyId);
      const seen = await tx<{ request_hash: string; response_jwt: string }[]>`
        SELECT request_hash, response_jwt FROM psp_sandbox.twoc2p_idempotency
         WHERE merchant_id = ${merchant.merchant_id} AND idempotency_id = ${request.idempotencyId}`;
      const first = seen[0];
      if (first) {
        // Same request → the same answer (same paymentToken), whatever happened to the invoice since.
        if (first.request_hash === request.fingerprint) return first.response_jwt;
        // 2C2P documents no code for a reused idempotencyID; 9004 "the value is not valid", naming
        // the field, is the nearest documented one [unverified].
        return new Refusal('9004', 'idempotencyID was already used for a different request');
      }
    }

    await lockInvoice(tx, merchant.merchant_id, request.invoiceNo);
    const existing = await selectInvoice(tx, merchant.merchant_id, request.invoiceNo);
    if (existing) {
      // An invoice number is unique per merchant: a paid one, or an open one for another amount or
      // currency, is "9015 Existing invoice number" (gateways.md notes 2014 in other sources; 9015 is
      // what 2C2P's v4.3 code list says). An open one for the same amount and currency reopens: a new
      // token for the same invoice, so a new attempt after a decline pays the same invoice.
      if (existing.status === 'paid') return new Refusal('9015', 'the invoice is already paid');
      if (existing.status === 'cancelled') return new Refusal('9015', 'the invoice is cancelled');
      if (BigInt(existing.amount_minor) !== request.amountMinor || existing.currency_code !== request.currencyCode) {
        return new Refusal('9015', 'the invoice exists with another amount or currency');
      }
      await tx`
        UPDATE psp_sandbox.twoc2p_invoices
           SET description = ${request.description},
               payment_channels = ${request.paymentChannels},
               backend_return_url = COALESCE(${request.backendReturnUrl ?? null}, backend_return_url),
               frontend_return_url = COALESCE(${request.frontendReturnUrl ?? null}, frontend_return_url)
         WHERE merchant_id = ${merchant.merchant_id} AND invoice_no = ${request.invoiceNo}`;
    } else {
      await tx`
        INSERT INTO psp_sandbox.twoc2p_invoices
          (merchant_id, invoice_no, description, amount_minor, currency_code, payment_channels,
           backend_return_url, frontend_return_url, status)
        VALUES (${merchant.merchant_id}, ${request.invoiceNo}, ${request.description},
                ${request.amountMinor.toString()}, ${request.currencyCode}, ${request.paymentChannels},
                ${request.backendReturnUrl ?? null}, ${request.frontendReturnUrl ?? null}, 'open')`;
    }

    // 2C2P documents a payment token as "valid for 30 minutes"; the sandbox keeps it alive while its
    // invoice is open unless the merchant set paymentExpiry, so that a stored redirect stays usable in
    // long drills [unverified deviation, on purpose]. A merchant that needs a fresh page asks for a new
    // token under a new idempotencyID.
    const paymentToken = newPaymentToken();
    await tx`
      INSERT INTO psp_sandbox.twoc2p_payment_tokens (payment_token, merchant_id, invoice_no, expires_at)
      VALUES (${paymentToken}, ${merchant.merchant_id}, ${request.invoiceNo}, ${request.paymentExpiresAt ?? null})`;
    const responseJwt = signJwt(
      { webPaymentUrl: webPaymentUrl(baseUrl, paymentToken), paymentToken, respCode: '0000', respDesc: RESP_DESC['0000'] },
      merchant.secret_key,
    );
    // Only successes are remembered: a refusal depends on the invoice's state, which a retry may find
    // changed, and recomputing it is harmless.
    if (request.idempotencyId !== undefined) {
      await tx`
        INSERT INTO psp_sandbox.twoc2p_idempotency (merchant_id, idempotency_id, request_hash, response_jwt)
        VALUES (${merchant.merchant_id}, ${request.idempotencyId}, ${request.fingerprint}, ${responseJwt})`;
    }
    return responseJwt;
  });
  if (answer instanceof Refusal) return answer.response();
  return json(200, { payload: answer });
}

// ---------------------------------------------------------------------------------------------
// POST /payment/4.3/payment (Do Payment)

interface PaymentRequest {
  paymentToken: string;
  channelCode: string;
  cardNo: string;
  expiry: { month: number; year: number } | null;
}

function readPaymentRequest(request: Record<string, unknown>): PaymentRequest | Refusal {
  const paymentToken = readString(request, 'paymentToken', { required: true, max: 255 });
  if (typeof paymentToken !== 'string') return paymentToken ?? new Refusal('9005', 'paymentToken');
  const payment = request.payment;
  if (typeof payment !== 'object' || payment === null) return new Refusal('9005', 'payment');
  const code = (payment as Record<string, unknown>).code;
  if (typeof code !== 'object' || code === null) return new Refusal('9005', 'payment.code');
  const channelCode = readString(code as Claims, 'channelCode', { required: true, max: 6 });
  if (typeof channelCode !== 'string') return channelCode ?? new Refusal('9005', 'payment.code.channelCode');
  // Only cards are emulated; other channels need a buyer on a third-party page.
  if (channelCode !== 'CC') return new Refusal('9004', `channelCode ${channelCode} is not emulated by the sandbox (CC only)`);
  const data = (payment as Record<string, unknown>).data;
  if (typeof data !== 'object' || data === null) return new Refusal('9005', 'payment.data');
  const fields = data as Claims;
  const name = readString(fields, 'name', { required: true, max: 255 });
  if (typeof name !== 'string') return name ?? new Refusal('9005', 'payment.data.name');
  const cardNo = readString(fields, 'cardNo', { required: false, max: 19 });
  if (cardNo instanceof Refusal) return cardNo;
  if (cardNo === undefined) {
    // securePayToken is card data encrypted by 2C2P's client library; the sandbox has no such key,
    // so it takes the card number directly (what 2C2P allows PCI-DSS merchants to send).
    return new Refusal(
      '9005',
      fields.securePayToken !== undefined ? 'payment.data.cardNo (securePayToken is not emulated)' : 'payment.data.cardNo',
    );
  }
  if (!/^\d{12,19}$/.test(cardNo)) return new Refusal('9004', 'payment.data.cardNo');

  let expiry: PaymentRequest['expiry'] = null;
  const month = fields.expiryMonth;
  const year = fields.expiryYear;
  if (month !== undefined || year !== undefined) {
    const m = Number(month);
    const y = Number(year);
    if (!Number.isInteger(m) || m < 1 || m > 12 || !Number.isInteger(y) || y < 2000 || y > 2099) {
      return new Refusal('9004', 'payment.data.expiryMonth/expiryYear');
    }
    expiry = { month: m, year: y };
  }
  const securityCode = fields.securityCode;
  if (securityCode !== undefined && !(typeof securityCode === 'string' && /^\d{3,4}$/.test(securityCode))) {
    return new Refusal('9004', 'payment.data.securityCode');
  }
  return { paymentToken, channelCode, cardNo, expiry };
}

interface TokenRow {
  payment_token: string;
  merchant_id: string;
  invoice_no: string;
  expires_at: Date | null;
}

async function findToken(db: Queryable, paymentToken: unknown): Promise<TokenRow | undefined> {
  if (typeof paymentToken !== 'string' || paymentToken === '') return undefined;
  const rows = await db<TokenRow[]>`
    SELECT payment_token, merchant_id, invoice_no, expires_at FROM psp_sandbox.twoc2p_payment_tokens
     WHERE payment_token = ${paymentToken}`;
  return rows[0];
}

const TOKEN_EXPIRED = 'the payment token has expired';

type PaymentResult = { kind: 'approved' | 'declined'; invoice: InvoiceRow; transaction: TransactionRow } | Refusal;

async function processPayment(ctx: Context, token: TokenRow, request: PaymentRequest): Promise<PaymentResult> {
  let approved = false;
  const result = await ctx.sql.begin(async (tx): Promise<PaymentResult> => {
    await lockInvoice(tx, token.merchant_id, token.invoice_no);
    const invoice = await selectInvoice(tx, token.merchant_id, token.invoice_no);
    if (!invoice) throw new Error('payment token without its invoice');
    // One approval per invoice: a payment on a paid invoice is refused before reaching the card host,
    // and is not a charge attempt (nothing recorded). 9015, the code 2C2P gives for a paid invoice.
    if (invoice.status === 'paid') return new Refusal('9015', 'the invoice is already paid');
    // Every token of a cancelled invoice is dead: 0003 "Transaction is cancelled" [unverified code].
    if (invoice.status === 'cancelled') return new Refusal('0003');
    // Past the request's paymentExpiry the token is dead; 9040 "the token is invalid" is the nearest
    // documented code [unverified]. The invoice itself stays open (a new token can still pay it).
    if (token.expires_at && token.expires_at.getTime() <= Date.now()) return new Refusal('9040', TOKEN_EXPIRED);
    if (invoice.payment_channels && !invoice.payment_channels.includes(request.channelCode)) {
      return new Refusal('9004', `channelCode ${request.channelCode} is not enabled for this payment token`);
    }

    const now = new Date();
    const respCode = cardOutcome(request.cardNo, request.expiry, now);
    const isApproved = respCode === '0000';
    const seq = await tx<{ n: string }[]>`SELECT nextval('psp_sandbox.twoc2p_tran_ref_seq')::text AS n`;
    const tranRef = seq[0]?.n;
    if (!tranRef) throw new Error('nextval returned nothing');
    const inserted = await tx<TransactionRow[]>`
      INSERT INTO psp_sandbox.twoc2p_transactions
        (tran_ref, merchant_id, invoice_no, payment_token, resp_code, channel_code, card_no_masked,
         reference_no, approval_code, eci)
      VALUES (${tranRef}, ${token.merchant_id}, ${token.invoice_no}, ${token.payment_token}, ${respCode},
              ${request.channelCode}, ${maskCard(request.cardNo)}, ${randomDigits(12)},
              ${isApproved ? randomDigits(6) : null}, ${isApproved ? '07' : null})
      RETURNING tran_ref, merchant_id, invoice_no, resp_code, channel_code, card_no_masked, reference_no,
                approval_code, eci, created_at`;
    const transaction = inserted[0];
    if (!transaction) throw new Error('INSERT … RETURNING returned no row');

    const charge = {
      gateway: GATEWAY,
      merchantId: token.merchant_id,
      outTradeNo: token.invoice_no,
      amountMinor: BigInt(invoice.amount_minor),
      currency: invoice.currency_code,
      gatewayTradeNo: tranRef,
      buyerId: transaction.card_no_masked,
    };
    if (!isApproved) {
      // The invoice stays open: another card (or a new token) can still pay it.
      await recordCharge(tx, { ...charge, status: 'declined', declineCode: respCode });
      return { kind: 'declined', invoice, transaction };
    }

    const paidRows = await tx<InvoiceRow[]>`
      UPDATE psp_sandbox.twoc2p_invoices SET status = 'paid', paid_at = now()
       WHERE merchant_id = ${token.merchant_id} AND invoice_no = ${token.invoice_no} AND status = 'open'
      RETURNING ${tx.unsafe(INVOICE_COLUMNS)}`;
    const paid = paidRows[0];
    if (!paid) throw new Error('invoice left "open" under its lock');
    await recordCharge(tx, { ...charge, status: 'succeeded', declineCode: null });
    if (paid.backend_return_url) {
      await enqueueNotification(tx, {
        gateway: GATEWAY,
        merchantId: token.merchant_id,
        outTradeNo: token.invoice_no,
        notifyId: `2c2p-${tranRef}-${randomBytes(6).toString('hex')}`,
        notifyUrl: paid.backend_return_url,
        fields: notificationFields(paid, transaction),
      });
    }
    approved = true;
    return { kind: 'approved', invoice: paid, transaction };
  });
  if (approved) ctx.wakeNotifier();
  return result;
}

/** The full result, as Payment Inquiry and the JWT form of Do Payment report it. */
function transactionClaims(merchantId: string, invoice: InvoiceRow, transaction: TransactionRow): Claims {
  const exponent = exponentOf(invoice.currency_code);
  const code = transaction.resp_code as RespCode;
  return {
    merchantID: merchantId,
    invoiceNo: invoice.invoice_no,
    amount: new DecimalLiteral(formatAmount(BigInt(invoice.amount_minor), exponent)),
    currencyCode: invoice.currency_code,
    transactionDateTime: transactionDateTime(transaction.created_at),
    agentCode: 'SANDBOX',
    channelCode: transaction.channel_code,
    approvalCode: transaction.approval_code ?? undefined,
    referenceNo: transaction.reference_no,
    tranRef: transaction.tran_ref,
    accountNo: transaction.card_no_masked,
    eci: transaction.eci ?? undefined,
    respCode: code,
    respDesc: RESP_DESC[code] ?? 'Transaction failed',
  };
}

async function doPaymentApi(ctx: Context, body: string): Promise<SandboxResponse> {
  const parsed = parseBody(body);
  if (parsed instanceof Refusal) return parsed.response();

  // The JWT envelope (gateways.md): the token inside names the invoice, whose merchant's secret must
  // have signed it. Without it, the documented plain form: the payment token is the credential.
  let merchant: MerchantRow;
  let request: Record<string, unknown>;
  const jwtForm = 'payload' in parsed;
  if (jwtForm) {
    const opened = await openEnvelope(parsed, async (claims) => {
      const token = await findToken(ctx.sql, claims.paymentToken);
      if (!token) return claims.paymentToken ? new Refusal('9040') : new Refusal('9005', 'paymentToken');
      if (claims.merchantID !== undefined && claims.merchantID !== token.merchant_id) return new Refusal('9007');
      return findMerchant(ctx.sql, token.merchant_id);
    });
    if (opened instanceof Refusal) return opened.response();
    merchant = opened.merchant;
    request = opened.claims;
  } else {
    request = parsed;
    const token = await findToken(ctx.sql, parsed.paymentToken);
    if (!token) return parsed.paymentToken ? plainError('9040') : plainError('9005', 'paymentToken');
    const found = await findMerchant(ctx.sql, token.merchant_id);
    if (!found) return plainError('9007');
    merchant = found;
  }

  const payment = readPaymentRequest(request);
  if (payment instanceof Refusal) return payment.response();
  const token = await findToken(ctx.sql, payment.paymentToken);
  if (!token) return plainError('9040');

  const result = await processPayment(ctx, token, payment);
  if (result instanceof Refusal) return result.response();
  const { invoice, transaction } = result;
  if (jwtForm) return signed(transactionClaims(merchant.merchant_id, invoice, transaction), merchant.secret_key);
  // The documented plain answer: "completed, ask Payment Inquiry for the result" or the failure code.
  const code = result.kind === 'approved' ? '2000' : (transaction.resp_code as RespCode);
  return json(200, {
    channelCode: transaction.channel_code,
    invoiceNo: invoice.invoice_no,
    respCode: code,
    respDesc: RESP_DESC[code] ?? 'Transaction failed',
  });
}

// ---------------------------------------------------------------------------------------------
// POST /payment/4.3/paymentInquiry

async function paymentInquiryApi(ctx: Context, body: string): Promise<SandboxResponse> {
  const parsed = parseBody(body);
  if (parsed instanceof Refusal) return parsed.response();
  const opened = await openEnvelope(parsed, (claims) => merchantOf(ctx.sql, claims));
  if (opened instanceof Refusal) return opened.response();
  const { claims, merchant } = opened;

  const invoiceNoClaim = readString(claims, 'invoiceNo', { required: false, max: 50 });
  if (invoiceNoClaim instanceof Refusal) return invoiceNoClaim.response();
  const tokenClaim = readString(claims, 'paymentToken', { required: false, max: 255 });
  if (tokenClaim instanceof Refusal) return tokenClaim.response();
  if (invoiceNoClaim === undefined && tokenClaim === undefined) return plainError('9005', 'invoiceNo or paymentToken');

  let invoiceNo = invoiceNoClaim;
  if (tokenClaim !== undefined) {
    const token = await findToken(ctx.sql, tokenClaim);
    if (!token || token.merchant_id !== merchant.merchant_id) return plainError('9040');
    if (invoiceNo !== undefined && invoiceNo !== token.invoice_no) return plainError('9004', 'paymentToken is for another invoiceNo');
    invoiceNo = token.invoice_no;
  }
  if (invoiceNo === undefined) return plainError('9005', 'invoiceNo');

  const invoice = await selectInvoice(ctx.sql, merchant.merchant_id, invoiceNo);
  // "Not found" is an answer about an authenticated request, so it is signed like any other.
  if (!invoice) {
    return signed({ merchantID: merchant.merchant_id, invoiceNo, respCode: '2002', respDesc: RESP_DESC['2002'] }, merchant.secret_key);
  }
  if (invoice.status === 'cancelled') {
    // Cancelled before anyone paid it: that is the invoice's final state, whatever was declined before.
    return signed(
      {
        merchantID: merchant.merchant_id,
        invoiceNo,
        amount: new DecimalLiteral(formatAmount(BigInt(invoice.amount_minor), exponentOf(invoice.currency_code))),
        currencyCode: invoice.currency_code,
        respCode: '0003',
        respDesc: RESP_DESC['0003'],
      },
      merchant.secret_key,
    );
  }
  const transaction = await reportedTransaction(ctx.sql, merchant.merchant_id, invoiceNo);
  if (!transaction) {
    // A token was issued but nobody has paid yet.
    return signed(
      {
        merchantID: merchant.merchant_id,
        invoiceNo,
        amount: new DecimalLiteral(formatAmount(BigInt(invoice.amount_minor), exponentOf(invoice.currency_code))),
        currencyCode: invoice.currency_code,
        respCode: '0001',
        respDesc: RESP_DESC['0001'],
      },
      merchant.secret_key,
    );
  }
  // The approval, or else the latest decline (the invoice is still payable then).
  return signed(transactionClaims(merchant.merchant_id, invoice, transaction), merchant.secret_key);
}

// ---------------------------------------------------------------------------------------------
// POST /payment/4.3/cancelTransaction

type CancelResult = 'cancelled' | 'already_cancelled' | 'paid' | 'not_found';

/** Cancels an unpaid invoice (and with it every payment token of it), under the invoice lock. */
async function cancelInvoice(ctx: Context, merchantId: string, invoiceNo: string): Promise<CancelResult> {
  return ctx.sql.begin(async (tx): Promise<CancelResult> => {
    // The same lock Do Payment takes: a payment and a cancel of one invoice are strictly ordered, so a
    // cancel either sees the approval (and refuses) or every later payment sees the cancel.
    await lockInvoice(tx, merchantId, invoiceNo);
    const invoice = await selectInvoice(tx, merchantId, invoiceNo);
    if (!invoice) return 'not_found';
    switch (invoice.status) {
      case 'paid':
        return 'paid';
      case 'cancelled':
        return 'already_cancelled';
      case 'open':
        await tx`
          UPDATE psp_sandbox.twoc2p_invoices SET status = 'cancelled', cancelled_at = now()
           WHERE merchant_id = ${merchantId} AND invoice_no = ${invoiceNo} AND status = 'open'`;
        return 'cancelled';
    }
  });
}

async function cancelTransactionApi(ctx: Context, body: string): Promise<SandboxResponse> {
  const parsed = parseBody(body);
  if (parsed instanceof Refusal) return parsed.response();

  if ('payload' in parsed) {
    // The JWT form: the merchant names the invoice, signed with its secret; answered signed.
    const opened = await openEnvelope(parsed, (claims) => merchantOf(ctx.sql, claims));
    if (opened instanceof Refusal) return opened.response();
    const { claims, merchant } = opened;
    const invoiceNo = readString(claims, 'invoiceNo', { required: true, max: 50 });
    if (typeof invoiceNo !== 'string') return (invoiceNo ?? new Refusal('9005', 'invoiceNo')).response();
    const result = await cancelInvoice(ctx, merchant.merchant_id, invoiceNo);
    const answer = (code: RespCode, detail?: string) =>
      signed(
        {
          merchantID: merchant.merchant_id,
          invoiceNo,
          respCode: code,
          respDesc: detail ? `${RESP_DESC[code]}: ${detail}` : RESP_DESC[code],
        },
        merchant.secret_key,
      );
    switch (result) {
      case 'cancelled':
      case 'already_cancelled':
        return answer('0000');
      case 'paid':
        return answer('9015', 'the invoice is already paid');
      case 'not_found':
        return answer('2002');
    }
  }

  // The documented plain form: the payment token is the credential.
  const token = await findToken(ctx.sql, parsed.paymentToken);
  if (!token) return parsed.paymentToken ? plainError('9040') : plainError('9005', 'paymentToken');
  const result = await cancelInvoice(ctx, token.merchant_id, token.invoice_no);
  switch (result) {
    case 'cancelled':
    case 'already_cancelled':
      // As documented: "completed, please do payment inquiry" (which then answers 0003).
      return json(200, { invoiceNo: token.invoice_no, respCode: '2000', respDesc: RESP_DESC['2000'] });
    case 'paid':
      return json(200, { invoiceNo: token.invoice_no, respCode: '9015', respDesc: `${RESP_DESC['9015']}: the invoice is already paid` });
    case 'not_found':
      throw new Error('payment token without its invoice');
  }
}

// ---------------------------------------------------------------------------------------------
// Refunds, for the Payment Maintenance API (sandbox/twoc2p-maintenance.ts speaks its envelope)

/** The approved transaction of a paid invoice: the charge a refund gives money back from. */
async function approvalOf(db: Queryable, merchantId: string, invoiceNo: string): Promise<TransactionRow> {
  const transaction = await reportedTransaction(db, merchantId, invoiceNo);
  if (!transaction || transaction.resp_code !== '0000') throw new Error('paid invoice without its approval');
  return transaction;
}

/** Refuses what cannot be refunded: an unknown, unpaid or cancelled invoice. */
function refundableRefusal(invoice: InvoiceRow | undefined): MaintenanceRefusal | undefined {
  if (!invoice) return { code: '16' };
  if (invoice.status !== 'paid')
    return { code: '12', detail: `The invoice is ${invoice.status === 'open' ? 'not paid' : invoice.status}.` };
  return undefined;
}

async function refundInvoice(
  ctx: Context,
  merchantId: string,
  request: MaintenanceRefundRequest,
): Promise<StoredRefund | MaintenanceRefusal> {
  const { invoiceNo, idempotencyId } = request;
  return ctx.sql.begin(async (tx): Promise<StoredRefund | MaintenanceRefusal> => {
    // The invoice lock serializes refunds of one charge with each other and with payments, so the
    // balance check below and the insert are one atomic step.
    await lockInvoice(tx, merchantId, invoiceNo);
    // The idempotent key first: a repeat gets the first refund back, even once the charge is fully
    // refunded (which a fresh request would be refused for).
    if (idempotencyId !== undefined) {
      const seen = await findRefund(tx, GATEWAY, merchantId, idempotencyId);
      if (seen) return seen.outTradeNo === invoiceNo ? seen : { code: '11', detail: 'idempotencyID was used for another invoiceNo.' };
    }
    const invoice = await selectInvoice(tx, merchantId, invoiceNo);
    const refusal = refundableRefusal(invoice);
    if (refusal || !invoice) return refusal ?? { code: '16' };
    const amountMinor = parseAmount(request.actionAmount, exponentOf(invoice.currency_code));
    if (amountMinor === null) return { code: '18' };
    const approval = await approvalOf(tx, merchantId, invoiceNo);
    const remaining = BigInt(invoice.amount_minor) - (await refundedMinor(tx, GATEWAY, merchantId, approval.tran_ref));
    if (remaining <= 0n) return { code: '49' };
    if (amountMinor > remaining) return { code: '40' };
    const seq = await tx<{ n: string }[]>`SELECT nextval('psp_sandbox.twoc2p_refund_ref_seq')::text AS n`;
    const refundReferenceNo = seq[0]?.n;
    if (!refundReferenceNo) throw new Error('nextval returned nothing');
    const { refund } = await recordRefund(tx, {
      gateway: GATEWAY,
      merchantId,
      outTradeNo: invoiceNo,
      gatewayTradeNo: approval.tran_ref,
      // Without an idempotencyID every request is a refund of its own, known by 2C2P's reference.
      refundId: idempotencyId ?? `RF${refundReferenceNo}`,
      gatewayRefundId: refundReferenceNo,
      amountMinor,
      currency: invoice.currency_code,
      status: 'succeeded',
    });
    // Under the invoice lock a conflict can only be the same key on another invoice, racing: the
    // stored row tells which.
    return refund.outTradeNo === invoiceNo ? refund : { code: '11', detail: 'idempotencyID was used for another invoiceNo.' };
  });
}

async function refundsOfInvoice(ctx: Context, merchantId: string, invoiceNo: string): Promise<InvoiceRefunds | MaintenanceRefusal> {
  const invoice = await selectInvoice(ctx.sql, merchantId, invoiceNo);
  const refusal = refundableRefusal(invoice);
  if (refusal || !invoice) return refusal ?? { code: '16' };
  const approval = await approvalOf(ctx.sql, merchantId, invoiceNo);
  return {
    amountMinor: BigInt(invoice.amount_minor),
    currency: invoice.currency_code,
    tranRef: approval.tran_ref,
    refunds: await refundsOfCharge(ctx.sql, GATEWAY, merchantId, approval.tran_ref),
  };
}

function maintenanceLedger(ctx: Context): MaintenanceLedger {
  return {
    refund: (merchantId, request) => refundInvoice(ctx, merchantId, request),
    refundsOf: (merchantId, invoiceNo) => refundsOfInvoice(ctx, merchantId, invoiceNo),
    exponentOf,
  };
}

// ---------------------------------------------------------------------------------------------
// Backend notifications

/** What the notification carries, as strings (the ledger's outbox stores Record<string, string>). */
function notificationFields(invoice: InvoiceRow, transaction: TransactionRow): Record<string, string> {
  const fields: Record<string, string | null> = {
    merchantID: invoice.merchant_id,
    invoiceNo: invoice.invoice_no,
    cardNo: transaction.card_no_masked,
    amount: formatAmount(BigInt(invoice.amount_minor), exponentOf(invoice.currency_code)),
    currencyCode: invoice.currency_code,
    tranRef: transaction.tran_ref,
    referenceNo: transaction.reference_no,
    approvalCode: transaction.approval_code,
    eci: transaction.eci,
    transactionDateTime: transactionDateTime(transaction.created_at),
    agentCode: 'SANDBOX',
    channelCode: transaction.channel_code,
    respCode: transaction.resp_code,
    respDesc: RESP_DESC[transaction.resp_code as RespCode] ?? 'Transaction failed',
  };
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(fields)) if (value) out[key] = value;
  return out;
}

const DECIMAL_RE = /^\d+(\.\d+)?$/;

/**
 * One delivery: `{"payload":"<JWT HS256>"}` signed with the merchant's secret. Overrides (test tool)
 * change the business fields BEFORE signing (an empty string removes one), so a tampered amount is
 * validly signed; the override `payload` replaces the whole JWT instead (forgery tests).
 */
export function buildTwoC2pNotification(
  fields: Record<string, string>,
  secretKey: string,
  overrides: Record<string, string> = {},
): { contentType: string; body: string } {
  const values = new Map(Object.entries(fields));
  for (const [key, value] of Object.entries(overrides)) {
    if (key === 'payload') continue;
    if (value === '') values.delete(key);
    else values.set(key, value);
  }
  const claims: Claims = {};
  for (const [key, value] of values) {
    claims[key] = key === 'amount' && DECIMAL_RE.test(value) ? new DecimalLiteral(value) : value;
  }
  const payload = overrides.payload ?? signJwt(claims, secretKey);
  return { contentType: 'application/json', body: JSON.stringify({ payload }) };
}

/** "Acknowledge with HTTP 200": anything else (another 2xx included) is delivered again. */
export function isTwoC2pAck(status: number): boolean {
  return status === 200;
}

/**
 * 2C2P does not publish its backend-notification retry schedule [unverified]; the sandbox retries
 * after 1m, 5m, 15m, 1h, 6h and 24h (7 deliveries in all), a common back-off.
 */
export const TWOC2P_RETRY_MINUTES = [1, 5, 15, 60, 360, 1440] as const;

function twoC2pNotifier(ctx: { secrets: ReadonlyMap<string, string>; defaultSecret: string }): GatewayNotifier {
  return {
    retryIntervalsMs: TWOC2P_RETRY_MINUTES.map((m) => m * 60_000),
    // Synchronous (the loop's contract): the secret comes from the map loaded at start-up. A
    // notification is only ever enqueued for a merchant in that map.
    buildRequest: (fields) => buildTwoC2pNotification(fields, ctx.secrets.get(fields.merchantID ?? '') ?? ctx.defaultSecret),
    isAcknowledged: (status) => isTwoC2pAck(status),
  };
}

// ---------------------------------------------------------------------------------------------
// POST /sandbox/2c2p/notify — the notification test tool

class ToolError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

async function sendToolNotifications(
  ctx: Context,
  request: { outTradeNo: string; copies: number; overrides: Record<string, string> },
): Promise<DeliveryResult[]> {
  const invoices = await ctx.sql<(InvoiceRow & { secret_key: string })[]>`
    SELECT i.merchant_id, i.invoice_no, i.description, i.amount_minor, i.currency_code, i.payment_channels,
           i.backend_return_url, i.frontend_return_url, i.status, i.paid_at, m.secret_key
      FROM psp_sandbox.twoc2p_invoices i JOIN psp_sandbox.twoc2p_merchants m USING (merchant_id)
     WHERE i.invoice_no = ${request.outTradeNo}
     ORDER BY (i.merchant_id = ${ctx.merchant.merchant_id}) DESC, i.created_at DESC
     LIMIT 1`;
  const invoice = invoices[0];
  if (!invoice) throw new ToolError(404, 'TRADE_NOT_FOUND', `no 2C2P invoice with invoiceNo ${request.outTradeNo}`);
  if (invoice.status !== 'paid') throw new ToolError(409, 'NOT_PAID', `invoice ${request.outTradeNo} has no approved payment to notify`);
  if (!invoice.backend_return_url) {
    throw new ToolError(409, 'NO_NOTIFY_URL', `invoice ${request.outTradeNo} was created without a backendReturnUrl`);
  }
  const transaction = await reportedTransaction(ctx.sql, invoice.merchant_id, invoice.invoice_no);
  if (!transaction || transaction.resp_code !== '0000') throw new Error('paid invoice without its approval');
  const scheduled = await findNotification(ctx.sql, GATEWAY, invoice.merchant_id, invoice.invoice_no);
  const fields = notificationFields(invoice, transaction);
  const notifyUrl = invoice.backend_return_url;

  return Promise.all(
    Array.from({ length: request.copies }, async () => {
      const startedAt = new Date();
      const delivery = buildTwoC2pNotification(fields, invoice.secret_key, request.overrides);
      const result = await postNotification(notifyUrl, delivery, ctx.deliveryTimeoutMs, startedAt, isTwoC2pAck);
      await insertAttempt(ctx.sql, { id: scheduled?.id ?? null, gateway: GATEWAY, outTradeNo: invoice.invoice_no }, 'tool', result);
      return result;
    }),
  );
}

const notifyToolBody = z.object({
  outTradeNo: z.string().min(1).max(50),
  copies: z.number().int().min(1).max(100).default(1),
  overrides: z.record(z.string(), z.string()).default({}),
});

async function notifyTool(ctx: Context, method: string, contentType: string | undefined, body: string): Promise<SandboxResponse> {
  if (method !== 'POST') return json(405, { error: { code: 'METHOD_NOT_ALLOWED', message: 'use POST' } });
  if (!(contentType ?? '').toLowerCase().includes('application/json')) {
    return json(415, { error: { code: 'UNSUPPORTED_MEDIA_TYPE', message: 'send application/json' } });
  }
  let parsedJson: unknown;
  try {
    parsedJson = JSON.parse(body);
  } catch {
    return json(400, { error: { code: 'INVALID_JSON', message: 'the body is not valid JSON' } });
  }
  const parsed = notifyToolBody.safeParse(parsedJson);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const message = issue ? `${issue.path.join('.') || 'body'}: ${issue.message}` : 'invalid';
    return json(400, { error: { code: 'INVALID_REQUEST', message } });
  }
  try {
    const deliveries = await sendToolNotifications(ctx, parsed.data);
    return json(200, {
      deliveries: deliveries.map((d) => ({ status: d.httpStatus, body: d.responseBody, ...(d.error ? { error: d.error } : {}) })),
    });
  } catch (error) {
    if (error instanceof ToolError) return json(error.status, { error: { code: error.code, message: error.message } });
    throw error;
  }
}

// ---------------------------------------------------------------------------------------------
// POST /sandbox/2c2p/buyer-pays — the buyer submits the hosted payment page now

function toolJson(status: number, code: string, message: string): SandboxResponse {
  return json(status, { code, message });
}

/**
 * What the hosted payment page does when the buyer submits the test buyer's card: a Do Payment on the
 * invoice's latest payment token, with the same ledger row and backend notification as any other
 * payment. Only an open invoice can be paid: unknown, paid and cancelled ones are 409.
 */
async function buyerPaysTool(ctx: Context, request: SandboxRequest): Promise<SandboxResponse> {
  const read = readBuyerPays(request);
  if ('answer' in read) return read.answer;
  const { outTradeNo, buyer } = read.input;
  const invoices = await ctx.sql<InvoiceRow[]>`
    SELECT ${ctx.sql.unsafe(INVOICE_COLUMNS)} FROM psp_sandbox.twoc2p_invoices
     WHERE invoice_no = ${outTradeNo}
     ORDER BY (merchant_id = ${ctx.merchant.merchant_id}) DESC, created_at DESC
     LIMIT 1`;
  const invoice = invoices[0];
  if (!invoice) return toolJson(409, 'TRADE_NOT_PAYABLE', `no 2C2P invoice with invoiceNo ${outTradeNo}`);
  if (invoice.status !== 'open') return toolJson(409, 'TRADE_NOT_PAYABLE', `invoice ${outTradeNo} is ${invoice.status}`);
  const tokens = await ctx.sql<TokenRow[]>`
    SELECT payment_token, merchant_id, invoice_no, expires_at FROM psp_sandbox.twoc2p_payment_tokens
     WHERE merchant_id = ${invoice.merchant_id} AND invoice_no = ${invoice.invoice_no}
     ORDER BY created_at DESC LIMIT 1`;
  const token = tokens[0];
  if (!token) throw new Error('invoice without a payment token');
  // The page offers the channels the token allows; the test buyer's card stands in for any of them.
  const channelCode = !invoice.payment_channels || invoice.payment_channels.includes('CC') ? 'CC' : (invoice.payment_channels[0] ?? 'CC');
  const result = await processPayment(ctx, token, {
    paymentToken: token.payment_token,
    channelCode,
    cardNo: TWOC2P_TEST_CARDS[buyer],
    expiry: null,
  });
  // Paid or cancelled between the check above and the invoice lock.
  if (result instanceof Refusal) return toolJson(409, 'TRADE_NOT_PAYABLE', `invoice ${outTradeNo}: ${RESP_DESC[result.code]}`);
  return json(200, {
    gateway: GATEWAY,
    outTradeNo,
    status: result.kind === 'approved' ? 'succeeded' : 'declined',
    gatewayTradeNo: result.kind === 'approved' ? result.transaction.tran_ref : null,
  });
}

// ---------------------------------------------------------------------------------------------
// GET|POST /payment/4.3/hosted/<paymentToken> — the hosted payment page

function html(status: number, body: string): SandboxResponse {
  return { status, headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }, body };
}

function hostedInvoice(invoice: InvoiceRow): HostedInvoice {
  return {
    merchantId: invoice.merchant_id,
    invoiceNo: invoice.invoice_no,
    description: invoice.description,
    amount: formatAmount(BigInt(invoice.amount_minor), exponentOf(invoice.currency_code)),
    currencyCode: invoice.currency_code,
  };
}

/** Why a token's page can take no payment, as the page says it (HTTP 409); undefined while it can. */
function closedReason(invoice: InvoiceRow, token: TokenRow, now: number): { title: string; detail: string } | undefined {
  if (invoice.status === 'paid') return { title: '订单已支付 (Already paid)', detail: `${RESP_DESC['9015']}: the invoice is already paid` };
  if (invoice.status === 'cancelled') return { title: '订单已取消 (Cancelled)', detail: RESP_DESC['0003'] };
  if (token.expires_at && token.expires_at.getTime() <= now) {
    return { title: '支付页面已过期 (Expired)', detail: `${RESP_DESC['9040']}: ${TOKEN_EXPIRED}` };
  }
  return undefined;
}

/** The page's refusal of a submission the invoice lock turned down (paid, cancelled or expired meanwhile). */
function refusalPage(invoice: InvoiceRow, refusal: Refusal): SandboxResponse {
  const title =
    refusal.code === '9015'
      ? '订单已支付 (Already paid)'
      : refusal.code === '0003'
        ? '订单已取消 (Cancelled)'
        : refusal.detail === TOKEN_EXPIRED
          ? '支付页面已过期 (Expired)'
          : '无法支付 (Cannot pay)';
  const detail = refusal.detail ? `${RESP_DESC[refusal.code]}: ${refusal.detail}` : RESP_DESC[refusal.code];
  return html(409, renderClosedPage({ title, detail, invoice: hostedInvoice(invoice) }));
}

/** MM/YY or MM/YYYY, as buyers type it on a card form. */
function readExpiry(text: string): { month: number; year: number } | null {
  const match = /^(\d{1,2})\s*\/\s*(\d{2}|\d{4})$/.exec(text.trim());
  if (!match) return null;
  const month = Number(match[1]);
  const year = (match[2] ?? '').length === 2 ? 2000 + Number(match[2]) : Number(match[2]);
  if (month < 1 || month > 12) return null;
  return { month, year };
}

/**
 * 2C2P's "Payment Response (Frontend)": `paymentResponse` = base64 of the JSON {invoiceNo,
 * channelCode, respCode, respDesc}, POSTed form-urlencoded by the buyer's browser. Its documented
 * sample carries respCode 2000 ("completed, please do payment inquiry") for a card approval: the
 * front end learns only that the flow ended; the result itself is read with paymentInquiry or taken
 * from the backend notification. The sample is standard base64 with padding (%3D once form-encoded),
 * which base64url decoders read as well [unverified: the page says "base64URL"].
 */
export function frontendPaymentResponse(fields: { invoiceNo: string; channelCode: string; respCode: RespCode }): string {
  const json = JSON.stringify({
    invoiceNo: fields.invoiceNo,
    channelCode: fields.channelCode,
    respCode: fields.respCode,
    respDesc: RESP_DESC[fields.respCode],
  });
  return Buffer.from(json, 'utf8').toString('base64');
}

async function hostedPage(ctx: Context, request: SandboxRequest): Promise<SandboxResponse> {
  if (request.method !== 'GET' && request.method !== 'POST') {
    return html(405, renderClosedPage({ title: '不支持的请求 (Method not allowed)', detail: 'use GET or POST' }));
  }
  let tokenText: string;
  try {
    tokenText = decodeURIComponent(request.url.pathname.slice(HOSTED_PREFIX.length));
  } catch {
    tokenText = '';
  }
  const notFound = () => html(404, renderClosedPage({ title: '找不到支付页面 (Payment page not found)', detail: `${RESP_DESC['9040']}` }));
  const token = await findToken(ctx.sql, tokenText);
  if (!token) return notFound();
  const invoice = await selectInvoice(ctx.sql, token.merchant_id, token.invoice_no);
  if (!invoice) return notFound();
  const closed = closedReason(invoice, token, Date.now());
  if (closed) return html(409, renderClosedPage({ ...closed, invoice: hostedInvoice(invoice) }));

  const action = request.url.pathname;
  const testCards = hostedTestCards(TWOC2P_TEST_CARDS);
  if (request.method === 'GET') return html(200, renderPaymentPage({ invoice: hostedInvoice(invoice), action, testCards }));

  // The buyer submitted the card form.
  const form = new URLSearchParams(request.body);
  const name = (form.get('name') ?? '').trim();
  const cardNo = (form.get('cardNo') ?? '').replace(/[\s-]/g, '');
  const expiry = readExpiry(form.get('expiry') ?? '');
  const securityCode = (form.get('securityCode') ?? '').trim();
  const again = (error: string) => html(400, renderPaymentPage({ invoice: hostedInvoice(invoice), action, testCards, error, name }));
  if (!/^\d{12,19}$/.test(cardNo)) return again('请输入卡号 (Enter the card number: 12–19 digits)');
  if (!expiry) return again('请输入有效期 (Enter the expiry as MM/YY)');
  if (!/^\d{3,4}$/.test(securityCode)) return again('请输入安全码 (Enter the 3- or 4-digit CVV)');
  if (name === '' || name.length > 255) return again('请输入持卡人姓名 (Enter the name on the card)');

  // Cards are what the sandbox emulates on this page: a token limited to other channels cannot use it.
  const result = await processPayment(ctx, token, { paymentToken: token.payment_token, channelCode: 'CC', cardNo, expiry });
  if (result instanceof Refusal) return refusalPage(invoice, result);
  if (result.kind === 'declined') {
    // The invoice stays payable: the buyer may try another card, as on 2C2P's page.
    const code = result.transaction.resp_code as RespCode;
    const error = `支付失败 (Payment declined): ${code} ${RESP_DESC[code] ?? 'Transaction failed'}`;
    return html(402, renderPaymentPage({ invoice: hostedInvoice(invoice), action, testCards, error, name }));
  }
  const paymentResponse = frontendPaymentResponse({
    invoiceNo: result.invoice.invoice_no,
    channelCode: result.transaction.channel_code,
    respCode: '2000',
  });
  return html(
    200,
    renderReturnPage({
      invoice: hostedInvoice(result.invoice),
      frontendReturnUrl: result.invoice.frontend_return_url ?? undefined,
      paymentResponse,
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// The module

/** Keyed in lower case: 2C2P's paths ignore case (its OpenAPI-generated clients send /paymenttoken). */
const APIS: Readonly<Record<string, (ctx: Context, body: string, baseUrl: string) => Promise<SandboxResponse>>> = {
  paymenttoken: paymentTokenApi,
  payment: (ctx, body) => doPaymentApi(ctx, body),
  paymentinquiry: (ctx, body) => paymentInquiryApi(ctx, body),
  canceltransaction: (ctx, body) => cancelTransactionApi(ctx, body),
};

/** PGW v4.3's merchant APIs, on /payment/4.3/<api> in any case. */
async function pgwApi(ctx: Context, request: SandboxRequest): Promise<SandboxResponse> {
  const path = request.url.pathname;
  const api = APIS[path.slice(API_PREFIX.length).toLowerCase()];
  if (!api) return json(404, { respCode: '9004', respDesc: `${RESP_DESC['9004']}: no API at ${path}` });
  if (request.method !== 'POST') return json(405, { respCode: '9004', respDesc: `${RESP_DESC['9004']}: use POST` });
  try {
    return await api(ctx, request.body, request.baseUrl);
  } catch (err) {
    // The caller cannot tell whether the request took effect (a failure at commit may follow
    // it), which is what 0999 "System error" tells a merchant: inquire before retrying.
    console.error('[psp-sandbox] 2c2p %s failed:', path, err);
    return plainError('0999');
  }
}

/** POST …/PaymentAction/2.0/action, answered as 2C2P answers it (99 when it fails in between). */
async function maintenance(ctx: Context, request: SandboxRequest): Promise<SandboxResponse> {
  try {
    return await maintenanceApi(ctx.maintenance, maintenanceLedger(ctx), request);
  } catch (err) {
    console.error('[psp-sandbox] 2c2p maintenance failed:', err);
    return maintenanceSystemError(ctx.maintenance, request.body);
  }
}

function tool(ctx: Context, request: SandboxRequest): Promise<SandboxResponse> | SandboxResponse | undefined {
  const path = request.url.pathname;
  if (path === '/sandbox/2c2p/buyer-pays') return buyerPaysTool(ctx, request);
  if (path === TWOC2P_SETTLEMENT_PATH) return twoC2pSettlementReport(ctx.sql, request);
  if (path === '/sandbox/2c2p/notify') return notifyTool(ctx, request.method, request.headers['content-type'], request.body);
  if (path === '/sandbox/2c2p/pay') {
    // The address webPaymentUrl had before the hosted page existed: stored answers may still hold it.
    if (request.method !== 'GET') return json(405, { error: { code: 'METHOD_NOT_ALLOWED', message: 'use GET' } });
    const token = request.url.searchParams.get('paymentToken') ?? '';
    return { status: 302, headers: { location: webPaymentUrl(request.baseUrl, token) }, body: '' };
  }
  return undefined;
}

export const twoC2pModule: SandboxGatewayModule = {
  gateway: GATEWAY,
  schemaSql: `${SCHEMA_SQL}\n${MAINTENANCE_SCHEMA_SQL}`,
  async setUp(tx, moduleContext) {
    const { merchant, all } = await loadOrCreateMerchant(tx);
    const keys = await loadOrCreateMaintenanceKeys(tx);
    const merchantKeys = keys.find((k) => k.merchant_id === merchant.merchant_id);
    if (!merchantKeys) throw new Error('no Payment Maintenance keys for the 2C2P merchant');
    const secrets = new Map(all.map((m) => [m.merchant_id, m.secret_key] as const));
    const ctx: Context = {
      sql: moduleContext.sql,
      merchant,
      secrets,
      wakeNotifier: moduleContext.wakeNotifier,
      deliveryTimeoutMs: moduleContext.deliveryTimeoutMs,
      maintenance: keys.map(maintenanceMerchant),
    };
    return {
      notifier: twoC2pNotifier({ secrets, defaultSecret: merchant.secret_key }),
      // 2C2P answers every API with HTTP 200; a failure before processing is 0999 "System error" in a
      // plain body on PGW, 99 "Unable to complete the request" on the Maintenance API: either tells
      // the merchant to inquire before retrying.
      systemError: (request) =>
        isMaintenancePath(request.url.pathname) ? maintenanceSystemError(ctx.maintenance, request.body) : plainError('0999'),
      operationOf: (request) =>
        isMaintenancePath(request.url.pathname) && maintenanceOperation(ctx.maintenance, request.body) === 'refund' ? 'refund' : undefined,
      credentials: (baseUrl) => ({
        merchantId: merchant.merchant_id,
        secretKey: merchant.secret_key,
        baseUrl: `${baseUrl}/payment/4.3`,
        testBuyers: { ...TWOC2P_TEST_CARDS },
        // The Payment Maintenance API: the merchant's own private key (its public half is registered
        // with 2C2P) and 2C2P's public key, as the merchant portal hands them out.
        maintenanceUrl: `${baseUrl}${MAINTENANCE_PATH}`,
        merchantPrivateKey: merchantKeys.merchant_private_key,
        twoc2pPublicKey: merchantKeys.twoc2p_public_key,
        // The MDR and its taxes this merchant's reconciliation reports show, for 对账 to check them against (statements.ts).
        feeContract: feeContract('2c2p'),
      }),
      async handle(request) {
        const path = request.url.pathname;
        const folded = path.toLowerCase();
        // The buyer's page, before the merchant APIs that share its prefix.
        if (folded.startsWith(HOSTED_PREFIX)) return hostedPage(ctx, request);
        if (folded.startsWith(API_PREFIX)) return pgwApi(ctx, request);
        if (isMaintenancePath(path)) return maintenance(ctx, request);
        return tool(ctx, request);
      },
    };
  },
};
