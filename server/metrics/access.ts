/**
 * Who may scrape GET /api/metrics. The counters tell an outsider how many orders, declines and
 * refunds the shop has, so the endpoint is closed unless it is switched on:
 *
 *   METRICS_TOKEN=<secret>   the scraper sends `Authorization: Bearer <secret>` (Prometheus:
 *                            `authorization: { credentials: <secret> }`); anything else gets a 401
 *   METRICS_PUBLIC=1         open without a token, for a port bound to a private network only
 *   PAYONCE_DEMO=1           open without a token (demo mode, see demo.ts)
 *   none of these            404, as if there were no such endpoint
 *
 * A token, when set, is always required: METRICS_PUBLIC or demo mode do not weaken it.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { envFrom, type RawEnv } from '@/server/config/env';

export type MetricsAccess = 'allowed' | 'unauthorized' | 'not_found';

export function metricsAccess(request: Request, env?: RawEnv): MetricsAccess {
  const config = envFrom(env);
  const token = config.METRICS_TOKEN;
  if (token) {
    const match = /^Bearer (.+)$/.exec(request.headers.get('authorization') ?? '');
    return match?.[1] !== undefined && sameSecret(match[1], token) ? 'allowed' : 'unauthorized';
  }
  return config.METRICS_PUBLIC || config.PAYONCE_DEMO ? 'allowed' : 'not_found';
}

/**
 * Constant time over the secret: both sides are hashed first, so neither the position of the first
 * wrong character nor the token's length shows in how long a wrong guess takes.
 */
function sameSecret(given: string, expected: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(given), digest(expected));
}
