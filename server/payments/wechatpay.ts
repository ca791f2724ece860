/**
 * The WeChat Pay adapter: API v3 Native payment (`POST /v3/pay/transactions/native`), spoken with
 * node:crypto and fetch only, mapped onto PayOnce's closed set of outcomes (./gateway).
 *
 * What a charge is. Native pay creates an order and gets a code_url (the QR code); the buyer scans
 * and pays in WeChat, and the result is read by querying or from the notification.
 *  - Without a test buyer (the buyer's own step, `buyerSteps: ['qr']`): charge() creates the order
 *    and answers `awaiting_buyer` with the code_url as the QR code at once; the order completes by
 *    TRANSACTION.SUCCESS or a query. A retry before the order expires sends the same parameters and
 *    gets a new code_url for the same order (shared/gateways.md: same parameters before time_expire →
 *    a new prepay_id / code_url). "code_url有效期为2小时，过期后扫码不能再发起支付" (Native调起支付).
 *  - With a sandbox test buyer (carried in `attach`, who pays at once): charge() creates the order and
 *    queries it for up to `pollWindowMs` (2 s): SUCCESS → succeeded, PAYERROR/CLOSED → declined,
 *    still NOTPAY/USERPAYING → indeterminate (settled later by the notification or a query).
 *
 * Idempotency comes from the gateway: every attempt at paying an order sends the order's
 * out_trade_no. The same parameters again reopen the unpaid order; a paid order (or changed
 * parameters) answers 403 OUT_TRADE_NO_USED, which we settle with a query instead of trusting; a
 * closed order answers 400 ORDER_CLOSED ("当前订单已关闭，请重新下单"), a terminal decline: WeChat
 * never reopens a closed out_trade_no.
 *
 * Trust. Every answer we act on must carry a valid platform signature (Wechatpay-Signature over
 * "TS\nNONCE\nBODY\n", SHA256withRSA, serial = the configured platform key) with a fresh timestamp;
 * anything else is `indeterminate`, because its content cannot be believed either way. The exceptions
 * are 401, 429 and 5xx, which only ever lead to `retryable`/`unavailable`: WeChat does not sign a 401
 * (it could not authenticate us), and a proxy's 502 is not WeChat's to sign. Treating a forged one as
 * retryable is harmless, since a retry with the same out_trade_no is deduplicated by WeChat.
 *
 * Close and refund. close() queries first and closes only a NOTPAY/PAYERROR order (SUCCESS/REFUND →
 * already_paid, USERPAYING → indeterminate: the buyer is entering a password right now). refund()
 * sends PayOnce's refundId as out_refund_no, WeChat's idempotent refund id, and answers `pending`
 * while WeChat says PROCESSING; queryRefund() reads the refund back by that out_refund_no, and
 * REFUND.* notifications (original_type "refund") are verified into `{ kind: 'refund' }`.
 *
 * No WeChat type leaves this file.
 */
import { createDecipheriv, createSign, createVerify, randomBytes, type KeyObject } from 'node:crypto';
import type {
  ChargeOutcome,
  ChargeRequest,
  CloseOutcome,
  CloseRequest,
  NotificationReply,
  NotificationVerdict,
  PaymentGateway,
  QueryOutcome,
  RefundOutcome,
  RefundQuery,
  RefundQueryOutcome,
  RefundRequest,
  RefundStatus,
  TestBuyer,
  TradeStatus,
} from './gateway';
import { keyFromText } from './support';
import { DEFAULT_GATEWAY_TIMEOUT_MS, exchangeHttp, type TransportFailure, assertNever, stringField } from './transport';

export interface WechatPayGatewayConfig {
  /** 商户号. */
  mchid: string;
  /** The AppID bound to the mchid (公众号 / 小程序 / 移动应用). */
  appid: string;
  /** Serial number of the merchant API certificate whose key signs our requests. */
  merchantSerialNo: string;
  /** apiclient_key.pem: PEM (PKCS#8 or PKCS#1) or bare base64 DER. */
  merchantPrivateKey: string;
  /** The APIv3 key (32 characters) that notification resources are encrypted with. */
  apiV3Key: string;
  /** WeChat Pay's public key (pub_key.pem, SPKI PEM or bare base64) verifying answers and notifications. */
  platformPublicKey: string;
  /** Its id as WeChat sends it in Wechatpay-Serial (PUB_KEY_ID_… or the platform certificate serial). */
  platformSerialNo: string;
  /** The API root, https://api.mch.weixin.qq.com or the sandbox's; /v3/… is appended. */
  baseUrl: string;
  /**
   * The `attach` each sandbox test buyer is selected by (`sandbox_buyer=…`). Against the real gateway
   * use empty strings: no attach is sent and the real buyer pays by scanning.
   */
  testBuyers: Record<TestBuyer, string>;
  /** Per-request timeout; default 5000 ms. */
  timeoutMs?: number;
  /** How long charge() keeps querying an order nobody has paid yet; default 2000 ms. */
  pollWindowMs?: number;
}

const AUTH_SCHEMA = 'WECHATPAY2-SHA256-RSA2048';
/** WeChat's window for request timestamps; we hold its answers and notifications to the same. */
const MAX_CLOCK_SKEW_SECONDS = 300;
/** WeChat's description is string(127): "不能超过127个字符". */
const MAX_DESCRIPTION_CHARS = 127;
const USER_AGENT = 'PayOnce/0.1 (+node-fetch; WeChat Pay API v3)';

// ---------------------------------------------------------------------------------------------
// Keys

interface Keys {
  merchantPrivateKey: KeyObject;
  platformPublicKey: KeyObject;
  apiV3Key: Buffer;
}

function loadKeys(config: WechatPayGatewayConfig): Keys {
  let merchantPrivateKey: KeyObject;
  let platformPublicKey: KeyObject;
  try {
    merchantPrivateKey = keyFromText(config.merchantPrivateKey, 'private');
  } catch (err) {
    throw new Error(`WeChat Pay merchantPrivateKey is not a valid RSA private key (${(err as Error).message})`);
  }
  try {
    platformPublicKey = keyFromText(config.platformPublicKey, 'public');
  } catch (err) {
    throw new Error(`WeChat Pay platformPublicKey is not a valid RSA public key (${(err as Error).message})`);
  }
  const apiV3Key = Buffer.from(config.apiV3Key, 'utf8');
  if (apiV3Key.length !== 32) throw new Error(`WeChat Pay apiV3Key must be 32 bytes, got ${apiV3Key.length}`);
  for (const field of ['mchid', 'appid', 'merchantSerialNo', 'platformSerialNo', 'baseUrl'] as const) {
    if (!config[field]) throw new Error(`WeChat Pay ${field} is empty`);
  }
  return { merchantPrivateKey, platformPublicKey, apiV3Key };
}

const NONCE_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

function nonce(length = 32): string {
  const bytes = randomBytes(length);
  let out = '';
  for (const byte of bytes) out += NONCE_ALPHABET[byte % NONCE_ALPHABET.length];
  return out;
}

/** Verifies Wechatpay-* headers over `body`; null when they hold, otherwise why not. */
function checkPlatformSignature(
  headers: Headers,
  body: string,
  platformSerialNo: string,
  platformPublicKey: KeyObject,
  nowMs: number,
): string | null {
  const timestamp = headers.get('wechatpay-timestamp');
  const nonceValue = headers.get('wechatpay-nonce');
  const signature = headers.get('wechatpay-signature');
  const serial = headers.get('wechatpay-serial');
  if (!timestamp || !nonceValue || !signature || !serial) return 'missing Wechatpay-* signature headers';
  const signatureType = headers.get('wechatpay-signature-type');
  if (signatureType !== null && signatureType !== AUTH_SCHEMA) return `unsupported signature type ${signatureType}`;
  // A serial we do not hold means a key we cannot verify with (e.g. WeChat rotated it): not provable.
  if (serial !== platformSerialNo) return `unknown platform key ${serial}`;
  let verified = false;
  try {
    // WeChat's signature-probe traffic ("WECHATPAY/SIGNTEST/…") fails here like any forgery.
    verified = createVerify('RSA-SHA256')
      .update(`${timestamp}\n${nonceValue}\n${body}\n`, 'utf8')
      .verify(platformPublicKey, signature, 'base64');
  } catch {
    verified = false;
  }
  if (!verified) return 'invalid signature';
  if (!/^\d{1,12}$/.test(timestamp) || Math.abs(nowMs / 1000 - Number(timestamp)) > MAX_CLOCK_SKEW_SECONDS) {
    return `timestamp ${timestamp} is more than ${MAX_CLOCK_SKEW_SECONDS} s from now`;
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// One call to the API

type Json = Record<string, unknown>;

/** What came back from one request: a provably WeChat answer, or why there is none. */
type Exchange =
  | { kind: 'answered'; status: number; body: Json | null }
  /** 401, 429 or 5xx, signed or not: WeChat (or something before it) refused to process it. */
  | { kind: 'refused'; status: number; code: string; message: string }
  | TransportFailure;

function parseJson(text: string): Json | null | undefined {
  if (text === '') return null;
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// The transaction as WeChat describes it

type TradeState = 'SUCCESS' | 'REFUND' | 'NOTPAY' | 'CLOSED' | 'REVOKED' | 'USERPAYING' | 'PAYERROR';

const TRADE_STATES: ReadonlySet<string> = new Set<TradeState>([
  'SUCCESS',
  'REFUND',
  'NOTPAY',
  'CLOSED',
  'REVOKED',
  'USERPAYING',
  'PAYERROR',
]);

interface Transaction {
  mchid: string;
  outTradeNo: string;
  state: TradeState;
  stateDesc: string;
  transactionId: string | undefined;
  total: number;
  currency: string;
}

/** Reads a query answer or a decrypted notification resource; a string says what is wrong. */
function readTransaction(body: Json | null): Transaction | string {
  const state = stringField(body, 'trade_state');
  if (!state || !TRADE_STATES.has(state)) return `unknown trade_state ${state ?? '(none)'}`;
  const amount = body?.amount;
  if (typeof amount !== 'object' || amount === null) return 'missing amount';
  const total = (amount as Json).total;
  if (typeof total !== 'number' || !Number.isSafeInteger(total) || total < 0) return `invalid amount.total ${String(total)}`;
  const currency = (amount as Json).currency;
  if (typeof currency !== 'string' || currency === '') return 'missing amount.currency';
  const mchid = stringField(body, 'mchid');
  if (!mchid) return 'missing mchid';
  const outTradeNo = stringField(body, 'out_trade_no');
  if (!outTradeNo) return 'missing out_trade_no';
  const transactionId = stringField(body, 'transaction_id');
  // SUCCESS / REFUND mean money moved: WeChat's transaction id is then the proof we keep.
  if ((state === 'SUCCESS' || state === 'REFUND') && !transactionId) return `${state} without transaction_id`;
  return {
    mchid,
    outTradeNo,
    state: state as TradeState,
    stateDesc: stringField(body, 'trade_state_desc') ?? state,
    transactionId,
    total,
    currency,
  };
}

/** What one query by out_trade_no found, before PayOnce's TradeStatus flattens PAYERROR away. */
type Lookup = { kind: 'found'; transaction: Transaction } | { kind: 'not_found' } | { kind: 'unavailable'; code: string; message: string };

// ---------------------------------------------------------------------------------------------
// Create answers

/** The create errors WeChat documents, by what they mean for this attempt. */
type CreateErrorCode =
  // The request itself is wrong; sending it again cannot help.
  | 'PARAM_ERROR'
  | 'INVALID_REQUEST'
  | 'ORDER_CLOSED'
  | 'RULE_LIMIT'
  | 'TRADE_ERROR'
  | 'NOT_ENOUGH'
  | 'ACCOUNT_ERROR'
  // Our configuration is wrong: nothing was processed, and it is not the buyer's fault to store.
  | 'APPID_MCHID_NOT_MATCH'
  | 'MCH_NOT_EXISTS'
  | 'NO_AUTH'
  // The out_trade_no exists with other parameters, or is paid / closed.
  | 'OUT_TRADE_NO_USED';

type CreateAnswer =
  | { kind: 'created'; codeUrl: string }
  | { kind: 'out_trade_no_used'; message: string }
  | { kind: 'declined'; code: string; message: string }
  | { kind: 'refused'; code: string; message: string }
  | { kind: 'in_doubt'; code: string; message: string };

function classifyCreateError(code: CreateErrorCode, message: string): CreateAnswer {
  switch (code) {
    case 'PARAM_ERROR':
    case 'INVALID_REQUEST':
    case 'ORDER_CLOSED':
    case 'RULE_LIMIT':
    case 'TRADE_ERROR':
    case 'NOT_ENOUGH':
    case 'ACCOUNT_ERROR':
      return { kind: 'declined', code, message };
    case 'APPID_MCHID_NOT_MATCH':
    case 'MCH_NOT_EXISTS':
    case 'NO_AUTH':
      return { kind: 'refused', code, message };
    case 'OUT_TRADE_NO_USED':
      return { kind: 'out_trade_no_used', message };
    default:
      return assertNever(code);
  }
}

const CREATE_ERROR_CODES: ReadonlySet<string> = new Set<CreateErrorCode>([
  'PARAM_ERROR',
  'INVALID_REQUEST',
  'ORDER_CLOSED',
  'RULE_LIMIT',
  'TRADE_ERROR',
  'NOT_ENOUGH',
  'ACCOUNT_ERROR',
  'APPID_MCHID_NOT_MATCH',
  'MCH_NOT_EXISTS',
  'NO_AUTH',
  'OUT_TRADE_NO_USED',
]);

function classifyCreate(status: number, body: Json | null): CreateAnswer {
  if (status === 200) {
    const codeUrl = stringField(body, 'code_url');
    return codeUrl
      ? { kind: 'created', codeUrl }
      : { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: 'create answered 200 without code_url' };
  }
  const code = stringField(body, 'code');
  const message = stringField(body, 'message') ?? `HTTP ${status}`;
  if (status >= 400 && status < 500 && code && CREATE_ERROR_CODES.has(code)) {
    return classifyCreateError(code as CreateErrorCode, message);
  }
  // Another 2xx/3xx/4xx or an error code we do not know: not proof that nothing happened.
  return { kind: 'in_doubt', code: code ?? `HTTP_${status}`, message };
}

// ---------------------------------------------------------------------------------------------
// Close answers

/**
 * What the close API's refusals mean. ORDERPAID ("订单已支付，不能发起关单，请当作已支付的正常交易")
 * is the documented one; ORDER_PAID and TRADE_ERROR are read the same way, since the v3 spelling is
 * unverified: all three are settled by querying, never trusted blindly. ORDER_NOT_EXIST and
 * ORDER_CLOSED / ORDERCLOSED mean nothing can be paid under this out_trade_no.
 */
type CloseErrorCode = 'ORDERPAID' | 'ORDER_PAID' | 'TRADE_ERROR' | 'ORDER_NOT_EXIST' | 'ORDER_CLOSED' | 'ORDERCLOSED';

const CLOSE_ERROR_CODES: ReadonlySet<string> = new Set<CloseErrorCode>([
  'ORDERPAID',
  'ORDER_PAID',
  'TRADE_ERROR',
  'ORDER_NOT_EXIST',
  'ORDER_CLOSED',
  'ORDERCLOSED',
]);

// ---------------------------------------------------------------------------------------------
// Refunds as WeChat describes them

type WechatRefundStatus = 'SUCCESS' | 'CLOSED' | 'PROCESSING' | 'ABNORMAL';

const REFUND_STATUSES: ReadonlySet<string> = new Set<WechatRefundStatus>(['SUCCESS', 'CLOSED', 'PROCESSING', 'ABNORMAL']);

interface WechatRefund {
  refundId: string;
  outRefundNo: string;
  outTradeNo: string;
  transactionId: string;
  status: WechatRefundStatus;
  refund: number;
  total: number;
}

function readInt(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

/**
 * Reads a refund: the answer of 申请退款 / 查询单笔退款 (`status`) or a decrypted REFUND.* resource
 * (`refund_status`). A string says what is wrong.
 */
function readRefund(body: Json | null, statusField: 'status' | 'refund_status'): WechatRefund | string {
  const status = stringField(body, statusField);
  if (!status || !REFUND_STATUSES.has(status)) return `unknown ${statusField} ${status ?? '(none)'}`;
  const refundId = stringField(body, 'refund_id');
  if (!refundId) return 'missing refund_id';
  const outRefundNo = stringField(body, 'out_refund_no');
  if (!outRefundNo) return 'missing out_refund_no';
  const outTradeNo = stringField(body, 'out_trade_no');
  if (!outTradeNo) return 'missing out_trade_no';
  const transactionId = stringField(body, 'transaction_id');
  if (!transactionId) return 'missing transaction_id';
  const amount = body?.amount;
  if (typeof amount !== 'object' || amount === null) return 'missing amount';
  const refund = readInt((amount as Json).refund);
  const total = readInt((amount as Json).total);
  if (refund === undefined || total === undefined) return 'invalid amount.refund or amount.total';
  return { refundId, outRefundNo, outTradeNo, transactionId, status: status as WechatRefundStatus, refund, total };
}

/** The refund errors WeChat documents for 申请退款, by what they mean for this refund id. */
type RefundErrorCode =
  // Refused for good: the request breaks a business rule (exceeds the refundable amount, total is
  // not the order's, the same out_refund_no with other terms) or is malformed.
  | 'INVALID_REQUEST'
  | 'PARAM_ERROR'
  // "订单号不存在": unknown or unpaid order.
  | 'RESOURCE_NOT_EXISTS'
  // The merchant's balance cannot cover it, the buyer's account cannot take it, or we may not refund:
  // nothing was refunded, and a person has to act before this refund id can go through.
  | 'NOT_ENOUGH'
  | 'USER_ACCOUNT_ABNORMAL'
  | 'NO_AUTH'
  | 'MCH_NOT_EXISTS';

const REFUND_ERROR_CODES: ReadonlySet<string> = new Set<RefundErrorCode>([
  'INVALID_REQUEST',
  'PARAM_ERROR',
  'RESOURCE_NOT_EXISTS',
  'NOT_ENOUGH',
  'USER_ACCOUNT_ABNORMAL',
  'NO_AUTH',
  'MCH_NOT_EXISTS',
]);

/** WeChat's reason is string(80). */
const MAX_REFUND_REASON_CHARS = 80;
/** PayOnce's refund ids: [A-Za-z0-9], ≤ 32 (gateway.ts), well inside out_refund_no's 1–64 of [0-9A-Za-z_-|*@]. */
const REFUND_ID_RE = /^[A-Za-z0-9]{1,32}$/;

// ---------------------------------------------------------------------------------------------
// The gateway

export function createWechatPayGateway(config: WechatPayGatewayConfig): PaymentGateway {
  const keys = loadKeys(config);
  const baseUrl = config.baseUrl.replace(/\/+$/, '');
  const timeoutMs = config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS;
  const pollWindowMs = config.pollWindowMs ?? 2000;

  function authorization(method: string, url: URL, body: string): string {
    const timestamp = String(Math.floor(Date.now() / 1000));
    const nonceStr = nonce();
    // The path exactly as sent, with its query string: that is what WeChat verifies.
    const message = `${method}\n${url.pathname}${url.search}\n${timestamp}\n${nonceStr}\n${body}\n`;
    const signature = createSign('RSA-SHA256').update(message, 'utf8').sign(keys.merchantPrivateKey, 'base64');
    return `${AUTH_SCHEMA} mchid="${config.mchid}",nonce_str="${nonceStr}",timestamp="${timestamp}",serial_no="${config.merchantSerialNo}",signature="${signature}"`;
  }

  async function call(method: 'GET' | 'POST', path: string, payload?: Json): Promise<Exchange> {
    const url = new URL(`${baseUrl}${path}`);
    const body = payload === undefined ? '' : JSON.stringify(payload);
    const response = await exchangeHttp(
      url,
      {
        method,
        headers: {
          authorization: authorization(method, url, body),
          accept: 'application/json',
          'user-agent': USER_AGENT,
          // Names the key we verify answers with. While a merchant switches from platform certificate
          // to WeChat Pay public key, WeChat signs an answer with the public key only when the request
          // names its PUB_KEY_ID_… here ("不指定则默认平台证书"); a certificate serial keeps the
          // certificate. Either way, the answer is signed by the key we hold.
          'wechatpay-serial': config.platformSerialNo,
          ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
        },
        ...(payload === undefined ? {} : { body }),
        redirect: 'manual',
      },
      timeoutMs,
    );
    if (response.kind !== 'received') return response;
    const { status, text } = response;
    const parsed = parseJson(text);
    if (status === 401 || status === 429 || status >= 500) {
      return {
        kind: 'refused',
        status,
        code: stringField(parsed ?? null, 'code') ?? `HTTP_${status}`,
        message: stringField(parsed ?? null, 'message') ?? `HTTP ${status}`,
      };
    }
    const problem = checkPlatformSignature(response.headers, text, config.platformSerialNo, keys.platformPublicKey, Date.now());
    if (problem) return { kind: 'in_doubt', code: 'INVALID_RESPONSE_SIGNATURE', message: `HTTP ${status}: ${problem}` };
    if (parsed === undefined) return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: `HTTP ${status}: body is not a JSON object` };
    return { kind: 'answered', status, body: parsed };
  }

  async function lookup(outTradeNo: string): Promise<Lookup> {
    const exchange = await call(
      'GET',
      `/v3/pay/transactions/out-trade-no/${encodeURIComponent(outTradeNo)}?mchid=${encodeURIComponent(config.mchid)}`,
    );
    switch (exchange.kind) {
      case 'not_sent':
      case 'in_doubt':
      case 'refused':
        return { kind: 'unavailable', code: exchange.code, message: exchange.message };
      case 'answered':
        break;
      default:
        return assertNever(exchange);
    }
    const { status, body } = exchange;
    if (status === 404 && stringField(body, 'code') === 'ORDER_NOT_EXIST') return { kind: 'not_found' };
    if (status !== 200) {
      return {
        kind: 'unavailable',
        code: stringField(body, 'code') ?? `HTTP_${status}`,
        message: stringField(body, 'message') ?? `HTTP ${status}`,
      };
    }
    const transaction = readTransaction(body);
    if (typeof transaction === 'string') return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: transaction };
    // An answer about another order or merchant is not an answer to our question.
    if (transaction.outTradeNo !== outTradeNo || transaction.mchid !== config.mchid) {
      return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'query answered for another order' };
    }
    return { kind: 'found', transaction };
  }

  async function query(outTradeNo: string): Promise<QueryOutcome> {
    const found = await lookup(outTradeNo);
    switch (found.kind) {
      case 'unavailable':
        return { kind: 'unavailable', code: found.code, message: found.message };
      case 'not_found':
        return { kind: 'answered', trade: { kind: 'not_found' } };
      case 'found':
        return { kind: 'answered', trade: tradeStatus(found.transaction) };
      default:
        return assertNever(found);
    }
  }

  function tradeStatus(transaction: Transaction): TradeStatus {
    switch (transaction.state) {
      // PAYERROR: the last payment failed but the order stays payable (another buyer may pay it).
      case 'NOTPAY':
      case 'USERPAYING':
      case 'PAYERROR':
        return { kind: 'pending' };
      // REFUND ("转入退款") means it was paid; refunds are a separate flow and never un-pay an order.
      case 'SUCCESS':
      case 'REFUND':
        return {
          kind: 'succeeded',
          gatewayTradeNo: transaction.transactionId ?? '',
          amountMinor: transaction.total,
          currency: transaction.currency,
        };
      case 'CLOSED':
      case 'REVOKED':
        return { kind: 'closed' };
      default:
        return assertNever(transaction.state);
    }
  }

  /** A paid transaction is this charge's success only for exactly the amount and currency asked. */
  function paidOutcome(transaction: Transaction, request: ChargeRequest): ChargeOutcome {
    if (transaction.total !== request.amountMinor || transaction.currency !== request.currency) {
      return {
        kind: 'indeterminate',
        code: 'AMOUNT_MISMATCH',
        message: `order paid ${transaction.total} ${transaction.currency}, asked ${request.amountMinor} ${request.currency}`,
      };
    }
    return {
      kind: 'succeeded',
      gatewayTradeNo: transaction.transactionId ?? '',
      amountMinor: transaction.total,
      currency: transaction.currency,
    };
  }

  /** Queries the order just created until someone has paid or failed to, for up to pollWindowMs. */
  async function awaitPayment(request: ChargeRequest): Promise<ChargeOutcome> {
    const deadline = Date.now() + pollWindowMs;
    let last: { code: string; message: string } = { code: 'NOTPAY', message: 'not paid yet' };
    for (let round = 0; ; round += 1) {
      const found = await lookup(request.outTradeNo);
      switch (found.kind) {
        case 'found': {
          const { transaction } = found;
          switch (transaction.state) {
            case 'SUCCESS':
            case 'REFUND':
              return paidOutcome(transaction, request);
            case 'PAYERROR':
              return { kind: 'declined', code: 'PAYERROR', message: transaction.stateDesc };
            case 'CLOSED':
            case 'REVOKED':
              return { kind: 'declined', code: transaction.state, message: transaction.stateDesc };
            case 'NOTPAY':
            case 'USERPAYING':
              last = { code: transaction.state, message: transaction.stateDesc };
              break;
            default:
              return assertNever(transaction.state);
          }
          break;
        }
        case 'not_found':
          // We were just told it was created; an unknown order here is lag or a different gateway.
          last = { code: 'ORDER_NOT_EXIST', message: 'created order not found by query' };
          break;
        case 'unavailable':
          last = { code: found.code, message: found.message };
          break;
        default:
          return assertNever(found);
      }
      // Back off 100, 200, 400, 500, 500… ms; the last query is made at the end of the window.
      const remaining = deadline - Date.now();
      if (remaining <= 0) break;
      await new Promise((resolve) => setTimeout(resolve, Math.min(100 * 2 ** round, 500, remaining)));
    }
    // Nobody has paid (yet): the notification or a later query settles it.
    return { kind: 'indeterminate', code: last.code, message: last.message };
  }

  /** 403 OUT_TRADE_NO_USED: paid already (a retry whose answer was lost), or not this order's terms. */
  async function settleUsedOutTradeNo(request: ChargeRequest, message: string): Promise<ChargeOutcome> {
    const found = await lookup(request.outTradeNo);
    switch (found.kind) {
      case 'unavailable':
        return { kind: 'indeterminate', code: 'OUT_TRADE_NO_USED', message: `${message}; query failed: ${found.message}` };
      case 'not_found':
        return { kind: 'indeterminate', code: 'OUT_TRADE_NO_USED', message: `${message}; query found no order` };
      case 'found':
        break;
      default:
        return assertNever(found);
    }
    const { transaction } = found;
    switch (transaction.state) {
      case 'SUCCESS':
      case 'REFUND':
        return paidOutcome(transaction, request);
      case 'USERPAYING':
        // Someone is paying the existing order right now: its outcome is not known yet.
        return { kind: 'indeterminate', code: 'OUT_TRADE_NO_USED', message: `${message}; order is USERPAYING` };
      case 'NOTPAY':
      case 'PAYERROR':
      case 'CLOSED':
      case 'REVOKED':
        return { kind: 'declined', code: 'OUT_TRADE_NO_USED', message: `${message} (order is ${transaction.state})` };
      default:
        return assertNever(transaction.state);
    }
  }

  async function charge(request: ChargeRequest): Promise<ChargeOutcome> {
    // Checked before any call: these can only be programming errors, and WeChat would refuse them.
    if (!Number.isSafeInteger(request.amountMinor) || request.amountMinor < 1) {
      return { kind: 'declined', code: 'INVALID_AMOUNT', message: 'amount must be a positive integer in minor units' };
    }
    if (!/^[A-Z]{3}$/.test(request.currency)) {
      return { kind: 'declined', code: 'INVALID_CURRENCY', message: `invalid currency ${request.currency}` };
    }
    // The buyer's own step: Native pay's QR code is the only one this adapter offers.
    if (!request.buyer && request.buyerStep !== undefined && request.buyerStep !== 'qr') {
      return {
        kind: 'declined',
        code: 'UNSUPPORTED_BUYER_STEP',
        message: `WeChat Pay Native offers the qr step, not ${request.buyerStep}`,
      };
    }
    // No test buyer, no attach: the real buyer scans the code_url.
    const attach = request.buyer ? config.testBuyers[request.buyer] : '';
    // `request.attempt` is not sent: WeChat deduplicates on out_trade_no alone, and a new attempt after
    // a decline is meant to reopen the same order. The description is cut deterministically, so every
    // attempt sends identical parameters.
    const payload: Json = {
      appid: config.appid,
      mchid: config.mchid,
      description: [...request.subject].slice(0, MAX_DESCRIPTION_CHARS).join(''),
      out_trade_no: request.outTradeNo,
      notify_url: request.notifyUrl,
      amount: { total: request.amountMinor, currency: request.currency },
      ...(attach ? { attach } : {}),
    };
    const exchange = await call('POST', '/v3/pay/transactions/native', payload);
    let answer: CreateAnswer;
    switch (exchange.kind) {
      case 'not_sent':
        return { kind: 'retryable', code: exchange.code, message: exchange.message };
      case 'refused':
        // 401 SIGN_ERROR, 429 FREQUENCY_LIMITED, 5xx SYSTEM_ERROR ("请用相同参数重新调用"): not
        // processed; and should a 5xx hide a processed create, the retry meets OUT_TRADE_NO_USED and
        // queries, so retrying the same attempt is safe.
        return { kind: 'retryable', code: exchange.code, message: exchange.message };
      case 'in_doubt':
        return { kind: 'indeterminate', code: exchange.code, message: exchange.message };
      case 'answered':
        answer = classifyCreate(exchange.status, exchange.body);
        break;
      default:
        return assertNever(exchange);
    }
    switch (answer.kind) {
      case 'created':
        // The code_url is not a secret: whoever scans it pays this merchant for this order, which is
        // what the page is for; it stays usable for 2 h while the order is open, so storing and
        // replaying it with the 202 is safe (a replay after that shows an expired code: pay again).
        return request.buyer ? awaitPayment(request) : { kind: 'awaiting_buyer', action: { kind: 'qr', qrCode: answer.codeUrl } };
      case 'out_trade_no_used':
        return settleUsedOutTradeNo(request, answer.message);
      case 'declined':
        // ORDER_CLOSED included: the order was closed (the checkout moved elsewhere, or it expired) and
        // this gateway will never take money under this out_trade_no again.
        return { kind: 'declined', code: answer.code, message: answer.message };
      case 'refused':
        return { kind: 'retryable', code: answer.code, message: answer.message };
      case 'in_doubt':
        return { kind: 'indeterminate', code: answer.code, message: answer.message };
      default:
        return assertNever(answer);
    }
  }

  /** The charges a paid transaction stands for, as close reports them. */
  function alreadyPaid(transaction: Transaction): CloseOutcome {
    return {
      kind: 'already_paid',
      charges: [{ gatewayTradeNo: transaction.transactionId ?? '', amountMinor: transaction.total, currency: transaction.currency }],
    };
  }

  /**
   * Close by querying first: the close API cannot tell "paid" from other refusals reliably, and
   * must not be sent while the buyer is entering a password (USERPAYING: the payment's outcome is
   * seconds away, and closing under it is exactly the race this is meant to avoid).
   */
  async function close(request: CloseRequest): Promise<CloseOutcome> {
    const found = await lookup(request.outTradeNo);
    switch (found.kind) {
      case 'unavailable':
        return { kind: 'indeterminate', code: found.code, message: `query before close failed: ${found.message}` };
      case 'not_found':
        // [unverified] WeChat does not say whether a later create under this out_trade_no would be
        // refused; the close API itself answers ORDER_NOT_EXIST, so there is nothing to close here.
        return { kind: 'closed' };
      case 'found':
        break;
      default:
        return assertNever(found);
    }
    const { transaction } = found;
    switch (transaction.state) {
      case 'SUCCESS':
      case 'REFUND':
        return alreadyPaid(transaction);
      case 'USERPAYING':
        return { kind: 'indeterminate', code: 'USERPAYING', message: `${transaction.stateDesc}: the buyer is paying now` };
      case 'CLOSED':
      case 'REVOKED':
        return { kind: 'closed' };
      case 'NOTPAY':
      case 'PAYERROR':
        return closeOpenTrade(request.outTradeNo);
      default:
        return assertNever(transaction.state);
    }
  }

  async function closeOpenTrade(outTradeNo: string): Promise<CloseOutcome> {
    const exchange = await call('POST', `/v3/pay/transactions/out-trade-no/${encodeURIComponent(outTradeNo)}/close`, {
      mchid: config.mchid,
    });
    switch (exchange.kind) {
      // Not closed (or not known to be): the caller holds the next attempt until a later close.
      case 'not_sent':
      case 'refused':
      case 'in_doubt':
        return { kind: 'indeterminate', code: exchange.code, message: exchange.message };
      case 'answered':
        break;
      default:
        return assertNever(exchange);
    }
    const { status, body } = exchange;
    if (status === 204) return { kind: 'closed' };
    const code = stringField(body, 'code');
    const message = stringField(body, 'message') ?? `HTTP ${status}`;
    if (status < 400 || status >= 500 || !code || !CLOSE_ERROR_CODES.has(code)) {
      return { kind: 'indeterminate', code: code ?? `HTTP_${status}`, message };
    }
    const closeError = code as CloseErrorCode;
    switch (closeError) {
      case 'ORDER_NOT_EXIST':
      case 'ORDER_CLOSED':
      case 'ORDERCLOSED':
        return { kind: 'closed' };
      case 'ORDERPAID':
      case 'ORDER_PAID':
      case 'TRADE_ERROR':
        // Paid between our query and the close (or refused for a reason the query will show).
        return settleRefusedClose(outTradeNo, closeError, message);
      default:
        return assertNever(closeError);
    }
  }

  async function settleRefusedClose(outTradeNo: string, code: string, message: string): Promise<CloseOutcome> {
    const found = await lookup(outTradeNo);
    if (found.kind !== 'found') return { kind: 'indeterminate', code, message: `${message}; query after close: ${found.kind}` };
    const { transaction } = found;
    switch (transaction.state) {
      case 'SUCCESS':
      case 'REFUND':
        return alreadyPaid(transaction);
      case 'CLOSED':
      case 'REVOKED':
        return { kind: 'closed' };
      case 'NOTPAY':
      case 'PAYERROR':
      case 'USERPAYING':
        return { kind: 'indeterminate', code, message: `${message} (order is ${transaction.state})` };
      default:
        return assertNever(transaction.state);
    }
  }

  /** An answer about another refund, order or amount is not an answer to our question. */
  function mismatch(refund: WechatRefund, request: RefundQuery & { amountMinor?: number }): string | null {
    if (refund.outRefundNo !== request.refundId) return `answered for refund ${refund.outRefundNo}`;
    if (refund.outTradeNo !== request.outTradeNo) return `answered for order ${refund.outTradeNo}`;
    if (request.gatewayTradeNo && refund.transactionId !== request.gatewayTradeNo)
      return `answered for transaction ${refund.transactionId}`;
    if (request.amountMinor !== undefined && refund.refund !== request.amountMinor)
      return `refund of ${refund.refund}, asked ${request.amountMinor}`;
    return null;
  }

  function refundStatus(refund: WechatRefund): RefundStatus {
    switch (refund.status) {
      case 'SUCCESS':
        return { kind: 'succeeded', gatewayRefundId: refund.refundId, amountMinor: refund.refund };
      case 'PROCESSING':
        return { kind: 'pending' };
      // CLOSED: "退款关闭", nothing was refunded. ABNORMAL: the money could not reach the buyer (e.g. a
      // cancelled card) and waits for the merchant's 异常退款 — a person must act either way.
      case 'CLOSED':
      case 'ABNORMAL':
        return { kind: 'failed', code: `REFUND_${refund.status}`, message: `WeChat Pay refund ${refund.refundId} is ${refund.status}` };
      default:
        return assertNever(refund.status);
    }
  }

  /**
   * 申请退款 with out_refund_no = our refundId: WeChat's own rule ("同一退款单号多次请求只退一笔") is what
   * makes a repeat safe, so transport failures are classified exactly as for charge.
   */
  async function refund(request: RefundRequest): Promise<RefundOutcome> {
    // Checked before any call: only a programming error can break these, and WeChat would refuse them.
    if (!REFUND_ID_RE.test(request.refundId)) {
      return { kind: 'failed', code: 'INVALID_REFUND_ID', message: `refund id must be 1-32 letters or digits, got ${request.refundId}` };
    }
    if (
      !Number.isSafeInteger(request.amountMinor) ||
      !Number.isSafeInteger(request.chargeAmountMinor) ||
      request.amountMinor < 1 ||
      request.amountMinor > request.chargeAmountMinor
    ) {
      return { kind: 'failed', code: 'INVALID_AMOUNT', message: `cannot refund ${request.amountMinor} of ${request.chargeAmountMinor}` };
    }
    const payload: Json = {
      // transaction_id and out_trade_no are 二选一: the transaction is the charge being refunded.
      ...(request.gatewayTradeNo ? { transaction_id: request.gatewayTradeNo } : { out_trade_no: request.outTradeNo }),
      out_refund_no: request.refundId,
      ...(request.reason ? { reason: [...request.reason].slice(0, MAX_REFUND_REASON_CHARS).join('') } : {}),
      ...(request.notifyUrl ? { notify_url: request.notifyUrl } : {}),
      amount: { refund: request.amountMinor, total: request.chargeAmountMinor, currency: request.currency },
    };
    const exchange = await call('POST', '/v3/refund/domestic/refunds', payload);
    switch (exchange.kind) {
      case 'not_sent':
      case 'refused':
        // 401/429/5xx ("请用相同参数重新调用"): not processed, and a repeat with the same out_refund_no
        // cannot refund twice even if a 5xx hid a processed one.
        return { kind: 'retryable', code: exchange.code, message: exchange.message };
      case 'in_doubt':
        return { kind: 'indeterminate', code: exchange.code, message: exchange.message };
      case 'answered':
        break;
      default:
        return assertNever(exchange);
    }
    const { status, body } = exchange;
    if (status === 200) {
      const answered = readRefund(body, 'status');
      if (typeof answered === 'string') return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: answered };
      const wrong = mismatch(answered, request);
      if (wrong) return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: wrong };
      const result = refundStatus(answered);
      switch (result.kind) {
        case 'succeeded':
          return result;
        case 'pending':
          return { kind: 'pending', gatewayRefundId: answered.refundId };
        case 'failed':
          return result;
        case 'not_found':
          return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'refund answered without a refund' };
        default:
          return assertNever(result);
      }
    }
    const code = stringField(body, 'code');
    const message = stringField(body, 'message') ?? `HTTP ${status}`;
    if (status >= 400 && status < 500 && code && REFUND_ERROR_CODES.has(code)) {
      const refundError = code as RefundErrorCode;
      switch (refundError) {
        case 'INVALID_REQUEST':
        case 'PARAM_ERROR':
        case 'RESOURCE_NOT_EXISTS':
        case 'NOT_ENOUGH':
        case 'USER_ACCOUNT_ABNORMAL':
        case 'NO_AUTH':
        case 'MCH_NOT_EXISTS':
          return { kind: 'failed', code: refundError, message };
        default:
          return assertNever(refundError);
      }
    }
    // Another status or an error code we do not know: not proof that nothing was refunded.
    return { kind: 'indeterminate', code: code ?? `HTTP_${status}`, message };
  }

  /** 查询单笔退款（通过商户退款单号）: GET /v3/refund/domestic/refunds/{out_refund_no}. */
  async function queryRefund(request: RefundQuery): Promise<RefundQueryOutcome> {
    const exchange = await call('GET', `/v3/refund/domestic/refunds/${encodeURIComponent(request.refundId)}`);
    switch (exchange.kind) {
      case 'not_sent':
      case 'in_doubt':
      case 'refused':
        return { kind: 'unavailable', code: exchange.code, message: exchange.message };
      case 'answered':
        break;
      default:
        return assertNever(exchange);
    }
    const { status, body } = exchange;
    // WeChat positively says it has no refund under this out_refund_no.
    if (status === 404 && stringField(body, 'code') === 'RESOURCE_NOT_EXISTS') return { kind: 'answered', refund: { kind: 'not_found' } };
    if (status !== 200) {
      return {
        kind: 'unavailable',
        code: stringField(body, 'code') ?? `HTTP_${status}`,
        message: stringField(body, 'message') ?? `HTTP ${status}`,
      };
    }
    const answered = readRefund(body, 'status');
    if (typeof answered === 'string') return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: answered };
    const wrong = mismatch(answered, request);
    if (wrong) return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: wrong };
    return { kind: 'answered', refund: refundStatus(answered) };
  }

  async function verifyNotification(request: { headers: Headers; rawBody: string }): Promise<NotificationVerdict> {
    // 1. The signature, before a byte of the body is read.
    const problem = checkPlatformSignature(request.headers, request.rawBody, config.platformSerialNo, keys.platformPublicKey, Date.now());
    if (problem) return { kind: 'rejected', reason: problem };

    // 2. The envelope and its encrypted resource.
    const envelope = parseJson(request.rawBody);
    if (!envelope) return { kind: 'rejected', reason: 'body is not a JSON object' };
    const resource = envelope.resource;
    if (typeof resource !== 'object' || resource === null) return { kind: 'rejected', reason: 'missing resource' };
    const r = resource as Json;
    if (r.algorithm !== 'AEAD_AES_256_GCM') return { kind: 'rejected', reason: `unsupported algorithm ${String(r.algorithm)}` };
    if (r.original_type !== 'transaction' && r.original_type !== 'refund') {
      return { kind: 'rejected', reason: `unexpected original_type ${String(r.original_type)}` };
    }
    const ciphertext = typeof r.ciphertext === 'string' ? Buffer.from(r.ciphertext, 'base64') : Buffer.alloc(0);
    const iv = Buffer.from(typeof r.nonce === 'string' ? r.nonce : '', 'utf8');
    if (ciphertext.length <= 16 || iv.length !== 12) return { kind: 'rejected', reason: 'malformed resource ciphertext or nonce' };
    let plaintext: string;
    try {
      const decipher = createDecipheriv('aes-256-gcm', keys.apiV3Key, iv);
      decipher.setAAD(Buffer.from(typeof r.associated_data === 'string' ? r.associated_data : '', 'utf8'));
      decipher.setAuthTag(ciphertext.subarray(ciphertext.length - 16));
      plaintext = Buffer.concat([decipher.update(ciphertext.subarray(0, ciphertext.length - 16)), decipher.final()]).toString('utf8');
    } catch {
      return { kind: 'rejected', reason: 'resource does not decrypt with the APIv3 key' };
    }

    // 3. A refund (REFUND.SUCCESS / REFUND.ABNORMAL / REFUND.CLOSED).
    if (r.original_type === 'refund') return refundVerdict(envelope, parseJson(plaintext) ?? null);

    // 4. The transaction.
    const transaction = readTransaction(parseJson(plaintext) ?? null);
    if (typeof transaction === 'string') return { kind: 'rejected', reason: transaction };
    if (!transaction.transactionId) return { kind: 'rejected', reason: 'missing transaction_id' };
    const succeeded = envelope.event_type === 'TRANSACTION.SUCCESS' && transaction.state === 'SUCCESS';
    return {
      kind: 'verified',
      notification: {
        gateway: 'wechatpay',
        // design.md §5: webhook:wechatpay:{transaction_id}. The notification `id` would also be
        // constant across retries, but the transaction id is what makes two notifications about one
        // payment one event.
        eventId: transaction.transactionId,
        merchantId: transaction.mchid,
        outTradeNo: transaction.outTradeNo,
        status: succeeded ? 'succeeded' : 'other',
        gatewayTradeNo: transaction.transactionId,
        amountMinor: transaction.total,
        currency: transaction.currency,
      },
    };
  }

  function refundVerdict(envelope: Json, resource: Json | null): NotificationVerdict {
    const eventId = stringField(envelope, 'id');
    if (!eventId) return { kind: 'rejected', reason: 'missing notification id' };
    const refund = readRefund(resource, 'refund_status');
    if (typeof refund === 'string') return { kind: 'rejected', reason: refund };
    const mchid = stringField(resource, 'mchid');
    if (!mchid) return { kind: 'rejected', reason: 'missing mchid' };
    // The event and the resource must agree before either is believed.
    const event = envelope.event_type;
    const status: 'succeeded' | 'failed' | 'other' =
      event === 'REFUND.SUCCESS' && refund.status === 'SUCCESS'
        ? 'succeeded'
        : (event === 'REFUND.CLOSED' && refund.status === 'CLOSED') || (event === 'REFUND.ABNORMAL' && refund.status === 'ABNORMAL')
          ? 'failed'
          : 'other';
    const amount = resource?.amount;
    // The refund resource carries no currency: a domestic (境内) merchant refunds in CNY only.
    const currency = typeof amount === 'object' && amount !== null ? (stringField(amount as Json, 'currency') ?? 'CNY') : 'CNY';
    return {
      kind: 'refund',
      notification: {
        gateway: 'wechatpay',
        // The notification id is constant across retries of one notification, and a refund has one
        // notification per outcome.
        eventId,
        merchantId: mchid,
        outTradeNo: refund.outTradeNo,
        refundId: refund.outRefundNo,
        gatewayRefundId: refund.refundId,
        status,
        amountMinor: refund.refund,
        currency,
      },
    };
  }

  function notificationReply(ack: boolean): NotificationReply {
    // WeChat acknowledges on HTTP 200 or 204 with any body. 200 with an empty body rather than 204:
    // a `new Response('', { status: 204 })` (how the webhook route turns this into a Response) throws,
    // since a 204 may not have a body, even an empty one. Failure: 4xx/5xx + {"code":"FAIL",…}.
    return ack
      ? { status: 200, headers: {}, body: '' }
      : {
          status: 500,
          headers: { 'content-type': 'application/json; charset=utf-8' },
          body: JSON.stringify({ code: 'FAIL', message: '处理失败，请稍后重试' }),
        };
  }

  return {
    id: 'wechatpay',
    merchantId: config.mchid,
    // Every attempt of an order is the same WeChat order (same out_trade_no, reopened after a decline).
    oneTradePerOrder: true,
    buyerSteps: ['qr'],
    hasTestBuyers: Object.values(config.testBuyers).some(Boolean),
    charge,
    query,
    close,
    refund,
    queryRefund,
    verifyNotification,
    notificationReply,
  };
}
