/**
 * Every refusal the app gives, in one table: the machine-readable reason, the HTTP status the public
 * contract promises for it (design.md §1.8) and, where a retry makes sense after a fixed wait, its
 * Retry-After. The checkout, its HTTP endpoint and the webhooks all refuse through `CheckoutError`;
 * the tRPC adapter (../trpc/errors.ts) and the webhook handler (./notifications.ts) answer with what
 * it carries. Thrown inside a transaction, a refusal rolls the transaction back: bad input changes
 * nothing. The guard's own refusals (400/409/422 of the idempotency key) are the package's.
 */
import { Refusal } from '@payonce/idempotency';

export const REFUSALS = {
  // The cart and the order
  UNKNOWN_SKU: { httpStatus: 400 },
  DUPLICATE_SKU: { httpStatus: 400 },
  MIXED_CURRENCIES: { httpStatus: 400 },
  OUT_OF_STOCK: { httpStatus: 409 },
  // A product with no stock left at all (已售罄): the flash sale's answer to everyone after the last unit
  SOLD_OUT: { httpStatus: 409 },
  // A product's price moved between the order's read and its stock being taken: order again
  PRICE_CHANGED: { httpStatus: 409 },
  ORDER_NOT_FOUND: { httpStatus: 404 },
  ORDER_PAYMENT_IN_PROGRESS: { httpStatus: 409, retryAfterSeconds: 2 },
  ORDER_NOT_PAYABLE: { httpStatus: 409 },
  // The merchant's decisions about an authorisation (./authorizations)
  ORDER_NOT_AUTHORIZED: { httpStatus: 409 },
  AUTHORIZATION_RELEASED: { httpStatus: 409 },
  AUTHORIZATION_ALREADY_DECIDED: { httpStatus: 409 },
  CAPTURE_AMOUNT_INVALID: { httpStatus: 422 },
  // The merchant's refunds (./merchant-refunds)
  ORDER_NOT_REFUNDABLE: { httpStatus: 409 },
  REFUND_EXCEEDS_CHARGE: { httpStatus: 422 },
  MERCHANT_AUTH_REQUIRED: { httpStatus: 401 },
  // The console's operators (server/operators)
  OPERATOR_SIGN_IN_REQUIRED: { httpStatus: 401 },
  OPERATOR_ROLE_INSUFFICIENT: { httpStatus: 403 },
  CSRF_TOKEN_INVALID: { httpStatus: 403 },
  // 对账 (server/reconciliation)
  MISMATCH_NOT_FOUND: { httpStatus: 404 },
  MISMATCH_ALREADY_RESOLVED: { httpStatus: 409 },
  // Paying
  INVALID_INPUT: { httpStatus: 400 },
  GATEWAY_NOT_CONFIGURED: { httpStatus: 400 },
  TEST_BUYER_NOT_AVAILABLE: { httpStatus: 400 },
  BUYER_STEP_NOT_AVAILABLE: { httpStatus: 400 },
  GATEWAY_UNAVAILABLE: { httpStatus: 503, retryAfterSeconds: 1 },
  PAYMENT_OUTCOME_UNKNOWN: { httpStatus: 503, retryAfterSeconds: 1 },
  // A gateway's notification
  INVALID_SIGNATURE: { httpStatus: 400 },
  MERCHANT_MISMATCH: { httpStatus: 400 },
  AMOUNT_MISMATCH: { httpStatus: 400 },
  CONFLICTING_NOTIFICATION: { httpStatus: 409 },
  // Sessions and limits
  SESSION_REQUIRED: { httpStatus: 401, retryAfterSeconds: 0 },
  RATE_LIMITED: { httpStatus: 429 },
  TOO_MANY_OPEN_ORDERS: { httpStatus: 409 },
  STOCK_HOLD_LIMIT: { httpStatus: 409 },
  // A minute: unpaid orders from the address are paid, or expire, or a neighbour's checkout finishes.
  ADDRESS_HOLD_LIMIT: { httpStatus: 429, retryAfterSeconds: 60 },
  // The HTTP endpoint, before any procedure runs
  PAYLOAD_TOO_LARGE: { httpStatus: 413 },
  BATCH_NOT_ALLOWED: { httpStatus: 400 },
  BATCH_TOO_LARGE: { httpStatus: 400 },
  // PostgreSQL is unreachable or not the primary for a moment (a restart, a failover: db/failures.ts)
  DATABASE_UNAVAILABLE: { httpStatus: 503, retryAfterSeconds: 1 },
  // This instance is shutting down (server/http/drain.ts): retry, on another instance or this one restarted
  SHUTTING_DOWN: { httpStatus: 503, retryAfterSeconds: 1 },
  // A failure drill's injected fault (server/demo/faults.ts)
  INJECTED_FAULT: { httpStatus: 503, retryAfterSeconds: 1 },
} as const satisfies Record<string, { httpStatus: number; retryAfterSeconds?: number }>;

export type CheckoutReason = keyof typeof REFUSALS;

/** A refusal with its status from the table; `retryAfterSeconds` overrides the table's wait. */
export class CheckoutError extends Refusal {
  override name = 'CheckoutError';
  declare readonly reason: CheckoutReason;
  constructor(reason: CheckoutReason, message: string, retryAfterSeconds?: number) {
    const entry: { httpStatus: number; retryAfterSeconds?: number } = REFUSALS[reason];
    super(entry.httpStatus, reason, message, retryAfterSeconds ?? entry.retryAfterSeconds);
  }
}
