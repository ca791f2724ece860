/**
 * The rate limits (server/http/rate-limit) as tRPC middleware on the mutations. It runs after the input
 * is validated (bad input costs no write at all) and before the idempotency key is claimed, so a
 * refused request stores nothing and runs nothing. Replays of a completed key count like any other
 * request: a client replaying one key in a loop is flooding all the same.
 */
import { CheckoutError } from '@/server/checkout/refusals';
import { clientAddress, hitRateLimits, normalizeAddress } from '@/server/http/rate-limit';
import { middleware } from './init';

/**
 * Said once per process: a request whose X-Forwarded-For names another address than its socket came
 * through a proxy (or forged the header). Without TRUST_PROXY every shopper behind that proxy shares
 * its address, and with it the address's limits and caps.
 */
let warnedAboutProxy = false;
function warnIfBehindUntrustedProxy(headers: Headers, trustProxy: number): void {
  if (warnedAboutProxy || trustProxy > 0) return;
  const peer = clientAddress(headers, 0);
  const forwarded = headers.get('x-forwarded-for')?.split(',').at(-1)?.trim();
  if (!peer || !forwarded || normalizeAddress(forwarded) === peer) return;
  warnedAboutProxy = true;
  console.warn(
    `[payonce] a request from ${peer} carries X-Forwarded-For: ${forwarded}. If a proxy or load balancer is in front, set ` +
      'TRUST_PROXY to the number of proxies: otherwise every shopper behind it shares its address and the per-address limits.',
  );
}

export const rateLimit = middleware(async ({ ctx, next }) => {
  const policy = ctx.services.rateLimits;
  if (!policy) return next();
  warnIfBehindUntrustedProxy(ctx.headers, policy.trustProxy);
  const verdict = await hitRateLimits(ctx.services.db, policy, {
    // A session issued with this very request is refused by the idempotency guard (SESSION_REQUIRED)
    // anyway; a bucket for it would be a row per request that nobody hits twice.
    customerId: ctx.sessionIssued ? undefined : ctx.customerId,
    address: clientAddress(ctx.headers, policy.trustProxy),
  });
  if (verdict.limited) {
    throw new CheckoutError(
      'RATE_LIMITED',
      `Too many requests from this ${verdict.bucket === 'session' ? 'session' : 'address'} ` +
        `(at most ${verdict.limit} a ${policy.windowSeconds === 60 ? 'minute' : `${policy.windowSeconds} s`}): ` +
        `retry after ${verdict.retryAfterSeconds} s.`,
      verdict.retryAfterSeconds,
    );
  }
  return next();
});
