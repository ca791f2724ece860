import { TRPCError } from '@trpc/server';
import { CheckoutError } from '../checkout/errors';
import { IdempotencyError } from '../idempotency';

type TRPCErrorCode = ConstructorParameters<typeof TRPCError>[0]['code'];

const CODE_BY_STATUS: Record<number, TRPCErrorCode> = {
  400: 'BAD_REQUEST',
  401: 'UNAUTHORIZED',
  402: 'PAYMENT_REQUIRED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  409: 'CONFLICT',
  413: 'PAYLOAD_TOO_LARGE',
  422: 'UNPROCESSABLE_CONTENT',
  429: 'TOO_MANY_REQUESTS',
  502: 'BAD_GATEWAY',
  503: 'SERVICE_UNAVAILABLE',
  504: 'GATEWAY_TIMEOUT',
};

export function trpcCodeFor(status: number): TRPCErrorCode {
  return CODE_BY_STATUS[status] ?? (status >= 500 ? 'INTERNAL_SERVER_ERROR' : 'BAD_REQUEST');
}

/**
 * A stored error response (e.g. the 402 of a decline) travelling as the cause of a TRPCError, so the
 * error formatter can put its reason and details into the body, identically the first time and on
 * every replay.
 */
export class StoredErrorResponse extends Error {
  constructor(
    readonly status: number,
    readonly body: { reason?: string; message?: string } & Record<string, unknown>,
  ) {
    super(body.message ?? `Request failed with status ${status}`);
    this.name = 'StoredErrorResponse';
  }
}

/**
 * What a 500 says on the wire. The real error goes to the server's log only: its message can carry
 * SQL, hostnames or a gateway's reply, and an error body may be shown to the customer. A 500 is never
 * stored (the key is released), so a retry with the same key runs again rather than replaying this.
 */
export const INTERNAL_ERROR_MESSAGE = 'Internal error; retry the request (a mutation with the same Idempotency-Key).';

/** The message an error body carries: its own, unless it is an unexpected one (a 500). */
export function publicMessageOf(error: TRPCError, message: string): string {
  return error.code === 'INTERNAL_SERVER_ERROR' ? INTERNAL_ERROR_MESSAGE : message;
}

/** Refusals of the HTTP endpoint itself, before any procedure runs: body size and batching. */
export type EndpointReason = 'PAYLOAD_TOO_LARGE' | 'BATCH_NOT_ALLOWED' | 'BATCH_TOO_LARGE';

export class EndpointRefusal extends Error {
  constructor(
    readonly httpStatus: 400 | 413,
    readonly reason: EndpointReason,
    message: string,
  ) {
    super(message);
    this.name = 'EndpointRefusal';
  }
}

/** Our domain errors, as the TRPCError with the status the contract promises. */
export function toTRPCError(error: unknown): TRPCError | undefined {
  if (error instanceof TRPCError) {
    return error.cause instanceof Error && !(error.cause instanceof TRPCError) ? toTRPCError(error.cause) ?? error : error;
  }
  if (error instanceof CheckoutError || error instanceof IdempotencyError || error instanceof EndpointRefusal) {
    return new TRPCError({ code: trpcCodeFor(error.httpStatus), message: error.message, cause: error });
  }
  if (error instanceof StoredErrorResponse) {
    return new TRPCError({ code: trpcCodeFor(error.status), message: error.message, cause: error });
  }
  return undefined;
}

/** The machine-readable reason and any details for the error body's `data`. */
export function reasonOf(error: TRPCError): { reason: string; details?: Record<string, unknown> } {
  const cause = error.cause;
  if (cause instanceof CheckoutError || cause instanceof IdempotencyError || cause instanceof EndpointRefusal) {
    return { reason: cause.reason };
  }
  if (cause instanceof StoredErrorResponse) {
    const { reason, message: _message, ...details } = cause.body;
    return { reason: reason ?? error.code, ...(Object.keys(details).length > 0 ? { details } : {}) };
  }
  if (error.code === 'BAD_REQUEST' && cause && 'issues' in cause) return { reason: 'INVALID_INPUT' };
  // Not one of ours: say so without naming what broke (the log has it).
  if (error.code === 'INTERNAL_SERVER_ERROR') return { reason: 'INTERNAL_ERROR' };
  return { reason: error.code };
}
