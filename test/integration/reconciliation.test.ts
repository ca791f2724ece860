/**
 * 对账 against the sandbox's statements, downloaded through each gateway's documented delivery: a day
 * of real payments and refunds reconciles clean; each kind of discrepancy the sandbox injects into
 * the statement is caught and classed (a fee off the contract too, against the contract the sandbox
 * publishes with its credentials); a person resolves one, once, and the journal says who.
 * Real PostgreSQL, the sandbox over HTTP, the app's own adapters.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, afterEach, before, describe, it } from 'node:test';
import { processDueRefunds } from '@/server/jobs/refund-worker';
import type { GatewayId } from '@/server/payments/gateway-ids';
import { listMismatches, resolveMismatch } from '@/server/reconciliation/mismatches';
import { reconcileDay, STATEMENT_TIME_ZONES } from '@/server/reconciliation/reconcile-day';
import { eventually, startTestStack, type TestStack } from '@/test/support/stack';

const TOKEN = 'merchant-token-for-the-reconciliation-tests-0123456789';
const RECONCILED: GatewayId[] = ['alipay', 'wechatpay', 'stripe', '2c2p'];
let stack: TestStack;

before(async () => {
  stack = await startTestStack({ merchantApiToken: TOKEN });
});
after(async () => {
  await stack?.close();
});
afterEach(async () => {
  await fetch(`${stack.sandboxUrl}/sandbox/statements/discrepancies`, { method: 'DELETE' });
});

/** Today in the gateway's statement time zone: the day these tests pay on. */
const today = (gateway: GatewayId) =>
  new Intl.DateTimeFormat('en-CA', { timeZone: STATEMENT_TIME_ZONES[gateway], year: 'numeric', month: '2-digit', day: '2-digit' }).format(
    new Date(),
  );

async function paidOrder(gateway: GatewayId) {
  const customer = stack.customer();
  const order = await customer.createOrder([{ sku: 'MUG-CELADON', quantity: 1 }]);
  const paid = await customer.pay(order.orderId, { gateway });
  assert.equal(paid.status, 201, paid.text);
  return order;
}

async function refunded(orderId: string, amountMinor: number) {
  const answer = await stack.customer().send('POST', 'merchant.refund', {
    input: { orderId, amountMinor, reason: 'returned' },
    key: randomUUID(),
    headers: { authorization: `Bearer ${TOKEN}`, 'x-no-session': '1' },
  });
  assert.equal(answer.status, 202, answer.text);
  const refundId = (answer.json as { result: { data: { refundId: string } } }).result.data.refundId;
  // Until the gateway says it is done (WeChat Pay answers PROCESSING first, then settles it).
  await eventually(
    async () => {
      await processDueRefunds(stack.services, { backoffMs: 0 });
      const [row] = await stack.sql<{ status: string }[]>`select status from refunds where refund_id = ${refundId}`;
      return row?.status === 'succeeded' ? true : undefined;
    },
    15_000,
    'the refund to succeed',
  );
}

async function inject(spec: Record<string, unknown>) {
  const response = await fetch(`${stack.sandboxUrl}/sandbox/statements/discrepancies`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(spec),
  });
  assert.equal(response.status, 201, await response.text());
}

// First in the file (its database is its own): a day with one Alipay payment, which the statement
// leaves out — Alipay then has no bill at all for the day ("账单不存在").
describe('对账: a day the gateway has no bill for, while our books have money on it', () => {
  it('0. reports the payment missing, never a quiet day', async () => {
    const order = await paidOrder('alipay');
    const date = today('alipay');
    await inject({ gateway: 'alipay', date, kind: 'missing_payment', outTradeNo: order.outTradeNo });
    const day = await reconcileDay(stack.services, 'alipay', date, 'test');
    assert.equal(day.status, 'mismatches', JSON.stringify(day));
    assert.deepEqual(
      day.mismatches.map((m) => [m.kind, m.outTradeNo]),
      [['missing_payment', order.outTradeNo]],
    );
  });
});

for (const gateway of RECONCILED) {
  describe(`对账: ${gateway}`, () => {
    it('1. a day of payments and a refund reconciles clean, both ways', async () => {
      const first = await paidOrder(gateway);
      await paidOrder(gateway);
      await refunded(first.orderId, 1000);
      const day = await reconcileDay(stack.services, gateway, today(gateway), 'test');
      assert.equal(day.status, 'clean', JSON.stringify(day.mismatches, null, 1));
      assert.ok(day.lines >= 3 && day.matched === day.lines, JSON.stringify(day));
      assert.ok(day.feesMinor > 0, 'the statement’s fees are reported');
      assert.equal(day.feesChecked, true, 'and each line’s checked against the contract the sandbox publishes');
    });

    it('2. each injected discrepancy is caught and classed; a re-run of the day adds no second row', async () => {
      const missing = await paidOrder(gateway);
      const differs = await paidOrder(gateway);
      const refundedOrder = await paidOrder(gateway);
      const overcharged = await paidOrder(gateway);
      await refunded(refundedOrder.orderId, 500);
      const date = today(gateway);
      await inject({ gateway, date, kind: 'fee_differs', outTradeNo: overcharged.outTradeNo, amountMinor: 100 });
      await inject({ gateway, date, kind: 'unknown_payment' });
      await inject({ gateway, date, kind: 'missing_payment', outTradeNo: missing.outTradeNo });
      await inject({ gateway, date, kind: 'amount_differs', outTradeNo: differs.outTradeNo });
      await inject({ gateway, date, kind: 'missing_refund', outTradeNo: refundedOrder.outTradeNo });

      const day = await reconcileDay(stack.services, gateway, date, 'test');
      assert.equal(day.status, 'mismatches');
      const found = day.mismatches.map((m) => [m.kind, m.outTradeNo === '' ? '(unknown)' : m.outTradeNo]);
      assert.deepEqual(
        found.filter(([kind]) => kind !== 'unknown_payment').sort(),
        [
          ['amount_differs', differs.outTradeNo],
          ['fee_differs', overcharged.outTradeNo],
          ['missing_payment', missing.outTradeNo],
          ['missing_refund', refundedOrder.outTradeNo],
        ].sort(),
      );
      assert.equal(day.mismatches.filter((m) => m.kind === 'unknown_payment').length, 1, 'money at the gateway we do not know of');
      const fee = day.mismatches.find((m) => m.kind === 'fee_differs');
      assert.ok(fee?.ours?.feeMinor !== undefined && fee.theirs, 'the contract’s fee beside the statement’s');
      assert.ok(fee.theirs.feeMinor - fee.ours.feeMinor >= 100, JSON.stringify(fee));

      const rowsOfTheDay = async () =>
        (
          await stack.sql<{ n: number }[]>`
            select count(*)::int as n from reconciliation_mismatches where gateway = ${gateway} and statement_date = ${date}`
        )[0]!.n;
      const before = await rowsOfTheDay();
      const again = await reconcileDay(stack.services, gateway, date, 'test');
      assert.equal(again.mismatches.length, 5, 'the re-run sees the same five');
      assert.equal(await rowsOfTheDay(), before, 'and records no second row for any of them');
    });

    it('3. a person resolves a mismatch once; the journal says who and what', async () => {
      const order = await paidOrder(gateway);
      const date = today(gateway);
      await inject({ gateway, date, kind: 'missing_payment', outTradeNo: order.outTradeNo });
      await reconcileDay(stack.services, gateway, date, 'test');
      const [row] = await stack.sql<{ id: string }[]>`
        select id from reconciliation_mismatches where out_trade_no = ${order.outTradeNo} and kind = 'missing_payment'`;
      const resolved = await resolveMismatch(
        stack.db,
        { id: row!.id, resolution: 'the gateway confirmed the payment by phone' },
        'operator:finance',
      );
      assert.equal(resolved.resolvedBy, 'operator:finance');
      await assert.rejects(
        resolveMismatch(stack.db, { id: row!.id, resolution: 'again' }, 'operator:other'),
        /Already resolved by operator:finance/,
      );
      const journaled = await stack.sql<{ n: number }[]>`
        select count(*)::int as n from payment_events
         where order_id = ${order.orderId} and kind = 'reconciliation.resolved' and data->>'by' = 'operator:finance'`;
      assert.equal(journaled[0]!.n, 1);
    });
  });
}

describe('对账: a statement corrected after a mismatch was recorded', () => {
  it('4. the mismatch stays open for a person, marked with the run that no longer found it', async () => {
    const order = await paidOrder('stripe');
    const date = today('stripe');
    await inject({ gateway: 'stripe', date, kind: 'missing_payment', outTradeNo: order.outTradeNo });
    await reconcileDay(stack.services, 'stripe', date, 'test');
    const listed = async () =>
      (await listMismatches(stack.db, { open: true, limit: 500 })).find(
        (m) => m.outTradeNo === order.outTradeNo && m.kind === 'missing_payment',
      );
    assert.equal((await listed())?.notSeenSince, null, 'seen by the newest run of its day');
    // Another gateway's clean run of the same day says nothing of Stripe's statement.
    await stack.sql`insert into reconciliation_runs (gateway, statement_date, status, by, started_at) values ('alipay', ${date}, 'clean', 'test', now())`;
    assert.equal((await listed())?.notSeenSince, null, 'another gateway’s run of the day does not count');

    await fetch(`${stack.sandboxUrl}/sandbox/statements/discrepancies`, { method: 'DELETE' });
    const corrected = await reconcileDay(stack.services, 'stripe', date, 'test');
    assert.ok(!corrected.mismatches.some((m) => m.outTradeNo === order.outTradeNo), 'the corrected statement shows the payment');
    const row = await listed();
    assert.ok(row, 'still open: a person resolves it');
    assert.ok(row.notSeenSince !== null && Date.parse(row.notSeenSince) >= Date.parse(row.firstSeenAt.toISOString()), JSON.stringify(row));
  });
});

describe('对账 across midnight: the gateway booked a payment the day before we recorded it', () => {
  it('5. matches it on the gateway’s day by its trade number, and finds it there when our day’s statement lacks it', async () => {
    const order = await paidOrder('stripe');
    const date = today('stripe');
    const dayBefore = new Date(Date.parse(`${date}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10);
    // The buyer paid the day before (as if a second before midnight, or a lost notification settled
    // later); we recorded it today. The sandbox's ledger is the gateway's record of when it happened.
    const moved = await stack.sql`
      update psp_sandbox.charges set created_at = created_at - interval '1 day'
       where gateway = 'stripe' and out_trade_no = ${order.outTradeNo} and status = 'succeeded'`;
    assert.equal(moved.count, 1);

    const before = await reconcileDay(stack.services, 'stripe', dayBefore, 'test');
    assert.deepEqual(before.mismatches, [], 'the gateway’s day: its line is money we know of, recorded today');
    assert.equal(before.lines, 1);
    const ours = await reconcileDay(stack.services, 'stripe', date, 'test');
    assert.ok(
      !ours.mismatches.some((m) => m.outTradeNo === order.outTradeNo),
      `our day: found on the day before's statement, not missing (${JSON.stringify(ours.mismatches)})`,
    );
  });
});

describe('对账: a statement line for money we booked on an earlier day', () => {
  it('6. is money we have no record of that day, never matched to the old entry', async () => {
    const order = await paidOrder('stripe');
    const date = today('stripe');
    // Our books say we recorded it two days ago; the gateway lists it today: not how money is learned of.
    await stack.sql`update payments set created_at = created_at - interval '2 days' where order_id = ${order.orderId}`;
    const day = await reconcileDay(stack.services, 'stripe', date, 'test');
    assert.deepEqual(
      day.mismatches.filter((m) => m.outTradeNo === order.outTradeNo).map((m) => m.kind),
      ['unknown_payment'],
    );
  });
});
