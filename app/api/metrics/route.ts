import { appServices } from '@/server/app/services';
import { metricsAccess } from '@/server/metrics/access';

/**
 * Prometheus scrape endpoint: guard outcomes, gateway calls, notifications, guard latency. Closed
 * unless METRICS_TOKEN, METRICS_PUBLIC=1 or demo mode opens it (server/metrics/access.ts).
 */
export async function GET(request: Request): Promise<Response> {
  const access = metricsAccess(request);
  if (access === 'not_found') return new Response('not found', { status: 404 });
  if (access === 'unauthorized') {
    return new Response('a valid bearer token is required', {
      status: 401,
      headers: { 'www-authenticate': 'Bearer realm="metrics"' },
    });
  }
  const metrics = appServices().metrics;
  if (!metrics) return new Response('metrics are not enabled', { status: 404 });
  return new Response(await metrics.registry.metrics(), {
    headers: { 'content-type': metrics.registry.contentType },
  });
}
