/**
 * The one business transaction every in-process contender wraps, through postgres.js: an INSERT into
 * `bench_writes` (the HTTP benchmark's business table, bench/router.ts) and an UPDATE of one row of
 * `bench_inproc_accounts`, in one transaction. Each load worker updates its own account row, so the
 * workers never wait on each other's row locks: what is measured is the guard, not a hot row.
 */
import { drizzle } from 'drizzle-orm/postgres-js';
import type postgres from 'postgres';
import { ensureBenchTables } from '@/bench/router';

/** Account rows, one per load worker (worker index modulo this). */
export const ACCOUNTS = 256;
export const AMOUNT_MINOR = 6800;
/** `bench_writes.scenario` of every in-process row starts with this. */
export const SCENARIO_PREFIX = 'inproc:';
/** The path our guard and node-idempotency key on; the seed's rows carry it as request_path. */
export const INPROC_PATH = 'bench.inproc';
export const SEED_PATH = 'bench.inproc.seed';
export const INPROC_SCOPE = 'customer:bench-inproc';

/** What a call asks for: part of every guard's fingerprint. */
export interface BusinessInput {
  /** Which run wrote the row, so the benchmark can count the rows of each run. */
  tag: string;
  amountMinor: number;
}

/** What the business transaction answers, and what every guard stores and replays. */
export interface BusinessResult {
  id: string;
  tag: string;
  amountMinor: number;
  balanceMinor: string;
}

/** The tables: the HTTP benchmark's (bench_writes, bench_naive_keys) and the accounts. */
export async function ensureInProcessTables(sql: postgres.Sql): Promise<void> {
  await ensureBenchTables(drizzle(sql));
  await sql`
    create table if not exists bench_inproc_accounts (
      id integer primary key,
      balance_minor bigint not null default 0,
      updated_at timestamptz
    )`;
  await sql`insert into bench_inproc_accounts (id) select generate_series(0, ${ACCOUNTS - 1}::int) on conflict (id) do nothing`;
}

/** The business statements, on a transaction's handle: INSERT then UPDATE. */
export async function businessStatements(
  tx: postgres.TransactionSql,
  contender: string,
  input: BusinessInput,
  worker: number,
): Promise<BusinessResult> {
  const [row] = await tx<{ id: string }[]>`
    insert into bench_writes (scenario, tag, amount_minor)
    values (${SCENARIO_PREFIX + contender}, ${input.tag}, ${input.amountMinor})
    returning id::text as id`;
  const [account] = await tx<{ balance: string }[]>`
    update bench_inproc_accounts set balance_minor = balance_minor + ${input.amountMinor}, updated_at = now()
     where id = ${worker % ACCOUNTS}
    returning balance_minor::text as balance`;
  return { id: row!.id, tag: input.tag, amountMinor: input.amountMinor, balanceMinor: account!.balance };
}

/** The business transaction on its own: BEGIN, INSERT, UPDATE, COMMIT. */
export function businessTransaction(sql: postgres.Sql, contender: string, input: BusinessInput, worker: number): Promise<BusinessResult> {
  return sql.begin((tx) => businessStatements(tx, contender, input, worker));
}

/** Business rows per tag, for the in-process rows whose tag starts with `tagPrefix`. */
export async function rowsByTag(sql: postgres.Sql, tagPrefix: string): Promise<Map<string, number>> {
  const rows = await sql<{ tag: string; n: number }[]>`
    select tag, count(*)::int as n from bench_writes
     where scenario like ${SCENARIO_PREFIX + '%'} and starts_with(tag, ${tagPrefix})
     group by tag`;
  return new Map(rows.map((r) => [r.tag, r.n]));
}

/** Removes what in-process runs left: their business rows and keys (nothing of the HTTP set's). */
export async function cleanUpInProcess(sql: postgres.Sql): Promise<void> {
  await sql`delete from bench_writes where scenario like ${SCENARIO_PREFIX + '%'}`;
  await sql`delete from idempotency_keys where scope = ${INPROC_SCOPE}`;
  await sql`delete from bench_naive_keys where request_path = ${SEED_PATH}`;
}
