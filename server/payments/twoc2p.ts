/**
 * The 2C2P adapter: PGW v4.3 server-to-server card payment, mapped onto PayOnce's closed set of
 * outcomes (./gateway). There is no 2C2P SDK on npm; JWTs (HS256 over the UTF-8 bytes of the
 * merchant's secret key, as 2C2P's samples do) are made and checked with jose.
 *
 * One charge is three calls:
 *  1. paymentToken (JWT in, JWT out): opens — or reopens — the invoice `invoiceNo = outTradeNo` for
 *     the amount, with an idempotencyID derived from (outTradeNo, attempt), so a retry of the same
 *     attempt gets the same token back and a new attempt after a decline gets a new one for the same
 *     invoice. A token moves no money.
 *  2. Do Payment with the test buyer's card, as 2C2P documents it: plain JSON, the payment token being
 *     the credential, answered with plain JSON — 2000 "completed, ask Payment Inquiry" or a failure
 *     code. That answer is not signed, so it is never believed on its own.
 *  3. paymentInquiry (JWT in, JWT out): the signed result that the outcome is decided on.
 * This is what makes the adapter work unchanged against the real 2C2P (only baseUrl, merchantId and
 * secretKey differ); the PSP sandbox also accepts gateways.md's JWT form of Do Payment, which the
 * adapter does not need.
 *
 * Without a test buyer the buyer takes their own step on 2C2P's hosted payment page (buyerSteps
 * ['redirect']): a paymentToken with frontendReturnUrl = returnUrl and backendReturnUrl = notifyUrl,
 * answered `awaiting_buyer` with a redirect to its webPaymentUrl, and no Do Payment. The outcome comes
 * by the signed backend notification or paymentInquiry; the browser's return (a form POST of a base64
 * `paymentResponse`, unsigned) decides nothing.
 *
 * Close (an order moving to another gateway, or expiring): paymentInquiry first — paid → already_paid,
 * cancelled or never created → closed — then cancelTransaction in its JWT form `{merchantID,
 * invoiceNo}` (the documented form takes a payment token, which PayOnce does not keep; the invoice is
 * what must stop taking money), and on any refusal a second inquiry decides (the buyer may have paid in
 * between). 2C2P's invoice is one per order (`oneTradePerOrder`): a new attempt on 2C2P reopens it.
 *
 * Refund and refund status: the Payment Maintenance API's refund (processType R) and refund status
 * (RS), with invoiceNo, actionAmount and PayOnce's refundId as `idempotencyID`, in PGW v4.3's JWT
 * envelope (POST {base}/refund, {base}/refundStatusInquiry) rather than 2C2P's XML-in-JWE/JWS on
 * PaymentAction/2.0 [unverified: that envelope is the sandbox's; against the real 2C2P these two calls
 * need the Maintenance API's RSA key exchange]. Their answers use the Maintenance API's two-digit
 * result codes (00, 12, 16, 18, 40, 49 …). 2C2P publishes no refund notification for card payments,
 * so none is verified here.
 *
 * Nothing here guesses: an answer that may hide a charge is `indeterminate`, settled later by query()
 * or the notification. Amounts cross the wire as exact decimal literals, never through a float
 * computation. No 2C2P wire type leaves this file.
 */
import { CompactSign, errors as joseErrors, jwtVerify } from 'jose';
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
import { decimalToMinor, minorToDecimal } from './money';
import { DEFAULT_GATEWAY_TIMEOUT_MS, exchangeHttp, type TransportFailure, assertNever, stringField } from './transport';

export interface TwoC2pGatewayConfig {
  /** The merchant ID 2C2P registered (AN25). */
  merchantId: string;
  /** The merchant's secret key from 2C2P's merchant portal (signs and verifies every JWT). */
  secretKey: string;
  /** The API base including the version, e.g. https://sandbox-pgw.2c2p.com/payment/4.3. */
  baseUrl: string;
  /** Sandbox card numbers standing in for the buyer's card. */
  testBuyers: Record<TestBuyer, string>;
  /** Per-request timeout; default 5000 ms. */
  timeoutMs?: number;
}

const GATEWAY = '2c2p' as const;
/** D(12,5): 12 integer digits at most. */
const MAX_INTEGER_DIGITS = 12;
/** Shown on 2C2P's side as the card holder; the test cards do not check it. */
const CARDHOLDER_NAME = 'PayOnce Customer';

/** ISO 4217 exponents that differ from 2 among the currencies 2C2P settles. */
const CURRENCY_EXPONENT: Readonly<Record<string, number>> = { JPY: 0, KRW: 0, VND: 0 };

function exponentOf(currency: string): number {
  return CURRENCY_EXPONENT[currency] ?? 2;
}

// ---------------------------------------------------------------------------------------------
// JWT

/** A decimal that must reach the JSON text as a number literal, digit for digit. */
class DecimalLiteral {
  constructor(readonly text: string) {}
}

/** JSON.stringify, except that DecimalLiteral values are written as number literals (168.00). */
function jsonText(value: unknown): string {
  if (value instanceof DecimalLiteral) return value.text;
  if (Array.isArray(value)) return `[${value.map((item) => jsonText(item)).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const parts: string[] = [];
    for (const [key, item] of Object.entries(value)) {
      if (item !== undefined) parts.push(`${JSON.stringify(key)}:${jsonText(item)}`);
    }
    return `{${parts.join(',')}}`;
  }
  return JSON.stringify(value);
}

type Claims = Record<string, unknown>;

/**
 * 2C2P amounts are JSON numbers. JSON.parse has turned them into doubles; String() gives back the
 * shortest decimal that reads as the same double, which is the amount exactly for anything up to 15
 * significant digits (every D(12,2) amount). Trailing zeros past the currency's exponent
 * ("168.00000") are dropped; other digits past it, exponent forms or signs make the amount invalid.
 */
function claimAmountToMinor(value: unknown, currency: string): number | null {
  let text: string;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) return null;
    text = String(value);
  } else if (typeof value === 'string') {
    text = value;
  } else {
    return null;
  }
  const match = /^(\d+)(?:\.(\d+))?$/.exec(text);
  if (!match) return null;
  const exponent = exponentOf(currency);
  const whole = match[1] ?? '';
  const fraction = (match[2] ?? '').replace(/0+$/, '');
  if (fraction.length > exponent) return null;
  return decimalToMinor(fraction ? `${whole}.${fraction}` : whole, exponent);
}

// ---------------------------------------------------------------------------------------------
// One call to the gateway

/** What came back from one POST: a verified JWT, a plain JSON answer, or why there is none. */
type Exchange = { kind: 'signed'; claims: Claims } | { kind: 'plain'; body: Claims } | TransportFailure;

// ---------------------------------------------------------------------------------------------
// respCode classes

/**
 * Every respCode, sorted by what it means for money. 2C2P's list: 0000 success, 0001 pending, 0003
 * cancelled, 1000–1005 "continue on another page", 2000 Do Payment completed (inquire), 2001 in
 * progress, 2002 not found, 4xxx card host declines, 6xxx/9xxx refusals of the request itself.
 */
type RespClass =
  | { kind: 'success' }
  | { kind: 'completed' }
  | { kind: 'pending' }
  | { kind: 'redirect' }
  | { kind: 'not_found' }
  | { kind: 'cancelled' }
  | { kind: 'declined' }
  | { kind: 'existing_invoice' }
  /** The request was refused before processing for a reason of configuration: fixable, retryable. */
  | { kind: 'refused' }
  /** The request was refused before processing because of its content: retrying cannot help. */
  | { kind: 'invalid' }
  | { kind: 'unknown' };

function classify(respCode: string): RespClass {
  switch (respCode) {
    case '0000':
      return { kind: 'success' };
    case '2000':
      return { kind: 'completed' };
    case '0001':
    case '2001':
      return { kind: 'pending' };
    case '2002':
      return { kind: 'not_found' };
    case '0003':
      return { kind: 'cancelled' };
    case '9015':
      return { kind: 'existing_invoice' };
    case '9007': // invalid merchant
    case '9040': // invalid payment token
    case '9042': // hash value mismatch (wrong secret)
    case '6103': // invalid JWT
      return { kind: 'refused' };
    case '9004': // value not valid
    case '9005': // mandatory field missing
    case '9006': // field too long
    case '9009': // amount invalid
    case '9010': // currency invalid
      return { kind: 'invalid' };
    default:
      if (/^1\d{3}$/.test(respCode)) return { kind: 'redirect' };
      if (/^4\d{3}$/.test(respCode)) return { kind: 'declined' };
      // Includes 0999/99xx system errors: they do not prove that nothing was processed.
      return { kind: 'unknown' };
  }
}

/**
 * The Payment Maintenance API's result codes (two digits; 2C2P's "Payment Maintenance Result Codes"),
 * sorted by what they mean for a refund.
 */
type MaintenanceClass =
  | { kind: 'success' }
  | { kind: 'pending' }
  | { kind: 'not_found' }
  /** Refused for good for this refund: nothing was refunded and the same request cannot succeed. */
  | { kind: 'refused' }
  /** Anything else, 99 "unable to complete" and 95 "timed out" included: it may have been processed. */
  | { kind: 'unknown' };

function classifyMaintenance(respCode: string): MaintenanceClass {
  switch (respCode) {
    case '00':
      return { kind: 'success' };
    case '42': // refund pending
    case '51': // same idempotent key exists with status pending
      return { kind: 'pending' };
    case '15': // invalid invoice number
    case '16': // requested transaction doesn't exist
      return { kind: 'not_found' };
    case '02': // invalid request
    case '10': // missing compulsory values
    case '11': // request validation failed
    case '12': // transaction status is not valid to perform your action (not paid, voided …)
    case '14': // invalid merchant ID
    case '17': // request type is invalid
    case '18': // invalid action amount
    case '30': // unable to refund more than transaction amount
    case '40': // refund amount is more than transaction amount
    case '41': // refund not allowed
    case '43': // partial refund not allowed
    case '44': // refund rejected
    case '45': // refund failed
    case '46': // insufficient funds to perform refund
    case '49': // transaction is already fully refunded
    case '50': // same idempotent key exists with different type
    case '54': // refund exceeded allowable timeframe
      return { kind: 'refused' };
    default:
      return { kind: 'unknown' };
  }
}

function respCodeOf(claims: Claims): string {
  return stringField(claims, 'respCode') ?? '';
}

function respDescOf(claims: Claims): string {
  return stringField(claims, 'respDesc') ?? (respCodeOf(claims) || 'no respCode');
}

// ---------------------------------------------------------------------------------------------
// The gateway

export function createTwoC2pGateway(config: TwoC2pGatewayConfig): PaymentGateway {
  if (!config.merchantId) throw new Error('2C2P merchantId is required');
  if (!config.secretKey) throw new Error('2C2P secretKey is required');
  const key = new TextEncoder().encode(config.secretKey);
  const baseUrl = config.baseUrl.replace(/\/+$/, '');
  const timeoutMs = config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS;

  async function signClaims(claims: Claims): Promise<string> {
    return new CompactSign(new TextEncoder().encode(jsonText(claims))).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(key);
  }

  /** Verifies a JWT from 2C2P; null for anything that is not provably signed with our secret. */
  async function verify(token: string): Promise<Claims | null> {
    try {
      const { payload } = await jwtVerify(token, key, { algorithms: ['HS256'] });
      return payload as Claims;
    } catch (err) {
      if (err instanceof joseErrors.JOSEError) return null;
      throw err;
    }
  }

  async function post(api: string, body: string): Promise<Exchange> {
    const response = await exchangeHttp(
      `${baseUrl}/${api}`,
      { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json' }, body, redirect: 'error' },
      timeoutMs,
    );
    if (response.kind !== 'received') return response;
    const { status, text } = response;
    // 2C2P answers every request it processed with HTTP 200 (errors included, as respCode); any other
    // status came from something in front of it (a proxy, an overload, a wrong path) before processing.
    if (status !== 200) return { kind: 'not_sent', code: `HTTP_${status}`, message: `HTTP ${status} from ${api}` };
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: `${api} answered non-JSON` };
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: `${api} answered a non-object` };
    }
    const payload = (parsed as Claims).payload;
    if (payload === undefined) return { kind: 'plain', body: parsed as Claims };
    const claims = typeof payload === 'string' ? await verify(payload) : null;
    if (!claims) {
      return { kind: 'in_doubt', code: 'INVALID_RESPONSE_SIGNATURE', message: `${api} answer did not verify with the merchant secret` };
    }
    return { kind: 'signed', claims };
  }

  async function postJwt(api: string, claims: Claims): Promise<Exchange> {
    return post(api, JSON.stringify({ payload: await signClaims(claims) }));
  }

  // -------------------------------------------------------------------------------------------
  // paymentInquiry

  type Inquiry = { kind: 'answered'; claims: Claims } | { kind: 'unavailable'; code: string; message: string };

  async function inquire(invoiceNo: string): Promise<Inquiry> {
    const exchange = await postJwt('paymentInquiry', { merchantID: config.merchantId, invoiceNo, locale: 'en' });
    switch (exchange.kind) {
      case 'signed':
        return { kind: 'answered', claims: exchange.claims };
      case 'plain':
        // Unsigned: a refusal of the inquiry itself (wrong secret, unknown merchant, …).
        return { kind: 'unavailable', code: respCodeOf(exchange.body) || 'MALFORMED_RESPONSE', message: respDescOf(exchange.body) };
      case 'not_sent':
      case 'in_doubt':
        return { kind: 'unavailable', code: exchange.code, message: exchange.message };
      default:
        return assertNever(exchange);
    }
  }

  /** A signed 0000 inquiry answer as a paid trade; null if it does not hold together. */
  function paidTrade(claims: Claims, invoiceNo: string): Extract<TradeStatus, { kind: 'succeeded' }> | null {
    const tranRef = stringField(claims, 'tranRef');
    const currency = stringField(claims, 'currencyCode');
    if (!tranRef || !currency || stringField(claims, 'invoiceNo') !== invoiceNo) return null;
    const amountMinor = claimAmountToMinor(claims.amount, currency);
    if (amountMinor === null) return null;
    return { kind: 'succeeded', gatewayTradeNo: tranRef, amountMinor, currency };
  }

  async function query(outTradeNo: string): Promise<QueryOutcome> {
    const inquiry = await inquire(outTradeNo);
    if (inquiry.kind === 'unavailable') return inquiry;
    const { claims } = inquiry;
    const respClass = classify(respCodeOf(claims));
    let trade: TradeStatus;
    switch (respClass.kind) {
      case 'success': {
        const paid = paidTrade(claims, outTradeNo);
        if (!paid) return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'paid invoice without tranRef, amount or currency' };
        trade = paid;
        break;
      }
      // The latest attempt was declined, or none has finished: the invoice can still be paid.
      case 'declined':
      case 'pending':
      case 'redirect':
        trade = { kind: 'pending' };
        break;
      case 'not_found':
        trade = { kind: 'not_found' };
        break;
      case 'cancelled':
        trade = { kind: 'closed' };
        break;
      case 'completed':
      case 'existing_invoice':
      case 'refused':
      case 'invalid':
      case 'unknown':
        return { kind: 'unavailable', code: respCodeOf(claims) || 'MALFORMED_RESPONSE', message: respDescOf(claims) };
      default:
        return assertNever(respClass);
    }
    return { kind: 'answered', trade };
  }

  /**
   * Decides a charge on the signed inquiry. `why` is what led here: Do Payment's own (unsigned) answer
   * — `payment_error` when that answer was one of 2C2P's error codes (0999 "System error" and the like,
   * HTTP 200 with a plain body, the shape 2C2P fails in) — or 9015 from paymentToken, where "not paid"
   * means the invoice exists for another amount.
   */
  async function settle(
    request: ChargeRequest,
    why: { step: 'payment' | 'payment_error' | 'existing_invoice'; code: string; message: string },
  ): Promise<ChargeOutcome> {
    const inquiry = await inquire(request.outTradeNo);
    if (inquiry.kind === 'unavailable') {
      return { kind: 'indeterminate', code: why.code, message: `${why.message}; inquiry failed: ${inquiry.code} ${inquiry.message}` };
    }
    const { claims } = inquiry;
    const code = respCodeOf(claims);
    const respClass = classify(code);
    switch (respClass.kind) {
      case 'success': {
        const paid = paidTrade(claims, request.outTradeNo);
        if (!paid)
          return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'paid invoice without tranRef, amount or currency' };
        if (paid.amountMinor !== request.amountMinor || paid.currency !== request.currency) {
          // Money moved, but not as asked: for a person (or reconciliation) to look at, never a decline.
          return {
            kind: 'indeterminate',
            code: why.step === 'existing_invoice' ? '9015' : 'AMOUNT_MISMATCH',
            message: `invoice paid ${paid.amountMinor} ${paid.currency}, asked ${request.amountMinor} ${request.currency}`,
          };
        }
        return { kind: 'succeeded', gatewayTradeNo: paid.gatewayTradeNo, amountMinor: paid.amountMinor, currency: paid.currency };
      }
      case 'declined':
      case 'pending':
      case 'cancelled':
        if (why.step === 'existing_invoice') {
          // Not paid, yet paymentToken refused the invoice: it exists for another amount or currency,
          // or it is cancelled — this attempt cannot be paid here, for good.
          const currency = stringField(claims, 'currencyCode');
          const sameTerms =
            respClass.kind !== 'cancelled' &&
            currency === request.currency &&
            claimAmountToMinor(claims.amount, currency) === request.amountMinor;
          if (!sameTerms) return { kind: 'declined', code: '9015', message: why.message };
          // Open for exactly this amount, yet a token refused: not the documented reason for 9015, and
          // nothing was charged. Never a terminal decline of a buyer who did nothing wrong: a retry asks
          // again (the sandbox reopens such an invoice; 2C2P's behaviour here is [unverified]).
          return { kind: 'retryable', code: '9015', message: `${why.message}; the invoice is open for this amount` };
        }
        if (why.step === 'payment_error' && (code === '0001' || respClass.kind === 'declined')) {
          // Do Payment answered with an error, and the signed inquiry finds no approval: no payment
          // attempt at all (0001, a token issued and nobody paid) or a decline, which may be an earlier
          // attempt's (the error carries no tranRef to tell). Either way no money moved, and trying the
          // same attempt again is safe — the idempotencyID replays the token and an invoice takes one
          // approval — so this neither waits for a query nor reports someone else's decline.
          return { kind: 'retryable', code: why.code, message: `${why.message}; the inquiry finds no approval (${code})` };
        }
        if (respClass.kind === 'declined') return { kind: 'declined', code, message: respDescOf(claims) };
        if (respClass.kind === 'cancelled') return { kind: 'declined', code, message: respDescOf(claims) };
        return { kind: 'indeterminate', code, message: respDescOf(claims) };
      case 'redirect':
      case 'not_found':
      case 'completed':
      case 'existing_invoice':
      case 'refused':
      case 'invalid':
      case 'unknown':
        return { kind: 'indeterminate', code: code || why.code, message: `${why.message}; inquiry answered ${code} ${respDescOf(claims)}` };
      default:
        return assertNever(respClass);
    }
  }

  type IssuedToken =
    { kind: 'token'; paymentToken: string; webPaymentUrl: string | undefined } | { kind: 'outcome'; outcome: ChargeOutcome };

  /**
   * paymentToken: opens (or reopens) the invoice. A token moves no money, so whatever goes wrong here
   * short of an answer we cannot authenticate is retryable; 9015 is settled by the signed inquiry.
   */
  async function requestPaymentToken(request: ChargeRequest, claims: Claims): Promise<IssuedToken> {
    const outcome = (o: ChargeOutcome): IssuedToken => ({ kind: 'outcome', outcome: o });
    const tokenExchange = await postJwt('paymentToken', claims);
    switch (tokenExchange.kind) {
      case 'not_sent':
        return outcome({ kind: 'retryable', code: tokenExchange.code, message: tokenExchange.message });
      case 'in_doubt':
        // An answer we cannot authenticate is never acted on (common contract). A timeout or a reset
        // is different: a payment token moves no money, so trying the same attempt again is safe.
        if (tokenExchange.code === 'INVALID_RESPONSE_SIGNATURE' || tokenExchange.code === 'MALFORMED_RESPONSE') {
          return outcome({ kind: 'indeterminate', code: tokenExchange.code, message: tokenExchange.message });
        }
        return outcome({ kind: 'retryable', code: tokenExchange.code, message: `paymentToken: ${tokenExchange.message}` });
      case 'signed':
      case 'plain': {
        const answer = tokenExchange.kind === 'signed' ? tokenExchange.claims : tokenExchange.body;
        const code = respCodeOf(answer);
        const message = respDescOf(answer);
        const respClass = classify(code);
        switch (respClass.kind) {
          case 'success': {
            const token = stringField(answer, 'paymentToken');
            // Only a signed success is believed; a plain "0000" is not 2C2P's.
            if (tokenExchange.kind !== 'signed' || !token) {
              return outcome({ kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'paymentToken success without a signed token' });
            }
            return { kind: 'token', paymentToken: token, webPaymentUrl: stringField(answer, 'webPaymentUrl') };
          }
          case 'existing_invoice':
            // Paid already (a lost answer, another tab) or open for another amount: the inquiry says which.
            return outcome(await settle(request, { step: 'existing_invoice', code, message }));
          case 'refused':
          case 'unknown':
            // Nothing is charged by a paymentToken call, whatever went wrong with it.
            return outcome({ kind: 'retryable', code: code || 'MALFORMED_RESPONSE', message });
          case 'invalid':
            return outcome({ kind: 'declined', code, message });
          case 'completed':
          case 'pending':
          case 'redirect':
          case 'not_found':
          case 'cancelled':
          case 'declined':
            return outcome({ kind: 'retryable', code, message: `unexpected paymentToken answer: ${message}` });
          default:
            return assertNever(respClass);
        }
      }
      default:
        return assertNever(tokenExchange);
    }
  }

  /**
   * The buyer's own step: 2C2P's hosted payment page. A payment token whose webPaymentUrl the buyer's
   * browser is sent to; no Do Payment (the page is where the card is entered, 3-D Secure included). The
   * page sends the buyer back to returnUrl (frontendReturnUrl, a form POST of `paymentResponse`, which
   * is unsigned and never decides anything) and 2C2P posts the signed result to notifyUrl
   * (backendReturnUrl); query() reads it from paymentInquiry.
   *
   * A retry of the same attempt sends the same idempotencyID and the same claims, so 2C2P answers with
   * the same token and the same page — not 9015 "Existing invoice number", which it keeps for an invoice
   * that is paid, cancelled, or open for another amount. Its own idempotencyID (suffix "W"), distinct from
   * the test-buyer charge's, keeps the two requests from ever being taken for one changed request.
   */
  async function chargeByRedirect(request: ChargeRequest, exponent: number): Promise<ChargeOutcome> {
    const step = request.buyerStep ?? 'redirect';
    if (step !== 'redirect') {
      return { kind: 'declined', code: 'UNSUPPORTED_BUYER_STEP', message: `2C2P offers the hosted payment page (redirect), not ${step}` };
    }
    const issued = await requestPaymentToken(request, {
      merchantID: config.merchantId,
      invoiceNo: request.outTradeNo,
      description: request.subject,
      amount: new DecimalLiteral(minorToDecimal(request.amountMinor, exponent)),
      currencyCode: request.currency,
      idempotencyID: `${request.outTradeNo}-${request.attempt}W`,
      // Cards: what query() and the notification are read for (tranRef, approval) and what the sandbox
      // emulates; other channels would leave the invoice pending on a third party's page.
      paymentChannel: ['CC'],
      frontendReturnUrl: request.returnUrl,
      backendReturnUrl: request.notifyUrl,
    });
    if (issued.kind === 'outcome') return issued.outcome;
    const url = issued.webPaymentUrl;
    if (!url || !/^https?:\/\//i.test(url)) {
      return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'paymentToken success without a webPaymentUrl' };
    }

    // A replayed token may belong to an invoice the buyer has paid since (or that was cancelled): its
    // page would only say so. The signed inquiry tells; when it cannot be asked, the page is still the
    // right answer (a paid invoice is settled by the notification or a later query).
    const inquiry = await inquire(request.outTradeNo);
    if (inquiry.kind === 'answered') {
      const { claims } = inquiry;
      const code = respCodeOf(claims);
      const respClass = classify(code);
      if (respClass.kind === 'success') {
        const paid = paidTrade(claims, request.outTradeNo);
        if (!paid || paid.amountMinor !== request.amountMinor || paid.currency !== request.currency) {
          return {
            kind: 'indeterminate',
            code: paid ? 'AMOUNT_MISMATCH' : 'MALFORMED_RESPONSE',
            message: 'invoice paid, but not as asked',
          };
        }
        return { kind: 'succeeded', gatewayTradeNo: paid.gatewayTradeNo, amountMinor: paid.amountMinor, currency: paid.currency };
      }
      // Cancelled by close(): the page is dead and stays dead; this attempt is over.
      if (respClass.kind === 'cancelled') return { kind: 'declined', code, message: respDescOf(claims) };
    }
    return { kind: 'awaiting_buyer', action: { kind: 'redirect', url } };
  }

  async function charge(request: ChargeRequest): Promise<ChargeOutcome> {
    // Checked before any call: these can only be programming errors, and the gateway would refuse them.
    if (!/^[A-Z]{3}$/.test(request.currency)) {
      return { kind: 'declined', code: 'UNSUPPORTED_CURRENCY', message: `not an ISO 4217 code: ${request.currency}` };
    }
    const exponent = exponentOf(request.currency);
    if (
      !Number.isSafeInteger(request.amountMinor) ||
      request.amountMinor < 1 ||
      String(request.amountMinor).length > MAX_INTEGER_DIGITS + exponent
    ) {
      return { kind: 'declined', code: 'INVALID_AMOUNT', message: 'amount must be a positive integer with at most 12 integer digits' };
    }
    if (request.buyer === undefined) return chargeByRedirect(request, exponent);
    const cardNo = config.testBuyers[request.buyer];
    if (!cardNo) return { kind: 'declined', code: 'NO_TEST_CARD', message: 'no card configured for this buyer' };

    // 1. paymentToken. The idempotencyID is per attempt: a retry of this attempt replays the same
    // token; the next attempt (after a decline) gets a new token for the same invoice.
    const issued = await requestPaymentToken(request, {
      merchantID: config.merchantId,
      invoiceNo: request.outTradeNo,
      description: request.subject,
      amount: new DecimalLiteral(minorToDecimal(request.amountMinor, exponent)),
      currencyCode: request.currency,
      idempotencyID: `${request.outTradeNo}-${request.attempt}`,
      paymentChannel: ['CC'],
      // Server-to-server: no buyer is there to pass a 3-D Secure challenge.
      request3DS: 'N',
      backendReturnUrl: request.notifyUrl,
    });
    if (issued.kind === 'outcome') return issued.outcome;
    const { paymentToken } = issued;

    // 2. Do Payment, as 2C2P documents it for PCI-DSS merchants (card data in clear, no
    // securePayToken: the sandbox's test cards stand in for a real buyer). 2C2P's test cards take
    // any future expiry and any CVV.
    const expiryYear = new Date().getUTCFullYear() + 3;
    const paymentExchange = await post(
      'payment',
      JSON.stringify({
        paymentToken,
        locale: 'en',
        payment: {
          code: { channelCode: 'CC' },
          data: { name: CARDHOLDER_NAME, cardNo, expiryMonth: '12', expiryYear: String(expiryYear), securityCode: '123' },
        },
      }),
    );
    switch (paymentExchange.kind) {
      case 'not_sent':
        return { kind: 'retryable', code: paymentExchange.code, message: paymentExchange.message };
      case 'in_doubt':
        // Sent, and maybe processed: only an inquiry (later) or the notification can tell.
        return { kind: 'indeterminate', code: paymentExchange.code, message: paymentExchange.message };
      case 'signed':
      case 'plain': {
        const answer = paymentExchange.kind === 'signed' ? paymentExchange.claims : paymentExchange.body;
        const code = respCodeOf(answer);
        const message = respDescOf(answer);
        const respClass = classify(code);
        switch (respClass.kind) {
          // Whatever Do Payment says about the card, the signed inquiry decides.
          case 'success':
          case 'completed':
          case 'declined':
          case 'pending':
          case 'existing_invoice':
          case 'cancelled':
          case 'not_found':
          case 'unknown':
            return settle(request, {
              step: respClass.kind === 'unknown' && /^\d{4}$/.test(code) ? 'payment_error' : 'payment',
              code: code || 'MALFORMED_RESPONSE',
              message,
            });
          case 'redirect':
            // 3-D Secure or a third-party page that nobody will open: it stays pending, never guessed.
            return { kind: 'indeterminate', code, message: `Do Payment needs a buyer on another page: ${message}` };
          case 'refused':
            return { kind: 'retryable', code, message };
          case 'invalid':
            // Refused for its content before reaching the card host: nothing was charged, and the
            // same request would be refused again.
            return { kind: 'declined', code, message };
          default:
            return assertNever(respClass);
        }
      }
      default:
        return assertNever(paymentExchange);
    }
  }

  // -------------------------------------------------------------------------------------------
  // close

  async function close(request: CloseRequest): Promise<CloseOutcome> {
    const before = await closeVerdict(request.outTradeNo);
    if (before.kind !== 'open') return before.outcome;

    const exchange = await postJwt('cancelTransaction', { merchantID: config.merchantId, invoiceNo: request.outTradeNo });
    switch (exchange.kind) {
      case 'not_sent':
      case 'in_doubt':
        // Not closed, or not known to be: no new attempt may start until a later close settles it.
        return { kind: 'indeterminate', code: exchange.code, message: `cancelTransaction: ${exchange.message}` };
      case 'plain':
        // An unsigned refusal of the request itself (wrong secret, unknown merchant …): nothing cancelled.
        return { kind: 'indeterminate', code: respCodeOf(exchange.body) || 'MALFORMED_RESPONSE', message: respDescOf(exchange.body) };
      case 'signed': {
        const { claims } = exchange;
        const code = respCodeOf(claims);
        if (stringField(claims, 'invoiceNo') !== request.outTradeNo) {
          return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'cancelTransaction answered for another invoiceNo' };
        }
        const respClass = classify(code);
        switch (respClass.kind) {
          case 'success':
          case 'cancelled':
          case 'not_found':
            return { kind: 'closed' };
          // 9015 (paid in the meantime) or anything else: the invoice's own state decides.
          case 'existing_invoice':
          case 'completed':
          case 'pending':
          case 'redirect':
          case 'declined':
          case 'refused':
          case 'invalid':
          case 'unknown': {
            const after = await closeVerdict(request.outTradeNo);
            if (after.kind !== 'open') return after.outcome;
            return {
              kind: 'indeterminate',
              code: code || 'MALFORMED_RESPONSE',
              message: `cancelTransaction refused: ${respDescOf(claims)}`,
            };
          }
          default:
            return assertNever(respClass);
        }
      }
      default:
        return assertNever(exchange);
    }
  }

  /**
   * What the signed inquiry says a close must do: nothing more (paid, cancelled, never created), or
   * cancel (open: unpaid, maybe declined before).
   */
  async function closeVerdict(invoiceNo: string): Promise<{ kind: 'open' } | { kind: 'final'; outcome: CloseOutcome }> {
    const outcome = await query(invoiceNo);
    if (outcome.kind === 'unavailable') {
      return { kind: 'final', outcome: { kind: 'indeterminate', code: outcome.code, message: `paymentInquiry: ${outcome.message}` } };
    }
    const { trade } = outcome;
    switch (trade.kind) {
      case 'succeeded':
        return {
          kind: 'final',
          outcome: {
            kind: 'already_paid',
            charges: [{ gatewayTradeNo: trade.gatewayTradeNo, amountMinor: trade.amountMinor, currency: trade.currency }],
          },
        };
      case 'closed':
        return { kind: 'final', outcome: { kind: 'closed' } };
      case 'not_found':
        // No invoice, so no payment token: nothing can take money for it until the merchant itself asks
        // for a token, which PayOnce does only in a new attempt, after this close.
        return { kind: 'final', outcome: { kind: 'closed' } };
      case 'pending':
        return { kind: 'open' };
      default:
        return assertNever(trade);
    }
  }

  // -------------------------------------------------------------------------------------------
  // refund and refund status

  /** The signed refund record (processType R or RS with respCode 00) as a RefundStatus; null if malformed. */
  function refundRecord(claims: Claims, expected: { outTradeNo: string; refundId: string; currency: string }): RefundStatus | null {
    if (stringField(claims, 'invoiceNo') !== expected.outTradeNo || stringField(claims, 'idempotencyID') !== expected.refundId) return null;
    const gatewayRefundId = stringField(claims, 'refundReferenceNo');
    const currency = stringField(claims, 'currencyCode') ?? expected.currency;
    if (currency !== expected.currency) return null;
    const amountMinor = claimAmountToMinor(claims.amount, currency);
    const status = stringField(claims, 'status');
    switch (status) {
      case 'RF':
      case undefined:
        if (!gatewayRefundId || amountMinor === null) return null;
        return { kind: 'succeeded', gatewayRefundId, amountMinor };
      case 'RP':
        return { kind: 'pending' };
      case 'RR':
        return { kind: 'failed', code: 'RR', message: 'refund rejected' };
      default:
        return null;
    }
  }

  async function refund(request: RefundRequest): Promise<RefundOutcome> {
    // Checked before any call: these can only be programming errors, and the gateway would refuse them.
    if (!/^[A-Za-z0-9]{1,32}$/.test(request.refundId)) {
      return { kind: 'failed', code: 'INVALID_REFUND_ID', message: 'refundId must be 1–32 letters or digits' };
    }
    const exponent = exponentOf(request.currency);
    if (
      !/^[A-Z]{3}$/.test(request.currency) ||
      !Number.isSafeInteger(request.amountMinor) ||
      request.amountMinor < 1 ||
      String(request.amountMinor).length > MAX_INTEGER_DIGITS + exponent
    ) {
      return { kind: 'failed', code: 'INVALID_AMOUNT', message: 'amount must be a positive integer with at most 12 integer digits' };
    }

    const exchange = await postJwt('refund', {
      merchantID: config.merchantId,
      processType: 'R',
      invoiceNo: request.outTradeNo,
      actionAmount: new DecimalLiteral(minorToDecimal(request.amountMinor, exponent)),
      // PayOnce's refund id is the refund's idempotent key: the same one again returns the first refund.
      idempotencyID: request.refundId,
    });
    switch (exchange.kind) {
      case 'not_sent':
        return { kind: 'retryable', code: exchange.code, message: `refund: ${exchange.message}` };
      case 'in_doubt':
        return { kind: 'indeterminate', code: exchange.code, message: `refund: ${exchange.message}` };
      case 'plain': {
        // Refused before processing, unsigned: the envelope or a field of it.
        const code = respCodeOf(exchange.body);
        const respClass = classify(code);
        switch (respClass.kind) {
          case 'refused':
            return { kind: 'retryable', code, message: respDescOf(exchange.body) };
          case 'invalid':
            return { kind: 'failed', code, message: respDescOf(exchange.body) };
          case 'success':
          case 'completed':
          case 'pending':
          case 'redirect':
          case 'not_found':
          case 'cancelled':
          case 'declined':
          case 'existing_invoice':
          case 'unknown':
            // 0999 and anything unexpected do not prove that nothing was refunded.
            return { kind: 'indeterminate', code: code || 'MALFORMED_RESPONSE', message: respDescOf(exchange.body) };
          default:
            return assertNever(respClass);
        }
      }
      case 'signed': {
        const { claims } = exchange;
        const code = respCodeOf(claims);
        const message = respDescOf(claims);
        const respClass = classifyMaintenance(code);
        switch (respClass.kind) {
          case 'success': {
            const record = refundRecord(claims, { outTradeNo: request.outTradeNo, refundId: request.refundId, currency: request.currency });
            if (!record)
              return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'refund success without a matching refund record' };
            switch (record.kind) {
              case 'succeeded':
                return { kind: 'succeeded', gatewayRefundId: record.gatewayRefundId, amountMinor: record.amountMinor };
              case 'pending':
                return { kind: 'pending', gatewayRefundId: stringField(claims, 'refundReferenceNo') ?? null };
              case 'failed':
                return { kind: 'failed', code: record.code, message: record.message };
              case 'not_found':
                return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'refund success without a refund' };
              default:
                return assertNever(record);
            }
          }
          case 'pending':
            return { kind: 'pending', gatewayRefundId: stringField(claims, 'refundReferenceNo') ?? null };
          case 'not_found':
          case 'refused':
            return { kind: 'failed', code, message };
          case 'unknown':
            return { kind: 'indeterminate', code: code || 'MALFORMED_RESPONSE', message };
          default:
            return assertNever(respClass);
        }
      }
      default:
        return assertNever(exchange);
    }
  }

  async function queryRefund(request: RefundQuery): Promise<RefundQueryOutcome> {
    const exchange = await postJwt('refundStatusInquiry', {
      merchantID: config.merchantId,
      processType: 'RS',
      invoiceNo: request.outTradeNo,
      idempotencyID: request.refundId,
    });
    switch (exchange.kind) {
      case 'not_sent':
      case 'in_doubt':
        return { kind: 'unavailable', code: exchange.code, message: `refundStatusInquiry: ${exchange.message}` };
      case 'plain':
        return { kind: 'unavailable', code: respCodeOf(exchange.body) || 'MALFORMED_RESPONSE', message: respDescOf(exchange.body) };
      case 'signed': {
        const { claims } = exchange;
        const code = respCodeOf(claims);
        const respClass = classifyMaintenance(code);
        switch (respClass.kind) {
          case 'success': {
            // The charge's currency is not in the query; the record carries its own.
            const currency = stringField(claims, 'currencyCode') ?? '';
            const record = refundRecord(claims, { outTradeNo: request.outTradeNo, refundId: request.refundId, currency });
            if (!record)
              return { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: 'refund status without a matching refund record' };
            return { kind: 'answered', refund: record };
          }
          case 'pending':
            return { kind: 'answered', refund: { kind: 'pending' } };
          case 'not_found':
            // 2C2P positively says it holds no refund under this idempotencyID for this invoice.
            return { kind: 'answered', refund: { kind: 'not_found' } };
          case 'refused':
          case 'unknown':
            return { kind: 'unavailable', code: code || 'MALFORMED_RESPONSE', message: respDescOf(claims) };
          default:
            return assertNever(respClass);
        }
      }
      default:
        return assertNever(exchange);
    }
  }

  async function verifyNotification(request: { headers: Headers; rawBody: string }): Promise<NotificationVerdict> {
    let parsed: unknown;
    try {
      parsed = JSON.parse(request.rawBody);
    } catch {
      return { kind: 'rejected', reason: 'body is not JSON' };
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
      return { kind: 'rejected', reason: 'body is not a JSON object' };
    const payload = (parsed as Claims).payload;
    if (typeof payload !== 'string' || payload === '') return { kind: 'rejected', reason: 'missing payload' };
    // The signature first: nothing below reads an unverified claim.
    const claims = await verify(payload);
    if (!claims) return { kind: 'rejected', reason: 'invalid signature' };

    for (const field of ['merchantID', 'invoiceNo', 'currencyCode', 'respCode'] as const) {
      if (!stringField(claims, field)) return { kind: 'rejected', reason: `missing ${field}` };
    }
    const currency = stringField(claims, 'currencyCode') ?? '';
    const amountMinor = claimAmountToMinor(claims.amount, currency);
    if (amountMinor === null) return { kind: 'rejected', reason: `invalid amount ${JSON.stringify(claims.amount)}` };
    const succeeded = claims.respCode === '0000';
    const tranRef = stringField(claims, 'tranRef');
    if (succeeded && !tranRef) return { kind: 'rejected', reason: 'missing tranRef' };
    const invoiceNo = stringField(claims, 'invoiceNo') ?? '';
    return {
      kind: 'verified',
      notification: {
        gateway: GATEWAY,
        // design.md §5: `webhook:2c2p:{invoiceNo}` — one paid transaction per invoice.
        eventId: invoiceNo,
        merchantId: stringField(claims, 'merchantID') ?? '',
        outTradeNo: invoiceNo,
        status: succeeded ? 'succeeded' : 'other',
        gatewayTradeNo: tranRef ?? '',
        amountMinor,
        currency,
      },
    };
  }

  function notificationReply(ack: boolean): NotificationReply {
    // 2C2P stops on HTTP 200; anything else is delivered again on its schedule.
    return ack
      ? { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: '' }
      : { status: 500, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: 'retry' };
  }

  return {
    id: GATEWAY,
    merchantId: config.merchantId,
    // One invoiceNo per order: a new attempt asks for a new payment token on the same invoice.
    oneTradePerOrder: true,
    // The hosted payment page: the buyer enters the card on 2C2P's page and comes back to returnUrl.
    buyerSteps: ['redirect'],
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
