/**
 * What the hostile-input suite checks after every refused request: that nothing changed. A snapshot
 * of every table a request could touch, and of the sandbox's ledger, compared before and after.
 */
import assert from 'node:assert/strict';
import type { TestStack } from '@/test/support/stack';

export interface Footprint {
  orders: number;
  orderItems: number;
  customers: number;
  payments: number;
  keys: number;
  events: number;
  exceptions: number;
  outbox: number;
  stock: number;
  ledgerCharges: number;
}

export async function footprint(stack: TestStack): Promise<Footprint> {
  const [row] = await stack.sql<Omit<Footprint, 'ledgerCharges'>[]>`
    select (select count(*)::int from orders) as orders,
           (select count(*)::int from order_items) as "orderItems",
           (select count(*)::int from customers) as customers,
           (select count(*)::int from payments) as payments,
           (select count(*)::int from idempotency_keys) as keys,
           (select count(*)::int from payment_events) as events,
           (select count(*)::int from payment_exceptions) as exceptions,
           (select count(*)::int from outbox) as outbox,
           (select sum(stock)::int from products) as stock`;
  const ledger = await stack.ledger();
  return { ...row!, ledgerCharges: ledger.charges.length };
}

/** Runs `attack` and asserts it left no trace; returns what it returned. */
export async function leavesNoTrace<T>(stack: TestStack, attack: () => Promise<T>): Promise<T> {
  const before = await footprint(stack);
  const result = await attack();
  assert.deepEqual(await footprint(stack), before, 'a refused request changed something');
  return result;
}
