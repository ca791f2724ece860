import { sql } from 'drizzle-orm';
import { appServices } from '../../../server/app-services';

/** Ready when the database answers: what a load balancer or the test harness waits for. */
export async function GET(): Promise<Response> {
  try {
    await appServices().db.execute(sql`select 1`);
    return Response.json({ ok: true });
  } catch (error) {
    return Response.json({ ok: false, error: (error as Error).message }, { status: 503 });
  }
}
