/**
 * tRPC set-up: the context every procedure sees, the error shape, `publicProcedure`.
 *
 * You probably don't need to edit this file unless you add something to the context. Plain JSON on
 * the wire (no transformer), so curl and mobile clients can call every procedure.
 */
import { initTRPC, TRPCError } from '@trpc/server';
import { buyerOrigin, returnAddress, verifyReturnToken } from '@/server/checkout/return-address';
import { CheckoutError } from '@/server/checkout/refusals';
import type { CheckoutServices } from '@/server/checkout/services';
import { databaseUnavailability } from '@/db/failures';
import { issueSession, verifySession } from '@/server/http/session';
import { operatorToken } from '@/server/operators/sessions';
import { publicMessageOf, reasonOf, toTRPCError } from './errors';
import { refusalHeaders, refusalOf } from '@payonce/idempotency';
import type { ResponseMetaHolder } from '@payonce/idempotency/trpc';

export interface CreateContextOptions {
  headers: Headers;
  resHeaders: Headers;
  services: CheckoutServices;
  sessionSecret: string;
  /** Served over https: the session cookie is `__Host-payonce_session` and Secure. */
  secureCookies: boolean;
}

export function createTRPCContext(opts: CreateContextOptions) {
  const sessionOptions = { secure: opts.secureCookies };
  let customerId = verifySession(opts.sessionSecret, opts.headers.get('cookie'), sessionOptions);
  // A missing, forged, expired or old-format session alike: a new customer, and mutations answer
  // 401 SESSION_REQUIRED until the retry carries the new cookie (see @payonce/idempotency/trpc).
  const sessionIssued = !customerId;
  if (!customerId) {
    const session = issueSession(opts.sessionSecret, sessionOptions);
    customerId = session.customerId;
    opts.resHeaders.append('set-cookie', session.setCookie);
  }
  const response: ResponseMetaHolder = { headers: {} };
  const secret = opts.sessionSecret;
  // Where a gateway's page sends this buyer back to, and the check of a return link's token: both
  // under the session secret, which procedures never see.
  const returnTo = returnAddress(
    secret,
    buyerOrigin(opts.headers, { publicBaseUrl: opts.services.publicBaseUrl, extraOrigins: opts.services.publicOrigins }),
  );
  const isReturnToken = (orderId: string, token: string) => verifyReturnToken(secret, orderId, token);
  // An operator's session cookie (server/operators), read only by the operator procedures.
  const operatorSessionToken = operatorToken(opts.headers.get('cookie'), opts.secureCookies);
  return {
    services: opts.services,
    headers: opts.headers,
    customerId,
    sessionIssued,
    response,
    returnTo,
    isReturnToken,
    operatorSessionToken,
  };
}

export type TRPCContext = ReturnType<typeof createTRPCContext>;

const t = initTRPC.context<TRPCContext>().create({
  errorFormatter({ shape, error }) {
    const { reason, details } = reasonOf(error);
    const issues = error.code === 'BAD_REQUEST' && error.cause && 'issues' in error.cause ? error.cause.issues : undefined;
    // No stack traces on the wire, in any environment: bodies are stored and replayed verbatim.
    const { stack: _stack, ...data } = shape.data;
    const message = publicMessageOf(error, shape.message);
    return { ...shape, message, data: { ...data, reason, ...(details ? { details } : {}), ...(issues ? { issues } : {}) } };
  },
});

export const createTRPCRouter = t.router;
export const middleware = t.middleware;

/**
 * Turns the checkout's and the guard's errors into the HTTP status the contract promises, and keeps
 * any Retry-After they carry.
 */
const domainErrors = t.middleware(async ({ ctx, next, path }) => {
  const result = await next();
  if (result.ok) return result;
  const mapped = toTRPCError(databaseRefusal(result.error, path)) ?? result.error;
  const refusal = refusalOf(mapped.cause);
  if (refusal) Object.assign(ctx.response.headers, refusalHeaders(refusal));
  if (mapped.code === 'INTERNAL_SERVER_ERROR') console.error('[trpc] unexpected error', mapped.cause ?? mapped);
  throw mapped satisfies TRPCError;
});

/**
 * A database that cannot be reached, or is not the primary (a restart, a failover), is a wait, not a
 * failure: 503 + Retry-After, which the page retries with the same key (db/failures.ts).
 */
function databaseRefusal(error: TRPCError, path: string): TRPCError | CheckoutError {
  const failure = databaseUnavailability(error.cause);
  if (!failure) return error;
  console.warn(`[trpc] ${path}: database unavailable (${failure.message}); answered 503`);
  return new CheckoutError('DATABASE_UNAVAILABLE', 'The database is unavailable for a moment; retry with the same Idempotency-Key.');
}

export const publicProcedure = t.procedure.use(domainErrors);
