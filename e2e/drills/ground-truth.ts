/**
 * The drills' ground truth in the app's database, read (and, for the expiry drills, moved) by the
 * drills themselves over their own connection, as an operator with psql would: the app serves no
 * route for it. DRILL_DATABASE_URL is the drills' stack database (playwright.config.ts).
 */
import postgres from 'postgres';
import { customerScope } from '@/server/checkout/services';

export interface OrderState {
  order: { status: string; paymentAttempts: number; clientAddress: string | null };
  payments: { gateway: string; status: string; gatewayTradeNo: string | null; source: string }[];
  emails: { queued: number; sent: number };
  keys: { key: string; status: number | null; recoveryPoint: string; completed: boolean; leaseHeld: boolean }[];
  trades: { gateway: string; status: string; openedAttempt: number }[];
  refunds: { gateway: string; refundId: string; amountMinor: number; reason: string; status: string; attempts: number }[];
  refundEmails: { queued: number; sent: number };
}

export type GroundTruthSql = postgres.Sql;

export function openGroundTruth(url = process.env.DRILL_DATABASE_URL): GroundTruthSql {
  if (!url) throw new Error('DRILL_DATABASE_URL is not set: run the drills through playwright.config.ts');
  return postgres(url, { max: 2, onnotice: () => {}, connect_timeout: 10 });
}

const emailCounts = (sql: GroundTruthSql, topic: string, orderId: string) => sql<{ queued: number; sent: number }[]>`
  select count(distinct o.id)::int as queued, count(m.id)::int as sent
    from outbox o left join mail_sink m on m.outbox_id = o.id
   where o.topic = ${topic} and o.payload->>'orderId' = ${orderId}`;

/**
 * What the database holds for one order: its status, payments, confirmation emails (queued and
 * sent), the idempotency keys of its customer's payment attempts (a drill's browser context is one
 * customer), the trades it opened at gateways, and its refunds with their emails. Undefined: no such order.
 */
export async function orderState(sql: GroundTruthSql, outTradeNo: string): Promise<OrderState | undefined> {
  const [order] = await sql<{ id: string; customer_id: string; status: string; payment_attempt: number; client_address: string | null }[]>`
    select id, customer_id, status, payment_attempt, client_address from orders where out_trade_no = ${outTradeNo}`;
  if (!order) return undefined;
  const [payments, [emails], keys, trades, refunds, [refundEmails]] = await Promise.all([
    sql<OrderState['payments']>`
      select gateway, attempt, status, gateway_trade_no as "gatewayTradeNo", source, role from payments
       where order_id = ${order.id} order by created_at`,
    emailCounts(sql, 'email.order_paid', order.id),
    sql<OrderState['keys']>`
      select key, response_status as status, recovery_point as "recoveryPoint", completed_at is not null as completed,
             coalesce(lease_expires_at > now(), false) as "leaseHeld"
        from idempotency_keys
       where scope = ${customerScope(order.customer_id)} and request_path = 'checkout.pay'
       order by created_at`,
    sql<OrderState['trades']>`
      select gateway, status, opened_attempt as "openedAttempt" from order_trades where order_id = ${order.id} order by opened_at`,
    sql<OrderState['refunds']>`
      select gateway, refund_id as "refundId", amount_minor as "amountMinor", reason, status, attempts
        from refunds where order_id = ${order.id} order by created_at`,
    emailCounts(sql, 'email.refund', order.id),
  ]);
  return {
    order: { status: order.status, paymentAttempts: order.payment_attempt, clientAddress: order.client_address },
    payments: [...payments],
    emails: emails!,
    keys: [...keys],
    trades: [...trades],
    refunds: [...refunds],
    refundEmails: refundEmails!,
  };
}

/**
 * Makes an unpaid order due for expiry now, as if its 30 minutes had passed, so the expiry drills
 * need not wait for the clock: the reconciler then expires it on its next run, exactly as it would
 * have. Answers the order's status (only `awaiting_payment` is moved), undefined if there is none.
 */
export async function expireNow(sql: GroundTruthSql, outTradeNo: string): Promise<string | undefined> {
  const [order] = await sql<{ status: string }[]>`
    update orders set expires_at = case when status = 'awaiting_payment' then now() - interval '1 second' else expires_at end
     where out_trade_no = ${outTradeNo}
    returning status`;
  return order?.status;
}
