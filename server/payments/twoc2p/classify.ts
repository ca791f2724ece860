/**
 * What 2C2P's answers mean, as pure functions: a parsed answer (or the transport failure in its
 * place) in, PayOnce's outcome or the next step out — for the trade's status, a charge, the hosted
 * page, a close and the backend notification (refunds: ./classify-refund). No I/O, no configuration,
 * no signing: the gateway makes the calls, verifies the JWTs and hands what came back to these.
 */
import type {
  ChargeOutcome,
  ChargeRequest,
  CloseOutcome,
  GatewayId,
  NotificationVerdict,
  QueryOutcome,
  SucceededTrade,
  TradeStatus,
} from '@/server/payments/gateway';
import {
  assertNever,
  chargeOrRefundFailure,
  closeFailure,
  queryFailure,
  stringField,
  type TransportFailure,
} from '@/server/payments/transport';
import { claimAmountToMinor } from './amounts';
import { respClassOf, respCodeOf, respDescOf, unavailableOf, type Unavailable } from './codes';
import type { Exchange } from './exchange';
import type { Claims } from './jwt';

export const GATEWAY_ID: GatewayId = '2c2p';

// ---------------------------------------------------------------------------------------------
// paymentInquiry → TradeStatus

export type Inquiry = { kind: 'answered'; claims: Claims } | Unavailable;

export function inquiryOf(exchange: Exchange): Inquiry {
  switch (exchange.kind) {
    case 'signed':
      return { kind: 'answered', claims: exchange.claims };
    case 'plain':
      // Unsigned: a refusal of the inquiry itself (wrong secret, unknown merchant, …).
      return unavailableOf(exchange.body);
    case 'not_sent':
    case 'in_doubt':
      return queryFailure(exchange);
    default:
      return assertNever(exchange);
  }
}

/** A signed 0000 inquiry answer as a paid trade; null if it does not hold together. */
export function paidTrade(claims: Claims, invoiceNo: string): Extract<TradeStatus, { kind: 'succeeded' }> | null {
  const tranRef = stringField(claims, 'tranRef');
  const currency = stringField(claims, 'currencyCode');
  if (!tranRef || !currency || stringField(claims, 'invoiceNo') !== invoiceNo) return null;
  const amountMinor = claimAmountToMinor(claims.amount, currency);
  if (amountMinor === null) return null;
  return { kind: 'succeeded', gatewayTradeNo: tranRef, amountMinor, currency };
}

const MALFORMED_PAID = 'paid invoice without tranRef, amount or currency';

export function tradeOf(inquiry: Inquiry, invoiceNo: string): QueryOutcome {
  if (inquiry.kind === 'unavailable') return inquiry;
  const { claims } = inquiry;
  const respClass = respClassOf(respCodeOf(claims));
  switch (respClass) {
    case 'success': {
      const paid = paidTrade(claims, invoiceNo);
      return paid ? { kind: 'answered', trade: paid } : { kind: 'unavailable', code: 'MALFORMED_RESPONSE', message: MALFORMED_PAID };
    }
    // The latest attempt was declined, or none has finished: the invoice can still be paid.
    case 'declined':
    case 'pending':
    case 'redirect':
      return { kind: 'answered', trade: { kind: 'pending' } };
    case 'not_found':
      return { kind: 'answered', trade: { kind: 'not_found' } };
    case 'cancelled':
      return { kind: 'answered', trade: { kind: 'closed' } };
    case 'completed':
    case 'existing_invoice':
    case 'refused':
    case 'invalid':
    case 'unknown':
      return unavailableOf(claims);
    default:
      return assertNever(respClass);
  }
}

// ---------------------------------------------------------------------------------------------
// Charge: paymentToken, Do Payment, and the inquiry that settles them

/** A step that moves no money and needs the next call, or the charge's outcome already. */
type Decided = { kind: 'outcome'; outcome: ChargeOutcome };

export type TokenAnswer =
  | { kind: 'token'; paymentToken: string; webPaymentUrl: string | undefined }
  /** 9015: paid already (a lost answer, another tab) or open for another amount: the inquiry says which. */
  | { kind: 'existing_invoice'; code: string; message: string }
  | Decided;

/**
 * paymentToken's answer. A token moves no money, so whatever goes wrong here short of an answer we
 * cannot authenticate is retryable.
 */
export function classifyTokenAnswer(exchange: Exchange): TokenAnswer {
  switch (exchange.kind) {
    case 'not_sent':
    case 'in_doubt':
      return { kind: 'outcome', outcome: tokenFailure(exchange) };
    case 'signed':
      return tokenAnswer(exchange.claims, true);
    case 'plain':
      return tokenAnswer(exchange.body, false);
    default:
      return assertNever(exchange);
  }
}

/**
 * An answer we cannot authenticate is never acted on (common contract). A timeout or a reset is
 * different: a payment token moves no money, so trying the same attempt again is safe.
 */
function tokenFailure(failure: TransportFailure): ChargeOutcome {
  const unauthenticated = failure.code === 'INVALID_RESPONSE_SIGNATURE' || failure.code === 'MALFORMED_RESPONSE';
  if (failure.kind === 'in_doubt' && !unauthenticated) {
    return { kind: 'retryable', code: failure.code, message: `paymentToken: ${failure.message}` };
  }
  return chargeOrRefundFailure(failure);
}

function tokenAnswer(answer: Claims, signed: boolean): TokenAnswer {
  const code = respCodeOf(answer);
  const message = respDescOf(answer);
  const respClass = respClassOf(code);
  switch (respClass) {
    case 'success': {
      const token = stringField(answer, 'paymentToken');
      // Only a signed success is believed; a plain "0000" is not 2C2P's.
      if (!signed || !token) {
        return decided({ kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'paymentToken success without a signed token' });
      }
      return { kind: 'token', paymentToken: token, webPaymentUrl: stringField(answer, 'webPaymentUrl') };
    }
    case 'existing_invoice':
      return { kind: 'existing_invoice', code, message };
    case 'refused':
    case 'unknown':
      // Nothing is charged by a paymentToken call, whatever went wrong with it.
      return decided({ kind: 'retryable', code: code || 'MALFORMED_RESPONSE', message });
    case 'invalid':
      return decided({ kind: 'declined', code, message });
    case 'completed':
    case 'pending':
    case 'redirect':
    case 'not_found':
    case 'cancelled':
    case 'declined':
      return decided({ kind: 'retryable', code, message: `unexpected paymentToken answer: ${message}` });
    default:
      return assertNever(respClass);
  }
}

function decided(outcome: ChargeOutcome): Decided {
  return { kind: 'outcome', outcome };
}

/**
 * What led to the signed inquiry: Do Payment's own (unsigned) answer — `payment_error` when that
 * answer was one of 2C2P's error codes (0999 "System error" and the like, HTTP 200 with a plain body,
 * the shape 2C2P fails in) — or 9015 from paymentToken, where "not paid" means the invoice exists for
 * another amount.
 */
export type SettleReason = { step: 'payment' | 'payment_error' | 'existing_invoice'; code: string; message: string };

export type PaymentAnswer = { kind: 'settle'; why: SettleReason } | Decided;

/** Do Payment's answer: whatever it says about the card, the signed inquiry decides. */
export function classifyPaymentAnswer(exchange: Exchange): PaymentAnswer {
  switch (exchange.kind) {
    case 'not_sent':
    case 'in_doubt':
      // Sent, and maybe processed: only an inquiry (later) or the notification can tell.
      return decided(chargeOrRefundFailure(exchange));
    case 'signed':
      return paymentAnswer(exchange.claims);
    case 'plain':
      return paymentAnswer(exchange.body);
    default:
      return assertNever(exchange);
  }
}

function paymentAnswer(answer: Claims): PaymentAnswer {
  const code = respCodeOf(answer);
  const message = respDescOf(answer);
  const respClass = respClassOf(code);
  switch (respClass) {
    case 'success':
    case 'completed':
    case 'declined':
    case 'pending':
    case 'existing_invoice':
    case 'cancelled':
    case 'not_found':
    case 'unknown': {
      const step = respClass === 'unknown' && /^\d{4}$/.test(code) ? 'payment_error' : 'payment';
      return { kind: 'settle', why: { step, code: code || 'MALFORMED_RESPONSE', message } };
    }
    case 'redirect':
      // 3-D Secure or a third-party page that nobody will open: it stays pending, never guessed.
      return decided({ kind: 'indeterminate', code, message: `Do Payment needs a buyer on another page: ${message}` });
    case 'refused':
      return decided({ kind: 'retryable', code, message });
    case 'invalid':
      // Refused for its content before reaching the card host: nothing was charged, and the same
      // request would be refused again.
      return decided({ kind: 'declined', code, message });
    default:
      return assertNever(respClass);
  }
}

/** Decides a charge on the signed inquiry, given what led to it. */
export function settleCharge(inquiry: Inquiry, request: ChargeRequest, why: SettleReason): ChargeOutcome {
  if (inquiry.kind === 'unavailable') {
    return { kind: 'indeterminate', code: why.code, message: `${why.message}; inquiry failed: ${inquiry.code} ${inquiry.message}` };
  }
  const { claims } = inquiry;
  const code = respCodeOf(claims);
  const respClass = respClassOf(code);
  switch (respClass) {
    case 'success':
      return paidCharge(claims, request, why.step === 'existing_invoice' ? '9015' : 'AMOUNT_MISMATCH');
    case 'declined':
    case 'pending':
    case 'cancelled':
      return unpaidCharge(claims, respClass, request, why);
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

/** A paid invoice: succeeded when paid exactly as asked. */
function paidCharge(claims: Claims, request: ChargeRequest, mismatchCode: string): ChargeOutcome {
  const paid = paidTrade(claims, request.outTradeNo);
  if (!paid) return { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: MALFORMED_PAID };
  if (paid.amountMinor !== request.amountMinor || paid.currency !== request.currency) {
    // Money moved, but not as asked: for a person (or reconciliation) to look at, never a decline.
    return {
      kind: 'indeterminate',
      code: mismatchCode,
      message: `invoice paid ${paid.amountMinor} ${paid.currency}, asked ${request.amountMinor} ${request.currency}`,
    };
  }
  return { kind: 'succeeded', gatewayTradeNo: paid.gatewayTradeNo, amountMinor: paid.amountMinor, currency: paid.currency };
}

/** An invoice that is not paid: declined (0001 pending, 4xxx the latest attempt's decline, 0003 cancelled). */
function unpaidCharge(
  claims: Claims,
  respClass: 'declined' | 'pending' | 'cancelled',
  request: ChargeRequest,
  why: SettleReason,
): ChargeOutcome {
  const code = respCodeOf(claims);
  if (why.step === 'existing_invoice') return existingInvoiceCharge(claims, respClass, request, why.message);
  if (why.step === 'payment_error' && (code === '0001' || respClass === 'declined')) {
    // Do Payment answered with an error, and the signed inquiry finds no approval: no payment
    // attempt at all (0001, a token issued and nobody paid) or a decline, which may be an earlier
    // attempt's (the error carries no tranRef to tell). Either way no money moved, and trying the
    // same attempt again is safe — the idempotencyID replays the token and an invoice takes one
    // approval — so this neither waits for a query nor reports someone else's decline.
    return { kind: 'retryable', code: why.code, message: `${why.message}; the inquiry finds no approval (${code})` };
  }
  if (respClass === 'pending') return { kind: 'indeterminate', code, message: respDescOf(claims) };
  return { kind: 'declined', code, message: respDescOf(claims) };
}

/**
 * Not paid, yet paymentToken refused the invoice (9015): it exists for another amount or currency, or
 * it is cancelled — this attempt cannot be paid here, for good.
 */
function existingInvoiceCharge(
  claims: Claims,
  respClass: 'declined' | 'pending' | 'cancelled',
  request: ChargeRequest,
  message: string,
): ChargeOutcome {
  const currency = stringField(claims, 'currencyCode');
  const sameTerms =
    respClass !== 'cancelled' && currency === request.currency && claimAmountToMinor(claims.amount, currency) === request.amountMinor;
  if (!sameTerms) return { kind: 'declined', code: '9015', message };
  // Open for exactly this amount, yet a token refused: not the documented reason for 9015, and
  // nothing was charged. Never a terminal decline of a buyer who did nothing wrong: a retry asks
  // again (the sandbox reopens such an invoice; 2C2P's behaviour here is [unverified]).
  return { kind: 'retryable', code: '9015', message: `${message}; the invoice is open for this amount` };
}

// ---------------------------------------------------------------------------------------------
// The hosted payment page

export type HostedPage = { kind: 'url'; url: string } | Decided;

/** The page a successful paymentToken sends the buyer to: an http(s) URL, or the answer is malformed. */
export function hostedPageOf(webPaymentUrl: string | undefined): HostedPage {
  if (!webPaymentUrl || !/^https?:\/\//i.test(webPaymentUrl)) {
    return decided({ kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'paymentToken success without a webPaymentUrl' });
  }
  return { kind: 'url', url: webPaymentUrl };
}

/**
 * A replayed token may belong to an invoice the buyer has paid since (or that was cancelled): its
 * page would only say so. The signed inquiry tells; when it cannot be asked, the page is still the
 * right answer (a paid invoice is settled by the notification or a later query).
 */
export function hostedPageOutcome(inquiry: Inquiry, request: ChargeRequest, url: string): ChargeOutcome {
  if (inquiry.kind === 'answered') {
    const { claims } = inquiry;
    const code = respCodeOf(claims);
    const respClass = respClassOf(code);
    if (respClass === 'success') return hostedPagePaid(claims, request);
    // Cancelled by close(): the page is dead and stays dead; this attempt is over.
    if (respClass === 'cancelled') return { kind: 'declined', code, message: respDescOf(claims) };
  }
  return { kind: 'awaiting_buyer', action: { kind: 'redirect', url } };
}

function hostedPagePaid(claims: Claims, request: ChargeRequest): ChargeOutcome {
  const paid = paidTrade(claims, request.outTradeNo);
  if (!paid || paid.amountMinor !== request.amountMinor || paid.currency !== request.currency) {
    return { kind: 'indeterminate', code: paid ? 'AMOUNT_MISMATCH' : 'MALFORMED_RESPONSE', message: 'invoice paid, but not as asked' };
  }
  return { kind: 'succeeded', gatewayTradeNo: paid.gatewayTradeNo, amountMinor: paid.amountMinor, currency: paid.currency };
}

// ---------------------------------------------------------------------------------------------
// Close

/**
 * What the signed inquiry says a close must do: nothing more (paid, cancelled, never created), or
 * cancel (open: unpaid, maybe declined before).
 */
export type CloseVerdict = { kind: 'open' } | { kind: 'final'; outcome: CloseOutcome };

export function closeVerdictOf(found: QueryOutcome): CloseVerdict {
  if (found.kind === 'unavailable') {
    return { kind: 'final', outcome: { kind: 'indeterminate', code: found.code, message: `paymentInquiry: ${found.message}` } };
  }
  const { trade } = found;
  switch (trade.kind) {
    case 'succeeded': {
      const charge: SucceededTrade = { gatewayTradeNo: trade.gatewayTradeNo, amountMinor: trade.amountMinor, currency: trade.currency };
      return { kind: 'final', outcome: { kind: 'already_paid', charges: [charge] } };
    }
    case 'closed':
      return { kind: 'final', outcome: { kind: 'closed' } };
    case 'not_found':
      // No invoice, so no payment token: nothing can take money for it until the merchant itself asks
      // for a token, which PayOnce does only in a new attempt, after this close.
      return { kind: 'final', outcome: { kind: 'closed' } };
    case 'pending':
      return { kind: 'open' };
    case 'authorized':
      // This adapter never authorises: never seen here.
      return {
        kind: 'final',
        outcome: { kind: 'indeterminate', code: 'UNEXPECTED_AUTHORIZATION', message: '2C2P reported an authorisation' },
      };
    default:
      return assertNever(trade);
  }
}

/** cancelTransaction's answer: the close's outcome, or a refusal that a second inquiry must weigh. */
export type CancelAnswer = { kind: 'final'; outcome: CloseOutcome } | { kind: 'refused'; code: string; message: string };

export function classifyCancelAnswer(exchange: Exchange, invoiceNo: string): CancelAnswer {
  switch (exchange.kind) {
    case 'not_sent':
    case 'in_doubt':
      // Not closed, or not known to be: no new attempt may start until a later close settles it.
      return { kind: 'final', outcome: closeFailure(exchange, 'cancelTransaction') };
    case 'plain': {
      // An unsigned refusal of the request itself (wrong secret, unknown merchant …): nothing cancelled.
      const { code, message } = unavailableOf(exchange.body);
      return { kind: 'final', outcome: { kind: 'indeterminate', code, message } };
    }
    case 'signed':
      return cancelAnswer(exchange.claims, invoiceNo);
    default:
      return assertNever(exchange);
  }
}

function cancelAnswer(claims: Claims, invoiceNo: string): CancelAnswer {
  const code = respCodeOf(claims);
  if (stringField(claims, 'invoiceNo') !== invoiceNo) {
    return {
      kind: 'final',
      outcome: { kind: 'indeterminate', code: 'MALFORMED_RESPONSE', message: 'cancelTransaction answered for another invoiceNo' },
    };
  }
  const respClass = respClassOf(code);
  switch (respClass) {
    case 'success':
    case 'cancelled':
    case 'not_found':
      return { kind: 'final', outcome: { kind: 'closed' } };
    // 9015 (paid in the meantime) or anything else: the invoice's own state decides.
    case 'existing_invoice':
    case 'completed':
    case 'pending':
    case 'redirect':
    case 'declined':
    case 'refused':
    case 'invalid':
    case 'unknown':
      return { kind: 'refused', code: code || 'MALFORMED_RESPONSE', message: `cancelTransaction refused: ${respDescOf(claims)}` };
    default:
      return assertNever(respClass);
  }
}

/** After a refused cancel, the second inquiry decides: paid or closed since, or still open (in doubt). */
export function closeAfterRefusal(found: QueryOutcome, refusal: { code: string; message: string }): CloseOutcome {
  const after = closeVerdictOf(found);
  if (after.kind !== 'open') return after.outcome;
  return { kind: 'indeterminate', code: refusal.code, message: refusal.message };
}

// ---------------------------------------------------------------------------------------------
// The backend notification

type Rejected = Extract<NotificationVerdict, { kind: 'rejected' }>;

/** The notification's body, `{"payload":"<JWT>"}`: the JWT to verify, or why there is none. */
export function notificationPayloadOf(rawBody: string): { kind: 'payload'; token: string } | Rejected {
  let parsed: unknown;
  try {
    parsed = JSON.parse(rawBody);
  } catch {
    return { kind: 'rejected', reason: 'body is not JSON' };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    return { kind: 'rejected', reason: 'body is not a JSON object' };
  const payload = (parsed as Claims).payload;
  if (typeof payload !== 'string' || payload === '') return { kind: 'rejected', reason: 'missing payload' };
  return { kind: 'payload', token: payload };
}

/** The verified notification's claims in PayOnce's terms; only 0000 with a tranRef settles an order. */
export function classifyNotification(claims: Claims): NotificationVerdict {
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
      gateway: GATEWAY_ID,
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
