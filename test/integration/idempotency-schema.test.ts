/**
 * @payonce/idempotency's schema SQL (applyIdempotencySchema, and the same statements as
 * migrations/0001_idempotency_keys.sql), for apps that do not generate migrations from its Drizzle
 * table, builds exactly what the app's migrations build: same columns, types, defaults and
 * nullability, same indexes, same fence function. And applying it twice, or from two starters at
 * once, is harmless.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import { runMigrations } from '@/db/migrate';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { applyIdempotencySchema } from '@payonce/idempotency/postgres';
import { requireDatabaseUrl } from '@/test/support/stack';

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
    assert.equal(count!.n, 2); // the scoped key's primary key and the BRIN on expires_at
  });

  it('3. moves a table of the earlier shape (uuid key, two B-trees) to one B-tree, keeping its rows', async () => {
    await blank.unsafe('drop table idempotency_keys');
    await blank.unsafe(`
      create table idempotency_keys (
        id uuid primary key default gen_random_uuid() not null, scope text not null, key text not null,
        request_path text not null, request_hash text not null, response_status integer, response_body jsonb,
        locked_at timestamp with time zone, lease_expires_at timestamp with time zone, lease_token uuid,
        recovery_point text default 'started' not null, completed_at timestamp with time zone,
        created_at timestamp with time zone default now() not null,
        expires_at timestamp with time zone default now() + interval '24 hours' not null)`);
    await blank.unsafe('create unique index idempotency_keys_scope_key_unique on idempotency_keys using btree (scope, key)');
    await blank.unsafe('create index idempotency_keys_expires_at_idx on idempotency_keys using btree (expires_at)');
    await blank`insert into idempotency_keys (scope, key, request_path, request_hash) values ('customer:1', 'k', 'p', 'h')`;
    await applyIdempotencySchema(blank);
    assert.deepEqual(await describeTable(blank), await describeTable(migrated));
    assert.equal((await blank`select count(*)::int as n from idempotency_keys`)[0]!.n, 1);
  });

  it('4. the migration file the package ships, run twice as a DBA would (one simple query), builds the same', async () => {
    // Resolved as an adopter's tool would find it: through the installed package.
    const file = createRequire(import.meta.url).resolve('@payonce/idempotency/migrations/0001_idempotency_keys.sql');
    const text = await readFile(file, 'utf8');
    await blank.unsafe('drop table idempotency_keys; drop function idempotency_assert_owned');
    await blank.unsafe(text).simple();
    await blank.unsafe(text).simple();
    assert.deepEqual(await describeTable(blank), await describeTable(migrated));
  });
});
