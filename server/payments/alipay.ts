/**
 * The Alipay adapter: face-to-face payment (`alipay.trade.pay`, scene bar_code) through the official
 * alipay-sdk, mapped onto PayOnce's closed set of outcomes (./gateway).
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
 * No SDK type leaves this file.
 */
import type { KeyObject } from 'node:crypto';
import { AlipayRequestError, AlipaySdk } from 'alipay-sdk';
import type {
  ChargeOutcome,
  ChargeRequest,
  NotificationReply,
  NotificationVerdict,
  PaymentGateway,
  QueryOutcome,
  TestBuyer,
  TradeStatus,
} from './gateway';
import { decimalToMinor, minorToDecimal } from './money';
import { keyFromText, NEVER_SENT_CODES, errorCode } from './support';

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
type Exchange =
  | { kind: 'answered'; response: Fields }
  | { kind: 'not_sent' | 'in_doubt'; code: string; message: string };



function classifyFailure(err: unknown): Exchange {
  if (!(err instanceof AlipayRequestError)) {
    // Not a transport error the SDK recognised: it could have happened after sending.
    return { kind: 'in_doubt', code: 'SDK_ERROR', message: err instanceof Error ? err.message : String(err) };
  }
  const cause: unknown = err.cause;
  if (cause !== undefined) {
    // A transport error; its cause is urllib's/undici's error.
    const code = errorCode(cause) ?? errorCode((cause as { cause?: unknown }).cause) ?? (cause as Error).name;
    if (NEVER_SENT_CODES.has(code)) return { kind: 'not_sent', code, message: err.message };
    // Timeouts, resets, "other side closed": the gateway may have processed the request.
    return { kind: 'in_doubt', code, message: err.message };
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

function str(fields: Fields, key: string): string | undefined {
  const value = fields[key];
  return typeof value === 'string' && value !== '' ? value : undefined;
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
  const code = str(response, 'code') ?? '';
  const subCode = str(response, 'sub_code') ?? '';
  const message = str(response, 'sub_msg') ?? str(response, 'msg') ?? code;
  switch (code) {
    case '10000': {
      const tradeNo = str(response, 'trade_no');
      const totalAmount = str(response, 'total_amount');
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

function assertNever(value: never): never {
  throw new Error(`unhandled case: ${JSON.stringify(value)}`);
}

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
    timeout: config.timeoutMs ?? 5000,
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

  async function query(outTradeNo: string): Promise<QueryOutcome> {
    const exchange = await call('alipay.trade.query', { bizContent: { out_trade_no: outTradeNo } });
    if (exchange.kind !== 'answered') return { kind: 'unavailable', code: exchange.code, message: exchange.message };
    const { response } = exchange;
    const code = str(response, 'code');
    const subCode = str(response, 'sub_code');
    if (code === '40004' && subCode === 'ACQ.TRADE_NOT_EXIST') return { kind: 'answered', trade: { kind: 'not_found' } };
    if (code !== '10000') {
      return {
        kind: 'unavailable',
        code: subCode ?? code ?? 'MALFORMED_RESPONSE',
        message: str(response, 'sub_msg') ?? str(response, 'msg') ?? 'trade.query failed',
      };
    }
    const status = str(response, 'trade_status');
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
        const tradeNo = str(response, 'trade_no');
        const amountMinor = decimalToMinor(str(response, 'total_amount') ?? '');
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
    const authCode = config.testBuyerAuthCodes[request.buyer ?? 'ok'];
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
          return { kind: 'indeterminate', code: 'AMOUNT_MISMATCH', message: `paid ${answer.totalAmount}, asked ${request.amountMinor} fen` };
        }
        return { kind: 'succeeded', gatewayTradeNo: answer.tradeNo, amountMinor, currency: CURRENCY };
      }
      case 'already_paid': {
        // A retry of a charge that went through (its answer was lost). Believe it only if the trade
        // says so, for this amount.
        const found = await query(request.outTradeNo);
        if (found.kind === 'answered' && found.trade.kind === 'succeeded' && found.trade.amountMinor === request.amountMinor) {
          return { kind: 'succeeded', gatewayTradeNo: found.trade.gatewayTradeNo, amountMinor: found.trade.amountMinor, currency: CURRENCY };
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
    charge,
    query,
    verifyNotification,
    notificationReply,
  };
}
