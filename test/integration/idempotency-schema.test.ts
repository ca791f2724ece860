/**
 * The core's own schema SQL (server/idempotency/schema-sql.ts), for apps that do not generate
 * migrations from its Drizzle table, builds exactly what the app's migrations build: same columns,
 * types, defaults and nullability, same indexes, same fence function. And applying it twice, or from
 * two starters at once, is harmless.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import { runMigrations } from '../../db/migrate';
import { applyIdempotencySchema } from '../../server/idempotency/schema-sql';
import { requireDatabaseUrl } from '../support/stack';

const url = requireDatabaseUrl();
const blankName = `idem_schema_${randomBytes(4).toString('hex')}`;
const blankUrl = (() => {
  const u = new URL(url);
  u.pathname = `/${blankName}`;
  return u.toString();
})();
let migrated: postgres.Sql;
let blank: postgres.Sql;

before(async () => {
  await runMigrations(url);
  migrated = postgres(url, { max: 1, onnotice: () => {} });
  await migrated.unsafe(`create database ${blankName}`);
  blank = postgres(blankUrl, { max: 4, onnotice: () => {} });
});
after(async () => {
  await blank?.end({ timeout: 5 });
  await migrated?.unsafe(`drop database if exists ${blankName} with (force)`);
  await migrated?.end({ timeout: 5 });
});

async function describeTable(sql: postgres.Sql) {
  const columns = await sql`
    select column_name, data_type, is_nullable, column_default
      from information_schema.columns where table_name = 'idempotency_keys' order by column_name`;
  const indexes = await sql`select indexname, indexdef from pg_indexes where tablename = 'idempotency_keys' order by indexname`;
  const [fence] = await sql`
    select regexp_replace(prosrc, '\\s+', ' ', 'g') as body, proargtypes::text as args
      from pg_proc where proname = 'idempotency_assert_owned'`;
  return { columns: [...columns], indexes: [...indexes], fence };
}

describe('the core schema SQL', () => {
  it('1. builds on a blank database exactly the table, indexes and fence the app migrations build', async () => {
    await applyIdempotencySchema(blank);
    const fromCore = await describeTable(blank);
    const fromMigrations = await describeTable(migrated);
    assert.equal(fromCore.columns.length, 14);
    assert.deepEqual(fromCore, fromMigrations);
  });

  it('2. is harmless applied again, and from several starters at once', async () => {
    await Promise.all([applyIdempotencySchema(blank), applyIdempotencySchema(blank), applyIdempotencySchema(blank)]);
    const [count] = await blank`select count(*)::int as n from pg_indexes where tablename = 'idempotency_keys'`;
    assert.equal(count!.n, 3); // the primary key and the two indexes
  });
});
