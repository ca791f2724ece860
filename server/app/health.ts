/**
 * The readiness answer. Framework-free so the route handler is one call to it and a test can hand
 * it a database that is down.
 *
 * The answer says only whether the instance can serve: a database error's text (host, port, user,
 * database name) is for the operator's log, not for whoever can reach a public health URL.
 */
import { sql } from 'drizzle-orm';
import type { Database } from '@/db/client';
import { isDraining } from '@/server/http/drain';

export async function checkHealth(database: () => Database): Promise<Response> {
  // Leaving (SIGTERM): not ready, so that the load balancer sends the next request elsewhere.
  if (isDraining()) return Response.json({ status: 'draining' }, { status: 503, headers: { 'Retry-After': '1' } });
  try {
    await database().execute(sql`select 1`);
    return Response.json({ status: 'ok' });
  } catch (error) {
    console.error('[health] database unavailable', error);
    return Response.json({ status: 'unavailable' }, { status: 503 });
  }
}
