/**
 * A refusal from the checkout, with the HTTP status and machine-readable reason the public contract
 * promises (design.md §1.8). Thrown inside a transaction, it rolls the transaction back: bad input
 * changes nothing.
 */
export type CheckoutReason =
  | 'ORDER_NOT_FOUND'
  | 'UNKNOWN_SKU'
  | 'DUPLICATE_SKU'
  | 'OUT_OF_STOCK'
  | 'MIXED_CURRENCIES'
  | 'ORDER_PAYMENT_IN_PROGRESS'
  | 'ORDER_NOT_PAYABLE'
  | 'GATEWAY_NOT_CONFIGURED'
  | 'INVALID_INPUT'
  | 'TEST_BUYER_NOT_AVAILABLE'
  | 'BUYER_STEP_NOT_AVAILABLE'
  | 'GATEWAY_UNAVAILABLE'
  | 'PAYMENT_OUTCOME_UNKNOWN'
  | 'AMOUNT_MISMATCH'
  | 'MERCHANT_MISMATCH'
  | 'INJECTED_FAULT'
  | 'SESSION_REQUIRED'
  | 'RATE_LIMITED'
  | 'TOO_MANY_OPEN_ORDERS'
  | 'STOCK_HOLD_LIMIT'
  | 'ADDRESS_HOLD_LIMIT';

export class CheckoutError extends Error {
  constructor(
    readonly httpStatus: number,
    readonly reason: CheckoutReason,
    message: string,
    /** Seconds after which a retry makes sense (409, 429 and 503 answers). */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = 'CheckoutError';
  }
}
