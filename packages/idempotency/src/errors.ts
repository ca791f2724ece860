/**
 * A refusal: what every adapter (tRPC, the fetch adapter, a webhook route) answers with — an HTTP
 * status, a machine-readable reason, a message safe to show the caller, and for a 409, 429 or 503
 * how many seconds until a retry makes sense (sent as Retry-After). The guard's own errors are
 * refusals; an application's become refusals by extending this class, or by carrying the same
 * fields (see `refusalOf`).
 */
export class Refusal extends Error {
  override name = 'Refusal';
  constructor(
    readonly httpStatus: number,
    readonly reason: string,
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/** The fields of a refusal, whichever class carries them. */
export type RefusalFields = Pick<Refusal, 'httpStatus' | 'reason' | 'message' | 'retryAfterSeconds'>;

/**
 * The refusal an error stands for: a Refusal, or any error that carries a `httpStatus` of 400–599 and
 * a string `reason` (an application's own error class). Undefined for anything else: an unexpected
 * failure, answered as a 500 whose details stay in the server's log.
 */
export function refusalOf(error: unknown): RefusalFields | undefined {
  if (error instanceof Refusal) return error;
  const own = error as { httpStatus?: unknown; reason?: unknown; message?: unknown; retryAfterSeconds?: unknown } | null;
  if (typeof own?.httpStatus !== 'number' || own.httpStatus < 400 || own.httpStatus > 599 || typeof own.reason !== 'string') {
    return undefined;
  }
  return {
    httpStatus: own.httpStatus,
    reason: own.reason,
    message: typeof own.message === 'string' ? own.message : own.reason,
    ...(typeof own.retryAfterSeconds === 'number' ? { retryAfterSeconds: own.retryAfterSeconds } : {}),
  };
}

/** The headers a refusal's answer carries: Retry-After when it names one. */
export function refusalHeaders(refusal: RefusalFields): Record<string, string> {
  return refusal.retryAfterSeconds === undefined ? {} : { 'Retry-After': String(refusal.retryAfterSeconds) };
}

/**
 * The guard's refusals. Each carries the HTTP status and the machine-readable reason of docs/design.md
 * §3, so any adapter (tRPC, a route handler, a queue consumer) can answer without knowing the core.
 */
export type IdempotencyReason =
  'IDEMPOTENCY_KEY_MISSING' | 'IDEMPOTENCY_KEY_INVALID' | 'KEY_REUSED_WITH_DIFFERENT_REQUEST' | 'REQUEST_IN_PROGRESS';

export abstract class IdempotencyError extends Refusal {
  declare readonly reason: IdempotencyReason;
  constructor(httpStatus: number, reason: IdempotencyReason, message: string, retryAfterSeconds?: number) {
    super(httpStatus, reason, message, retryAfterSeconds);
  }
}

export class MissingKeyError extends IdempotencyError {
  override name = 'MissingKeyError';
  constructor() {
    super(400, 'IDEMPOTENCY_KEY_MISSING', 'The Idempotency-Key header is required for this request.');
  }
}

export class InvalidKeyError extends IdempotencyError {
  override name = 'InvalidKeyError';
  constructor(detail: string) {
    super(400, 'IDEMPOTENCY_KEY_INVALID', `The Idempotency-Key header is invalid: ${detail}.`);
  }
}

export class KeyReusedError extends IdempotencyError {
  override name = 'KeyReusedError';
  constructor() {
    super(
      422,
      'KEY_REUSED_WITH_DIFFERENT_REQUEST',
      'This Idempotency-Key was already used with a different request. Use a new key for a new request.',
    );
  }
}

export class RequestInProgressError extends IdempotencyError {
  override name = 'RequestInProgressError';
  declare readonly retryAfterSeconds: number;
  constructor(retryAfterSeconds: number) {
    super(409, 'REQUEST_IN_PROGRESS', 'A request with this Idempotency-Key is still being processed. Retry later.', retryAfterSeconds);
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
