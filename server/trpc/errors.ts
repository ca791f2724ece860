import { TRPCError } from '@trpc/server';
import { refusalOf } from '@payonce/idempotency';
import { StoredErrorResponse, trpcCodeFor } from '@payonce/idempotency/trpc';

export { StoredErrorResponse, trpcCodeFor };

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

/** A refusal (the checkout's, the guard's, the endpoint's), as the TRPCError with the status the contract promises. */
export function toTRPCError(error: unknown): TRPCError | undefined {
  if (error instanceof TRPCError) {
    return error.cause instanceof Error && !(error.cause instanceof TRPCError) ? (toTRPCError(error.cause) ?? error) : error;
  }
  if (error instanceof StoredErrorResponse) {
    return new TRPCError({ code: trpcCodeFor(error.status), message: error.message, cause: error });
  }
  const refusal = refusalOf(error);
  return refusal && new TRPCError({ code: trpcCodeFor(refusal.httpStatus), message: refusal.message, cause: error });
}

/** The machine-readable reason and any details for the error body's `data`. */
export function reasonOf(error: TRPCError): { reason: string; details?: Record<string, unknown> } {
  const cause = error.cause;
  if (cause instanceof StoredErrorResponse) {
    const { reason, message: _message, ...details } = cause.body;
    return { reason: reason ?? error.code, ...(Object.keys(details).length > 0 ? { details } : {}) };
  }
  const refusal = refusalOf(cause);
  if (refusal) return { reason: refusal.reason };
  if (error.code === 'BAD_REQUEST' && cause && 'issues' in cause) return { reason: 'INVALID_INPUT' };
  // Not one of ours: say so without naming what broke (the log has it).
  if (error.code === 'INTERNAL_SERVER_ERROR') return { reason: 'INTERNAL_ERROR' };
  return { reason: error.code };
}
