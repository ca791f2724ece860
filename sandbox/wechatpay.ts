/**
 * The sandbox's WeChat Pay: an emulation of API v3 (直连商户, "basic payment") on its real paths:
 *
 *   POST /v3/pay/transactions/native                          → 200 { code_url }
 *   POST /v3/pay/transactions/jsapi                           → 200 { prepay_id }
 *   GET  /v3/pay/transactions/out-trade-no/{out_trade_no}?mchid=…  → the transaction
 *   GET  /v3/pay/transactions/id/{transaction_id}?mchid=…          → the transaction
 *   POST /v3/pay/transactions/out-trade-no/{out_trade_no}/close    → 204 (400 ORDERPAID when paid)
 *   POST /v3/refund/domestic/refunds                          → 200 the refund (PROCESSING, later SUCCESS)
 *   GET  /v3/refund/domestic/refunds/{out_refund_no}          → the refund
 *   POST /sandbox/wechatpay/notify       the notification test tool (see sendToolNotifications)
 *   GET  /v3/certificates                                     → the platform certificate, encrypted
 *   POST /sandbox/wechatpay/buyer-pays   a test buyer pays an open trade later (see buyerPaysTool);
 *                                        a JSON POST to /sandbox/wechatpay/scan is the same tool
 *   GET  /sandbox/wechatpay/scan?code_url=…  the page WeChat shows after the buyer scans the QR code;
 *                                        its form POSTs back there (see handleScanPage)
 *
 * Every /v3 request must carry WeChat's `Authorization: WECHATPAY2-SHA256-RSA2048 …` header signed by
 * the merchant's API key (wechatpay-protocol.ts); every answer to an authenticated request is signed
 * with the platform key in the Wechatpay-* headers. Like WeChat, a request that fails authentication
 * gets an UNSIGNED 401 ("如果验证商户的请求签名正确，微信支付会在应答的HTTP头部中包括应答签名").
 *
 * Test buyers. Native pay has no payer in the request: whoever scans the code_url pays. So the sandbox
 * reads its test buyer from the merchant-defined `attach` field, as `&`-separated `key=value` pairs:
 *
 *   sandbox_buyer=ok                   the buyer scans and pays at once → trade_state SUCCESS
 *   sandbox_buyer=insufficient_funds   the payment fails → PAYERROR "支付失败，用户余额不足"
 *   sandbox_buyer=account_restricted   the payment fails → PAYERROR "支付失败，用户账户异常…"
 *   sandbox_fault=FREQUENCY_LIMITED    the request is refused before anything happens: 429
 *   sandbox_fault=SYSTEM_ERROR         the request fails before anything happens: 500
 *
 * Without `sandbox_buyer` nobody scans: the trade stays NOTPAY (as on the real gateway until the
 * buyer shows up; the scan page or buyer-pays plays that buyer later). A real deployment sends its
 * own `attach` (or none). A failed payment leaves the trade payable: creating it again with the same
 * out_trade_no and the same parameters reopens it for another buyer, and buyer-pays can still pay it.
 * A closed trade takes no money any more: create and close answer 400 ORDER_CLOSED, buyer-pays and
 * the scan page 409.
 *
 * Signing keys. The merchant is mid-way through WeChat's switch from platform certificate to WeChat
 * Pay public key: notifications and answers to requests that send `Wechatpay-Serial: PUB_KEY_ID_…`
 * are signed with the public key, other answers with the platform certificate that GET
 * /v3/certificates serves (see responseSigner).
 *
 * Refunds. 申请退款 answers PROCESSING, as WeChat does ("申请退款接口的返回仅代表业务的受理情况"); the
 * refund becomes SUCCESS REFUND_PROCESSING_MS (× SANDBOX_TIME_SCALE) later, when REFUND.SUCCESS goes
 * to the refund's notify_url. The same out_refund_no again is the same refund, never a second one.
 *
 * Where WeChat's documentation leaves a behaviour open, the nearest documented behaviour is used and
 * a comment says so.
 */
import { createPrivateKey, randomInt, randomUUID } from 'node:crypto';
import { z } from 'zod';
import { json, readBuyerPays, type SandboxGatewayModule, type SandboxRequest, type SandboxResponse } from './gateway-module';
import { isWechatpayBillPath, wechatpayBill } from './wechatpay-bill';
import { feeContract } from './statements';
import { generateRsaKeyPair } from './keys';
import { makePlatformCertificate, type PlatformCertificate } from './wechatpay-certificate';
import { renderScanPage, type ScanPage, type ScanTradeView } from './wechatpay-scan-page';
import { postNotification, type GatewayNotifier } from './notifier';
import {
  enqueueNotification,
  insertAttempt,
  recordCharge,
  recordRefund,
  refundedMinor,
  settleRefund,
  type DeliveryResult,
  type Queryable,
  type Sql,
  type Tx,
} from './store';
import {
  MAX_CLOCK_SKEW_SECONDS,
  OUT_TRADE_NO_RE,
  beijingDate,
  beijingRfc3339,
  encryptResource,
  newCodeUrl,
  newPrepayId,
  newRefundId,
  newTransactionId,
  parseAuthorization,
  platformHeaders,
  randomAlnum,
  randomDigits,
  randomHexUpper,
  requestMessage,
  verifyRequestSignature,
  type PlatformSigner,
} from './wechatpay-protocol';

const GATEWAY = 'wechatpay';

// ---------------------------------------------------------------------------------------------
// Schema and identity

const SCHEMA_SQL = `
-- The merchant (商户号) and its keys. The sandbox emulates WeChat's "微信支付公钥" mode: the platform
-- key that signs answers and notifications is per merchant and identified by a PUB_KEY_ID_… serial.
-- The merchant's private key and APIv3 key are kept only because the sandbox doubles as the
-- merchant platform (商户平台) that hands them out (GET /sandbox/credentials).
CREATE TABLE IF NOT EXISTS psp_sandbox.wechatpay_merchants (
  mchid                     text PRIMARY KEY,
  appid                     text NOT NULL,
  merchant_serial_no        text NOT NULL,
  merchant_private_key_pem  text NOT NULL,
  merchant_public_key_pem   text NOT NULL,
  api_v3_key                text NOT NULL CHECK (octet_length(api_v3_key) = 32),
  platform_serial_no        text NOT NULL,
  platform_private_key_pem  text NOT NULL,
  platform_public_key_pem   text NOT NULL,
  created_at                timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS psp_sandbox.wechatpay_trades (
  mchid             text NOT NULL REFERENCES psp_sandbox.wechatpay_merchants (mchid),
  out_trade_no      text NOT NULL,
  appid             text NOT NULL,
  trade_type        text NOT NULL CHECK (trade_type IN ('NATIVE', 'JSAPI')),
  description       text NOT NULL,
  total             bigint NOT NULL CHECK (total > 0),
  currency          text NOT NULL,
  notify_url        text NOT NULL,
  attach            text,
  -- JSAPI: the payer named in the request; NATIVE: whoever scanned last.
  payer_openid      text,
  trade_state       text NOT NULL
                    CHECK (trade_state IN ('SUCCESS', 'REFUND', 'NOTPAY', 'CLOSED', 'REVOKED', 'USERPAYING', 'PAYERROR')),
  trade_state_desc  text NOT NULL,
  transaction_id    text UNIQUE,
  bank_type         text,
  success_time      timestamptz,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (mchid, out_trade_no)
);

-- WeChat's own view of each refund (the shared psp_sandbox.refunds row is the ledger's). One row per
-- out_refund_no: "同一退款单号多次请求只退一笔".
CREATE TABLE IF NOT EXISTS psp_sandbox.wechatpay_refunds (
  mchid                  text NOT NULL REFERENCES psp_sandbox.wechatpay_merchants (mchid),
  out_refund_no          text NOT NULL,
  refund_id              text NOT NULL UNIQUE,
  out_trade_no           text NOT NULL,
  transaction_id         text NOT NULL,
  reason                 text,
  notify_url             text,
  refund                 bigint NOT NULL CHECK (refund > 0),
  total                  bigint NOT NULL CHECK (total > 0),
  currency               text NOT NULL,
  status                 text NOT NULL CHECK (status IN ('SUCCESS', 'CLOSED', 'PROCESSING', 'ABNORMAL')),
  -- When a PROCESSING refund reaches the buyer: fixed at creation, so every observer (query, repeat,
  -- notification) agrees on it whichever sandbox process looks first.
  settle_at              timestamptz NOT NULL,
  success_time           timestamptz,
  created_at             timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (mchid, out_refund_no)
);

-- Platform-certificate mode (平台证书), which merchants that have not switched to the WeChat Pay
-- public key still use: GET /v3/certificates serves this certificate, and an answer is signed with
-- its key unless the request names the public key (Wechatpay-Serial: PUB_KEY_ID_…). Its own key, as on
-- WeChat: a certificate-mode signature does not verify with the public key, nor the other way round.
ALTER TABLE psp_sandbox.wechatpay_merchants
  ADD COLUMN IF NOT EXISTS platform_cert_serial_no text,
  ADD COLUMN IF NOT EXISTS platform_cert_private_key_pem text,
  ADD COLUMN IF NOT EXISTS platform_cert_pem text,
  ADD COLUMN IF NOT EXISTS platform_cert_not_before timestamptz,
  ADD COLUMN IF NOT EXISTS platform_cert_not_after timestamptz;

-- Every code_url Native下单 handed out, so the scan page can find the trade a scanned QR code is for.
-- "code_url有效期为2小时，过期后扫码不能再发起支付" (Native调起支付): a code past expires_at cannot be
-- paid, though its trade may still be (a new create hands out a new code).
CREATE TABLE IF NOT EXISTS psp_sandbox.wechatpay_code_urls (
  code_url      text PRIMARY KEY,
  mchid         text NOT NULL,
  out_trade_no  text NOT NULL,
  expires_at    timestamptz NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (mchid, out_trade_no) REFERENCES psp_sandbox.wechatpay_trades (mchid, out_trade_no)
);

-- A refund settles at the latest when its REFUND.SUCCESS notification is claimed for its first
-- delivery (the schedule holds it until settle_at): the ledger then says succeeded before the
-- merchant hears so, even if nobody queried the refund in between. A trigger rather than code in
-- the delivery loop, because the loop is shared by every gateway and knows nothing of refunds.
CREATE OR REPLACE FUNCTION psp_sandbox.wechatpay_settle_notified_refund() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE psp_sandbox.wechatpay_refunds
     SET status = 'SUCCESS', success_time = settle_at
   WHERE mchid = NEW.merchant_id AND out_refund_no = NEW.fields->>'out_refund_no' AND status = 'PROCESSING';
  UPDATE psp_sandbox.refunds
     SET status = 'succeeded', settled_at = now()
   WHERE gateway = 'wechatpay' AND merchant_id = NEW.merchant_id AND refund_id = NEW.fields->>'out_refund_no'
     AND status = 'pending';
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER wechatpay_settle_notified_refund
  AFTER UPDATE OF lease_until ON psp_sandbox.notifications
  FOR EACH ROW
  WHEN (NEW.gateway = 'wechatpay' AND NEW.lease_until IS NOT NULL AND NEW.fields ? 'out_refund_no')
  EXECUTE FUNCTION psp_sandbox.wechatpay_settle_notified_refund();
`;

export interface WechatPayIdentity {
  mchid: string;
  appid: string;
  merchantSerialNo: string;
  /** PKCS#8 PEM, the format of the apiclient_key.pem WeChat's certificate tool produces. */
  merchantPrivateKeyPem: string;
  merchantPublicKeyPem: string;
  /** 32 ASCII characters; its UTF-8 bytes are the AES-256 key. */
  apiV3Key: string;
  platformSerialNo: string;
  platformPrivateKeyPem: string;
  /** SPKI PEM, the format of WeChat's pub_key.pem. */
  platformPublicKeyPem: string;
  /** The platform certificate (平台证书) and its key, for merchants in platform-certificate mode. */
  platformCertificate: PlatformCertificate;
  platformCertPrivateKeyPem: string;
}

interface MerchantRow {
  mchid: string;
  appid: string;
  merchant_serial_no: string;
  merchant_private_key_pem: string;
  merchant_public_key_pem: string;
  api_v3_key: string;
  platform_serial_no: string;
  platform_private_key_pem: string;
  platform_public_key_pem: string;
  platform_cert_serial_no: string | null;
  platform_cert_private_key_pem: string | null;
  platform_cert_pem: string | null;
  platform_cert_not_before: Date | null;
  platform_cert_not_after: Date | null;
}

type CertifiedMerchantRow = MerchantRow & {
  platform_cert_serial_no: string;
  platform_cert_private_key_pem: string;
  platform_cert_pem: string;
  platform_cert_not_before: Date;
  platform_cert_not_after: Date;
};

function toIdentity(row: CertifiedMerchantRow): WechatPayIdentity {
  return {
    mchid: row.mchid,
    appid: row.appid,
    merchantSerialNo: row.merchant_serial_no,
    merchantPrivateKeyPem: row.merchant_private_key_pem,
    merchantPublicKeyPem: row.merchant_public_key_pem,
    apiV3Key: row.api_v3_key,
    platformSerialNo: row.platform_serial_no,
    platformPrivateKeyPem: row.platform_private_key_pem,
    platformPublicKeyPem: row.platform_public_key_pem,
    platformCertificate: {
      serialNo: row.platform_cert_serial_no,
      pem: row.platform_cert_pem,
      notBefore: row.platform_cert_not_before,
      notAfter: row.platform_cert_not_after,
    },
    platformCertPrivateKeyPem: row.platform_cert_private_key_pem,
  };
}

/**
 * Gives a merchant made before platform-certificate mode existed its certificate, once. The serial is
 * 40 upper-case hex digits like WeChat's (the first below 8: an X.509 serial is a positive integer).
 */
async function ensurePlatformCertificate(tx: Tx, row: MerchantRow): Promise<CertifiedMerchantRow> {
  if (
    row.platform_cert_serial_no &&
    row.platform_cert_private_key_pem &&
    row.platform_cert_pem &&
    row.platform_cert_not_before &&
    row.platform_cert_not_after
  ) {
    return row as CertifiedMerchantRow;
  }
  const pair = await generateRsaKeyPair();
  const serialNo = `${randomInt(1, 8)}${randomHexUpper(20).slice(1)}`;
  const certificate = makePlatformCertificate(pair.privateKeyPem, serialNo, new Date());
  await tx`
    UPDATE psp_sandbox.wechatpay_merchants
       SET platform_cert_serial_no = ${certificate.serialNo}, platform_cert_private_key_pem = ${pair.privateKeyPem},
           platform_cert_pem = ${certificate.pem}, platform_cert_not_before = ${certificate.notBefore},
           platform_cert_not_after = ${certificate.notAfter}
     WHERE mchid = ${row.mchid}`;
  return {
    ...row,
    platform_cert_serial_no: certificate.serialNo,
    platform_cert_private_key_pem: pair.privateKeyPem,
    platform_cert_pem: certificate.pem,
    platform_cert_not_before: certificate.notBefore,
    platform_cert_not_after: certificate.notAfter,
  };
}

/** The merchant, created on the very first start and kept (under the start-up advisory lock). */
async function loadOrCreateIdentity(tx: Tx): Promise<WechatPayIdentity> {
  const existing = await tx<MerchantRow[]>`
    SELECT mchid, appid, merchant_serial_no, merchant_private_key_pem, merchant_public_key_pem, api_v3_key,
           platform_serial_no, platform_private_key_pem, platform_public_key_pem, platform_cert_serial_no,
           platform_cert_private_key_pem, platform_cert_pem, platform_cert_not_before, platform_cert_not_after
      FROM psp_sandbox.wechatpay_merchants ORDER BY created_at, mchid LIMIT 1`;
  if (existing[0]) return toIdentity(await ensurePlatformCertificate(tx, existing[0]));

  const [merchantPair, platformPair] = await Promise.all([generateRsaKeyPair(), generateRsaKeyPair()]);
  // mchid: 10 digits (WeChat's examples: 1230000109, 1900000109). appid: wx + 16 hex. Serials: a
  // merchant API certificate serial is 40 upper-case hex digits; a WeChat Pay public key id is
  // PUB_KEY_ID_ + digits. The APIv3 key is 32 characters set by the merchant.
  const mchid = `19${randomDigits(8)}`;
  const row: MerchantRow = {
    mchid,
    appid: `wx${randomHexUpper(8).toLowerCase()}`,
    merchant_serial_no: randomHexUpper(20),
    merchant_private_key_pem: createPrivateKey(merchantPair.privateKeyPem).export({ type: 'pkcs8', format: 'pem' }).toString().trim(),
    merchant_public_key_pem: merchantPair.publicKeyPem,
    api_v3_key: randomAlnum(32),
    platform_serial_no: `PUB_KEY_ID_01${mchid}${beijingDate(new Date())}${randomDigits(14)}`,
    platform_private_key_pem: platformPair.privateKeyPem,
    platform_public_key_pem: platformPair.publicKeyPem,
    platform_cert_serial_no: null,
    platform_cert_private_key_pem: null,
    platform_cert_pem: null,
    platform_cert_not_before: null,
    platform_cert_not_after: null,
  };
  await tx`
    INSERT INTO psp_sandbox.wechatpay_merchants
      (mchid, appid, merchant_serial_no, merchant_private_key_pem, merchant_public_key_pem, api_v3_key,
       platform_serial_no, platform_private_key_pem, platform_public_key_pem)
    VALUES (${row.mchid}, ${row.appid}, ${row.merchant_serial_no}, ${row.merchant_private_key_pem},
            ${row.merchant_public_key_pem}, ${row.api_v3_key}, ${row.platform_serial_no},
            ${row.platform_private_key_pem}, ${row.platform_public_key_pem})`;
  return toIdentity(await ensurePlatformCertificate(tx, row));
}

// ---------------------------------------------------------------------------------------------
// Test buyers

export type TestBuyerName = 'ok' | 'insufficient_funds' | 'account_restricted';

interface TestBuyer {
  name: TestBuyerName;
  /** The buyer's openid under the merchant's appid (28 characters, like WeChat's). */
  openid: string;
  /**
   * Why this buyer's payment fails, or null when it succeeds. `code` is the v3 error code WeChat
   * uses for the same failure where the payer is known up front (付款码支付: 403 NOT_ENOUGH /
   * ACCOUNT_ERROR); a Native/JSAPI payment only shows it as trade_state PAYERROR + trade_state_desc.
   */
  decline: { code: 'NOT_ENOUGH' | 'ACCOUNT_ERROR'; desc: string } | null;
}

export const WECHATPAY_TEST_BUYERS: Readonly<Record<TestBuyerName, TestBuyer>> = {
  ok: { name: 'ok', openid: 'oSandbox_TestBuyer_Ok_000001', decline: null },
  insufficient_funds: {
    name: 'insufficient_funds',
    openid: 'oSandbox_TestBuyer_Poor_0002',
    decline: { code: 'NOT_ENOUGH', desc: '支付失败，用户余额不足' },
  },
  account_restricted: {
    name: 'account_restricted',
    openid: 'oSandbox_TestBuyer_Restr_003',
    decline: { code: 'ACCOUNT_ERROR', desc: '支付失败，用户账户异常，已被限制支付' },
  },
};

/** What the adapter must send as `attach` for each test buyer (served by GET /sandbox/credentials). */
export function wechatpayTestBuyerAttach(): Record<TestBuyerName, string> {
  return {
    ok: 'sandbox_buyer=ok',
    insufficient_funds: 'sandbox_buyer=insufficient_funds',
    account_restricted: 'sandbox_buyer=account_restricted',
  };
}

function isTestBuyerName(value: string): value is TestBuyerName {
  return Object.hasOwn(WECHATPAY_TEST_BUYERS, value);
}

type SandboxFault = 'FREQUENCY_LIMITED' | 'SYSTEM_ERROR';

interface Directives {
  buyer: TestBuyer | null;
  fault: SandboxFault | null;
}

// ---------------------------------------------------------------------------------------------
// Answers

/** An answer before signing: WeChat's error body is `{ code, message[, detail] }`. */
interface Answer {
  status: number;
  body?: unknown;
}

function errorAnswer(status: number, code: string, message: string, detail?: Record<string, unknown>): Answer {
  return { status, body: detail ? { code, message, detail } : { code, message } };
}

/** PARAM_ERROR with WeChat's `detail` (where in the request, which field). */
function paramError(field: string, issue: string, location: 'body' | 'query' | 'uri_template' = 'body'): Answer {
  return errorAnswer(400, 'PARAM_ERROR', `参数错误: ${field} ${issue}`, { location, field, issue });
}

function isAnswer(value: unknown): value is Answer {
  return typeof value === 'object' && value !== null && 'status' in value && typeof (value as Answer).status === 'number';
}

function signedResponse(signer: PlatformSigner, answer: Answer, now = new Date()): SandboxResponse {
  const body = answer.body === undefined ? '' : JSON.stringify(answer.body);
  const headers: Record<string, string> = {
    ...platformHeaders(signer, body, now),
    'Request-ID': randomUUID(),
  };
  if (body !== '') headers['content-type'] = 'application/json; charset=utf-8';
  return { status: answer.status, headers, body };
}

/** An answer to a request whose signature did not verify: WeChat does not sign those. */
function unsignedError(status: number, code: string, message: string): SandboxResponse {
  return json(status, { code, message }, { 'Request-ID': randomUUID() });
}

// ---------------------------------------------------------------------------------------------
// Trades

type TradeState = 'SUCCESS' | 'REFUND' | 'NOTPAY' | 'CLOSED' | 'REVOKED' | 'USERPAYING' | 'PAYERROR';
type TradeType = 'NATIVE' | 'JSAPI';

interface TradeRow {
  mchid: string;
  out_trade_no: string;
  appid: string;
  trade_type: TradeType;
  description: string;
  total: string;
  currency: string;
  notify_url: string;
  attach: string | null;
  payer_openid: string | null;
  trade_state: TradeState;
  trade_state_desc: string;
  transaction_id: string | null;
  bank_type: string | null;
  success_time: Date | null;
  created_at: Date;
}

const STATE_DESC: Readonly<Record<TradeState, string>> = {
  SUCCESS: '支付成功',
  REFUND: '转入退款',
  NOTPAY: '订单未支付',
  CLOSED: '订单已关闭',
  REVOKED: '已撤销',
  USERPAYING: '用户支付中',
  PAYERROR: '支付失败',
};

/**
 * Serializes everything that touches one merchant order, across requests and sandbox processes. A
 * row lock cannot: before the first create there is no row, so 50 concurrent first creates would all
 * insert-or-pay. The transaction-scoped advisory lock exists before the row and ends at commit.
 */
async function lockTrade(tx: Tx, mchid: string, outTradeNo: string): Promise<void> {
  await tx`SELECT pg_advisory_xact_lock(hashtextextended(${`${GATEWAY}:${mchid}:${outTradeNo}`}, 0))`;
}

async function selectTrade(
  db: Queryable,
  mchid: string,
  by: { outTradeNo: string } | { transactionId: string },
): Promise<TradeRow | undefined> {
  const rows =
    'outTradeNo' in by
      ? await db<TradeRow[]>`SELECT * FROM psp_sandbox.wechatpay_trades
                              WHERE mchid = ${mchid} AND out_trade_no = ${by.outTradeNo}`
      : await db<TradeRow[]>`SELECT * FROM psp_sandbox.wechatpay_trades
                              WHERE mchid = ${mchid} AND transaction_id = ${by.transactionId}`;
  return rows[0];
}

function isPaid(trade: TradeRow): boolean {
  return trade.trade_state === 'SUCCESS' || trade.trade_state === 'REFUND';
}

/** The transaction as the query API and the decrypted notification resource show it. */
function transactionView(trade: TradeRow): Record<string, unknown> {
  const total = Number(trade.total);
  const view: Record<string, unknown> = {
    appid: trade.appid,
    mchid: trade.mchid,
    out_trade_no: trade.out_trade_no,
  };
  if (trade.transaction_id) view.transaction_id = trade.transaction_id;
  view.trade_type = trade.trade_type;
  view.trade_state = trade.trade_state;
  view.trade_state_desc = trade.trade_state_desc;
  if (trade.bank_type) view.bank_type = trade.bank_type;
  if (trade.attach !== null) view.attach = trade.attach;
  if (trade.success_time) view.success_time = beijingRfc3339(trade.success_time);
  if (trade.payer_openid) view.payer = { openid: trade.payer_openid };
  // payer_total only exists once someone paid; no coupons in the sandbox, so it equals total.
  view.amount = isPaid(trade)
    ? { total, payer_total: total, currency: trade.currency, payer_currency: trade.currency }
    : { total, currency: trade.currency, payer_currency: trade.currency };
  return view;
}

// ---------------------------------------------------------------------------------------------
// Request body readers

type Body = Record<string, unknown>;

function readString(body: Body, field: string, max: number, required: true, parent?: string): string | Answer;
function readString(body: Body, field: string, max: number, required: false, parent?: string): string | null | Answer;
function readString(body: Body, field: string, max: number, required: boolean, parent = ''): string | null | Answer {
  const value = body[field];
  const path = `${parent}/${field}`;
  if (value === undefined || value === null) return required ? paramError(path, '为必填项') : null;
  if (typeof value !== 'string') return paramError(path, '必须是字符串');
  // WeChat's string(n) limits count characters (描述"不能超过127个字符").
  const length = [...value].length;
  if (length < 1 || length > max) return paramError(path, `长度须在 1-${max} 个字符之间`);
  return value;
}

/** WeChat's attach is opaque to it; the sandbox reads its own `sandbox_*` pairs out of it. */
function readDirectives(attach: string | null): Directives | Answer {
  const directives: Directives = { buyer: null, fault: null };
  if (attach === null) return directives;
  for (const part of attach.split('&')) {
    const eq = part.indexOf('=');
    const key = eq < 0 ? part : part.slice(0, eq);
    const value = eq < 0 ? '' : part.slice(eq + 1);
    if (key === 'sandbox_buyer') {
      if (!isTestBuyerName(value)) {
        return paramError('/attach', `sandbox_buyer 只能是 ok、insufficient_funds 或 account_restricted，收到 "${value}"`);
      }
      directives.buyer = WECHATPAY_TEST_BUYERS[value];
    } else if (key === 'sandbox_fault') {
      if (value !== 'FREQUENCY_LIMITED' && value !== 'SYSTEM_ERROR') {
        return paramError('/attach', `sandbox_fault 只能是 FREQUENCY_LIMITED 或 SYSTEM_ERROR，收到 "${value}"`);
      }
      directives.fault = value;
    }
  }
  return directives;
}

/** "code_url有效期为2小时，过期后扫码不能再发起支付" (Native调起支付). */
export const CODE_URL_TTL_SECONDS = 2 * 3600;

/** amount.total is an `int` in WeChat's schema: at most 2^31 − 1 fen (21,474,836.47 yuan). */
const MAX_TOTAL = 2_147_483_647;

interface CreateParams {
  tradeType: TradeType;
  appid: string;
  description: string;
  outTradeNo: string;
  notifyUrl: string;
  total: number;
  currency: string;
  attach: string | null;
  payerOpenid: string | null;
  directives: Directives;
}

function parseCreate(tradeType: TradeType, body: Body, authMchid: string, identity: WechatPayIdentity): CreateParams | Answer {
  const appid = readString(body, 'appid', 32, true);
  if (isAnswer(appid)) return appid;
  const mchid = readString(body, 'mchid', 32, true);
  if (isAnswer(mchid)) return mchid;
  // WeChat's own wording for this one.
  if (mchid !== authMchid) return errorAnswer(400, 'PARAM_ERROR', 'http header中的mchid与post payload中的mchid不匹配');
  const description = readString(body, 'description', 127, true);
  if (isAnswer(description)) return description;
  const outTradeNo = readString(body, 'out_trade_no', 32, true);
  if (isAnswer(outTradeNo)) return outTradeNo;
  if (!OUT_TRADE_NO_RE.test(outTradeNo)) {
    return paramError('/out_trade_no', '要求6-32个字符内，只能是数字、大小写字母_-|*');
  }
  const notifyUrl = readString(body, 'notify_url', 255, true);
  if (isAnswer(notifyUrl)) return notifyUrl;
  let parsedUrl: URL | null = null;
  try {
    parsedUrl = new URL(notifyUrl);
  } catch {
    parsedUrl = null;
  }
  // "通知URL必须为外网可访问的URL，不能携带参数" (and HTTPS on the public internet, which a local
  // sandbox cannot ask of a developer's machine: http is accepted here).
  if (!parsedUrl || (parsedUrl.protocol !== 'https:' && parsedUrl.protocol !== 'http:')) {
    return paramError('/notify_url', '必须是 http(s) 的绝对 URL');
  }
  if (parsedUrl.search !== '' || parsedUrl.hash !== '') return paramError('/notify_url', '不能携带参数');

  const amount = body.amount;
  if (typeof amount !== 'object' || amount === null || Array.isArray(amount)) return paramError('/amount', '为必填项');
  const total = (amount as Body).total;
  if (typeof total !== 'number' || !Number.isInteger(total) || total < 1 || total > MAX_TOTAL) {
    return paramError('/amount/total', `必须是 1-${MAX_TOTAL} 之间的整数（单位：分）`);
  }
  const currencyValue = (amount as Body).currency;
  if (currencyValue !== undefined && typeof currencyValue !== 'string') return paramError('/amount/currency', '必须是字符串');
  const currency = currencyValue ?? 'CNY';
  // 境内直连商户 collect CNY only.
  if (currency !== 'CNY') return paramError('/amount/currency', '境内商户号仅支持人民币 CNY');

  const attach = readString(body, 'attach', 128, false);
  if (isAnswer(attach)) return attach;
  const directives = readDirectives(attach);
  if (isAnswer(directives)) return directives;

  let payerOpenid: string | null = null;
  if (tradeType === 'JSAPI') {
    const payer = body.payer;
    if (typeof payer !== 'object' || payer === null || Array.isArray(payer)) return paramError('/payer', '为必填项');
    const openid = readString(payer as Body, 'openid', 128, true, '/payer');
    if (isAnswer(openid)) return openid;
    payerOpenid = openid;
  }
  // Checked after the shape, like WeChat: a well-formed request for an appid not bound to the mchid.
  if (appid !== identity.appid) return errorAnswer(400, 'APPID_MCHID_NOT_MATCH', 'AppID和mch_id不匹配');
  // time_expire, goods_tag, detail, scene_info, settle_info…: accepted and ignored.
  return { tradeType, appid, description, outTradeNo, notifyUrl, total, currency, attach, payerOpenid, directives };
}

function orderClosed(): Answer {
  return errorAnswer(400, 'ORDER_CLOSED', '当前订单已关闭，请重新下单');
}

/**
 * WeChat's rule for a repeated out_trade_no: the same parameters while unpaid get a new
 * code_url/prepay_id; changed parameters or a paid trade are 403 OUT_TRADE_NO_USED, a closed trade
 * 400 ORDER_CLOSED.
 * (Whether v3 has a separate ORDER_PAID is unverified; OUT_TRADE_NO_USED is used for a paid trade as
 * well, and a merchant tells "already paid" apart by querying.)
 *
 * `attach` is deliberately NOT compared: in this sandbox it carries the test buyer, which differs
 * between the attempts of one order by design (a declined buyer, then another), and WeChat returns
 * attach as data rather than treating it as part of the order's terms. `notify_url` is not compared
 * either (WeChat notifies the latest one), nor the optional fields that are ignored.
 */
function repeatedTradeError(trade: TradeRow, params: CreateParams): Answer | null {
  if (isPaid(trade)) return errorAnswer(403, 'OUT_TRADE_NO_USED', '商户订单号重复：该订单已支付');
  // "400 ORDER_CLOSED 订单已关闭 — 当前订单已关闭，请重新下单", in the error table Native下单 and
  // 关闭订单 share. [unverified] merchants report v2's "商户订单号重复" for this on the live gateway;
  // the v3 documentation's own code is used.
  if (trade.trade_state === 'CLOSED' || trade.trade_state === 'REVOKED') return orderClosed();
  const same =
    trade.trade_type === params.tradeType &&
    trade.appid === params.appid &&
    trade.description === params.description &&
    BigInt(trade.total) === BigInt(params.total) &&
    trade.currency === params.currency &&
    (params.tradeType !== 'JSAPI' || trade.payer_openid === params.payerOpenid);
  if (!same) return errorAnswer(403, 'OUT_TRADE_NO_USED', '商户订单号重复：同一商户订单号的下单参数不一致');
  return null;
}

// ---------------------------------------------------------------------------------------------
// Notifications

const NOTIFICATION_SUMMARY = '支付成功';

/**
 * What a notification is made of, stored with it (a Record<string, string>): the envelope's constant
 * parts and the transaction resource as JSON. `id` is the notification id, constant across retries.
 */
function notificationFields(trade: TradeRow, id: string, createTime: string): Record<string, string> {
  return {
    id,
    create_time: createTime,
    event_type: 'TRANSACTION.SUCCESS',
    summary: NOTIFICATION_SUMMARY,
    transaction: JSON.stringify(transactionView(trade)),
  };
}

const REFUND_SUMMARY: Readonly<Record<RefundStatus, string>> = {
  SUCCESS: '退款成功',
  CLOSED: '退款关闭',
  ABNORMAL: '退款异常',
  PROCESSING: '退款处理中',
};

/**
 * A refund notification's stored fields: `out_refund_no` at the top level is what the settling
 * trigger (SCHEMA_SQL) and the payment-notification lookups tell refund notifications apart by.
 */
function refundNotificationFields(refund: RefundRow, id: string, createTime: string): Record<string, string> {
  return {
    id,
    create_time: createTime,
    event_type: `REFUND.${refund.status}`,
    summary: REFUND_SUMMARY[refund.status],
    out_refund_no: refund.out_refund_no,
    refund: JSON.stringify(refundResourceView(refund)),
  };
}

const ENVELOPE_OVERRIDES = new Set(['id', 'create_time', 'event_type', 'resource_type', 'summary']);
const RESOURCE_OVERRIDES = new Set(['resource.original_type', 'resource.algorithm', 'resource.associated_data', 'resource.nonce']);
const HEADER_OVERRIDES = new Set(['Wechatpay-Timestamp', 'Wechatpay-Nonce', 'Wechatpay-Signature', 'Wechatpay-Serial']);

/**
 * Sets a dotted path ("amount.total") in the decrypted transaction. An empty string removes the
 * field; a numeric string replaces a number with a number, so `{"amount.total": "1"}` tampers the
 * amount without changing its type.
 */
function applyTransactionOverride(target: Record<string, unknown>, path: string, value: string): void {
  const keys = path.split('.');
  let node: Record<string, unknown> = target;
  for (const key of keys.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  const last = keys.at(-1) ?? path;
  if (value === '') {
    delete node[last];
  } else if (typeof node[last] === 'number' && /^-?\d+$/.test(value)) {
    node[last] = Number(value);
  } else {
    node[last] = value;
  }
}

export interface NotificationKeys {
  apiV3Key: string;
  signer: PlatformSigner;
}

/**
 * Builds one delivery: encrypts the transaction with the APIv3 key (a fresh 12-character nonce each
 * time: an AES-GCM nonce must never be reused under one key for different plaintexts, and overrides
 * change the plaintext) and signs the body with the platform key.
 *
 * Overrides (the notification tool's), applied BEFORE encrypting and signing:
 *   - transaction fields by dotted path: `out_trade_no`, `amount.total`, `trade_state`, `mchid`, …
 *   - envelope fields: `id`, `create_time`, `event_type`, `resource_type`, `summary`
 *   - resource metadata: `resource.original_type`, `resource.algorithm`, `resource.associated_data`,
 *     `resource.nonce` (encrypted under the given values, so they are consistent, not broken)
 *   - headers: `Wechatpay-Timestamp` / `Wechatpay-Nonce` / `Wechatpay-Serial` (signed as given, e.g. a
 *     stale timestamp with a valid signature) and `Wechatpay-Signature` (replaces the signature: a
 *     forgery)
 */
export function buildWechatPayNotification(
  fields: Record<string, string>,
  keys: NotificationKeys,
  now: Date,
  overrides: Record<string, string> = {},
): { contentType: string; body: string; headers: Record<string, string> } {
  // A refund notification carries a refund resource (original_type "refund"); the rest are payments.
  const kind = fields.refund === undefined ? 'transaction' : 'refund';
  const transaction = JSON.parse((kind === 'refund' ? fields.refund : fields.transaction) ?? '{}') as Record<string, unknown>;
  const envelope: Record<string, string> = {
    id: fields.id ?? randomUUID(),
    create_time: fields.create_time ?? beijingRfc3339(now),
    resource_type: 'encrypt-resource',
    event_type: fields.event_type ?? 'TRANSACTION.SUCCESS',
    summary: fields.summary ?? NOTIFICATION_SUMMARY,
  };
  const resourceMeta: Record<string, string> = {
    original_type: kind,
    algorithm: 'AEAD_AES_256_GCM',
    associated_data: kind,
    nonce: randomAlnum(12),
  };
  const headerOverrides: Record<string, string> = {};
  for (const [key, value] of Object.entries(overrides)) {
    if (ENVELOPE_OVERRIDES.has(key)) envelope[key] = value;
    else if (RESOURCE_OVERRIDES.has(key)) resourceMeta[key.slice('resource.'.length)] = value;
    else if (HEADER_OVERRIDES.has(key)) headerOverrides[key] = value;
    else applyTransactionOverride(transaction, key, value);
  }
  // A nonce that is not 12 bytes cannot be an AES-GCM IV here; encrypt under a valid one and put the
  // overridden text in the body, which is what a receiver would then fail to decrypt.
  const ivNonce = Buffer.byteLength(resourceMeta.nonce ?? '') === 12 ? (resourceMeta.nonce ?? '') : randomAlnum(12);
  const ciphertext = encryptResource(JSON.stringify(transaction), keys.apiV3Key, ivNonce, resourceMeta.associated_data ?? '');
  const body = JSON.stringify({
    ...envelope,
    resource: {
      original_type: resourceMeta.original_type,
      algorithm: resourceMeta.algorithm,
      ciphertext,
      associated_data: resourceMeta.associated_data,
      nonce: resourceMeta.nonce,
    },
  });
  const fixed: { timestamp?: string; nonce?: string } = {};
  if (headerOverrides['Wechatpay-Timestamp'] !== undefined) fixed.timestamp = headerOverrides['Wechatpay-Timestamp'];
  if (headerOverrides['Wechatpay-Nonce'] !== undefined) fixed.nonce = headerOverrides['Wechatpay-Nonce'];
  const headers = platformHeaders(keys.signer, body, now, fixed);
  if (headerOverrides['Wechatpay-Serial'] !== undefined) headers['Wechatpay-Serial'] = headerOverrides['Wechatpay-Serial'];
  if (headerOverrides['Wechatpay-Signature'] !== undefined) headers['Wechatpay-Signature'] = headerOverrides['Wechatpay-Signature'];
  return { contentType: 'application/json', body, headers };
}

/** "接收成功：HTTP应答状态码需返回200或204，无需返回应答报文。" Anything else is a failure. */
export function isWechatPayAck(status: number): boolean {
  return status === 200 || status === 204;
}

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

/** 15s/15s/30s/3m/10m/20m/30m/30m/30m/60m/3h/3h/3h/6h/6h — 16 deliveries over 24h4m. */
export const WECHATPAY_RETRY_INTERVALS_MS: readonly number[] = [
  15 * SECOND,
  15 * SECOND,
  30 * SECOND,
  3 * MINUTE,
  10 * MINUTE,
  20 * MINUTE,
  30 * MINUTE,
  30 * MINUTE,
  30 * MINUTE,
  60 * MINUTE,
  3 * HOUR,
  3 * HOUR,
  3 * HOUR,
  6 * HOUR,
  6 * HOUR,
];

export function wechatpayNotifier(keys: NotificationKeys): GatewayNotifier {
  return {
    retryIntervalsMs: WECHATPAY_RETRY_INTERVALS_MS,
    buildRequest: (fields, now) => buildWechatPayNotification(fields, keys, now),
    isAcknowledged: (status) => isWechatPayAck(status),
  };
}

// ---------------------------------------------------------------------------------------------
// Context

interface Context {
  sql: Sql;
  identity: WechatPayIdentity;
  /** The WeChat Pay public key's (PUB_KEY_ID_…): notifications, and answers to requests that name it. */
  signer: PlatformSigner;
  /** The platform certificate's: answers to requests that do not name the public key. */
  certSigner: PlatformSigner;
  keys: NotificationKeys;
  wakeNotifier(): void;
  deliveryTimeoutMs: number;
  /** SANDBOX_TIME_SCALE, applied to how long a refund stays PROCESSING. */
  timeScale: number;
}

/**
 * A test buyer pays (or fails to pay) the trade, under the trade's lock, in the caller's transaction:
 * the ledger row, the trade's state and the notification commit together or not at all.
 */
async function payTrade(tx: Tx, ctx: Context, trade: TradeRow, buyer: TestBuyer): Promise<{ trade: TradeRow; charged: boolean }> {
  // Native: whoever scans is the payer. JSAPI: the payer was fixed by the request's openid.
  const payerOpenid = trade.trade_type === 'JSAPI' ? trade.payer_openid : buyer.openid;
  const base = {
    gateway: GATEWAY,
    merchantId: trade.mchid,
    outTradeNo: trade.out_trade_no,
    amountMinor: BigInt(trade.total),
    currency: trade.currency,
    buyerId: payerOpenid,
  };
  if (buyer.decline) {
    const rows = await tx<TradeRow[]>`
      UPDATE psp_sandbox.wechatpay_trades
         SET trade_state = 'PAYERROR', trade_state_desc = ${buyer.decline.desc}, payer_openid = ${payerOpenid},
             updated_at = now()
       WHERE mchid = ${trade.mchid} AND out_trade_no = ${trade.out_trade_no}
      RETURNING *`;
    await recordCharge(tx, { ...base, status: 'declined', gatewayTradeNo: null, declineCode: buyer.decline.code });
    const updated = rows[0];
    if (!updated) throw new Error('trade vanished under its lock');
    return { trade: updated, charged: false };
  }

  const now = new Date();
  const rows = await tx<TradeRow[]>`
    UPDATE psp_sandbox.wechatpay_trades
       SET trade_state = 'SUCCESS', trade_state_desc = ${STATE_DESC.SUCCESS}, payer_openid = ${payerOpenid},
           transaction_id = ${newTransactionId(now)}, bank_type = 'OTHERS', success_time = now(), updated_at = now()
     WHERE mchid = ${trade.mchid} AND out_trade_no = ${trade.out_trade_no}
       AND trade_state IN ('NOTPAY', 'PAYERROR', 'USERPAYING')
    RETURNING *`;
  const paid = rows[0];
  if (!paid || !paid.transaction_id) throw new Error('trade left its payable state under its lock');
  await recordCharge(tx, { ...base, status: 'succeeded', gatewayTradeNo: paid.transaction_id, declineCode: null });
  const id = randomUUID();
  await enqueueNotification(tx, {
    gateway: GATEWAY,
    merchantId: paid.mchid,
    outTradeNo: paid.out_trade_no,
    notifyId: id,
    notifyUrl: paid.notify_url,
    fields: notificationFields(paid, id, beijingRfc3339(now)),
  });
  return { trade: paid, charged: true };
}

// ---------------------------------------------------------------------------------------------
// The API

async function createTransaction(ctx: Context, tradeType: TradeType, authMchid: string, rawBody: string): Promise<Answer> {
  let body: unknown;
  try {
    body = JSON.parse(rawBody);
  } catch {
    return errorAnswer(400, 'PARAM_ERROR', '请求体不是合法的 JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return errorAnswer(400, 'PARAM_ERROR', '请求体必须是 JSON 对象');
  }
  const params = parseCreate(tradeType, body as Body, authMchid, ctx.identity);
  if (isAnswer(params)) return params;
  // The sandbox's injected faults, answered before anything is read or written.
  if (params.directives.fault === 'FREQUENCY_LIMITED') return errorAnswer(429, 'FREQUENCY_LIMITED', '频率超限，请降低请求频率');
  if (params.directives.fault === 'SYSTEM_ERROR') return errorAnswer(500, 'SYSTEM_ERROR', '系统异常，请用相同参数重新调用');

  const mchid = ctx.identity.mchid;
  let charged = false;
  const answer = await ctx.sql.begin(async (tx): Promise<Answer> => {
    await lockTrade(tx, mchid, params.outTradeNo);
    let trade = await selectTrade(tx, mchid, { outTradeNo: params.outTradeNo });
    if (trade) {
      const refusal = repeatedTradeError(trade, params);
      if (refusal) return refusal;
      // Reopened: a new code_url is a new chance to pay, so the previous attempt's PAYERROR no longer
      // describes the trade; until someone pays it is NOTPAY again. (Unverified: WeChat documents
      // reopening but not what a query shows between a failed payment and the next one; NOTPAY is
      // what a fresh code_url shows.)
      const rows = await tx<TradeRow[]>`
        UPDATE psp_sandbox.wechatpay_trades
           SET notify_url = ${params.notifyUrl}, attach = ${params.attach}, trade_state = 'NOTPAY',
               trade_state_desc = ${STATE_DESC.NOTPAY}, updated_at = now()
         WHERE mchid = ${mchid} AND out_trade_no = ${params.outTradeNo}
        RETURNING *`;
      trade = rows[0];
    } else {
      const rows = await tx<TradeRow[]>`
        INSERT INTO psp_sandbox.wechatpay_trades
          (mchid, out_trade_no, appid, trade_type, description, total, currency, notify_url, attach, payer_openid,
           trade_state, trade_state_desc)
        VALUES (${mchid}, ${params.outTradeNo}, ${params.appid}, ${params.tradeType}, ${params.description},
                ${String(params.total)}, ${params.currency}, ${params.notifyUrl}, ${params.attach}, ${params.payerOpenid},
                'NOTPAY', ${STATE_DESC.NOTPAY})
        RETURNING *`;
      trade = rows[0];
    }
    if (!trade) throw new Error('INSERT/UPDATE … RETURNING returned no row');
    if (params.directives.buyer) {
      // The test buyer scans / confirms at once. Create itself still answers 200 either way, as on
      // WeChat: the payment's outcome is read by querying (or from the notification).
      const result = await payTrade(tx, ctx, trade, params.directives.buyer);
      charged = result.charged;
    }
    const now = new Date();
    if (tradeType !== 'NATIVE') return { status: 200, body: { prepay_id: newPrepayId(now) } };
    // Kept so the scan page can find the trade again; every create hands out a new one, and the
    // earlier ones stay usable until they expire (a buyer may still be looking at an older QR code).
    const codeUrl = newCodeUrl();
    await tx`
      INSERT INTO psp_sandbox.wechatpay_code_urls (code_url, mchid, out_trade_no, expires_at)
      VALUES (${codeUrl}, ${mchid}, ${params.outTradeNo}, now() + ${CODE_URL_TTL_SECONDS} * interval '1 second')`;
    return { status: 200, body: { code_url: codeUrl } };
  });
  if (charged) ctx.wakeNotifier();
  return answer;
}

function readMchidQuery(url: URL, authMchid: string): Answer | null {
  const mchid = url.searchParams.get('mchid');
  if (!mchid) return paramError('/mchid', '为必填项', 'query');
  if (mchid !== authMchid) return errorAnswer(400, 'PARAM_ERROR', 'http header中的mchid与query中的mchid不匹配');
  return null;
}

async function queryTransaction(
  ctx: Context,
  by: { outTradeNo: string } | { transactionId: string },
  url: URL,
  authMchid: string,
): Promise<Answer> {
  const mchidError = readMchidQuery(url, authMchid);
  if (mchidError) return mchidError;
  if ('outTradeNo' in by && !OUT_TRADE_NO_RE.test(by.outTradeNo)) {
    return paramError('/out_trade_no', '要求6-32个字符内，只能是数字、大小写字母_-|*', 'uri_template');
  }
  if ('transactionId' in by && !/^\d{1,32}$/.test(by.transactionId)) {
    return paramError('/transaction_id', '格式错误', 'uri_template');
  }
  const trade = await selectTrade(ctx.sql, ctx.identity.mchid, by);
  if (!trade) return errorAnswer(404, 'ORDER_NOT_EXIST', '订单不存在');
  return { status: 200, body: transactionView(trade) };
}

async function closeTransaction(ctx: Context, outTradeNo: string, authMchid: string, rawBody: string): Promise<Answer> {
  let body: unknown;
  try {
    body = JSON.parse(rawBody);
  } catch {
    return errorAnswer(400, 'PARAM_ERROR', '请求体不是合法的 JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return errorAnswer(400, 'PARAM_ERROR', '请求体必须是 JSON 对象');
  const mchid = readString(body as Body, 'mchid', 32, true);
  if (isAnswer(mchid)) return mchid;
  if (mchid !== authMchid) return errorAnswer(400, 'PARAM_ERROR', 'http header中的mchid与post payload中的mchid不匹配');
  if (!OUT_TRADE_NO_RE.test(outTradeNo)) {
    return paramError('/out_trade_no', '要求6-32个字符内，只能是数字、大小写字母_-|*', 'uri_template');
  }
  return ctx.sql.begin(async (tx): Promise<Answer> => {
    await lockTrade(tx, mchid, outTradeNo);
    const trade = await selectTrade(tx, mchid, { outTradeNo });
    // The close API's error table lists 404 ORDER_NOT_EXIST; (merchants report the live gateway
    // answering 204 even then; the documented answer is the more useful one for a sandbox).
    if (!trade) return errorAnswer(404, 'ORDER_NOT_EXIST', '订单不存在');
    // "ORDERPAID 订单已支付：订单已支付，不能发起关单，请当作已支付的正常交易" — the close API's error
    // table (v2, and v3 as published for the cross-border /v3/global close). [unverified] the HTTP
    // status in the domestic v3 API: 400, the status v3 gives business-rule refusals.
    if (isPaid(trade)) return errorAnswer(400, 'ORDERPAID', '订单已支付，不能发起关单，请当作已支付的正常交易');
    // Closing a closed trade: "400 ORDER_CLOSED 订单已关闭" in 关闭订单's error table. The caller
    // learns what it wanted (nothing can be paid any more) from the code.
    if (trade.trade_state === 'CLOSED' || trade.trade_state === 'REVOKED') return orderClosed();
    await tx`
      UPDATE psp_sandbox.wechatpay_trades
         SET trade_state = 'CLOSED', trade_state_desc = ${STATE_DESC.CLOSED}, updated_at = now()
       WHERE mchid = ${mchid} AND out_trade_no = ${outTradeNo}`;
    return { status: 204 };
  });
}

// ---------------------------------------------------------------------------------------------
// Refunds (申请退款 / 查询单笔退款)

type RefundStatus = 'SUCCESS' | 'CLOSED' | 'PROCESSING' | 'ABNORMAL';

interface RefundRow {
  mchid: string;
  out_refund_no: string;
  refund_id: string;
  out_trade_no: string;
  transaction_id: string;
  reason: string | null;
  notify_url: string | null;
  refund: string;
  total: string;
  currency: string;
  status: RefundStatus;
  settle_at: Date;
  success_time: Date | null;
  created_at: Date;
}

/**
 * How long a refund stays PROCESSING, in real time (× SANDBOX_TIME_SCALE). [unverified] WeChat gives
 * no figure: a refund to 零钱 usually lands within minutes, to a bank card in 1–3 working days. A few
 * seconds keeps the demo moving while still making the merchant handle PROCESSING (0.001 → 3 ms).
 */
export const REFUND_PROCESSING_MS = 3000;

/** out_refund_no: "商户系统内部的退款单号，商户系统内部唯一，只能是数字、大小写字母_-|*@", 1–64. */
const OUT_REFUND_NO_RE = /^[0-9A-Za-z_\-|*@]{1,64}$/;

async function selectRefund(db: Queryable, mchid: string, outRefundNo: string): Promise<RefundRow | undefined> {
  const rows = await db<RefundRow[]>`
    SELECT * FROM psp_sandbox.wechatpay_refunds WHERE mchid = ${mchid} AND out_refund_no = ${outRefundNo}`;
  return rows[0];
}

/**
 * The refund as it is now: a PROCESSING refund whose time has come is SUCCESS from here on, in
 * WeChat's table and the ledger alike (the notification's trigger may have done it already).
 */
async function currentRefund(tx: Tx, refund: RefundRow): Promise<RefundRow> {
  if (refund.status !== 'PROCESSING') return refund;
  const rows = await tx<RefundRow[]>`
    UPDATE psp_sandbox.wechatpay_refunds SET status = 'SUCCESS', success_time = settle_at
     WHERE mchid = ${refund.mchid} AND out_refund_no = ${refund.out_refund_no} AND status = 'PROCESSING'
       AND settle_at <= now()
    RETURNING *`;
  const settled = rows[0];
  if (!settled) return refund;
  await settleRefund(tx, GATEWAY, refund.mchid, refund.out_refund_no, 'succeeded');
  return settled;
}

/** The refund as 申请退款 and 查询单笔退款 answer it. No coupons in the sandbox: payer amounts = amounts. */
function refundView(refund: RefundRow): Record<string, unknown> {
  const total = Number(refund.total);
  const amount = Number(refund.refund);
  const view: Record<string, unknown> = {
    refund_id: refund.refund_id,
    out_refund_no: refund.out_refund_no,
    transaction_id: refund.transaction_id,
    out_trade_no: refund.out_trade_no,
    channel: 'ORIGINAL',
    user_received_account: '支付用户零钱',
  };
  if (refund.success_time) view.success_time = beijingRfc3339(refund.success_time);
  view.create_time = beijingRfc3339(refund.created_at);
  view.status = refund.status;
  view.funds_account = 'AVAILABLE';
  view.amount = {
    total,
    refund: amount,
    from: [],
    payer_total: total,
    payer_refund: amount,
    settlement_refund: amount,
    settlement_total: total,
    discount_refund: 0,
    currency: refund.currency,
    refund_fee: 0,
  };
  view.promotion_detail = [];
  return view;
}

/** The decrypted resource of a REFUND.* notification ("退款结果通知"). */
function refundResourceView(refund: RefundRow): Record<string, unknown> {
  const total = Number(refund.total);
  const amount = Number(refund.refund);
  const view: Record<string, unknown> = {
    mchid: refund.mchid,
    out_trade_no: refund.out_trade_no,
    transaction_id: refund.transaction_id,
    out_refund_no: refund.out_refund_no,
    refund_id: refund.refund_id,
    refund_status: refund.status,
  };
  if (refund.success_time) view.success_time = beijingRfc3339(refund.success_time);
  view.user_received_account = '支付用户零钱';
  view.amount = { total, refund: amount, payer_total: total, payer_refund: amount };
  return view;
}

interface RefundParams {
  transactionId: string | null;
  outTradeNo: string | null;
  outRefundNo: string;
  reason: string | null;
  notifyUrl: string | null;
  refund: number;
  total: number;
  currency: string;
}

function readAmount(amount: Body, field: 'refund' | 'total'): number | Answer {
  const value = amount[field];
  if (value === undefined || value === null) return paramError(`/amount/${field}`, '为必填项');
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_TOTAL) {
    return paramError(`/amount/${field}`, `必须是 1-${MAX_TOTAL} 之间的整数（单位：分）`);
  }
  return value;
}

function parseRefund(body: Body): RefundParams | Answer {
  const transactionId = readString(body, 'transaction_id', 32, false);
  if (isAnswer(transactionId)) return transactionId;
  const outTradeNo = readString(body, 'out_trade_no', 32, false);
  if (isAnswer(outTradeNo)) return outTradeNo;
  // "transaction_id 与 out_trade_no 二选一".
  if (transactionId === null && outTradeNo === null) return paramError('/transaction_id', '与 out_trade_no 须二选一');
  if (outTradeNo !== null && !OUT_TRADE_NO_RE.test(outTradeNo)) {
    return paramError('/out_trade_no', '要求6-32个字符内，只能是数字、大小写字母_-|*');
  }
  const outRefundNo = readString(body, 'out_refund_no', 64, true);
  if (isAnswer(outRefundNo)) return outRefundNo;
  if (!OUT_REFUND_NO_RE.test(outRefundNo)) return paramError('/out_refund_no', '要求1-64个字符内，只能是数字、大小写字母_-|*@');
  const reason = readString(body, 'reason', 80, false);
  if (isAnswer(reason)) return reason;
  const notifyUrl = readString(body, 'notify_url', 256, false);
  if (isAnswer(notifyUrl)) return notifyUrl;
  if (notifyUrl !== null) {
    let parsed: URL | null = null;
    try {
      parsed = new URL(notifyUrl);
    } catch {
      parsed = null;
    }
    if (!parsed || (parsed.protocol !== 'https:' && parsed.protocol !== 'http:'))
      return paramError('/notify_url', '必须是 http(s) 的绝对 URL');
    if (parsed.search !== '' || parsed.hash !== '') return paramError('/notify_url', '不能携带参数');
  }
  const amount = body.amount;
  if (typeof amount !== 'object' || amount === null || Array.isArray(amount)) return paramError('/amount', '为必填项');
  const refund = readAmount(amount as Body, 'refund');
  if (isAnswer(refund)) return refund;
  const total = readAmount(amount as Body, 'total');
  if (isAnswer(total)) return total;
  const currency = (amount as Body).currency;
  if (currency === undefined || currency === null) return paramError('/amount/currency', '为必填项');
  if (typeof currency !== 'string') return paramError('/amount/currency', '必须是字符串');
  if (currency !== 'CNY') return paramError('/amount/currency', '境内商户号仅支持人民币 CNY');
  // funds_account, goods_detail…: accepted and ignored.
  return { transactionId, outTradeNo, outRefundNo, reason, notifyUrl, refund, total, currency };
}

/**
 * 申请退款. The rules, in WeChat's order: the same out_refund_no is the same refund (answered as it is
 * now, never refunded twice; other amounts or another order under it are refused); the order must
 * exist and be paid; amount.total must be the order's; the refunds of one order may not exceed it.
 */
async function createRefund(ctx: Context, authMchid: string, rawBody: string): Promise<Answer> {
  let body: unknown;
  try {
    body = JSON.parse(rawBody);
  } catch {
    return errorAnswer(400, 'PARAM_ERROR', '请求体不是合法的 JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return errorAnswer(400, 'PARAM_ERROR', '请求体必须是 JSON 对象');
  const params = parseRefund(body as Body);
  if (isAnswer(params)) return params;
  const mchid = authMchid;
  // "订单号不存在：请检查订单号是否正确且是否已支付，未支付的订单不能发起退款" (404 RESOURCE_NOT_EXISTS):
  // WeChat does not tell an unknown order from an unpaid one here.
  const noSuchOrder = errorAnswer(404, 'RESOURCE_NOT_EXISTS', '订单不存在：请检查订单号是否正确且是否已支付，未支付的订单不能发起退款');

  // The lock is per out_trade_no; a refund by transaction_id finds its out_trade_no first (a paid
  // trade's transaction_id never changes, so reading it outside the lock is safe).
  let outTradeNo = params.outTradeNo;
  if (params.transactionId !== null) {
    const byId = await selectTrade(ctx.sql, mchid, { transactionId: params.transactionId });
    if (!byId) {
      // A repeat of a refund whose order is somehow unknown by this id still answers the refund.
      const existing = await selectRefund(ctx.sql, mchid, params.outRefundNo);
      if (!existing || existing.transaction_id !== params.transactionId) return noSuchOrder;
      outTradeNo = existing.out_trade_no;
    } else {
      if (outTradeNo !== null && outTradeNo !== byId.out_trade_no) {
        return errorAnswer(400, 'INVALID_REQUEST', 'transaction_id 与 out_trade_no 不是同一笔订单');
      }
      outTradeNo = byId.out_trade_no;
    }
  }
  if (outTradeNo === null) return noSuchOrder;
  const lockedOutTradeNo = outTradeNo;

  return ctx.sql.begin(async (tx): Promise<Answer> => {
    await lockTrade(tx, mchid, lockedOutTradeNo);
    const existing = await selectRefund(tx, mchid, params.outRefundNo);
    if (existing) {
      // [unverified] the v3 code for a reused out_refund_no with other terms: v2 answered
      // REFUND_FEE_MISMATCH ("订单金额或退款金额与之前请求不一致"); v3 folds business-rule refusals into
      // 400 INVALID_REQUEST.
      if (
        existing.out_trade_no !== lockedOutTradeNo ||
        Number(existing.refund) !== params.refund ||
        Number(existing.total) !== params.total
      ) {
        return errorAnswer(400, 'INVALID_REQUEST', '订单金额或退款金额与之前请求不一致，请核实后再试');
      }
      return { status: 200, body: refundView(await currentRefund(tx, existing)) };
    }
    const trade = await selectTrade(tx, mchid, { outTradeNo: lockedOutTradeNo });
    if (!trade || !isPaid(trade) || !trade.transaction_id) return noSuchOrder;
    // [unverified] wording; the documented rule is that amount.total is the original order's amount.
    if (BigInt(trade.total) !== BigInt(params.total)) return errorAnswer(400, 'INVALID_REQUEST', '订单金额与原订单金额不一致');
    if (trade.currency !== params.currency) return paramError('/amount/currency', '与原订单币种不一致');
    // Pending refunds count: two refunds of one order can never both pass (this runs under its lock).
    const refunded = await refundedMinor(tx, GATEWAY, mchid, trade.transaction_id);
    if (refunded + BigInt(params.refund) > BigInt(trade.total)) {
      return errorAnswer(400, 'INVALID_REQUEST', '申请退款金额超过订单可退金额');
    }

    const delaySeconds = (REFUND_PROCESSING_MS * ctx.timeScale) / 1000;
    const inserted = await tx<RefundRow[]>`
      INSERT INTO psp_sandbox.wechatpay_refunds
        (mchid, out_refund_no, refund_id, out_trade_no, transaction_id, reason, notify_url, refund, total, currency,
         status, settle_at)
      VALUES (${mchid}, ${params.outRefundNo}, ${newRefundId(new Date())}, ${trade.out_trade_no}, ${trade.transaction_id},
              ${params.reason}, ${params.notifyUrl}, ${String(params.refund)}, ${trade.total}, ${trade.currency},
              'PROCESSING', now() + make_interval(secs => ${delaySeconds}))
      RETURNING *`;
    const refund = inserted[0];
    if (!refund) throw new Error('INSERT … RETURNING returned no row');
    const recorded = await recordRefund(tx, {
      gateway: GATEWAY,
      merchantId: mchid,
      outTradeNo: trade.out_trade_no,
      gatewayTradeNo: trade.transaction_id,
      refundId: refund.out_refund_no,
      gatewayRefundId: refund.refund_id,
      amountMinor: BigInt(refund.refund),
      currency: refund.currency,
      status: 'pending',
    });
    if (!recorded.created) throw new Error(`ledger already holds refund ${refund.out_refund_no}`);
    // "转入退款": a query shows trade_state REFUND from the refund request on.
    await tx`
      UPDATE psp_sandbox.wechatpay_trades
         SET trade_state = 'REFUND', trade_state_desc = ${STATE_DESC.REFUND}, updated_at = now()
       WHERE mchid = ${mchid} AND out_trade_no = ${trade.out_trade_no} AND trade_state = 'SUCCESS'`;
    if (refund.notify_url !== null) {
      // REFUND.SUCCESS, due when the refund lands: its fields describe it as it will be then.
      const landed: RefundRow = { ...refund, status: 'SUCCESS', success_time: refund.settle_at };
      const id = randomUUID();
      await enqueueNotification(tx, {
        gateway: GATEWAY,
        merchantId: mchid,
        outTradeNo: refund.out_trade_no,
        notifyId: id,
        notifyUrl: refund.notify_url,
        fields: refundNotificationFields(landed, id, beijingRfc3339(refund.settle_at)),
      });
      await tx`UPDATE psp_sandbox.notifications SET next_attempt_at = ${refund.settle_at} WHERE notify_id = ${id}`;
    }
    return { status: 200, body: refundView(refund) };
  });
}

/** 查询单笔退款（通过商户退款单号）. */
async function queryRefund(ctx: Context, outRefundNo: string, authMchid: string): Promise<Answer> {
  if (!OUT_REFUND_NO_RE.test(outRefundNo)) {
    return paramError('/out_refund_no', '要求1-64个字符内，只能是数字、大小写字母_-|*@', 'uri_template');
  }
  return ctx.sql.begin(async (tx): Promise<Answer> => {
    const refund = await selectRefund(tx, authMchid, outRefundNo);
    if (!refund) return errorAnswer(404, 'RESOURCE_NOT_EXISTS', '退款单不存在');
    return { status: 200, body: refundView(await currentRefund(tx, refund)) };
  });
}

type Route =
  | { kind: 'create'; tradeType: TradeType }
  | { kind: 'query'; by: { outTradeNo: string } | { transactionId: string } }
  | { kind: 'close'; outTradeNo: string }
  | { kind: 'refund' }
  | { kind: 'refundQuery'; outRefundNo: string }
  | { kind: 'certificates' };

function decodeSegment(segment: string): string | null {
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}

/** Matches a /v3 path and method to one of the emulated APIs. */
function matchRoute(method: string, path: string): Route | { notFound: true } | { wrongMethod: string } {
  const create = /^\/v3\/pay\/transactions\/(native|jsapi)$/.exec(path);
  if (create) {
    if (method !== 'POST') return { wrongMethod: 'POST' };
    return { kind: 'create', tradeType: create[1] === 'native' ? 'NATIVE' : 'JSAPI' };
  }
  const close = /^\/v3\/pay\/transactions\/out-trade-no\/([^/]+)\/close$/.exec(path);
  if (close) {
    if (method !== 'POST') return { wrongMethod: 'POST' };
    const outTradeNo = decodeSegment(close[1] ?? '');
    return outTradeNo === null ? { notFound: true } : { kind: 'close', outTradeNo };
  }
  if (path === '/v3/certificates') {
    if (method !== 'GET') return { wrongMethod: 'GET' };
    return { kind: 'certificates' };
  }
  if (path === '/v3/refund/domestic/refunds') {
    if (method !== 'POST') return { wrongMethod: 'POST' };
    return { kind: 'refund' };
  }
  const refundQuery = /^\/v3\/refund\/domestic\/refunds\/([^/]+)$/.exec(path);
  if (refundQuery) {
    if (method !== 'GET') return { wrongMethod: 'GET' };
    const outRefundNo = decodeSegment(refundQuery[1] ?? '');
    return outRefundNo === null ? { notFound: true } : { kind: 'refundQuery', outRefundNo };
  }
  const query = /^\/v3\/pay\/transactions\/(out-trade-no|id)\/([^/]+)$/.exec(path);
  if (query) {
    if (method !== 'GET') return { wrongMethod: 'GET' };
    const value = decodeSegment(query[2] ?? '');
    if (value === null) return { notFound: true };
    return { kind: 'query', by: query[1] === 'id' ? { transactionId: value } : { outTradeNo: value } };
  }
  return { notFound: true };
}

/** The merchant's request authentication; a SandboxResponse is the (unsigned) refusal. */
function authenticate(ctx: Context, request: SandboxRequest): { mchid: string } | SandboxResponse {
  const header = request.headers.authorization;
  const auth = parseAuthorization(Array.isArray(header) ? header[0] : header);
  if (!auth) {
    return unsignedError(
      401,
      'SIGN_ERROR',
      `Authorization 缺失或格式错误，应为 WECHATPAY2-SHA256-RSA2048 mchid="…",nonce_str="…",timestamp="…",serial_no="…",signature="…"`,
    );
  }
  if (auth.mchid !== ctx.identity.mchid) return unsignedError(401, 'SIGN_ERROR', `商户号 ${auth.mchid} 不存在或未开通 API v3`);
  if (auth.serialNo !== ctx.identity.merchantSerialNo) {
    // WeChat's own wording for a serial that does not match the merchant's API certificate.
    return unsignedError(401, 'SIGN_ERROR', '商户证书序列号有误。请使用签名私钥匹配的证书序列号');
  }
  const message = requestMessage(
    request.method,
    `${request.url.pathname}${request.url.search}`,
    auth.timestamp,
    auth.nonceStr,
    request.body,
  );
  if (!verifyRequestSignature(message, auth.signature, ctx.identity.merchantPublicKeyPem)) {
    return unsignedError(401, 'SIGN_ERROR', `签名错误，验签串为: ${JSON.stringify(message)}`);
  }
  const skew = /^\d{1,12}$/.test(auth.timestamp) ? Math.abs(Date.now() / 1000 - Number(auth.timestamp)) : Infinity;
  if (skew > MAX_CLOCK_SKEW_SECONDS) {
    return unsignedError(401, 'SIGN_ERROR', `timestamp 与微信支付服务器时间相差超过 ${MAX_CLOCK_SKEW_SECONDS} 秒`);
  }
  return { mchid: auth.mchid };
}

async function handleApi(ctx: Context, request: SandboxRequest): Promise<SandboxResponse> {
  const route = matchRoute(request.method, request.url.pathname);
  if ('notFound' in route) return unsignedError(404, 'NOT_FOUND', `no WeChat Pay API at ${request.method} ${request.url.pathname}`);
  if ('wrongMethod' in route) {
    return unsignedError(
      400,
      'INVALID_REQUEST',
      `HTTP 请求不符合微信支付 APIv3 接口规则：${request.url.pathname} 只接受 ${route.wrongMethod}`,
    );
  }
  const auth = authenticate(ctx, request);
  if ('status' in auth) return auth;
  const signer = responseSigner(ctx, request);

  if (request.method === 'POST' && !(request.headers['content-type'] ?? '').toLowerCase().includes('application/json')) {
    return signedResponse(signer, errorAnswer(400, 'INVALID_REQUEST', 'Content-Type 须为 application/json'));
  }
  let answer: Answer;
  try {
    switch (route.kind) {
      case 'create':
        answer = await createTransaction(ctx, route.tradeType, auth.mchid, request.body);
        break;
      case 'query':
        answer = await queryTransaction(ctx, route.by, request.url, auth.mchid);
        break;
      case 'close':
        answer = await closeTransaction(ctx, route.outTradeNo, auth.mchid, request.body);
        break;
      case 'refund':
        answer = await createRefund(ctx, auth.mchid, request.body);
        break;
      case 'refundQuery':
        answer = await queryRefund(ctx, route.outRefundNo, auth.mchid);
        break;
      case 'certificates':
        answer = certificatesAnswer(ctx);
        break;
      default:
        return assertNever(route);
    }
  } catch (err) {
    // A failure mid-request rolled its transaction back: nothing happened, "请用相同参数重新调用".
    console.error('[psp-sandbox] wechatpay %s %s failed:', request.method, request.url.pathname, err);
    answer = errorAnswer(500, 'SYSTEM_ERROR', '系统异常，请用相同参数重新调用');
  }
  return signedResponse(signer, answer);
}

/**
 * Which key signs an answer. During the switch from platform certificate to WeChat Pay public key the
 * merchant chooses per request: "应答部分的灰度由商户控制，在请求头部 Wechatpay-Serial 填入公钥ID
 * 来指定应答时使用的验签方案，不指定则默认平台证书" (WeChat Pay's answers on its developer
 * community, 2025; [unverified] in the API reference itself). The sandbox's merchant is in that switch for good, so clients of either mode
 * (the adapter: public key; wechatpay-node-v3: certificates) can verify. Notifications, which the
 * platform controls, are all signed with the public key (the switch's last step).
 */
function responseSigner(ctx: Context, request: SandboxRequest): PlatformSigner {
  const header = request.headers['wechatpay-serial'];
  const serial = Array.isArray(header) ? header[0] : header;
  return serial === ctx.identity.platformSerialNo ? ctx.signer : ctx.certSigner;
}

/**
 * 下载平台证书 (GET /v3/certificates): each certificate AEAD_AES_256_GCM-encrypted with the APIv3 key,
 * associated_data "certificate", as WeChat serves them. A fresh nonce per answer: an AES-GCM nonce
 * must never repeat under one key.
 */
function certificatesAnswer(ctx: Context): Answer {
  const certificate = ctx.identity.platformCertificate;
  const nonce = randomAlnum(12);
  return {
    status: 200,
    body: {
      data: [
        {
          serial_no: certificate.serialNo,
          effective_time: beijingRfc3339(certificate.notBefore),
          expire_time: beijingRfc3339(certificate.notAfter),
          encrypt_certificate: {
            algorithm: 'AEAD_AES_256_GCM',
            nonce,
            associated_data: 'certificate',
            ciphertext: encryptResource(certificate.pem, ctx.identity.apiV3Key, nonce, 'certificate'),
          },
        },
      ],
    },
  };
}

function assertNever(value: never): never {
  throw new Error(`unhandled case: ${JSON.stringify(value)}`);
}

// ---------------------------------------------------------------------------------------------
// Sandbox tools (not WeChat's: JSON errors in the sandbox's own `{ error: { code, message } }`)

export class ToolError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The trade's TRANSACTION.SUCCESS notification (its refunds' REFUND.* notifications are others). */
async function findPaymentNotification(
  db: Queryable,
  mchid: string,
  outTradeNo: string,
): Promise<{ id: string; fields: Record<string, string> } | undefined> {
  const rows = await db<{ id: string; fields: Record<string, string> }[]>`
    SELECT id, fields FROM psp_sandbox.notifications
     WHERE gateway = ${GATEWAY} AND merchant_id = ${mchid} AND out_trade_no = ${outTradeNo}
       AND NOT (fields ? 'out_refund_no')
     ORDER BY id DESC LIMIT 1`;
  return rows[0];
}

/**
 * POST /sandbox/wechatpay/notify: sends `copies` deliveries of one paid trade's notification at once,
 * with the trade's scheduled notification's `id` (they are that notification again) and overrides
 * applied before encrypting and signing. The schedule is left alone; every delivery is in the ledger.
 */
async function sendToolNotifications(
  ctx: Context,
  request: { outTradeNo: string; copies: number; overrides: Record<string, string> },
): Promise<DeliveryResult[]> {
  const trade = await selectTrade(ctx.sql, ctx.identity.mchid, { outTradeNo: request.outTradeNo });
  if (!trade) throw new ToolError(404, 'TRADE_NOT_FOUND', `no WeChat Pay trade with out_trade_no ${request.outTradeNo}`);
  // REFUND ("转入退款") was paid too: its TRANSACTION.SUCCESS exists, as it was sent at payment.
  if (!isPaid(trade)) {
    throw new ToolError(
      409,
      'TRADE_NOT_PAID',
      `trade ${request.outTradeNo} is ${trade.trade_state}; only a paid trade has a TRANSACTION.SUCCESS notification`,
    );
  }
  const scheduled = await findPaymentNotification(ctx.sql, trade.mchid, trade.out_trade_no);
  const fields =
    scheduled?.fields.transaction !== undefined
      ? scheduled.fields
      : notificationFields(trade, randomUUID(), beijingRfc3339(trade.success_time ?? new Date()));
  const notifyUrl = trade.notify_url;
  return Promise.all(
    Array.from({ length: request.copies }, async () => {
      const startedAt = new Date();
      const delivery = buildWechatPayNotification(fields, ctx.keys, startedAt, request.overrides);
      const result = await postNotification(notifyUrl, delivery, ctx.deliveryTimeoutMs, startedAt, isWechatPayAck);
      await insertAttempt(ctx.sql, { id: scheduled?.id ?? null, gateway: GATEWAY, outTradeNo: trade.out_trade_no }, 'tool', result);
      return result;
    }),
  );
}

/** A trade the buyer cannot pay (closed, paid, unknown): buyer-pays answers 409 TRADE_NOT_PAYABLE. */
class TradeNotPayable extends Error {}

/**
 * POST /sandbox/wechatpay/buyer-pays (alias /scan): a test buyer scans an open trade's code now (the
 * real-world case of a Native order the buyer pays later, e.g. after the merchant's charge call gave
 * up waiting), exactly as on WeChat: a charge in the ledger, the trade SUCCESS (or PAYERROR, still
 * payable) and TRANSACTION.SUCCESS to the trade's notify_url. Only NOTPAY, USERPAYING and PAYERROR
 * trades take money: a CLOSED/REVOKED one cannot be paid any more, and a paid one only once.
 */
async function buyerPaysTool(
  ctx: Context,
  request: { outTradeNo: string; buyer: TestBuyerName },
): Promise<{ status: 'succeeded' | 'declined'; gatewayTradeNo: string | null }> {
  const mchid = ctx.identity.mchid;
  let charged = false;
  const paid = await ctx.sql.begin(async (tx) => {
    await lockTrade(tx, mchid, request.outTradeNo);
    const trade = await selectTrade(tx, mchid, { outTradeNo: request.outTradeNo });
    if (!trade) throw new TradeNotPayable(`no WeChat Pay trade with out_trade_no ${request.outTradeNo}`);
    if (trade.trade_state !== 'NOTPAY' && trade.trade_state !== 'PAYERROR' && trade.trade_state !== 'USERPAYING') {
      throw new TradeNotPayable(`trade ${request.outTradeNo} is ${trade.trade_state} (${trade.trade_state_desc})`);
    }
    const result = await payTrade(tx, ctx, trade, WECHATPAY_TEST_BUYERS[request.buyer]);
    charged = result.charged;
    return result.trade;
  });
  if (charged) ctx.wakeNotifier();
  return paid.trade_state === 'SUCCESS'
    ? { status: 'succeeded', gatewayTradeNo: paid.transaction_id }
    : { status: 'declined', gatewayTradeNo: null };
}

const notifyToolBody = z.object({
  outTradeNo: z.string().min(1).max(64),
  copies: z.number().int().min(1).max(100).default(1),
  overrides: z.record(z.string(), z.string()).default({}),
});

const SCAN_PATH = '/sandbox/wechatpay/scan';

interface CodeUrlRow {
  code_url: string;
  out_trade_no: string;
  expired: boolean;
}

function scanTradeView(trade: TradeRow): ScanTradeView {
  return {
    merchantName: `PayOnce 沙箱商户 (sandbox merchant ${trade.mchid})`,
    mchid: trade.mchid,
    description: trade.description,
    total: Number(trade.total),
    outTradeNo: trade.out_trade_no,
  };
}

/** What a scanned code leads to, read (and on POST, locked) in `db`; a trade when it can be paid. */
async function scannedTrade(
  ctx: Context,
  db: Queryable,
  codeUrl: string,
  lock?: Tx,
): Promise<{ page: ScanPage } | { trade: TradeRow; view: ScanTradeView }> {
  const codes = await db<CodeUrlRow[]>`
    SELECT code_url, out_trade_no, expires_at <= now() AS expired FROM psp_sandbox.wechatpay_code_urls
     WHERE code_url = ${codeUrl} AND mchid = ${ctx.identity.mchid}`;
  const code = codes[0];
  if (!code) return { page: { kind: 'refused', reason: 'unknown' } };
  if (lock) await lockTrade(lock, ctx.identity.mchid, code.out_trade_no);
  const trade = await selectTrade(db, ctx.identity.mchid, { outTradeNo: code.out_trade_no });
  if (!trade) return { page: { kind: 'refused', reason: 'unknown' } };
  const view = scanTradeView(trade);
  // A closed or paid order says so whatever the code's age: that is what the buyer needs to know.
  if (trade.trade_state === 'CLOSED' || trade.trade_state === 'REVOKED')
    return { page: { kind: 'refused', reason: 'closed', trade: view } };
  if (isPaid(trade)) return { page: { kind: 'refused', reason: 'paid', trade: view } };
  if (code.expired) return { page: { kind: 'refused', reason: 'expired', trade: view } };
  return { trade, view };
}

function htmlResponse(page: ScanPage): SandboxResponse {
  const { status, html } = renderScanPage(page);
  return { status, headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }, body: html };
}

/**
 * GET /sandbox/wechatpay/scan?code_url=… — the page WeChat shows after the buyer scans the QR code;
 * POST (a form: code_url, buyer) — the buyer confirms as one of the test buyers. Showing the page
 * changes nothing: a Native order has no USERPAYING (that is 付款码支付's password step), so a query
 * still says NOTPAY. A failed payment leaves the order payable (PAYERROR) and shows the form again.
 */
async function handleScanPage(ctx: Context, request: SandboxRequest): Promise<SandboxResponse> {
  if (request.method === 'GET') {
    const codeUrl = request.url.searchParams.get('code_url');
    if (!codeUrl) return htmlResponse({ kind: 'bad_request', message: '缺少 code_url 参数 (missing code_url)' });
    const found = await scannedTrade(ctx, ctx.sql, codeUrl);
    return htmlResponse('page' in found ? found.page : { kind: 'payable', trade: found.view, codeUrl });
  }
  if (request.method !== 'POST') return htmlResponse({ kind: 'bad_request', message: '只接受 GET 或 POST (use GET or POST)' });
  const form = new URLSearchParams(request.body);
  const codeUrl = form.get('code_url');
  const buyerName = form.get('buyer') ?? '';
  if (!codeUrl) return htmlResponse({ kind: 'bad_request', message: '缺少 code_url (missing code_url)' });
  if (!isTestBuyerName(buyerName))
    return htmlResponse({ kind: 'bad_request', message: `未知的测试买家 (unknown test buyer) "${buyerName}"` });
  let charged = false;
  const page = await ctx.sql.begin(async (tx): Promise<ScanPage> => {
    const found = await scannedTrade(ctx, tx, codeUrl, tx);
    if ('page' in found) return found.page;
    const buyer = WECHATPAY_TEST_BUYERS[buyerName];
    const result = await payTrade(tx, ctx, found.trade, buyer);
    charged = result.charged;
    if (result.charged && result.trade.transaction_id) {
      return { kind: 'paid', trade: found.view, transactionId: result.trade.transaction_id };
    }
    return { kind: 'payable', trade: found.view, codeUrl, failure: buyer.decline?.desc ?? result.trade.trade_state_desc };
  });
  if (charged) ctx.wakeNotifier();
  return htmlResponse(page);
}

const BUYER_PAYS_PATHS: ReadonlySet<string> = new Set(['/sandbox/wechatpay/buyer-pays', SCAN_PATH]);

function issueMessage(issues: readonly { path: readonly PropertyKey[]; message: string }[]): string {
  const issue = issues[0];
  return issue ? `${issue.path.map(String).join('.') || 'body'}: ${issue.message}` : 'invalid';
}

/** The uniform buyer tool every gateway of the sandbox offers: `{ code, message }` errors. */
async function handleBuyerPays(ctx: Context, request: SandboxRequest): Promise<SandboxResponse> {
  if (request.method === 'POST' && !(request.headers['content-type'] ?? '').toLowerCase().includes('application/json')) {
    return json(400, { code: 'BAD_REQUEST', message: 'send application/json' });
  }
  const read = readBuyerPays(request);
  if ('answer' in read) return read.answer;
  try {
    const result = await buyerPaysTool(ctx, read.input);
    return json(200, { gateway: GATEWAY, outTradeNo: read.input.outTradeNo, ...result });
  } catch (error) {
    if (error instanceof TradeNotPayable) return json(409, { code: 'TRADE_NOT_PAYABLE', message: error.message });
    throw error;
  }
}

async function handleTool(ctx: Context, request: SandboxRequest): Promise<SandboxResponse | undefined> {
  const path = request.url.pathname;
  // /scan is the buyer's page, except a JSON POST: the buyer-pays tool under its old name.
  if (
    path === SCAN_PATH &&
    !(request.method === 'POST' && (request.headers['content-type'] ?? '').toLowerCase().includes('application/json'))
  ) {
    return handleScanPage(ctx, request);
  }
  if (BUYER_PAYS_PATHS.has(path)) return handleBuyerPays(ctx, request);
  if (path !== '/sandbox/wechatpay/notify') return undefined;
  if (request.method !== 'POST') return json(405, { error: { code: 'METHOD_NOT_ALLOWED', message: 'use POST' } });
  if (!(request.headers['content-type'] ?? '').toLowerCase().includes('application/json')) {
    return json(415, { error: { code: 'UNSUPPORTED_MEDIA_TYPE', message: 'send application/json' } });
  }
  let body: unknown;
  try {
    body = JSON.parse(request.body);
  } catch {
    return json(400, { error: { code: 'INVALID_JSON', message: 'the body is not valid JSON' } });
  }
  try {
    const parsed = notifyToolBody.safeParse(body);
    if (!parsed.success) return json(400, { error: { code: 'INVALID_REQUEST', message: issueMessage(parsed.error.issues) } });
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
// The module

export const wechatpayModule: SandboxGatewayModule = {
  gateway: GATEWAY,
  schemaSql: SCHEMA_SQL,
  async setUp(tx, moduleContext) {
    const identity = await loadOrCreateIdentity(tx);
    const signer: PlatformSigner = { serialNo: identity.platformSerialNo, privateKeyPem: identity.platformPrivateKeyPem };
    const keys: NotificationKeys = { apiV3Key: identity.apiV3Key, signer };
    const ctx: Context = {
      sql: moduleContext.sql,
      identity,
      signer,
      certSigner: { serialNo: identity.platformCertificate.serialNo, privateKeyPem: identity.platformCertPrivateKeyPem },
      keys,
      wakeNotifier: moduleContext.wakeNotifier,
      deliveryTimeoutMs: moduleContext.deliveryTimeoutMs,
      timeScale: moduleContext.timeScale,
    };
    return {
      notifier: wechatpayNotifier(keys),
      // A failure before processing, as v3 documents it: HTTP 500 SYSTEM_ERROR ("系统异常，请用相同参数
      // 重新调用"), signed like every answer, so the merchant's client verifies it before it reads it.
      systemError: (request) =>
        signedResponse(responseSigner(ctx, request), errorAnswer(500, 'SYSTEM_ERROR', '系统异常，请用相同参数重新调用')),
      credentials: (baseUrl) => ({
        mchid: identity.mchid,
        appid: identity.appid,
        merchantSerialNo: identity.merchantSerialNo,
        merchantPrivateKey: identity.merchantPrivateKeyPem,
        apiV3Key: identity.apiV3Key,
        platformPublicKey: identity.platformPublicKeyPem,
        platformSerialNo: identity.platformSerialNo,
        // Platform-certificate mode: what GET /v3/certificates decrypts to, for clients that want it
        // without a call (the certificate is public; its key is not handed out).
        platformCertificateSerialNo: identity.platformCertificate.serialNo,
        platformCertificate: identity.platformCertificate.pem,
        // The API root: the adapter appends /v3/… exactly as to https://api.mch.weixin.qq.com.
        baseUrl,
        testBuyers: wechatpayTestBuyerAttach(),
        // The fees this merchant's bills show, for 对账 to check them against (statements.ts).
        feeContract: feeContract('wechatpay'),
      }),
      async handle(request) {
        const path = request.url.pathname;
        if (path.startsWith('/sandbox/wechatpay/')) return handleTool(ctx, request);
        if (isWechatpayBillPath(path)) {
          return wechatpayBill(
            {
              sql: ctx.sql,
              authenticate: (r) => authenticate(ctx, r),
              signed: (answer) => signedResponse(responseSigner(ctx, request), answer),
              linkSecret: identity.platformPrivateKeyPem,
            },
            request,
          );
        }
        if (path.startsWith('/v3/')) return handleApi(ctx, request);
        return undefined;
      },
    };
  },
};
