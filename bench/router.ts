/**
 * The benchmark's procedures (bench/main.ts), added to the served router by ./app-extension.ts only
 * in an app process started with BENCH=1: every other deployment answers 404 for `bench.*`. Not part
 * of the product, so its tables are not in db/schema.ts either: `ensureBenchTables` creates them, and
 * the benchmark drops their rows.
 *
 * Every scenario makes the same business write — one INSERT into `bench_writes`, in a transaction
 * of its own — so the scenarios differ only in what guards that write:
 *   control  nothing;
 *   guarded  `idempotentProcedure` + `idempotentOnePhase`: claim, business write and completion in one transaction;
 *   naive    the seed's literal sequence on a seed-shaped table with a global UNIQUE key: SELECT,
 *            INSERT … ON CONFLICT DO NOTHING, the business transaction, then a separate UPDATE.
 */
import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Executor } from '@/db/client';
import { KeyReusedError, parseIdempotencyKey, RequestInProgressError, respond } from '@payonce/idempotency';
import { createTRPCRouter, publicProcedure } from '@/server/trpc/init';
import { idempotentOnePhase, idempotentProcedure } from '@/server/trpc/procedures';
import { statementCount } from './wire-count';

/** The business table, and the seed's dedupe table exactly as the seed declared it. */
export const BENCH_TABLES_SQL = `
  create table if not exists bench_writes (
    id bigint generated always as identity primary key,
    scenario text not null,
    tag text not null,
    amount_minor integer not null,
    created_at timestamptz not null default now()
  );
  create table if not exists bench_naive_keys (
    id uuid primary key default gen_random_uuid(),
    key text not null unique,
    request_path text not null,
    request_hash text not null,
    response_status int,
    response_body jsonb,
    locked_at timestamptz,
    completed_at timestamptz,
    created_at timestamptz not null default now(),
    expires_at timestamptz not null default now() + interval '24 hours'
  );
  create index if not exists bench_naive_keys_key_idx on bench_naive_keys (key);
  create index if not exists bench_naive_keys_expires_at_idx on bench_naive_keys (expires_at);
`;

export async function ensureBenchTables(db: Executor): Promise<void> {
  // One statement per call: the extended protocol takes a single statement at a time.
  for (const statement of BENCH_TABLES_SQL.split(';')
    .map((s) => s.trim())
    .filter(Boolean)) {
    await db.execute(sql.raw(statement));
  }
}

const benchInput = z.object({
  /** Which run wrote the row, so the benchmark can check one row per answered request. */
  tag: z.string().min(1).max(64),
  amountMinor: z.number().int().min(0),
});
type BenchInput = z.infer<typeof benchInput>;

export interface BenchWrite {
  id: string;
  tag: string;
  amountMinor: number;
}

/** The one business write every scenario makes. */
async function writeBusinessRow(tx: Executor, scenario: string, input: BenchInput): Promise<BenchWrite> {
  const rows = await tx.execute<{ id: string }>(sql`
    insert into bench_writes (scenario, tag, amount_minor)
    values (${scenario}, ${input.tag}, ${input.amountMinor})
    returning id::text as id`);
  return { id: rows[0]!.id, tag: input.tag, amountMinor: input.amountMinor };
}

interface NaiveKeyRow extends Record<string, unknown> {
  request_hash: string;
  response_status: number | null;
  response_body: unknown;
  locked_at: Date | string | null;
  completed_at: Date | string | null;
}

export const benchRouter = createTRPCRouter({
  control: publicProcedure.input(benchInput).mutation(async ({ ctx, input }) => {
    const written = await ctx.services.db.transaction((tx) => writeBusinessRow(tx, 'control', input));
    ctx.response.status = 201;
    return written;
  }),

  guarded: idempotentProcedure(benchInput).mutation(
    idempotentOnePhase(
      ({ input }) =>
        async (tx) =>
          respond(201, await writeBusinessRow(tx, 'guarded', input)),
    ),
  ),

  /** The seed's IdempotencyGuard, statement for statement (its flaws included: global key, no lease). */
  naive: publicProcedure.input(benchInput).mutation(async ({ ctx, input, path }) => {
    const db = ctx.services.db;
    const key = parseIdempotencyKey(ctx.headers.get('idempotency-key'));
    const requestHash = createHash('sha256').update(JSON.stringify(input)).digest('hex');

    // get_idempotency_record
    const [record] = await db.execute<NaiveKeyRow>(sql`
      select request_hash, response_status, response_body, locked_at, completed_at
        from bench_naive_keys where key = ${key} and expires_at > now()`);
    if (record) {
      if (record.request_hash !== requestHash) throw new KeyReusedError();
      if (record.completed_at !== null) {
        ctx.response.status = record.response_status ?? 200;
        ctx.response.headers['Idempotency-Replayed'] = 'true';
        return record.response_body as BenchWrite;
      }
      throw new RequestInProgressError(1);
    }

    // acquire_idempotency_lock
    const acquired = await db.execute(sql`
      insert into bench_naive_keys (key, request_path, request_hash, locked_at)
      values (${key}, ${path}, ${requestHash}, now())
      on conflict (key) do nothing`);
    if (acquired.count !== 1) throw new RequestInProgressError(1);

    let written: BenchWrite;
    try {
      written = await db.transaction((tx) => writeBusinessRow(tx, 'naive', input));
    } catch (error) {
      // The seed deletes the key on failure so that a retry can run.
      await db.execute(sql`delete from bench_naive_keys where key = ${key}`);
      throw error;
    }

    // complete_idempotency_key: after the business transaction, as the seed does
    await db.execute(sql`
      update bench_naive_keys
         set response_status = 201, response_body = ${JSON.stringify(written)}::jsonb, completed_at = now()
       where key = ${key}`);
    ctx.response.status = 201;
    return written;
  }),

  /**
   * Statements this app process has sent to PostgreSQL (./wire-count.ts counts them under BENCH=1), and
   * the CPU time it has used: on a shared machine, CPU per request is steadier than wall time.
   */
  roundTrips: publicProcedure.query(() => {
    const cpu = process.cpuUsage();
    return {
      ...statementCount(),
      cpuUs: cpu.user + cpu.system,
    };
  }),
});
