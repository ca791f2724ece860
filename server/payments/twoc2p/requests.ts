/**
 * What the adapter sends to 2C2P: the claims of each JWT call, Do Payment's plain body, and the
 * checks made before any call — a request that can only be a programming error, and that the
 * gateway would refuse anyway, is never sent.
 */
import type { ChargeOutcome, ChargeRequest, RefundOutcome, RefundQuery, RefundRequest } from '@/server/payments/gateway';
import { minorToDecimal } from '@/server/payments/money';
import { DecimalLiteral, exponentOf, fitsAmount } from './amounts';
import type { Claims } from './jwt';

/** Shown on 2C2P's side as the card holder; the test cards do not check it. */
const CARDHOLDER_NAME = 'PayOnce Customer';

const AMOUNT_RULE = 'amount must be a positive integer with at most 12 integer digits';

/** A charge that must not be sent, as its decline; null when it may go. */
export function chargeRefusal(request: ChargeRequest): ChargeOutcome | null {
  if (!/^[A-Z]{3}$/.test(request.currency)) {
    return { kind: 'declined', code: 'UNSUPPORTED_CURRENCY', message: `not an ISO 4217 code: ${request.currency}` };
  }
  if (!fitsAmount(request.amountMinor, request.currency)) return { kind: 'declined', code: 'INVALID_AMOUNT', message: AMOUNT_RULE };
  const step = request.buyerStep ?? 'redirect';
  if (request.buyer === undefined && step !== 'redirect') {
    return { kind: 'declined', code: 'UNSUPPORTED_BUYER_STEP', message: `2C2P offers the hosted payment page (redirect), not ${step}` };
  }
  return null;
}

/** A refund that must not be sent, as its failure; null when it may go. */
export function refundRefusal(request: RefundRequest): RefundOutcome | null {
  if (!/^[A-Za-z0-9]{1,32}$/.test(request.refundId)) {
    return { kind: 'failed', code: 'INVALID_REFUND_ID', message: 'refundId must be 1–32 letters or digits' };
  }
  if (!/^[A-Z]{3}$/.test(request.currency) || !fitsAmount(request.amountMinor, request.currency)) {
    return { kind: 'failed', code: 'INVALID_AMOUNT', message: AMOUNT_RULE };
  }
  return null;
}

function amountLiteral(amountMinor: number, currency: string): DecimalLiteral {
  return new DecimalLiteral(minorToDecimal(amountMinor, exponentOf(currency)));
}

/** What every paymentToken of an order names: the merchant, the invoice (the order) and its amount. */
function invoiceClaims(merchantId: string, request: ChargeRequest): Claims {
  return {
    merchantID: merchantId,
    invoiceNo: request.outTradeNo,
    description: request.subject,
    amount: amountLiteral(request.amountMinor, request.currency),
    currencyCode: request.currency,
  };
}

/**
 * paymentToken for a test buyer's card, paid server-to-server by Do Payment. The idempotencyID is per
 * attempt: a retry of this attempt replays the same token; the next attempt (after a decline) gets a
 * new token for the same invoice.
 */
export function testCardTokenClaims(merchantId: string, request: ChargeRequest): Claims {
  return {
    ...invoiceClaims(merchantId, request),
    idempotencyID: `${request.outTradeNo}-${request.attempt}`,
    paymentChannel: ['CC'],
    // Server-to-server: no buyer is there to pass a 3-D Secure challenge.
    request3DS: 'N',
    backendReturnUrl: request.notifyUrl,
  };
}

/**
 * paymentToken for the hosted payment page. A retry of the same attempt sends the same idempotencyID
 * and the same claims, so 2C2P answers with the same token and the same page — not 9015 "Existing
 * invoice number", which it keeps for an invoice that is paid, cancelled, or open for another amount.
 * Its own idempotencyID (suffix "W"), distinct from the test-buyer charge's, keeps the two requests
 * from ever being taken for one changed request.
 */
export function hostedPageTokenClaims(merchantId: string, request: ChargeRequest): Claims {
  return {
    ...invoiceClaims(merchantId, request),
    idempotencyID: `${request.outTradeNo}-${request.attempt}W`,
    // Cards: what query() and the notification are read for (tranRef, approval) and what the sandbox
    // emulates; other channels would leave the invoice pending on a third party's page.
    paymentChannel: ['CC'],
    frontendReturnUrl: request.returnUrl,
    backendReturnUrl: request.notifyUrl,
  };
}

/**
 * Do Payment, as 2C2P documents it for PCI-DSS merchants (card data in clear, no securePayToken: the
 * sandbox's test cards stand in for a real buyer). 2C2P's test cards take any future expiry and any CVV.
 */
export function doPaymentBody(paymentToken: string, cardNo: string, now: Date): string {
  const expiryYear = now.getUTCFullYear() + 3;
  return JSON.stringify({
    paymentToken,
    locale: 'en',
    payment: {
      code: { channelCode: 'CC' },
      data: { name: CARDHOLDER_NAME, cardNo, expiryMonth: '12', expiryYear: String(expiryYear), securityCode: '123' },
    },
  });
}

export function inquiryClaims(merchantId: string, invoiceNo: string): Claims {
  return { merchantID: merchantId, invoiceNo, locale: 'en' };
}

/**
 * cancelTransaction in its JWT form: the documented form takes a payment token, which PayOnce does not
 * keep; the invoice is what must stop taking money.
 */
export function cancelClaims(merchantId: string, invoiceNo: string): Claims {
  return { merchantID: merchantId, invoiceNo };
}

/**
 * A refund (processType R) in the Payment Maintenance API's XML fields. PayOnce's refund id is its
 * idempotencyID: the same one again answers the first refund and refunds nothing more.
 */
export function refundFields(request: RefundRequest): [string, string][] {
  return [
    ['invoiceNo', request.outTradeNo],
    ['actionAmount', minorToDecimal(request.amountMinor, exponentOf(request.currency))],
    ['processType', 'R'],
    ['idempotencyID', request.refundId],
  ];
}

/** Refund status (processType RS) of the invoice: every refund of it, each under its idempotencyID. */
export function refundStatusFields(request: RefundQuery): [string, string][] {
  return [
    ['invoiceNo', request.outTradeNo],
    ['processType', 'RS'],
  ];
}
