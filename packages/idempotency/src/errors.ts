/**
 * The guard's refusals. Each carries the HTTP status and the machine-readable reason of docs/design.md
 * §3, so any adapter (tRPC, a route handler, a queue consumer) can answer without knowing the core.
 */
export type IdempotencyReason =
  'IDEMPOTENCY_KEY_MISSING' | 'IDEMPOTENCY_KEY_INVALID' | 'KEY_REUSED_WITH_DIFFERENT_REQUEST' | 'REQUEST_IN_PROGRESS';

export abstract class IdempotencyError extends Error {
  abstract readonly httpStatus: number;
  abstract readonly reason: IdempotencyReason;
}

export class MissingKeyError extends IdempotencyError {
  override name = 'MissingKeyError';
  readonly httpStatus = 400;
  readonly reason = 'IDEMPOTENCY_KEY_MISSING';
  constructor() {
    super('The Idempotency-Key header is required for this request.');
  }
}

export class InvalidKeyError extends IdempotencyError {
  override name = 'InvalidKeyError';
  readonly httpStatus = 400;
  readonly reason = 'IDEMPOTENCY_KEY_INVALID';
  constructor(detail: string) {
    super(`The Idempotency-Key header is invalid: ${detail}.`);
  }
}

export class KeyReusedError extends IdempotencyError {
  override name = 'KeyReusedError';
  readonly httpStatus = 422;
  readonly reason = 'KEY_REUSED_WITH_DIFFERENT_REQUEST';
  constructor() {
    super('This Idempotency-Key was already used with a different request. Use a new key for a new request.');
  }
}

export class RequestInProgressError extends IdempotencyError {
  override name = 'RequestInProgressError';
  readonly httpStatus = 409;
  readonly reason = 'REQUEST_IN_PROGRESS';
  constructor(readonly retryAfterSeconds: number) {
    super('A request with this Idempotency-Key is still being processed. Retry later.');
  }
}

/**
 * Thrown inside an atomic phase whose owner no longer holds the lease (it was presumed dead and
 * another request took the key over). The phase's transaction rolls back, so the loser writes nothing.
 */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError';
  constructor() {
    super('The idempotency lease was taken over by another request; this request must not write.');
  }
}
