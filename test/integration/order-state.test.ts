/**
 * The order state machine (server/checkout/order-state.ts): the transitions the checkout makes are
 * exactly the ones in the table, each is one conditional UPDATE that applies from its from-states
 * when its guard holds, and anything else is refused and changes nothing. Real PostgreSQL; orders are
 * put into each state with raw SQL fixtures.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { openDatabase, type Database } from '@/db/client';
import { runMigrations } from '@/db/migrate';
import { ORDER_STATUSES, type OrderStatus } from '@/db/schema';
import {
  applyOrderTransition,
  FINAL_ORDER_STATUSES,
  IllegalOrderTransitionError,
  ORDER_TRANSITIONS,
  orderTransitionRows,
  requireOrderTransition,
  type OrderEvent,
  type OrderEventParams,
} from '@/server/checkout/order-state';
import { requireDatabaseUrl } from '@/test/support/stack';

let handle: ReturnType<typeof openDatabase>;
let db: Database;

before(async () => {
  const url = requireDatabaseUrl();
  await runMigrations(url);
  handle = openDatabase(url, { max: 10 });
  db = handle.db;
});
after(async () => {
  await handle?.sql.end({ timeout: 5 });
});

const KEY = randomUUID();

/** Parameters under which each event's guard holds for an order made by `orderIn`. */
const PASSING: { [E in OrderEvent]: OrderEventParams[E] } = {
  attempt_started: { keyId: KEY, gateway: 'alipay' },
  charge_declined: { keyId: KEY },
  buyer_step_opened: { keyId: KEY },
  charge_succeeded: {},
  charge_authorized: {},
  charge_captured: {},
  authorization_voided: {},
  attempt_abandoned: { attempt: 1 },
  expired: { tradeInDoubt: false },
};

/** An order in `status`, as the checkout leaves one there: `paying` is attempt 1, owned by KEY. */
async function orderIn(status: OrderStatus): Promise<string> {
  const id = randomUUID();
  const customerId = randomUUID();
  const paying = status === 'paying';
  await handle.sql`insert into customers (id) values (${customerId})`;
  await handle.sql`
    insert into orders (id, customer_id, out_trade_no, amount_minor, currency, status, payment_attempt,
                        attempt_key_id, attempt_gateway, attempt_started_at, expires_at)
    values (${id}, ${customerId}, ${`PO${id.replaceAll('-', '').slice(0, 18).toUpperCase()}`}, 100, 'CNY', ${status},
            ${paying ? 1 : 0}, ${paying ? KEY : null}, ${paying ? 'alipay' : null}, case when ${paying}::boolean then now() end,
            now() - interval '1 minute')`;
  return id;
}

async function orderRow(id: string) {
  const [row] = await handle.sql`select * from orders where id = ${id}`;
  return row!;
}

function apply<E extends OrderEvent>(orderId: string, event: E, params: OrderEventParams[E]) {
  return db.transaction((tx) => applyOrderTransition(tx, orderId, event, params));
}

describe('the order state machine', () => {
  it('1. lists every transition the checkout makes, and nothing leaves paid, expired or failed', () => {
    assert.deepEqual(
      orderTransitionRows().map(({ from, event, to }) => `${from} --${event}--> ${to}`),
      [
        'awaiting_payment --attempt_started--> paying',
        'paying --charge_declined--> awaiting_payment',
        'paying --buyer_step_opened--> awaiting_payment',
        'awaiting_payment --charge_succeeded--> paid',
        'paying --charge_succeeded--> paid',
        'awaiting_payment --charge_authorized--> authorized',
        'paying --charge_authorized--> authorized',
        'authorized --charge_captured--> paid',
        'authorized --authorization_voided--> voided',
        'paying --attempt_abandoned--> awaiting_payment',
        'awaiting_payment --expired--> expired',
      ],
    );
    assert.deepEqual([...FINAL_ORDER_STATUSES].sort(), ['expired', 'paid', 'voided']);
    for (const row of orderTransitionRows()) assert.ok(row.cause.length > 0, `${row.event} says who causes it`);
  });

  for (const { from, event, to } of orderTransitionRows()) {
    it(`2. applies ${event} from ${from} to ${to}`, async () => {
      const id = await orderIn(from);
      const result = await apply(id, event, PASSING[event] as never);
      assert.equal(result.applied, true);
      const row = await orderRow(id);
      assert.equal(row.status, to);
      if (to === 'paying') {
        assert.equal(row.payment_attempt, 1);
        assert.equal(row.attempt_key_id, KEY);
        assert.equal(row.attempt_gateway, 'alipay');
      }
      if (to === 'paid') assert.notEqual(row.paid_at, null);
      if (to === 'authorized') assert.notEqual(row.authorized_at, null);
      if (from === 'paying') assert.equal(row.attempt_key_id, null, 'the attempt no longer owns the order');
    });
  }

  const illegal = ORDER_STATUSES.flatMap((status) =>
    (Object.keys(ORDER_TRANSITIONS) as OrderEvent[])
      .filter((event) => !ORDER_TRANSITIONS[event].from.includes(status))
      .map((event) => ({ status, event })),
  );
  for (const { status, event } of illegal) {
    it(`3. refuses ${event} from ${status} and changes nothing`, async () => {
      const id = await orderIn(status);
      const before = await orderRow(id);

      assert.deepEqual(await apply(id, event, PASSING[event] as never), { applied: false });
      await assert.rejects(
        db.transaction((tx) => requireOrderTransition(tx, id, event, PASSING[event] as never)),
        (error: unknown) =>
          error instanceof IllegalOrderTransitionError &&
          error.found === status &&
          error.message.includes(`cannot take ${event} from ${status}`),
      );
      assert.deepEqual(await orderRow(id), before);
    });
  }

  describe('4. guards', () => {
    it('a decline gives up only the attempt of the key that made it', async () => {
      const id = await orderIn('paying');
      assert.deepEqual(await apply(id, 'charge_declined', { keyId: randomUUID() }), { applied: false });
      assert.equal((await orderRow(id)).status, 'paying');
      await assert.rejects(
        db.transaction((tx) => requireOrderTransition(tx, id, 'charge_declined', { keyId: randomUUID() })),
        /its guard does not hold/,
      );
    });

    it('the reconciler reopens only the attempt it observed', async () => {
      const id = await orderIn('paying');
      assert.deepEqual(await apply(id, 'attempt_abandoned', { attempt: 2 }), { applied: false });
      assert.equal((await orderRow(id)).status, 'paying');
    });

    it('an order with an open trade expires only once its close is given up as in doubt', async () => {
      const id = await orderIn('awaiting_payment');
      await handle.sql`insert into order_trades (order_id, gateway, status, opened_attempt) values (${id}, 'alipay', 'open', 1)`;
      assert.deepEqual(await apply(id, 'expired', { tradeInDoubt: false }), { applied: false });
      assert.equal((await orderRow(id)).status, 'awaiting_payment');
      assert.equal((await apply(id, 'expired', { tradeInDoubt: true })).applied, true);
      assert.equal((await orderRow(id)).status, 'expired');
    });
  });

  it('5. racing actors: of ten concurrent tries to leave one attempt, exactly one applies', async () => {
    // The pay request's decline and the reconciler's reopen race for the same attempt.
    const id = await orderIn('paying');
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        i % 2 === 0 ? apply(id, 'attempt_abandoned', { attempt: 1 }) : apply(id, 'charge_declined', { keyId: KEY }),
      ),
    );
    assert.equal(results.filter((r) => r.applied).length, 1);
    assert.equal((await orderRow(id)).status, 'awaiting_payment');
  });
});
