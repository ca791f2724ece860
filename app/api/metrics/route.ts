import { appServices } from '../../../server/app-services';

/** Prometheus scrape endpoint: guard outcomes, gateway calls, notifications, guard latency. */
export async function GET(): Promise<Response> {
  const metrics = appServices().metrics;
  if (!metrics) return new Response('metrics are not enabled', { status: 404 });
  return new Response(await metrics.registry.metrics(), {
    headers: { 'content-type': metrics.registry.contentType },
  });
}
