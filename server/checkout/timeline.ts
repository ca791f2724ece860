/**
 * The 幕后 (under the hood) view of one order: its journal in order, whether the journal's hash chain
 * holds, and what the gateway's own ledger says was charged and refunded — the proof that one charge
 * was kept, next to every request, retry and notification that could have made a second.
 *
 * A customer sees only their own orders; demo mode (the local showcase) may show any.
 */
import { and, asc, desc, eq } from 'drizzle-orm';
import type { Executor } from '@/db/client';
import { orders, paymentEvents } from '@/db/schema';
import { eventHash, GENESIS_HASH } from './journal-audit';
import { getOrder, type OrderView } from './orders';
import { UNAVAILABLE_LEDGER, type GatewayLedger, type LedgerSummary } from '@/server/payments/ledger';
import { sql } from 'drizzle-orm';

export interface TimelineEvent {
  seq: number;
  at: string;
  kind: string;
  data: Record<string, unknown>;
  /** The first 12 hex digits of the row's hash, to show the chain. */
  hash: string;
}

export interface OrderTimeline {
  order: OrderView;
  events: TimelineEvent[];
  chain: { intact: true } | { intact: false; brokenAtSeq: number };
  ledger: LedgerSummary;
}

export async function orderTimeline(
  db: Executor,
  viewer: { customerId: string; demo: boolean },
  orderId: string,
  gatewayLedger: GatewayLedger | undefined,
): Promise<OrderTimeline> {
  const order = await getOrder(db, viewer.demo ? null : viewer.customerId, orderId);
  const rows = await db.execute<{
    seq: number;
    order_id: string | null;
    stream: string;
    at_text: string;
    kind: string;
    data_text: string;
    prev_hash: string;
    hash: string;
  }>(sql`
    select seq, order_id::text, stream, kind, prev_hash, hash, data::text as data_text,
           to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as at_text
      from ${paymentEvents}
     where stream = ${`order:${orderId}`}
     order by seq`);

  let chain: OrderTimeline['chain'] = { intact: true };
  let previous = GENESIS_HASH;
  for (const [index, row] of rows.entries()) {
    const ok = row.seq === index + 1 && row.prev_hash === previous && eventHash(row.prev_hash, row) === row.hash;
    if (!ok) {
      chain = { intact: false, brokenAtSeq: row.seq };
      break;
    }
    previous = row.hash;
  }

  return {
    order,
    events: rows.map((row) => ({
      seq: row.seq,
      at: row.at_text,
      kind: row.kind,
      data: JSON.parse(row.data_text) as Record<string, unknown>,
      hash: row.hash.slice(0, 12),
    })),
    chain,
    ledger: gatewayLedger ? await gatewayLedger.read(order.outTradeNo) : UNAVAILABLE_LEDGER,
  };
}

export interface OrderListing {
  orderId: string;
  outTradeNo: string;
  status: string;
  amountMinor: number;
  currency: string;
  createdAt: string;
  mine: boolean;
}

/** The newest orders: the customer's own, or in demo mode everyone's. */
export async function recentOrders(db: Executor, viewer: { customerId: string; demo: boolean }, limit = 30): Promise<OrderListing[]> {
  const rows = await db
    .select({
      orderId: orders.id,
      outTradeNo: orders.outTradeNo,
      status: orders.status,
      amountMinor: orders.amountMinor,
      currency: orders.currency,
      createdAt: orders.createdAt,
      customerId: orders.customerId,
    })
    .from(orders)
    .where(viewer.demo ? undefined : and(eq(orders.customerId, viewer.customerId)))
    .orderBy(desc(orders.createdAt), asc(orders.id))
    .limit(limit);
  return rows.map(({ customerId, createdAt, ...row }) => ({
    ...row,
    createdAt: createdAt.toISOString(),
    mine: customerId === viewer.customerId,
  }));
}
