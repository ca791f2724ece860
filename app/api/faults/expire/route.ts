import { sql } from 'drizzle-orm';
import { appServices } from '../../../../server/app-services';
import { controlRequestRefusal } from '../../../../server/control-requests';

/**
 * Drills only (CHECKOUT_FAULTS=1; otherwise a 404): makes an unpaid order due for expiry now, as if
 * its 30 minutes had passed, so the expiry drills need not wait for the clock. The reconciler then
 * expires it on its next run, exactly as it would have.
 *   POST { outTradeNo } → 200 { expiresAt } | 404 | 409 when the order is not awaiting payment
 */
export async function POST(request: Request): Promise<Response> {
  const services = appServices();
  if (!services.faults) return Response.json({ error: 'not found' }, { status: 404 });
  const refused = controlRequestRefusal(request);
  if (refused) return refused;
  const body = (await request.json().catch(() => undefined)) as { outTradeNo?: unknown } | undefined;
  if (typeof body?.outTradeNo !== 'string' || body.outTradeNo === '') {
    return Response.json({ error: 'outTradeNo is required' }, { status: 400 });
  }
  const rows = await services.db.execute<{ status: string; expires_at: Date }>(sql`
    update orders set expires_at = case when status = 'awaiting_payment' then now() - interval '1 second' else expires_at end
     where out_trade_no = ${body.outTradeNo}
    returning status, expires_at`);
  const [order] = rows;
  if (!order) return Response.json({ error: 'no such order' }, { status: 404 });
  if (order.status !== 'awaiting_payment') {
    return Response.json({ error: `the order is ${order.status}` }, { status: 409 });
  }
  return Response.json({ expiresAt: order.expires_at });
}
