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

/** Our domain errors, as the TRPCError with the status the contract promises. */
export function toTRPCError(error: unknown): TRPCError | undefined {
  if (error instanceof TRPCError) {
    return error.cause instanceof Error && !(error.cause instanceof TRPCError) ? toTRPCError(error.cause) ?? error : error;
  }
  if (error instanceof CheckoutError || error instanceof IdempotencyError) {
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
  if (cause instanceof CheckoutError || cause instanceof IdempotencyError) return { reason: cause.reason };
  if (cause instanceof StoredErrorResponse) {
    const { reason, message: _message, ...details } = cause.body;
    return { reason: reason ?? error.code, ...(Object.keys(details).length > 0 ? { details } : {}) };
  }
  if (error.code === 'BAD_REQUEST' && cause && 'issues' in cause) return { reason: 'INVALID_INPUT' };
  return { reason: error.code };
}
