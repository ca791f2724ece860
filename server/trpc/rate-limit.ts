/**
 * The rate limits (server/rate-limit) as tRPC middleware on the mutations. It runs after the input
 * is validated (bad input costs no write at all) and before the idempotency key is claimed, so a
 * refused request stores nothing and runs nothing. Replays of a completed key count like any other
 * request: a client replaying one key in a loop is flooding all the same.
 */
import { CheckoutError } from '../checkout/errors';
import { clientAddress, hitRateLimits } from '../rate-limit';
import { middleware } from './init';

export const rateLimit = middleware(async ({ ctx, next }) => {
  const policy = ctx.services.rateLimits;
  if (!policy) return next();
  const verdict = await hitRateLimits(ctx.services.db, policy, {
    // A session issued with this very request is refused by the idempotency guard (SESSION_REQUIRED)
    // anyway; a bucket for it would be a row per request that nobody hits twice.
    customerId: ctx.sessionIssued ? undefined : ctx.customerId,
    address: clientAddress(ctx.headers, policy.trustProxy),
  });
  if (verdict.limited) {
    throw new CheckoutError(
      429,
      'RATE_LIMITED',
      `Too many requests from this ${verdict.bucket === 'session' ? 'session' : 'address'} ` +
        `(at most ${verdict.limit} a ${policy.windowSeconds === 60 ? 'minute' : `${policy.windowSeconds} s`}): ` +
        `retry after ${verdict.retryAfterSeconds} s.`,
      verdict.retryAfterSeconds,
    );
  }
  return next();
});
