import { sql } from 'drizzle-orm';
import { appServices } from '../../../../server/app-services';
import { customerScope } from '../../../../server/checkout/services';

/**
 * Ground truth for the failure drills (CHECKOUT_FAULTS=1 only; otherwise a 404): what the database
 * holds for one order — its status, payments, confirmation emails (queued and sent) and the
 * idempotency keys of its customer's payment attempts (a drill's browser context is one customer),
 * the trades it opened at gateways, and its refunds with their emails.
 */
export async function GET(request: Request): Promise<Response> {
  const services = appServices();
  if (!services.faults) return Response.json({ error: 'not found' }, { status: 404 });
  const outTradeNo = new URL(request.url).searchParams.get('outTradeNo');
  if (!outTradeNo) return Response.json({ error: 'outTradeNo is required' }, { status: 400 });
  const db = services.db;
  const [order] = await db.execute<{
    id: string;
    customer_id: string;
    status: string;
    payment_attempt: number;
    client_address: string | null;
  }>(sql`
    select id, customer_id, status, payment_attempt, client_address from orders where out_trade_no = ${outTradeNo}`);
  if (!order) return Response.json({ error: 'no such order' }, { status: 404 });
  const payments = await db.execute(sql`
    select gateway, attempt, status, gateway_trade_no as "gatewayTradeNo", source, role from payments
     where order_id = ${order.id} order by created_at`);
  const [emails] = await db.execute<{ queued: number; sent: number }>(sql`
    select count(distinct o.id)::int as queued, count(m.id)::int as sent
      from outbox o left join mail_sink m on m.outbox_id = o.id
     where o.topic = 'email.order_paid' and o.payload->>'orderId' = ${order.id}`);
  const trades = await db.execute(sql`
    select gateway, status, opened_attempt as "openedAttempt" from order_trades where order_id = ${order.id} order by opened_at`);
  const refunds = await db.execute(sql`
    select gateway, refund_id as "refundId", amount_minor as "amountMinor", reason, status, attempts
      from refunds where order_id = ${order.id} order by created_at`);
  const [refundEmails] = await db.execute<{ queued: number; sent: number }>(sql`
    select count(distinct o.id)::int as queued, count(m.id)::int as sent
      from outbox o left join mail_sink m on m.outbox_id = o.id
     where o.topic = 'email.refund' and o.payload->>'orderId' = ${order.id}`);
  // The drills read the key table as an operator would: the store's interface has no listing.
  const keys = await db.execute(sql`
    select key, response_status as status, recovery_point as "recoveryPoint", completed_at is not null as completed,
           coalesce(lease_expires_at > now(), false) as "leaseHeld"
      from idempotency_keys
     where scope = ${customerScope(order.customer_id)} and request_path = 'checkout.pay'
     order by created_at`);
  return Response.json({
    order: { status: order.status, paymentAttempts: order.payment_attempt, clientAddress: order.client_address },
    payments,
    emails,
    keys,
    trades,
    refunds,
    refundEmails,
  });
}
