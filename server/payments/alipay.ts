/**
 * The Alipay adapter: face-to-face payment (`alipay.trade.pay`, scene bar_code) through the official
 * alipay-sdk, mapped onto PayOnce's closed set of outcomes (./gateway).
 *
 * Without a test buyer the buyer takes their own step (buyerSteps, 'qr' first):
 *  - qr: alipay.trade.precreate → the qr_code the buyer scans with the Alipay app. Precreate creates
 *    no trade; Alipay creates it when the buyer scans, so trade.query says ACQ.TRADE_NOT_EXIST
 *    (`not_found`) until then. The same out_trade_no and parameters answer the same code again.
 *  - redirect: alipay.trade.page.pay, a page interface: no HTTP call from here, only the signed GET
 *    URL that alipay-sdk's pageExecute(method, 'GET', …) builds; the buyer's browser opens it, pays
 *    on Alipay's cashier and comes back to returnUrl. The trade exists once the cashier opens.
 *  Either way the outcome arrives by notification or query.
 *
 * Idempotency comes from the gateway itself: every attempt at paying an order sends the order's
 * out_trade_no, which Alipay keeps one trade for. Paying it again after a decline reopens the same
 * trade; paying it again after a success answers ACQ.TRADE_HAS_SUCCESS, which we confirm with a query
 * instead of trusting. Nothing here ever guesses: an answer that may hide a charge is `indeterminate`
 * and is settled by a query or the notification.
 *
 * Points the alipay-sdk (4.14) source makes that this file relies on:
 *  - exec() returns business errors (code 40004 …) as values and throws AlipayRequestError for
 *    transport problems, non-200 HTTP statuses, unparsable bodies and bad response signatures. The
 *    error carries no structured kind, so we classify it by its `cause` (network errors) and, for the
 *    rest, by its message — pinned by the adapter tests so an SDK upgrade that rewords it fails loudly.
 *  - urllib (under the SDK) re-sends a request once after a socket error ("other side closed"), POST
 *    included. Harmless here because the out_trade_no deduplicates it.
 *  - checkNotifySignV2 verifies the raw form values; checkNotifySign (V1) URI-decodes them first and
 *    throws on a literal `%`, so only V2 is used.
 *
 * Closing and refunding (so that an abandoned trade cannot take money, and money that must not stay
 * goes back exactly once):
 *  - close() queries first, because the two ways Alipay closes a trade cannot be told apart from
 *    their refusals: alipay.trade.close refuses a paid trade with the same ACQ.TRADE_STATUS_ERROR it
 *    uses for a closed one, and alipay.trade.cancel REFUNDS a paid trade. So: paid → already_paid;
 *    WAIT_BUYER_PAY → trade.close; no trade yet → trade.cancel (it blocks the out_trade_no, so a
 *    late trade.pay cannot create and charge it, and a precreate QR code nobody scanned yet can no
 *    longer open a trade — trade.close cannot reach it: ACQ.TRADE_NOT_EXIST); closed → closed.
 *    trade.cancel is used only where the query found no trade, so it refunds only if the buyer paid
 *    in the instant between the query and the cancel; that answer (action "refund") is reported
 *    `indeterminate` CANCEL_REFUNDED, never `closed` or `already_paid` (see classifyClose).
 *  - refund() sends PayOnce's refundId as out_request_no, Alipay's idempotency key for refunds: the
 *    same one again answers the same refund with fund_change "N" and moves no money. Alipay says
 *    fund_change "Y" is a success and anything else must be confirmed with the refund query.
 *  - Alipay names a refund by (trade_no, out_request_no) and shows no refund id of its own, so
 *    gatewayRefundId is `trade_no:out_request_no`.
 *
 * No SDK type leaves this file.
 */
import type { KeyObject } from 'node:crypto';
import { AlipayRequestError, AlipaySdk } from 'alipay-sdk';
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
  TestBuyer,
  TradeStatus,
} from './gateway';
import { CLOSE_REVERSED_PAYMENT } from './gateway';
import { decimalToMinor, minorToDecimal } from './money';
import { keyFromText } from './support';
import { connectionFailure, DEFAULT_GATEWAY_TIMEOUT_MS, type TransportFailure, assertNever, stringField } from './transport';

export interface AlipayGatewayConfig {
  appId: string;
  /** PEM (PKCS#1 or PKCS#8) or the bare base64 that Alipay's key tool prints. */
  appPrivateKey: string;
  /** The Alipay (platform) public key: PEM or bare base64 SPKI. */
  alipayPublicKey: string;
  /** The OpenAPI 2.0 gateway, e.g. https://openapi.alipay.com/gateway.do or the sandbox's. */
  gatewayUrl: string;
  /** Sandbox payment codes standing in for the buyer's barcode. */
  testBuyerAuthCodes: Record<TestBuyer, string>;
  /** Per-request timeout; default 5000 ms. */
  timeoutMs?: number;
}

/** Alipay's limit: 100,000,000.00 yuan. */
const MAX_AMOUNT_FEN = 10_000_000_000;
const CURRENCY = 'CNY';

// ---------------------------------------------------------------------------------------------
// Keys

/**
 * Canonical PEM for the SDK, trimmed: its formatKey() strips the header and footer only when they are
 * the first and last lines, so a trailing newline (or a PKCS#1 public key) would corrupt the key.
 */
function canonicalKeys(config: AlipayGatewayConfig): { privateKeyPem: string; publicKeyPem: string } {
  let privateKey: KeyObject;
  let publicKey: KeyObject;
  try {
    privateKey = keyFromText(config.appPrivateKey, 'private');
  } catch (err) {
    throw new Error(`Alipay appPrivateKey is not a valid RSA private key (${(err as Error).message})`);
  }
  try {
    publicKey = keyFromText(config.alipayPublicKey, 'public');
  } catch (err) {
    throw new Error(`Alipay alipayPublicKey is not a valid RSA public key (${(err as Error).message})`);
  }
  return {
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString().trim(),
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString().trim(),
  };
}

// ---------------------------------------------------------------------------------------------
// One call to the gateway

type Fields = Record<string, unknown>;

/** What came back from one exec(): a signed answer, or why there is none. */
type Exchange = { kind: 'answered'; response: Fields } | TransportFailure;

function classifyFailure(err: unknown): Exchange {
  if (!(err instanceof AlipayRequestError)) {
    // Not a transport error the SDK recognised: it could have happened after sending.
    return { kind: 'in_doubt', code: 'SDK_ERROR', message: err instanceof Error ? err.message : String(err) };
  }
  const cause: unknown = err.cause;
  if (cause !== undefined) {
    // A transport error; its cause is urllib's/undici's error. Timeouts, resets, "other side
    // closed": the gateway may have processed the request.
    return connectionFailure(cause, err.message, (cause as Error).name);
  }
  // "HTTP 请求错误, status: 502": Alipay answers every request it processed with HTTP 200, so any
  // other status came from in front of it (a proxy, an overloaded gateway) before processing.
  const status = /status: (\d{3})/.exec(err.message)?.[1];
  if (status) return { kind: 'not_sent', code: `HTTP_${status}`, message: err.message };
  // "验签失败…": the answer is not provably Alipay's, so its content cannot be trusted either way.
  if (err.message.startsWith('验签失败')) {
    return { kind: 'in_doubt', code: 'INVALID_RESPONSE_SIGNATURE', message: 'response signature did not verify' };
  }
  // "Response 格式错误…" and anything else: a reply arrived but cannot be read.
  return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: err.message };
}

// ---------------------------------------------------------------------------------------------
// trade.pay answers

/** trade.pay sub-codes that end this attempt for good: the trade stays open for another buyer. */
type DeclineSubCode =
  | 'ACQ.BUYER_BALANCE_NOT_ENOUGH'
  | 'ACQ.BUYER_ENABLE_STATUS_FORBID'
  | 'ACQ.PAYMENT_AUTH_CODE_INVALID'
  | 'ACQ.CONTEXT_INCONSISTENT'
  | 'ACQ.TRADE_HAS_CLOSE'
  | 'ACQ.TRADE_BUYER_NOT_MATCH'
  | 'ACQ.INVALID_PARAMETER';

type PayAnswer =
  | { kind: 'paid'; tradeNo: string; totalAmount: string }
  | { kind: 'already_paid' }
  | { kind: 'declined'; subCode: DeclineSubCode; message: string }
  /** Rejected by the gateway's public checks (40001/40002/40006): nothing was processed. */
  | { kind: 'refused'; code: string; message: string }
  /** 10003 USERPAYING, 20000, ACQ.SYSTEM_ERROR, or a code we do not know: may have been charged. */
  | { kind: 'in_doubt'; code: string; message: string };

function classifyPay(response: Fields): PayAnswer {
  const code = stringField(response, 'code') ?? '';
  const subCode = stringField(response, 'sub_code') ?? '';
  const message = stringField(response, 'sub_msg') ?? stringField(response, 'msg') ?? code;
  switch (code) {
    case '10000': {
      const tradeNo = stringField(response, 'trade_no');
      const totalAmount = stringField(response, 'total_amount');
      if (!tradeNo || !totalAmount) return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: 'success without trade_no' };
      return { kind: 'paid', tradeNo, totalAmount };
    }
    case '10003': // USERPAYING: waiting for the buyer to confirm in the app; the outcome comes later.
      return { kind: 'in_doubt', code: 'ACQ.USERPAYING', message };
    case '20000': // Service Currently Unavailable: Alipay's own "unknown result, query it".
      return { kind: 'in_doubt', code: subCode || '20000', message };
    case '40001':
    case '40002':
    case '40006':
      return { kind: 'refused', code: subCode || code, message };
    case '40004':
      switch (subCode) {
        case 'ACQ.TRADE_HAS_SUCCESS':
          return { kind: 'already_paid' };
        case 'ACQ.BUYER_BALANCE_NOT_ENOUGH':
        case 'ACQ.BUYER_ENABLE_STATUS_FORBID':
        case 'ACQ.PAYMENT_AUTH_CODE_INVALID':
        case 'ACQ.CONTEXT_INCONSISTENT':
        case 'ACQ.TRADE_HAS_CLOSE':
        case 'ACQ.TRADE_BUYER_NOT_MATCH':
        case 'ACQ.INVALID_PARAMETER':
          return { kind: 'declined', subCode, message };
        case 'ACQ.SYSTEM_ERROR':
          return { kind: 'in_doubt', code: subCode, message };
        default:
          // An unlisted business failure is not proof that nothing was charged.
          return { kind: 'in_doubt', code: subCode || code, message };
      }
    default:
      return { kind: 'in_doubt', code: code || 'MALFORMED_RESPONSE', message };
  }
}

// ---------------------------------------------------------------------------------------------
// trade.close / trade.cancel answers

type CloseAnswer =
  | { kind: 'closed' }
  /** trade.cancel found the trade paid and refunded it in full (action "refund"). */
  | { kind: 'refunded_by_cancel'; message: string }
  /** The trade is not (or no longer) in the state the call expected: settle it with a query. */
  | { kind: 'state_changed'; code: string; message: string }
  /** Not processed (public checks) or outcome unknown: the trade may still take money. */
  | { kind: 'in_doubt'; code: string; message: string };

function classifyClose(response: Fields, method: 'alipay.trade.close' | 'alipay.trade.cancel'): CloseAnswer {
  const code = stringField(response, 'code') ?? '';
  const subCode = stringField(response, 'sub_code') ?? '';
  const message = stringField(response, 'sub_msg') ?? stringField(response, 'msg') ?? code;
  switch (code) {
    case '10000': {
      if (method === 'alipay.trade.close') return { kind: 'closed' };
      // trade.cancel says what it did. "close": the trade (or the out_trade_no) can take no money.
      // "refund": the buyer had paid after all and Alipay gave the money back in full. Anything else
      // is not an answer we can rely on.
      const action = stringField(response, 'action');
      if (action === 'close') return { kind: 'closed' };
      if (action === 'refund') {
        return { kind: 'refunded_by_cancel', message: 'trade.cancel found the trade paid and refunded it in full (action refund)' };
      }
      return { kind: 'in_doubt', code: 'UNKNOWN_CANCEL_ACTION', message: `trade.cancel action ${action ?? '(none)'}` };
    }
    case '40004':
      switch (subCode) {
        case 'ACQ.TRADE_STATUS_ERROR': // trade.close of a paid (or otherwise not open) trade
        case 'ACQ.TRADE_HAS_SUCCESS':
        case 'ACQ.TRADE_HAS_FINISHED':
        case 'ACQ.TRADE_NOT_EXIST':
          return { kind: 'state_changed', code: subCode, message };
        default:
          // ACQ.SYSTEM_ERROR, a cancel with retry_flag "Y", or a code we do not know.
          return { kind: 'in_doubt', code: subCode || code, message };
      }
    default:
      // 20000, 40001/40002/40006 (nothing was processed, so nothing was closed either), unknown codes.
      return { kind: 'in_doubt', code: subCode || code || 'MALFORMED_RESPONSE', message };
  }
}

// ---------------------------------------------------------------------------------------------
// trade.refund answers

/** trade.refund sub-codes that refuse the refund for good: nothing was refunded, a person must look. */
type RefundRefusalSubCode =
  | 'ACQ.TRADE_NOT_EXIST'
  | 'ACQ.TRADE_STATUS_ERROR'
  | 'ACQ.TRADE_HAS_FINISHED'
  | 'ACQ.TRADE_NOT_ALLOW_REFUND'
  | 'ACQ.REASON_TRADE_REFUND_FEE_ERR'
  | 'ACQ.REFUND_AMT_NOT_EQUAL_TOTAL'
  | 'ACQ.REFUND_FEE_ERROR'
  | 'ACQ.DISCORDANT_REPEAT_REQUEST'
  | 'ACQ.SELLER_BALANCE_NOT_ENOUGH'
  | 'ACQ.REASON_TRADE_BEEN_FREEZEN'
  | 'ACQ.INVALID_PARAMETER';

type RefundAnswer =
  /** fund_change "Y": this call moved the money. */
  | { kind: 'refunded'; tradeNo: string | undefined }
  /** 10000 without fund_change "Y": a repeat of a refund already made, or one Alipay must confirm. */
  | { kind: 'confirm_by_query' }
  | { kind: 'refused'; subCode: RefundRefusalSubCode; message: string }
  /** Rejected by the gateway's public checks (40001/40002/40006): nothing was processed. */
  | { kind: 'not_processed'; code: string; message: string }
  | { kind: 'in_doubt'; code: string; message: string };

function classifyRefund(response: Fields): RefundAnswer {
  const code = stringField(response, 'code') ?? '';
  const subCode = stringField(response, 'sub_code') ?? '';
  const message = stringField(response, 'sub_msg') ?? stringField(response, 'msg') ?? code;
  switch (code) {
    case '10000':
      return stringField(response, 'fund_change') === 'Y'
        ? { kind: 'refunded', tradeNo: stringField(response, 'trade_no') }
        : { kind: 'confirm_by_query' };
    case '40001':
    case '40002':
    case '40006':
      return { kind: 'not_processed', code: subCode || code, message };
    case '40004':
      switch (subCode) {
        case 'ACQ.TRADE_NOT_EXIST':
        case 'ACQ.TRADE_STATUS_ERROR':
        case 'ACQ.TRADE_HAS_FINISHED':
        case 'ACQ.TRADE_NOT_ALLOW_REFUND':
        case 'ACQ.REASON_TRADE_REFUND_FEE_ERR':
        case 'ACQ.REFUND_AMT_NOT_EQUAL_TOTAL':
        case 'ACQ.REFUND_FEE_ERROR':
        case 'ACQ.DISCORDANT_REPEAT_REQUEST':
        case 'ACQ.SELLER_BALANCE_NOT_ENOUGH':
        case 'ACQ.REASON_TRADE_BEEN_FREEZEN':
        case 'ACQ.INVALID_PARAMETER':
          return { kind: 'refused', subCode, message };
        default:
          // ACQ.SYSTEM_ERROR or a code we do not know: not proof that nothing was refunded.
          return { kind: 'in_doubt', code: subCode || code, message };
      }
    default:
      // 20000 Service Currently Unavailable: Alipay's own "unknown result, query it".
      return { kind: 'in_doubt', code: subCode || code || 'MALFORMED_RESPONSE', message };
  }
}

/** Alipay's refund has no id of its own on the wire: it is named by its trade and out_request_no. */
function gatewayRefundIdOf(tradeNo: string, outRequestNo: string): string {
  return `${tradeNo}:${outRequestNo}`;
}

/** Alipay's limit on out_request_no; PayOnce's own refundId rule ([A-Za-z0-9], ≤ 32) is stricter. */
const OUT_REQUEST_NO_RE = /^[A-Za-z0-9_]{1,64}$/;
const MAX_REFUND_REASON = 256;

// ---------------------------------------------------------------------------------------------
// The gateway

export function createAlipayGateway(config: AlipayGatewayConfig): PaymentGateway {
  const keys = canonicalKeys(config);
  const sdk = new AlipaySdk({
    appId: config.appId,
    privateKey: keys.privateKeyPem,
    keyType: 'PKCS8',
    alipayPublicKey: keys.publicKeyPem,
    gateway: config.gatewayUrl,
    signType: 'RSA2',
    timeout: config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS,
    // Keep Alipay's own snake_case names: they are what the documentation and the sandbox use.
    camelcase: false,
  });

  async function call(method: string, params: { bizContent: Fields; notifyUrl?: string }): Promise<Exchange> {
    try {
      const response: unknown = await sdk.exec(method, params, { validateSign: true });
      if (typeof response !== 'object' || response === null) {
        return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: 'empty response' };
      }
      return { kind: 'answered', response: response as Fields };
    } catch (err) {
      return classifyFailure(err);
    }
  }

  /**
   * What trade.query says, in PayOnce's terms. Alipay closes a trade once it is fully refunded, so a
   * paid trade whose whole amount went back answers TRADE_CLOSED and the caller sees `closed` — the
   * honest answer to "can this trade still take or keep money?" (no), not "was it ever paid?". A
   * partly refunded trade stays TRADE_SUCCESS and is `succeeded` for its whole total_amount; refunds
   * are tracked through refund()/queryRefund(), never netted here.
   */
  async function query(outTradeNo: string): Promise<QueryOutcome> {
    const exchange = await call('alipay.trade.query', { bizContent: { out_trade_no: outTradeNo } });
    if (exchange.kind !== 'answered') return { kind: 'unavailable', code: exchange.code, message: exchange.message };
    const { response } = exchange;
    const code = stringField(response, 'code');
    const subCode = stringField(response, 'sub_code');
    if (code === '40004' && subCode === 'ACQ.TRADE_NOT_EXIST') return { kind: 'answered', trade: { kind: 'not_found' } };
    if (code !== '10000') {
      return {
        kind: 'unavailable',
        code: subCode ?? code ?? 'MALFORMED_RESPONSE',
        message: stringField(response, 'sub_msg') ?? stringField(response, 'msg') ?? 'trade.query failed',
      };
    }
    const status = stringField(response, 'trade_status');
    let trade: TradeStatus;
    switch (status) {
      case 'WAIT_BUYER_PAY':
        trade = { kind: 'pending' };
        break;
      case 'TRADE_CLOSED':
        trade = { kind: 'closed' };
        break;
      case 'TRADE_SUCCESS':
      case 'TRADE_FINISHED': {
        const tradeNo = stringField(response, 'trade_no');
        const amountMinor = decimalToMinor(stringField(response, 'total_amount') ?? '');
        if (!tradeNo || amountMinor === null) {
          return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'paid trade without trade_no or amount' };
        }
        trade = { kind: 'succeeded', gatewayTradeNo: tradeNo, amountMinor, currency: CURRENCY };
        break;
      }
      default:
        return { kind: 'unavailable', code: 'UNKNOWN_TRADE_STATUS', message: `trade_status ${status ?? '(none)'}` };
    }
    return { kind: 'answered', trade };
  }

  async function charge(request: ChargeRequest): Promise<ChargeOutcome> {
    // Checked before any call: these can only be programming errors, and the gateway would refuse them.
    if (request.currency !== CURRENCY) {
      return { kind: 'declined', code: 'UNSUPPORTED_CURRENCY', message: `Alipay face-to-face charges ${CURRENCY} only` };
    }
    if (!Number.isSafeInteger(request.amountMinor) || request.amountMinor < 1 || request.amountMinor > MAX_AMOUNT_FEN) {
      return { kind: 'declined', code: 'INVALID_AMOUNT', message: 'amount must be 1 … 10,000,000,000 fen' };
    }
    if (!request.buyer) return openForBuyer(request);
    const authCode = config.testBuyerAuthCodes[request.buyer];
    if (!authCode) {
      return { kind: 'declined', code: 'NO_PAYMENT_CODE', message: 'no payment code configured for this buyer' };
    }

    // `request.attempt` is not sent: Alipay deduplicates on out_trade_no alone, and a new attempt after
    // a decline is meant to reopen the same WAIT_BUYER_PAY trade.
    const exchange = await call('alipay.trade.pay', {
      notifyUrl: request.notifyUrl,
      bizContent: {
        out_trade_no: request.outTradeNo,
        scene: 'bar_code',
        auth_code: authCode,
        product_code: 'FACE_TO_FACE_PAYMENT',
        total_amount: minorToDecimal(request.amountMinor),
        subject: request.subject,
      },
    });
    switch (exchange.kind) {
      case 'not_sent':
        return { kind: 'retryable', code: exchange.code, message: exchange.message };
      case 'in_doubt':
        return { kind: 'indeterminate', code: exchange.code, message: exchange.message };
      case 'answered':
        break;
      default:
        return assertNever(exchange);
    }

    const answer = classifyPay(exchange.response);
    switch (answer.kind) {
      case 'paid': {
        const amountMinor = decimalToMinor(answer.totalAmount);
        if (amountMinor !== request.amountMinor) {
          return {
            kind: 'indeterminate',
            code: 'AMOUNT_MISMATCH',
            message: `paid ${answer.totalAmount}, asked ${request.amountMinor} fen`,
          };
        }
        return { kind: 'succeeded', gatewayTradeNo: answer.tradeNo, amountMinor, currency: CURRENCY };
      }
      case 'already_paid': {
        // A retry of a charge that went through (its answer was lost). Believe it only if the trade
        // says so, for this amount.
        const found = await query(request.outTradeNo);
        if (found.kind === 'answered' && found.trade.kind === 'succeeded' && found.trade.amountMinor === request.amountMinor) {
          return {
            kind: 'succeeded',
            gatewayTradeNo: found.trade.gatewayTradeNo,
            amountMinor: found.trade.amountMinor,
            currency: CURRENCY,
          };
        }
        return {
          kind: 'indeterminate',
          code: 'ACQ.TRADE_HAS_SUCCESS',
          message: found.kind === 'answered' ? `trade is ${found.trade.kind} for another amount or state` : found.message,
        };
      }
      case 'declined':
        return { kind: 'declined', code: answer.subCode, message: answer.message };
      case 'refused':
        // Nothing was processed and nothing was charged. Retrying the same attempt is safe; it helps
        // once the configuration (key, app id) is fixed, which is not the buyer's fault to store.
        return { kind: 'retryable', code: answer.code, message: answer.message };
      case 'in_doubt':
        return { kind: 'indeterminate', code: answer.code, message: answer.message };
      default:
        return assertNever(answer);
    }
  }

  /**
   * The trade already paid (a retry after the buyer paid, or another step paid it): believe it only
   * if the trade says so, for this amount.
   */
  async function confirmPaid(request: ChargeRequest, code: string): Promise<ChargeOutcome> {
    const found = await query(request.outTradeNo);
    if (found.kind === 'answered' && found.trade.kind === 'succeeded' && found.trade.amountMinor === request.amountMinor) {
      return { kind: 'succeeded', gatewayTradeNo: found.trade.gatewayTradeNo, amountMinor: found.trade.amountMinor, currency: CURRENCY };
    }
    return {
      kind: 'indeterminate',
      code,
      message: found.kind === 'answered' ? `trade is ${found.trade.kind} for another amount or state` : found.message,
    };
  }

  /**
   * alipay.trade.precreate. It moves no money by itself — only a buyer who scans the code can pay —
   * so a lost answer is `retryable`: the retry gets the same code (same out_trade_no and parameters),
   * and whatever the buyer may already have paid is found by the notification or by close()'s query.
   */
  async function precreate(request: ChargeRequest): Promise<ChargeOutcome> {
    const exchange = await call('alipay.trade.precreate', {
      notifyUrl: request.notifyUrl,
      bizContent: {
        out_trade_no: request.outTradeNo,
        total_amount: minorToDecimal(request.amountMinor),
        subject: request.subject,
      },
    });
    if (exchange.kind !== 'answered') return { kind: 'retryable', code: exchange.code, message: exchange.message };
    const { response } = exchange;
    const code = stringField(response, 'code') ?? '';
    const subCode = stringField(response, 'sub_code') ?? '';
    const message = stringField(response, 'sub_msg') ?? stringField(response, 'msg') ?? code;
    if (code === '10000') {
      const qrCode = stringField(response, 'qr_code');
      if (!qrCode) return { kind: 'retryable', code: 'MALFORMED_RESPONSE', message: 'precreate success without qr_code' };
      return { kind: 'awaiting_buyer', action: { kind: 'qr', qrCode } };
    }
    if (code === '40004') {
      switch (subCode) {
        case 'ACQ.TRADE_HAS_SUCCESS':
          return confirmPaid(request, subCode);
        case 'ACQ.TRADE_HAS_CLOSE':
        case 'ACQ.CONTEXT_INCONSISTENT':
        case 'ACQ.TRADE_BUYER_NOT_MATCH':
        case 'ACQ.INVALID_PARAMETER':
          return { kind: 'declined', code: subCode, message };
        default:
          break;
      }
    }
    // 20000, 40001/40002/40006, ACQ.SYSTEM_ERROR, unknown codes: no code was handed out.
    return { kind: 'retryable', code: subCode || code || 'MALFORMED_RESPONSE', message };
  }

  /**
   * alipay.trade.page.pay: the signed GET URL of Alipay's cashier, built by the SDK's own
   * pageExecute(method, 'GET', …) exactly as Alipay's docs tell merchants to (gateway?method, app_id,
   * charset, sign_type, timestamp, version, notify_url, return_url, biz_content, sign). No HTTP call;
   * a query first, so that a trade the buyer already paid (or one that was closed) is answered as
   * such instead of sending the buyer to a cashier that would refuse them.
   */
  async function pagePayUrl(request: ChargeRequest): Promise<ChargeOutcome> {
    if (!request.returnUrl) return { kind: 'declined', code: 'NO_RETURN_URL', message: 'the redirect step needs a returnUrl' };
    const found = await query(request.outTradeNo);
    if (found.kind === 'answered') {
      if (found.trade.kind === 'succeeded') return confirmPaid(request, 'ACQ.TRADE_HAS_SUCCESS');
      if (found.trade.kind === 'closed') return { kind: 'declined', code: 'ACQ.TRADE_HAS_CLOSE', message: 'the trade is closed' };
    }
    // An unavailable query changes nothing: the gateway applies the same rules when the buyer arrives.
    let url: string;
    try {
      url = sdk.pageExecute('alipay.trade.page.pay', 'GET', {
        bizContent: {
          out_trade_no: request.outTradeNo,
          total_amount: minorToDecimal(request.amountMinor),
          subject: request.subject,
          product_code: 'FAST_INSTANT_TRADE_PAY',
        },
        notifyUrl: request.notifyUrl,
        returnUrl: request.returnUrl,
      });
    } catch (err) {
      return { kind: 'retryable', code: 'SDK_ERROR', message: err instanceof Error ? err.message : String(err) };
    }
    return { kind: 'awaiting_buyer', action: { kind: 'redirect', url } };
  }

  async function openForBuyer(request: ChargeRequest): Promise<ChargeOutcome> {
    const step = request.buyerStep ?? 'qr';
    switch (step) {
      case 'qr':
        return precreate(request);
      case 'redirect':
        return pagePayUrl(request);
      case 'card':
        return { kind: 'declined', code: 'UNSUPPORTED_BUYER_STEP', message: 'Alipay offers the qr and redirect steps' };
      default:
        return assertNever(step);
    }
  }

  /** A second look after close/cancel said the trade was not where the first query left it. */
  async function settleClose(outTradeNo: string, code: string, message: string): Promise<CloseOutcome> {
    const found = await query(outTradeNo);
    if (found.kind === 'answered') {
      if (found.trade.kind === 'succeeded') {
        const { gatewayTradeNo, amountMinor, currency } = found.trade;
        return { kind: 'already_paid', charges: [{ gatewayTradeNo, amountMinor, currency }] };
      }
      if (found.trade.kind === 'closed') return { kind: 'closed' };
    }
    return { kind: 'indeterminate', code, message };
  }

  async function closeWith(method: 'alipay.trade.close' | 'alipay.trade.cancel', outTradeNo: string): Promise<CloseOutcome> {
    const exchange = await call(method, { bizContent: { out_trade_no: outTradeNo } });
    switch (exchange.kind) {
      case 'not_sent':
      case 'in_doubt':
        // Close has no "retryable": either way the trade may still take money until a later close
        // (safe to repeat: closing is idempotent) or a query settles it.
        return { kind: 'indeterminate', code: exchange.code, message: exchange.message };
      case 'answered':
        break;
      default:
        return assertNever(exchange);
    }
    const answer = classifyClose(exchange.response, method);
    switch (answer.kind) {
      case 'closed':
        return { kind: 'closed' };
      case 'refunded_by_cancel':
        // The buyer paid between our query and the cancel, and Alipay refunded it. Not `already_paid`:
        // the checkout would settle the order on money that has gone back. Not `closed` either: the
        // payment's TRADE_SUCCESS notification is still on its way and a person should see that a
        // payment was made and reversed. `indeterminate` blocks a new attempt until a later close,
        // whose query then finds TRADE_CLOSED and answers `closed`.
        return { kind: 'indeterminate', code: CLOSE_REVERSED_PAYMENT, message: answer.message };
      case 'state_changed':
        // Typically the buyer paid between our query and the close: the query says so.
        return settleClose(outTradeNo, answer.code, answer.message);
      case 'in_doubt':
        return { kind: 'indeterminate', code: answer.code, message: answer.message };
      default:
        return assertNever(answer);
    }
  }

  async function close(request: CloseRequest): Promise<CloseOutcome> {
    const found = await query(request.outTradeNo);
    if (found.kind === 'unavailable') return { kind: 'indeterminate', code: found.code, message: found.message };
    const { trade } = found;
    switch (trade.kind) {
      case 'succeeded':
        // Never cancel (which would refund) nor refund here: the caller settles this payment.
        return {
          kind: 'already_paid',
          charges: [{ gatewayTradeNo: trade.gatewayTradeNo, amountMinor: trade.amountMinor, currency: trade.currency }],
        };
      case 'closed':
        return { kind: 'closed' };
      case 'pending':
        return closeWith('alipay.trade.close', request.outTradeNo);
      case 'not_found':
        // No trade yet, but a trade.pay of ours may still be on its way: cancel blocks the
        // out_trade_no so that it cannot be created (or paid) later.
        return closeWith('alipay.trade.cancel', request.outTradeNo);
      default:
        return assertNever(trade);
    }
  }

  async function queryRefund(request: RefundQuery): Promise<RefundQueryOutcome> {
    const exchange = await call('alipay.trade.fastpay.refund.query', {
      bizContent: {
        out_trade_no: request.outTradeNo,
        ...(request.gatewayTradeNo ? { trade_no: request.gatewayTradeNo } : {}),
        out_request_no: request.refundId,
      },
    });
    if (exchange.kind !== 'answered') return { kind: 'unavailable', code: exchange.code, message: exchange.message };
    const { response } = exchange;
    const code = stringField(response, 'code');
    const subCode = stringField(response, 'sub_code');
    // No trade, so certainly no refund of it.
    if (code === '40004' && subCode === 'ACQ.TRADE_NOT_EXIST') return { kind: 'answered', refund: { kind: 'not_found' } };
    if (code !== '10000') {
      return {
        kind: 'unavailable',
        code: subCode ?? code ?? 'MALFORMED_RESPONSE',
        message: stringField(response, 'sub_msg') ?? stringField(response, 'msg') ?? 'refund query failed',
      };
    }
    // Alipay: "10000 only means the query ran; if it returns the refund's data the refund succeeded,
    // if not, it did not — retry with the same out_request_no". Alipay also warns that a query made
    // right after the refund may not see it yet; repeating the same out_request_no is safe either way.
    const refundAmount = stringField(response, 'refund_amount');
    if (refundAmount === undefined) return { kind: 'answered', refund: { kind: 'not_found' } };
    const amountMinor = decimalToMinor(refundAmount);
    if (amountMinor === null) return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: `refund_amount ${refundAmount}` };
    const refundStatus = stringField(response, 'refund_status');
    // REFUND_SUCCESS is the only status Alipay documents; an absent one means success for refunds made
    // with trade.refund. Any other is not final as far as we can tell.
    if (refundStatus !== undefined && refundStatus !== 'REFUND_SUCCESS') return { kind: 'answered', refund: { kind: 'pending' } };
    const tradeNo = stringField(response, 'trade_no') ?? request.gatewayTradeNo;
    return {
      kind: 'answered',
      refund: { kind: 'succeeded', gatewayRefundId: gatewayRefundIdOf(tradeNo, request.refundId), amountMinor },
    };
  }

  async function refund(request: RefundRequest): Promise<RefundOutcome> {
    // Checked before any call: these can only be programming errors, and the gateway would refuse them.
    if (request.currency !== CURRENCY) {
      return { kind: 'failed', code: 'UNSUPPORTED_CURRENCY', message: `Alipay refunds ${CURRENCY} only` };
    }
    if (!Number.isSafeInteger(request.amountMinor) || request.amountMinor < 1 || request.amountMinor > MAX_AMOUNT_FEN) {
      return { kind: 'failed', code: 'INVALID_AMOUNT', message: 'amount must be 1 … 10,000,000,000 fen' };
    }
    if (!OUT_REQUEST_NO_RE.test(request.refundId)) {
      return { kind: 'failed', code: 'INVALID_REFUND_ID', message: 'refundId must be 1–64 letters, digits or underscores' };
    }
    const reason = [...request.reason].slice(0, MAX_REFUND_REASON).join('');
    const exchange = await call('alipay.trade.refund', {
      bizContent: {
        out_trade_no: request.outTradeNo,
        // Both names: Alipay refunds the trade they agree on, and refuses if they do not.
        ...(request.gatewayTradeNo ? { trade_no: request.gatewayTradeNo } : {}),
        refund_amount: minorToDecimal(request.amountMinor),
        // PayOnce's refundId IS Alipay's idempotency key for this refund.
        out_request_no: request.refundId,
        ...(reason ? { refund_reason: reason } : {}),
      },
    });
    switch (exchange.kind) {
      case 'not_sent':
        return { kind: 'retryable', code: exchange.code, message: exchange.message };
      case 'in_doubt':
        return { kind: 'indeterminate', code: exchange.code, message: exchange.message };
      case 'answered':
        break;
      default:
        return assertNever(exchange);
    }

    const answer = classifyRefund(exchange.response);
    switch (answer.kind) {
      case 'refunded':
        // Alipay refunded exactly refund_amount (its refund_fee is the trade's running total).
        return {
          kind: 'succeeded',
          gatewayRefundId: gatewayRefundIdOf(answer.tradeNo ?? request.gatewayTradeNo, request.refundId),
          amountMinor: request.amountMinor,
        };
      case 'confirm_by_query': {
        // fund_change "N": most often this refundId's refund answered again (a retry after a lost
        // answer). Alipay's rule is to confirm with the refund query, which also gives its amount.
        const found = await queryRefund(request);
        if (found.kind === 'answered') {
          switch (found.refund.kind) {
            case 'succeeded':
              return { kind: 'succeeded', gatewayRefundId: found.refund.gatewayRefundId, amountMinor: found.refund.amountMinor };
            case 'failed':
              return { kind: 'failed', code: found.refund.code, message: found.refund.message };
            case 'pending':
            case 'not_found':
              // Accepted (10000) but not visible yet: Alipay's query can lag the refund.
              return { kind: 'pending', gatewayRefundId: null };
            default:
              return assertNever(found.refund);
          }
        }
        return { kind: 'pending', gatewayRefundId: null };
      }
      case 'refused':
        return { kind: 'failed', code: answer.subCode, message: answer.message };
      case 'not_processed':
        return { kind: 'retryable', code: answer.code, message: answer.message };
      case 'in_doubt':
        return { kind: 'indeterminate', code: answer.code, message: answer.message };
      default:
        return assertNever(answer);
    }
  }

  async function verifyNotification(request: { headers: Headers; rawBody: string }): Promise<NotificationVerdict> {
    const postData: Record<string, string> = {};
    for (const [key, value] of new URLSearchParams(request.rawBody)) {
      // Two values for one name would let the signed and the read value differ.
      if (Object.hasOwn(postData, key)) return { kind: 'rejected', reason: `duplicate field ${key}` };
      postData[key] = value;
    }
    if (!postData.sign) return { kind: 'rejected', reason: 'missing sign' };
    // Only RSA2 is configured; refuse a downgrade to RSA (SHA-1) announced by the message itself.
    if (postData.sign_type !== undefined && postData.sign_type !== 'RSA2') {
      return { kind: 'rejected', reason: `unsupported sign_type ${postData.sign_type}` };
    }
    let signed = false;
    try {
      signed = sdk.checkNotifySignV2(postData);
    } catch {
      signed = false;
    }
    if (!signed) return { kind: 'rejected', reason: 'invalid signature' };

    for (const field of ['app_id', 'out_trade_no', 'trade_no', 'trade_status', 'total_amount'] as const) {
      if (!postData[field]) return { kind: 'rejected', reason: `missing ${field}` };
    }
    const amountMinor = decimalToMinor(postData.total_amount ?? '');
    if (amountMinor === null) return { kind: 'rejected', reason: `invalid total_amount ${postData.total_amount}` };

    // A refund triggers the same trade_status_sync as the payment, to the payment's notify_url, with
    // trade_status still TRADE_SUCCESS after a partial refund: only refund_fee / out_biz_no /
    // gmt_refund tell it apart, and it must never be read as a (second) payment.
    if (postData.refund_fee !== undefined || postData.out_biz_no !== undefined || postData.gmt_refund !== undefined) {
      const refundId = postData.out_biz_no;
      if (!refundId) return { kind: 'rejected', reason: 'missing out_biz_no' };
      const refundedMinor = decimalToMinor(postData.refund_fee ?? '');
      if (refundedMinor === null) return { kind: 'rejected', reason: `invalid refund_fee ${postData.refund_fee}` };
      const outTradeNo = postData.out_trade_no ?? '';
      const tradeNo = postData.trade_no ?? '';
      return {
        kind: 'refund',
        notification: {
          gateway: 'alipay',
          // One notification per refund (its notify_id is per delivery series, the refund id is ours).
          eventId: `${outTradeNo}:refund:${refundId}`,
          merchantId: postData.app_id ?? '',
          outTradeNo,
          refundId,
          gatewayRefundId: gatewayRefundIdOf(tradeNo, refundId),
          // Alipay only notifies refunds that went through.
          status: 'succeeded',
          // refund_fee is the trade's total refunded so far — Alipay's notification carries no
          // per-refund amount. With PayOnce's one refund per charge the two are the same.
          amountMinor: refundedMinor,
          currency: CURRENCY,
        },
      };
    }

    const tradeStatus = postData.trade_status;
    return {
      kind: 'verified',
      notification: {
        gateway: 'alipay',
        eventId: postData.out_trade_no ?? '',
        merchantId: postData.app_id ?? '',
        outTradeNo: postData.out_trade_no ?? '',
        status: tradeStatus === 'TRADE_SUCCESS' || tradeStatus === 'TRADE_FINISHED' ? 'succeeded' : 'other',
        gatewayTradeNo: postData.trade_no ?? '',
        amountMinor,
        currency: CURRENCY,
      },
    };
  }

  function notificationReply(ack: boolean): NotificationReply {
    // Alipay stops only on the exact body `success`; anything else (here `retry`, with a 503 for
    // people reading logs) makes it deliver again on its schedule.
    return ack
      ? { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: 'success' }
      : { status: 503, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: 'retry' };
  }

  return {
    id: 'alipay',
    merchantId: config.appId,
    // Alipay keeps one trade per out_trade_no: a new attempt reopens the WAIT_BUYER_PAY trade.
    oneTradePerOrder: true,
    // The QR code first: it works on any screen; the redirect needs the buyer on a browser that can
    // leave the shop and come back.
    buyerSteps: ['qr', 'redirect'],
    hasTestBuyers: Object.values(config.testBuyerAuthCodes).some(Boolean),
    charge,
    query,
    close,
    refund,
    queryRefund,
    verifyNotification,
    notificationReply,
  };
}
