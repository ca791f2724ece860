/**
 * LIBRARY BEHAVIOUR RELIED ON — drizzle-orm's postgres-js driver and postgres.js. The PayOnce app's
 * test/integration/prepared-statements.test.ts fails if an upgrade changes it.
 *
 * Drizzle runs every statement through the client's `unsafe(text, params, { prepare })` and asks for
 * an unnamed statement (`prepare: false`) unless the query was `.prepare("name")`d. postgres.js must
 * then describe each parameterised statement before executing it: two round trips per statement,
 * and a parse and plan on the server every time. Named prepared statements, cached per connection by
 * their text, cost one round trip after the first use. The set of statement texts is small and fixed
 * (the queries are code), so the cache stays bounded.
 *
 * So Drizzle gets a view of the postgres.js client (a Proxy; the client itself is not changed) whose
 * `unsafe` asks for named statements, and whose `begin`/`savepoint` hand Drizzle's transactions the
 * same view of the transaction's connection.
 */
import { drizzle, type PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import type postgres from 'postgres';

type AnySql = postgres.Sql | postgres.TransactionSql;
type Callback = (tx: postgres.TransactionSql) => unknown;

export function withPreparedStatements<T extends AnySql>(sql: T): T {
  return new Proxy(sql, {
    get(target, property, receiver) {
      if (property === 'unsafe') {
        return (text: string, parameters?: never[], options?: postgres.UnsafeQueryOptions) =>
          target.unsafe(text, parameters, { ...options, prepare: true });
      }
      if (property === 'begin' && 'begin' in target) {
        return (...args: unknown[]) => {
          const fn = args.pop() as Callback;
          return (target.begin as (...a: unknown[]) => unknown)(...args, (tx: postgres.TransactionSql) => fn(withPreparedStatements(tx)));
        };
      }
      if (property === 'savepoint' && 'savepoint' in target) {
        return (...args: unknown[]) => {
          const fn = args.pop() as Callback;
          return (target.savepoint as (...a: unknown[]) => unknown)(...args, (tx: postgres.TransactionSql) =>
            fn(withPreparedStatements(tx)),
          );
        };
      }
      const value = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * What an atomic phase's code writes with, for Drizzle users: Drizzle over the phase's own
 * transaction, with named prepared statements. Pass it as the store's `transactionHandle`:
 *
 *   createPostgresIdempotencyStore(sql, { transactionHandle: drizzleTransactionHandle({ casing: 'snake_case' }) })
 *
 * `casing` must match your own `drizzle(…)` call.
 */
export function drizzleTransactionHandle(
  options: { casing?: 'snake_case' | 'camelCase' } = {},
): (tx: postgres.TransactionSql) => PostgresJsDatabase {
  return (tx) => {
    // Drizzle's driver, when built, sets its value parsers on the client's `options`. A transaction
    // handle has no `options` of its own and parses with its pool's, so it gets a scratch object.
    const client = new Proxy(withPreparedStatements(tx), {
      get: (target, property, receiver) =>
        property === 'options' ? { parsers: {}, serializers: {} } : Reflect.get(target, property, receiver),
    });
    return drizzle(client as unknown as postgres.Sql, options);
  };
}
