/**
 * The soak's invariant checker: the promises of design.md §1, read off the ground truth — the PSP
 * sandbox's ledger (`GET {sandbox}/ledger`) and the app's database — for the orders created since a
 * baseline taken before the run (so the database may hold earlier runs).
 *
 *   money_kept             per order, succeeded ledger charges − succeeded ledger refunds ≠ the order's
 *                          amount if it is paid, 0 otherwise (and any money kept for an out_trade_no
 *                          that no order has)
 *   refund_exceeds_charge  the refunds of one charge (pending and succeeded) add up to more than it
 *   refund_twice           more than one succeeded refund of one charge
 *   charged_not_paid       a succeeded ledger charge that its order does not record (as its payment or
 *                          as excess being refunded), or a paid order whose one payment is not one of
 *                          its charges
 *   paid_without_charge    a paid order, or a succeeded payment, that no succeeded ledger charge backs
 *   stock_not_conserved    per SKU: baseline stock − quantities of the run's orders not expired/failed
 *                          + quantities of orders open at the baseline that expired since ≠ stock now
 *   emails_per_paid_order  confirmation emails delivered (mail_sink rows via the outbox) ≠ 1 for a
 *                          paid order, or any email for an order that is not paid; refund emails ≠ 1
 *                          per succeeded refund
 *   orders_per_key         an order that no completed checkout.createOrder key answered with, or that
 *                          more than one key answered with: one order per order-creation key
 *   key_in_flight          an idempotency key, not completed, whose lease is held at the check and is
 *                          still held by the same owner (same lease token) more than a lease length
 *                          later: with every client gone, no request can legitimately hold it that long
 *   unsettled              after the settling time: an order still `paying`, an email still queued, a
 *                          refund not final, or a trade still open on an order that is over
 */
import postgres from 'postgres';
import { auditJournal } from '@/server/checkout/journal-audit';
import { setTimeout as sleep } from 'node:timers/promises';

export interface LedgerCharge {
  gateway: string;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  status: string;
  gatewayTradeNo: string | null;
  createdAt: string;
}

export interface LedgerRefund {
  gateway: string;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  status: string;
  refundId: string;
  /** The gateway's own id for the refund. */
  gatewayRefundId: string;
  gatewayTradeNo: string;
  createdAt: string;
}

export interface Ledger {
  charges: LedgerCharge[];
  notifications: { gateway: string; outTradeNo: string; attempt: number; acknowledged: boolean; at: string }[];
  refunds: LedgerRefund[];
}

export async function fetchLedger(sandboxUrl: string): Promise<Ledger> {
  const response = await fetch(`${sandboxUrl}/ledger`, { signal: AbortSignal.timeout(60_000) });
  if (!response.ok) throw new Error(`GET ${sandboxUrl}/ledger answered ${response.status}`);
  return (await response.json()) as Ledger;
}

export const VIOLATION_KINDS = [
  'money_kept',
  'refund_exceeds_charge',
  'refund_twice',
  'charged_not_paid',
  'paid_without_charge',
  'stock_not_conserved',
  'emails_per_paid_order',
  'orders_per_key',
  'key_in_flight',
  'unsettled',
  'journal_broken',
  'journal_disagrees',
] as const;
export type ViolationKind = (typeof VIOLATION_KINDS)[number];

export interface Violation {
  kind: ViolationKind;
  /** What it is about: an out_trade_no, a SKU, a key. */
  subject: string;
  detail: string;
}

/** What the run starts from: taken before the first order. */
export interface Baseline {
  /** The database's clock at the baseline; the run's orders and keys are created after it. */
  at: Date;
  stock: Record<string, number>;
  /** Orders open (awaiting_payment, paying) at the baseline: if they expire meanwhile, stock comes back. */
  openOrderIds: string[];
}

export async function takeBaseline(sql: postgres.Sql): Promise<Baseline> {
  return sql.begin('isolation level repeatable read', async (tx) => {
    const [clock] = await tx<{ now: Date }[]>`select now() as now`;
    const products = await tx<{ sku: string; stock: number }[]>`select sku, stock from products order by sku`;
    const open = await tx<{ id: string }[]>`select id from orders where status in ('awaiting_payment', 'paying')`;
    return {
      at: clock!.now,
      stock: Object.fromEntries(products.map((p) => [p.sku, p.stock])),
      openOrderIds: open.map((o) => o.id),
    };
  });
}

export interface InvariantStats {
  orders: number;
  ordersByStatus: Record<string, number>;
  paidBySource: Record<string, number>;
  ledgerCharges: { succeeded: number; declined: number; other: number };
  notifications: { deliveries: number; acknowledged: number };
  emailsSent: number;
  keys: { total: number; completed: number; staleLease: number; released: number };
  /** Charges that had to go back (second successes, late payments), and their refunds at the ledger. */
  refunds: { excessCharges: number; ledgerSucceeded: number; ledgerOther: number; byReason: Record<string, number> };
  /** Orders that had to pay with two or more charges before the refunds: the protection at work. */
  ordersChargedTwice: number;
}

export interface InvariantReport {
  violations: Violation[];
  stats: InvariantStats;
}

const RETURNED_STATUSES = new Set(['expired', 'failed']);

function tally<T extends string>(values: Iterable<T>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const value of values) out[value] = (out[value] ?? 0) + 1;
  return out;
}

export async function checkInvariants(params: {
  sql: postgres.Sql;
  ledger: Ledger;
  baseline: Baseline;
  /** The app's lease length: a lease still held by one owner after this long is a key left in flight. */
  leaseMs: number;
}): Promise<InvariantReport> {
  const { sql, ledger, baseline } = params;
  const since = baseline.at;
  const violations: Violation[] = [];
  const add = (kind: ViolationKind, subject: string, detail: string) => violations.push({ kind, subject, detail });

  const orders = await sql<{ id: string; out_trade_no: string; status: string; amount_minor: number }[]>`
    select id, out_trade_no, status, amount_minor from orders where created_at >= ${since} order by created_at`;
  const byTradeNo = new Map(orders.map((o) => [o.out_trade_no, o]));
  type PaymentRow = { order_id: string; gateway: string; gateway_trade_no: string | null; source: string; role: string };
  const allSucceeded = await sql<PaymentRow[]>`
    select p.order_id, p.gateway, p.gateway_trade_no, p.source, p.role
      from payments p join orders o on o.id = p.order_id
     where o.created_at >= ${since} and p.status = 'succeeded'`;
  const payments = allSucceeded.filter((p) => p.role === 'payment');
  const paymentsByOrder = new Map<string, PaymentRow[]>();
  for (const p of payments) paymentsByOrder.set(p.order_id, [...(paymentsByOrder.get(p.order_id) ?? []), p]);
  const recordedByOrder = new Map<string, PaymentRow[]>();
  for (const p of allSucceeded) recordedByOrder.set(p.order_id, [...(recordedByOrder.get(p.order_id) ?? []), p]);

  // --- The ledger, scoped to this run: charges for its orders, and charges since the baseline for
  // an out_trade_no that no order has at all (money taken for nothing we know of).
  const recentUnknown = ledger.charges.filter((c) => !byTradeNo.has(c.outTradeNo) && new Date(c.createdAt) >= since);
  const unknownTradeNos = [...new Set(recentUnknown.map((c) => c.outTradeNo))];
  const known = unknownTradeNos.length
    ? new Set(
        (await sql<{ out_trade_no: string }[]>`select out_trade_no from orders where out_trade_no in ${sql(unknownTradeNos)}`).map(
          (r) => r.out_trade_no,
        ),
      )
    : new Set<string>();
  const inScope = (c: { outTradeNo: string; createdAt: string }) =>
    byTradeNo.has(c.outTradeNo) || (new Date(c.createdAt) >= since && !known.has(c.outTradeNo));
  const charges = ledger.charges.filter(inScope);
  const ledgerRefunds = (ledger.refunds ?? []).filter(inScope);
  const succeeded = charges.filter((c) => c.status === 'succeeded');
  const chargesByTradeNo = new Map<string, LedgerCharge[]>();
  for (const c of succeeded) chargesByTradeNo.set(c.outTradeNo, [...(chargesByTradeNo.get(c.outTradeNo) ?? []), c]);
  const refundedByTradeNo = new Map<string, number>();
  for (const r of ledgerRefunds) {
    if (r.status === 'succeeded') refundedByTradeNo.set(r.outTradeNo, (refundedByTradeNo.get(r.outTradeNo) ?? 0) + r.amountMinor);
  }
  const describe = (list: LedgerCharge[]) => list.map((c) => `${c.gateway}/${c.gatewayTradeNo} ${c.amountMinor}`).join(', ');

  // 1. Money kept per order: its amount if paid, nothing otherwise.
  for (const tradeNo of new Set([...chargesByTradeNo.keys(), ...refundedByTradeNo.keys(), ...byTradeNo.keys()])) {
    const list = chargesByTradeNo.get(tradeNo) ?? [];
    const charged = list.reduce((sum, c) => sum + c.amountMinor, 0);
    const refunded = refundedByTradeNo.get(tradeNo) ?? 0;
    const order = byTradeNo.get(tradeNo);
    const expected = order?.status === 'paid' ? order.amount_minor : 0;
    if (charged - refunded !== expected) {
      add(
        'money_kept',
        tradeNo,
        `kept ${charged - refunded} (charged ${charged}: ${describe(list) || 'none'}; refunded ${refunded}), expected ${expected} for ${order ? `an order that is ${order.status}` : 'no order'}`,
      );
    }
  }

  // 1b. Refunds never exceed their charge, and no charge is refunded twice.
  const refundsByCharge = new Map<string, LedgerRefund[]>();
  for (const r of ledgerRefunds) {
    const charge = `${r.gateway}/${r.gatewayTradeNo}`;
    refundsByCharge.set(charge, [...(refundsByCharge.get(charge) ?? []), r]);
  }
  for (const [charge, list] of refundsByCharge) {
    const live = list.filter((r) => r.status === 'succeeded' || r.status === 'pending');
    const total = live.reduce((sum, r) => sum + r.amountMinor, 0);
    const original = succeeded.find((c) => `${c.gateway}/${c.gatewayTradeNo}` === charge);
    if (!original || total > original.amountMinor) {
      add(
        'refund_exceeds_charge',
        charge,
        `refunds total ${total}; the charge is ${original ? original.amountMinor : 'not in the ledger'}`,
      );
    }
    const done = list.filter((r) => r.status === 'succeeded');
    if (done.length > 1) add('refund_twice', charge, `${done.length} succeeded refunds: ${done.map((r) => r.refundId).join(', ')}`);
  }

  // 2. Every successful charge is reflected in its order: as the one payment of a paid order, or as
  // excess being refunded.
  for (const [tradeNo, list] of chargesByTradeNo) {
    const order = byTradeNo.get(tradeNo);
    if (!order) {
      add('charged_not_paid', tradeNo, `charged (${describe(list)}) but no order has this out_trade_no`);
      continue;
    }
    const recorded = recordedByOrder.get(order.id) ?? [];
    const problems: string[] = [];
    // A charge the gateway itself reversed in full (Alipay's cancel of a trade paid a moment before)
    // kept no money: the order need not record it.
    const reversed = (c: LedgerCharge) =>
      ledgerRefunds
        .filter((r) => r.status === 'succeeded' && r.gateway === c.gateway && r.gatewayTradeNo === c.gatewayTradeNo)
        .reduce((sum, r) => sum + r.amountMinor, 0) >= c.amountMinor;
    for (const c of list) {
      if (!recorded.some((p) => p.gateway === c.gateway && p.gateway_trade_no === c.gatewayTradeNo) && !reversed(c)) {
        problems.push(`charge ${c.gateway}/${c.gatewayTradeNo} is not recorded by its order (${order.status})`);
      }
    }
    const paid = paymentsByOrder.get(order.id) ?? [];
    const matches = (p: PaymentRow) => list.some((c) => c.gateway === p.gateway && c.gatewayTradeNo === p.gateway_trade_no);
    if (order.status === 'paid' && paid.length !== 1) {
      problems.push(`the paid order has ${paid.length} payments`);
    } else if (order.status === 'paid' && !matches(paid[0]!)) {
      problems.push(`the payment records ${paid[0]!.gateway}/${paid[0]!.gateway_trade_no}`);
    } else if (order.status !== 'paid' && paid.length > 0) {
      problems.push(`recorded as the payment of an order that is ${order.status}`);
    }
    if (problems.length > 0) add('charged_not_paid', tradeNo, `charged (${describe(list)}): ${problems.join('; ')}`);
  }

  // 2b. The converse: nothing is paid that the gateway did not charge.
  for (const order of orders) {
    const paid = paymentsByOrder.get(order.id) ?? [];
    const list = chargesByTradeNo.get(order.out_trade_no) ?? [];
    if (order.status === 'paid' && paid.length === 0) {
      add('paid_without_charge', order.out_trade_no, 'the order is paid but has no succeeded payment');
    }
    for (const p of paid) {
      if (!list.some((c) => c.gateway === p.gateway && c.gatewayTradeNo === p.gateway_trade_no)) {
        add(
          'paid_without_charge',
          order.out_trade_no,
          `payment ${p.gateway}/${p.gateway_trade_no} (${p.source}) has no succeeded ledger charge`,
        );
      }
    }
  }

  // 3. Inventory is conserved.
  const items = await sql<{ sku: string; held: number }[]>`
    select i.sku, sum(i.quantity)::int as held
      from order_items i join orders o on o.id = i.order_id
     where o.created_at >= ${since} and o.status not in ('expired', 'failed')
     group by i.sku`;
  const returned = baseline.openOrderIds.length
    ? await sql<{ sku: string; quantity: number }[]>`
        select i.sku, sum(i.quantity)::int as quantity
          from order_items i join orders o on o.id = i.order_id
         where o.id in ${sql(baseline.openOrderIds)} and o.status in ${sql([...RETURNED_STATUSES])}
         group by i.sku`
    : [];
  const products = await sql<{ sku: string; stock: number }[]>`select sku, stock from products order by sku`;
  for (const product of products) {
    const initial = baseline.stock[product.sku];
    if (initial === undefined) continue; // created during the run: nothing to compare with
    const held = items.find((i) => i.sku === product.sku)?.held ?? 0;
    const back = returned.find((r) => r.sku === product.sku)?.quantity ?? 0;
    const expected = initial - held + back;
    if (product.stock !== expected) {
      add(
        'stock_not_conserved',
        product.sku,
        `stock is ${product.stock}, expected ${expected} (baseline ${initial} − ${held} held by open/paid orders + ${back} returned by older orders)`,
      );
    }
  }

  // 4a. One order per order-creation key: every order of the run is the stored answer of exactly one
  // completed checkout.createOrder key. A retry that ran the work again would leave an order no key
  // names (its key answers with the first one).
  const keysPerOrder = await sql<{ out_trade_no: string; keys: number }[]>`
    select o.out_trade_no, count(k.key)::int as keys
      from orders o
      left join idempotency_keys k
        on k.request_path = 'checkout.createOrder' and k.completed_at is not null and (k.response_body->>'orderId') = o.id::text
     where o.created_at >= ${since}
     group by o.out_trade_no
    having count(k.key) <> 1`;
  for (const order of keysPerOrder) {
    add('orders_per_key', order.out_trade_no, `the answer of ${order.keys} order-creation keys (expected exactly 1)`);
  }

  // 4. One confirmation email per paid order, none for any other.
  const emails = await sql<{ order_id: string; queued: number; sent: number; undelivered: number }[]>`
    select ob.payload->>'orderId' as order_id, count(distinct ob.id)::int as queued, count(m.id)::int as sent,
           count(distinct ob.id) filter (where ob.delivered_at is null)::int as undelivered
      from outbox ob
      join orders o on o.id = (ob.payload->>'orderId')::uuid
      left join mail_sink m on m.outbox_id = ob.id
     where ob.topic = 'email.order_paid' and o.created_at >= ${since}
     group by 1`;
  const emailsByOrder = new Map(emails.map((e) => [e.order_id, e]));
  for (const order of orders) {
    const e = emailsByOrder.get(order.id);
    const sent = e?.sent ?? 0;
    if (order.status === 'paid' && sent !== 1) {
      add('emails_per_paid_order', order.out_trade_no, `${sent} emails sent (${e?.queued ?? 0} queued) for a paid order`);
    } else if (order.status !== 'paid' && sent > 0) {
      add('emails_per_paid_order', order.out_trade_no, `${sent} emails sent for an order that is ${order.status}`);
    }
  }

  // 4b. One refund email per refund that succeeded in our books, none for any other.
  const refundRows = await sql<{ refund_id: string; status: string; reason: string; order_status: string; sent: number; queued: number }[]>`
    select r.refund_id, r.status, r.reason, o.status as order_status,
           (select count(*)::int from outbox ob join mail_sink m on m.outbox_id = ob.id
             where ob.topic = 'email.refund' and ob.dedupe_key = 'refund-email:' || r.refund_id) as sent,
           (select count(*)::int from outbox ob
             where ob.topic = 'email.refund' and ob.dedupe_key = 'refund-email:' || r.refund_id and ob.delivered_at is null) as queued
      from refunds r join orders o on o.id = r.order_id
     where o.created_at >= ${since}`;
  for (const r of refundRows) {
    const expected = r.status === 'succeeded' ? 1 : 0;
    if (r.sent !== expected && !(r.status === 'succeeded' && r.queued > 0)) {
      add('emails_per_paid_order', r.refund_id, `${r.sent} refund emails sent for a refund that is ${r.status}`);
    }
  }

  // 5. Keys left in flight: held now, and still held by the same owner after a full lease length.
  const held = await sql<{ id: string; scope: string; key: string; request_path: string; lease_token: string }[]>`
    select id, scope, key, request_path, lease_token from idempotency_keys
     where created_at >= ${since} and completed_at is null and lease_expires_at > now()`;
  if (held.length > 0) {
    await sleep(params.leaseMs + 250);
    const still = await sql<{ id: string; lease_token: string; lease_expires_at: Date }[]>`
      select id, lease_token, lease_expires_at from idempotency_keys
       where id in ${sql(held.map((k) => k.id))} and completed_at is null and lease_expires_at > now()`;
    for (const row of still) {
      const key = held.find((k) => k.id === row.id)!;
      if (row.lease_token !== key.lease_token) continue; // taken over meanwhile: someone is working on it
      add(
        'key_in_flight',
        `${key.scope} ${key.key}`,
        `${key.request_path}: not completed, lease held by one owner for over ${params.leaseMs} ms (until ${row.lease_expires_at.toISOString()})`,
      );
    }
  }

  // 6. Settled: nothing still paying, no email still queued.
  for (const order of orders) {
    if (order.status === 'paying') add('unsettled', order.out_trade_no, 'the order is still paying');
    const e = emailsByOrder.get(order.id);
    if (e && e.undelivered > 0) add('unsettled', order.out_trade_no, `${e.undelivered} confirmation email(s) still queued`);
  }
  for (const r of refundRows) {
    if (r.status !== 'succeeded' && r.status !== 'failed') add('unsettled', r.refund_id, `the refund is still ${r.status}`);
    if (r.queued > 0) add('unsettled', r.refund_id, 'the refund email is still queued');
  }
  const openTrades = await sql<{ out_trade_no: string; gateway: string; status: string }[]>`
    select o.out_trade_no, t.gateway, o.status from order_trades t join orders o on o.id = t.order_id
     where o.created_at >= ${since} and t.status = 'open' and o.status in ('paid', 'expired', 'failed')`;
  for (const t of openTrades) add('unsettled', t.out_trade_no, `the ${t.gateway} trade is still open on an order that is ${t.status}`);

  // --- Figures.
  const [keyStats] = await sql<{ total: number; completed: number; stale: number; released: number }[]>`
    select count(*)::int as total,
           count(*) filter (where completed_at is not null)::int as completed,
           count(*) filter (where completed_at is null and lease_token is not null and lease_expires_at <= now())::int as stale,
           count(*) filter (where completed_at is null and lease_token is null)::int as released
      from idempotency_keys where created_at >= ${since}`;
  const excess = allSucceeded.filter((p) => p.role === 'excess');
  const scopedTradeNos = new Set(charges.map((c) => c.outTradeNo));
  const notifications = ledger.notifications.filter((n) => scopedTradeNos.has(n.outTradeNo) || byTradeNo.has(n.outTradeNo));
  const paidOrderIds = new Set(orders.filter((o) => o.status === 'paid').map((o) => o.id));
  const stats: InvariantStats = {
    orders: orders.length,
    ordersByStatus: tally(orders.map((o) => o.status)),
    paidBySource: tally(payments.filter((p) => paidOrderIds.has(p.order_id)).map((p) => p.source)),
    ledgerCharges: {
      succeeded: succeeded.length,
      declined: charges.filter((c) => c.status === 'declined').length,
      other: charges.filter((c) => c.status !== 'succeeded' && c.status !== 'declined').length,
    },
    notifications: { deliveries: notifications.length, acknowledged: notifications.filter((n) => n.acknowledged).length },
    emailsSent: emails.reduce((sum, e) => sum + e.sent, 0),
    keys: {
      total: keyStats?.total ?? 0,
      completed: keyStats?.completed ?? 0,
      staleLease: keyStats?.stale ?? 0,
      released: keyStats?.released ?? 0,
    },
    refunds: {
      excessCharges: excess.length,
      ledgerSucceeded: ledgerRefunds.filter((r) => r.status === 'succeeded').length,
      ledgerOther: ledgerRefunds.filter((r) => r.status !== 'succeeded').length,
      byReason: tally(refundRows.map((r) => r.reason)),
    },
    ordersChargedTwice: [...chargesByTradeNo.values()].filter((list) => list.length > 1).length,
  };

  // --- The payment journal: every chain of this run's orders intact, and each order's journal
  // telling the same story as its rows — one `payment.succeeded` per paying charge, one
  // `payment.excess` per charge that had to go back.
  if (orders.length > 0) {
    const audit = await auditJournal(sql, { streams: orders.map((o) => `order:${o.id}`) });
    if (audit.broken) add('journal_broken', audit.broken.stream, `${audit.broken.reason} at seq ${audit.broken.seq}`);
    const journaled = await sql<{ order_id: string; kind: string; n: number }[]>`
      select order_id::text, kind, count(*)::int as n from payment_events
       where order_id in ${sql(orders.map((o) => o.id))} and kind in ('payment.succeeded', 'payment.excess')
       group by order_id, kind`;
    const count = (orderId: string, kind: string) => journaled.find((j) => j.order_id === orderId && j.kind === kind)?.n ?? 0;
    for (const order of orders) {
      const rows = recordedByOrder.get(order.id) ?? [];
      const paying = rows.filter((p) => p.role === 'payment').length;
      const excessRows = rows.length - paying;
      if (count(order.id, 'payment.succeeded') !== paying || count(order.id, 'payment.excess') !== excessRows) {
        add(
          'journal_disagrees',
          order.out_trade_no,
          `payments ${paying}+${excessRows} excess, journal ${count(order.id, 'payment.succeeded')}+${count(order.id, 'payment.excess')}`,
        );
      }
    }
  }
  return { violations, stats };
}

/**
 * What settling waits for: the run's orders still paying and emails still queued, and a fingerprint
 * of everything that moves (order states, payments, emails, keys) — settled means nothing pending
 * and the fingerprint still for a while, since requests that customers abandoned run on server-side.
 */
export async function pendingWork(sql: postgres.Sql, since: Date): Promise<{ paying: number; queuedEmails: number; fingerprint: string }> {
  const [row] = await sql<{ paying: number; queued: number; fingerprint: string }[]>`
    select (select count(*)::int from orders where created_at >= ${since} and status = 'paying') as paying,
           (select count(*)::int from outbox ob join orders o on o.id = (ob.payload->>'orderId')::uuid
             where ob.topic in ('email.order_paid', 'email.refund') and ob.delivered_at is null and o.created_at >= ${since})
           + (select count(*)::int from refunds r join orders o on o.id = r.order_id
               where o.created_at >= ${since} and r.status in ('pending', 'sent', 'processing')) as queued,
           concat_ws('/',
             (select string_agg(status || ':' || n, ',' order by status)
                from (select status, count(*) as n from orders where created_at >= ${since} group by status) s),
             (select count(*) from payments p join orders o on o.id = p.order_id where o.created_at >= ${since}),
             (select count(*) filter (where r.status = 'succeeded') from refunds r join orders o on o.id = r.order_id where o.created_at >= ${since}),
             (select count(*) from mail_sink where sent_at >= ${since}),
             (select count(*) filter (where completed_at is not null) || ':' || count(*) filter (where lease_token is not null)
                from idempotency_keys where created_at >= ${since})) as fingerprint`;
  return { paying: row?.paying ?? 0, queuedEmails: row?.queued ?? 0, fingerprint: row?.fingerprint ?? '' };
}

export type PendingWork = Awaited<ReturnType<typeof pendingWork>>;

/**
 * Waits until the run has settled: nothing paying or queued, and nothing changed for `quietMs` (the
 * requests customers abandoned still run on the server; the lease bounds them) — or until
 * `budgetMs` has passed. `onWait` hears each second's state. Returns the last state and the time taken.
 */
export async function waitUntilSettled(
  sql: postgres.Sql,
  since: Date,
  options: { quietMs: number; budgetMs: number; onWait?: (pending: PendingWork, elapsedMs: number, quietForMs: number) => void },
): Promise<{ pending: PendingWork; ms: number }> {
  const started = Date.now();
  let pending = await pendingWork(sql, since);
  let lastChange = Date.now();
  for (;;) {
    const idle = pending.paying === 0 && pending.queuedEmails === 0;
    if (idle && Date.now() - lastChange >= options.quietMs) break;
    if (Date.now() - started >= options.budgetMs) break;
    options.onWait?.(pending, Date.now() - started, Date.now() - lastChange);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const now = await pendingWork(sql, since);
    if (now.fingerprint !== pending.fingerprint || now.paying !== pending.paying || now.queuedEmails !== pending.queuedEmails) {
      lastChange = Date.now();
    }
    pending = now;
  }
  return { pending, ms: Date.now() - started };
}
