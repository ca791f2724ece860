/**
 * `npm run bench`: what the idempotency guard costs, over HTTP, on a production build.
 *
 * Four scenarios make the same business write (one INSERT in a transaction) through the bench-only
 * procedures of bench/router.ts: control (no guard), guarded (`idempotentProcedure`,
 * a fresh key per request), replay (the guarded procedure with keys already completed) and naive (the
 * seed's SELECT / INSERT … ON CONFLICT / business transaction / UPDATE). For each concurrency, several
 * rounds each run every scenario once in a rotated order, so machine drift hits all of them alike;
 * latencies are merged across rounds. Then the same with the key table pre-filled to 5 M rows, then
 * the notification storm (bench/notification-storm.ts).
 *
 * Flags: --quick (2 s × 2 rounds at 1 and 32, no 5 M, a 200-order storm), --seconds N, --rounds N,
 * --concurrency 1,8,32,128, --skip-5m, --prefill N, --skip-storm, --storm-orders N,
 * --replay-keys N, --reuse-build (keep an existing .next-bench build), --verbose (app and sandbox logs).
 * --in-process: only the in-process set (bench/in-process/run.ts: our guard against the Redis-backed
 * libraries, in one process, on loopback and across zones), which a plain run also runs first
 * (--skip-in-process: the HTTP set alone); --seed N (its rounds' shuffled order, default 1) and
 * --zone-delay-ms N (its across-zones delay each way, default 1) apply to it alone.
 * --pgbouncer: the app reaches PostgreSQL through a PgBouncer in transaction-pooling mode (docs/scaling.md).
 *
 * PostgreSQL: DATABASE_URL, or the embedded cluster (database payonce_bench). App on :3400, sandbox on
 * :4410 (BENCH_APP_PORT, BENCH_SANDBOX_PORT). Results: bench/results/latest.{json,md}.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { drizzle } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import type { StatementCount } from './wire-count';
import { ensureBenchTables } from './router';
import type { Stack } from '@/scripts/stack';
import { machineInfo, sessionCookie, startBenchStack } from './environment';
import { gitCommit, latencySummary, mergeSorted, runLoad, type LoadResult } from './load';
import { runNotificationStorm } from './notification-storm';
import { runInProcessBench } from './in-process/run';
import {
  checkTargets,
  compareWithControl,
  renderMarkdown,
  SCENARIOS,
  type BenchReport,
  type CellResult,
  type PhaseId,
  type PhaseResult,
  type ScenarioId,
} from './report';

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    seconds: { type: 'string' },
    rounds: { type: 'string' },
    concurrency: { type: 'string' },
    'skip-5m': { type: 'boolean', default: false },
    prefill: { type: 'string' },
    'skip-storm': { type: 'boolean', default: false },
    'storm-orders': { type: 'string' },
    'replay-keys': { type: 'string' },
    'reuse-build': { type: 'boolean', default: false },
    verbose: { type: 'boolean', default: false },
    'in-process': { type: 'boolean', default: false },
    'skip-in-process': { type: 'boolean', default: false },
    // The in-process set's round orders and its across-zones delay (bench/in-process/rounds.ts, conditions.ts).
    seed: { type: 'string' },
    'zone-delay-ms': { type: 'string' },
    // The app through a PgBouncer in transaction-pooling mode (bench/environment.ts, docs/scaling.md).
    pgbouncer: { type: 'boolean' },
  },
});

const quick = flags.quick;
const settings = {
  seconds: Number(flags.seconds ?? (quick ? 2 : 8)),
  rounds: Number(flags.rounds ?? (quick ? 2 : 4)),
  concurrency: (flags.concurrency ?? (quick ? '1,32' : '1,8,32,128')).split(',').map(Number),
  prefillRows: flags['skip-5m'] || (quick && flags.prefill === undefined) ? null : Number(flags.prefill ?? 5_000_000),
  stormOrders: flags['skip-storm'] ? 0 : Number(flags['storm-orders'] ?? (quick ? 200 : 1000)),
  replayKeys: Number(flags['replay-keys'] ?? (quick ? 2_000 : 10_000)),
  warmupSeconds: quick ? 1 : 2,
};
/** A fixed number of requests per scenario and concurrency, each answered before the count is read. */
const probeAmount = (c: number) => Math.max(quick ? 100 : 200, 4 * c);

const PROCEDURE: Record<ScenarioId, string> = {
  control: 'bench.control',
  guarded: 'bench.guarded',
  replay: 'bench.guarded',
  naive: 'bench.naive',
};
const AMOUNT_MINOR = 6800;
/** Tags are padded to one length so every scenario sends bodies of the same size. */
const tagged = (tag: string) => tag.padEnd(28, '.');
const REPLAY_TAG = tagged('replay-pool');
const bodyOf = (tag: string) => JSON.stringify({ tag, amountMinor: AMOUNT_MINOR });

const log = (line: string) => console.error(`[bench] ${line}`);

/** What bench.roundTrips reports: the app's statement count and CPU time. */
interface AppCounters extends StatementCount {
  cpuUs: number;
}

interface Context {
  stack: Stack;
  /** The benchmark's own connection (application_name payonce-bench, so it is never counted as the app's). */
  sql: postgres.Sql;
  /** Whether PostgreSQL runs on this machine, so its backends' CPU time can be read from /proc. */
  localPostgres: boolean;
  cookie: string;
  replayKeys: string[];
  replayNext: number;
}

function keySource(ctx: Context, scenario: ScenarioId): () => string {
  if (scenario !== 'replay') return randomUUID;
  return () => ctx.replayKeys[ctx.replayNext++ % ctx.replayKeys.length]!;
}

async function roundTrips(ctx: Context): Promise<AppCounters> {
  const response = await fetch(`${ctx.stack.appUrl}/api/trpc/bench.roundTrips`);
  const text = await response.text();
  if (!response.ok) throw new Error(`bench.roundTrips answered ${response.status}: ${text} — is the app running with BENCH=1?`);
  return (JSON.parse(text) as { result: { data: AppCounters } }).result.data;
}

/**
 * CPU time (ns) used so far by the app's PostgreSQL backends (application_name payonce), from
 * /proc/<pid>/schedstat; undefined when PostgreSQL is not on this machine or /proc is not readable.
 */
async function postgresCpuNs(ctx: Context): Promise<Map<number, number> | undefined> {
  if (!ctx.localPostgres) return undefined;
  const backends = await ctx.sql<{ pid: number }[]>`
    select pid from pg_stat_activity where application_name = 'payonce' and datname = current_database()`;
  const cpu = new Map<number, number>();
  try {
    for (const { pid } of backends) {
      cpu.set(pid, Number((await readFile(`/proc/${pid}/schedstat`, 'utf8')).split(' ')[0]));
    }
  } catch {
    return undefined;
  }
  return cpu;
}

function cpuDeltaNs(before: Map<number, number> | undefined, after: Map<number, number> | undefined): number | null {
  if (!before || !after) return null;
  let total = 0;
  for (const [pid, ns] of after) total += ns - (before.get(pid) ?? 0);
  return total;
}

/** Waits until the app has sent no statement for 100 ms: the previous run's last requests are done. */
async function quiesce(ctx: Context): Promise<AppCounters> {
  let last = await roundTrips(ctx);
  for (let i = 0; i < 30; i++) {
    await sleep(100);
    const now = await roundTrips(ctx);
    if (now.total === last.total) return now;
    last = now;
  }
  return last;
}

function load(ctx: Context, scenario: ScenarioId, connections: number, tag: string, run: { seconds?: number; amount?: number }) {
  return runLoad({
    appUrl: ctx.stack.appUrl,
    procedure: PROCEDURE[scenario],
    connections,
    ...run,
    cookie: ctx.cookie,
    body: bodyOf(scenario === 'replay' ? REPLAY_TAG : tag),
    nextKey: keySource(ctx, scenario),
  });
}

/** Completed keys for the replay scenario, made through the guarded procedure itself. */
async function createReplayKeys(ctx: Context, count: number): Promise<void> {
  ctx.replayKeys = Array.from({ length: count }, () => randomUUID());
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < ctx.replayKeys.length) {
        const key = ctx.replayKeys[next++]!;
        const response = await fetch(`${ctx.stack.appUrl}/api/trpc/bench.guarded`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', cookie: ctx.cookie, 'idempotency-key': key },
          body: bodyOf(REPLAY_TAG),
        });
        const text = await response.text();
        if (response.status !== 201) throw new Error(`creating a replay key answered ${response.status}: ${text}`);
      }
    }),
  );
}

async function countRows(ctx: Context): Promise<{ keys: number; naive: number }> {
  const [row] = await ctx.sql<{ keys: number; naive: number }[]>`
    select (select count(*)::int from idempotency_keys) as keys, (select count(*)::int from bench_naive_keys) as naive`;
  return row!;
}

interface RunRecord {
  scenario: ScenarioId;
  concurrency: number;
  tag: string;
  result: LoadResult;
}

async function measurePhase(ctx: Context, phase: PhaseId): Promise<PhaseResult> {
  const rows = await countRows(ctx);
  const runs: RunRecord[] = [];
  const probes = new Map<
    string,
    { statements: StatementCount; requests: number; tag: string; appCpuUs: number; postgresCpuUs: number | null }
  >();
  for (const [ci, c] of settings.concurrency.entries()) {
    // Connections, JIT and prepared statements at this concurrency before anything is recorded.
    for (const scenario of SCENARIOS) await load(ctx, scenario, c, tagged(`${phase}/${scenario}/c${c}/warm`), { seconds: 1 });
    for (let round = 0; round < settings.rounds; round++) {
      const shift = (round + ci) % SCENARIOS.length;
      const order = [...SCENARIOS.slice(shift), ...SCENARIOS.slice(0, shift)];
      for (const scenario of order) {
        await sleep(100);
        const tag = tagged(`${phase}/${scenario}/c${c}/r${round}`);
        const result = await load(ctx, scenario, c, tag, { seconds: settings.seconds });
        runs.push({ scenario, concurrency: c, tag, result });
        log(
          `${phase} c=${c} round ${round + 1}/${settings.rounds} ${scenario.padEnd(7)} ` +
            `${(result.ok / result.durationSeconds).toFixed(0).padStart(6)} req/s` +
            (result.non2xx + result.errors + result.timeouts > 0
              ? `  non-2xx ${result.non2xx} errors ${result.errors} timeouts ${result.timeouts} ${JSON.stringify(result.statusCodes)}`
              : ''),
        );
      }
    }
    // Round trips, counted: a fixed number of requests, all answered, between two readings of the
    // app's statement counter taken while nothing else runs.
    for (const scenario of SCENARIOS) {
      const before = await quiesce(ctx);
      const pgBefore = await postgresCpuNs(ctx);
      const amount = probeAmount(c);
      const tag = tagged(`${phase}/${scenario}/c${c}/probe`);
      const result = await load(ctx, scenario, c, tag, { amount });
      const after = await quiesce(ctx);
      const pgNs = cpuDeltaNs(pgBefore, await postgresCpuNs(ctx));
      if (result.ok !== amount) throw new Error(`${scenario} probe at ${c}: ${result.ok} of ${amount} answered 2xx`);
      probes.set(`${scenario}/${c}`, {
        statements: {
          total: after.total - before.total,
          begin: after.begin - before.begin,
          commit: after.commit - before.commit,
          rollback: after.rollback - before.rollback,
          roundTrips: after.roundTrips - before.roundTrips,
        },
        requests: amount,
        tag,
        appCpuUs: after.cpuUs - before.cpuUs,
        postgresCpuUs: pgNs === null ? null : pgNs / 1000,
      });
    }
  }

  // Every handled request of a writing scenario wrote exactly one row under its run's tag (a timed
  // run's last requests may be answered after autocannon stopped listening: at most one per
  // connection); no replay wrote anything.
  const written = new Map(
    (
      await ctx.sql<{ tag: string; n: number }[]>`
        select tag, count(*)::int as n from bench_writes where tag like ${`${phase}/%`} or tag = ${REPLAY_TAG} group by tag`
    ).map((r) => [r.tag, r.n]),
  );
  const replayPoolIntact = written.get(REPLAY_TAG) === ctx.replayKeys.length;

  const cells: CellResult[] = [];
  for (const c of settings.concurrency) {
    for (const scenario of SCENARIOS) {
      const mine = runs.filter((r) => r.scenario === scenario && r.concurrency === c);
      const probe = probes.get(`${scenario}/${c}`)!;
      const sorted = mergeSorted(mine.map((r) => r.result.latenciesMs));
      const ok = mine.reduce((n, r) => n + r.result.ok, 0);
      const seconds = mine.reduce((n, r) => n + r.result.durationSeconds, 0);
      const statusCodes: Record<string, number> = {};
      for (const r of mine) for (const [code, n] of Object.entries(r.result.statusCodes)) statusCodes[code] = (statusCodes[code] ?? 0) + n;
      const writesVerified =
        scenario === 'replay'
          ? replayPoolIntact && mine.every((r) => !written.has(r.tag)) && !written.has(probe.tag)
          : mine.every((r) => {
              const n = written.get(r.tag) ?? 0;
              return n >= r.result.ok && n <= r.result.ok + r.result.non2xx + c;
            }) && written.get(probe.tag) === probe.requests;
      cells.push({
        phase,
        concurrency: c,
        scenario,
        requests: ok,
        seconds,
        rps: ok / seconds,
        rpsPerRound: mine.map((r) => Math.round(r.result.ok / r.result.durationSeconds)),
        latencyMs: latencySummary(sorted),
        non2xx: mine.reduce((n, r) => n + r.result.non2xx, 0),
        errors: mine.reduce((n, r) => n + r.result.errors, 0),
        timeouts: mine.reduce((n, r) => n + r.result.timeouts, 0),
        statusCodes,
        roundTrips: {
          perRequest: probe.statements.roundTrips / probe.requests,
          statementsPerRequest: probe.statements.total / probe.requests,
          beginPerRequest: probe.statements.begin / probe.requests,
          commitPerRequest: probe.statements.commit / probe.requests,
          rollbackPerRequest: probe.statements.rollback / probe.requests,
          requests: probe.requests,
        },
        cpuUsPerRequest: {
          app: probe.appCpuUs / probe.requests,
          postgres: probe.postgresCpuUs === null ? null : probe.postgresCpuUs / probe.requests,
        },
        writesVerified,
      });
    }
  }
  const label =
    phase === 'empty'
      ? 'empty table'
      : settings.prefillRows === 5_000_000
        ? '5 M keys'
        : `${(settings.prefillRows ?? 0).toLocaleString('en')} keys`;
  const result: PhaseResult = { phase, label, keyRows: rows.keys, naiveKeyRows: rows.naive, cells };
  compareWithControl(result);
  return result;
}

/** Removes what earlier runs of the benchmark left: its keys (and prefill), its tables' rows. */
async function cleanUp(ctx: Context): Promise<void> {
  const started = Date.now();
  // Every key the benchmark makes, prefill included, belongs to the bench-only procedure.
  await ctx.sql`delete from idempotency_keys where request_path = 'bench.guarded'`;
  await ctx.sql`truncate bench_writes, bench_naive_keys`;
  await ctx.sql`vacuum analyze idempotency_keys`;
  log(`cleaned up in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

/**
 * Completed, unexpired keys of other customers (20 each), and as many in the naive table so that
 * it is compared on equal terms; then a vacuum with statistics and a checkpoint, so that neither the
 * planner, autovacuum nor the prefill's WAL flush is part of the measurement.
 */
async function prefill(ctx: Context, rows: number): Promise<number> {
  const started = Date.now();
  log(`pre-filling ${rows.toLocaleString('en')} keys…`);
  await ctx.sql`
    insert into idempotency_keys
      (scope, key, request_path, request_hash, response_status, response_body, recovery_point, completed_at, expires_at)
    select 'customer:' || md5('prefill-customer-' || (i / 20))::uuid, md5('prefill-key-' || i)::uuid::text,
           'bench.guarded', encode(sha256(('prefill-' || i)::bytea), 'hex'), 201,
           jsonb_build_object('id', i::text, 'tag', 'prefill', 'amountMinor', ${AMOUNT_MINOR}::int),
           'started', now(), now() + interval '24 hours'
      from generate_series(1, ${rows}::int) as i`;
  await ctx.sql`
    insert into bench_naive_keys
      (key, request_path, request_hash, response_status, response_body, locked_at, completed_at)
    select md5('prefill-naive-' || i)::uuid::text, 'bench.naive', encode(sha256(('prefill-' || i)::bytea), 'hex'), 201,
           jsonb_build_object('id', i::text, 'tag', 'prefill', 'amountMinor', ${AMOUNT_MINOR}::int), now(), now()
      from generate_series(1, ${rows}::int) as i`;
  // VACUUM as well as ANALYZE: 5 M freshly inserted rows per table would otherwise trip
  // autovacuum's insert threshold, and its pass over them would run during the measurement.
  await ctx.sql`vacuum (analyze) idempotency_keys`;
  await ctx.sql`vacuum (analyze) bench_naive_keys`;
  await ctx.sql`checkpoint`.catch((error: unknown) => log(`checkpoint skipped: ${(error as Error).message}`));
  const seconds = (Date.now() - started) / 1000;
  log(`pre-filled in ${seconds.toFixed(0)} s`);
  return seconds;
}

const METHOD = [
  'Every scenario makes the same business write: one INSERT into `bench_writes` in its own transaction (BEGIN, INSERT, COMMIT). ' +
    'control = that alone; guarded = `idempotentProcedure` (claim, then completion inside the business transaction); ' +
    'replay = the guarded procedure with keys already completed, cycled; naive = the seed’s SELECT, INSERT … ON CONFLICT (key) DO NOTHING, ' +
    'business transaction, then a separate UPDATE, on a seed-shaped table with a global UNIQUE key.',
  'All requests come from one anonymous customer (one session cookie); every request carries a fresh random Idempotency-Key ' +
    '(a completed one for replay), control included, so the load generator does the same work for every scenario.',
  'Interleaved: at each concurrency, a 1 s warm-up of every scenario, then each round runs every scenario once in an order rotated ' +
    'by round; percentiles come from the merged per-request latencies (µs resolution) of all rounds; req/s = 2xx answers / run time.',
  'Round trips are counted, not assumed, by the app itself under BENCH=1 (bench/wire-count.ts), on its PostgreSQL socket: statements ' +
    '(every Execute or simple Query message, BEGIN and COMMIT included) and wire round trips (every socket write ending in a Sync, Flush or simple Query, ' +
    'which the client then waits on). ' +
    'Statements are prepared per connection (withPreparedStatements, @payonce/idempotency/drizzle), so each costs one round trip once its connection has seen it; statements ' +
    'queued on one connection at once share a write (the guard’s completion rides with its COMMIT; under load, postgres.js also ' +
    'pipelines concurrent requests’ statements, so counts at high concurrency fall below the one-request figure). ' +
    'After the timed rounds, a fixed number of requests per scenario runs with the app otherwise idle; ' +
    'the counters’ deltas are divided by that number.',
  'CPU µs / req, over the same fixed-size runs: the app process’s own CPU time (process.cpuUsage, read through bench.roundTrips) and ' +
    'its PostgreSQL backends’ (/proc/<pid>/schedstat, when PostgreSQL runs on this machine) — steadier than wall time on a shared machine.',
  '“writes ✓”: each handled request of control/guarded/naive wrote exactly one business row under its run’s tag, and no replay wrote any.',
];

async function main(): Promise<void> {
  const started = Date.now();
  // The in-process set (bench/in-process/, docs/benchmark.md) first, while nothing else runs; alone with --in-process.
  if (!flags['skip-in-process']) {
    await runInProcessBench({
      quick,
      seconds: flags.seconds,
      rounds: flags.rounds,
      seed: flags.seed,
      zoneDelayMs: flags['zone-delay-ms'],
      concurrency: settings.concurrency,
    });
  }
  if (flags['in-process']) return;
  const stack = await startBenchStack({ build: !flags['reuse-build'], verbose: flags.verbose, pgbouncer: flags.pgbouncer });
  const sql = postgres(stack.databaseUrl, {
    max: 4,
    onnotice: () => {},
    connection: { application_name: 'payonce-bench' },
  });
  const host = new URL(stack.databaseUrl).hostname;
  const ctx: Context = {
    stack,
    sql,
    localPostgres: ['127.0.0.1', 'localhost', '::1', '[::1]'].includes(host),
    cookie: '',
    replayKeys: [],
    replayNext: 0,
  };
  const stop = async () => {
    await sql.end({ timeout: 5 }).catch(() => {});
    await stack.stop();
  };
  process.once('SIGINT', () => {
    log('interrupted: stopping the stack');
    void stop().finally(() => process.exit(130));
  });

  try {
    const machine = await machineInfo(sql, stack.databaseUrl);
    await ensureBenchTables(drizzle(sql));
    await cleanUp(ctx);
    ctx.cookie = await sessionCookie(stack.appUrl);
    log(`creating ${settings.replayKeys.toLocaleString('en')} completed keys for replay…`);
    await createReplayKeys(ctx, settings.replayKeys);
    log('warming up…');
    for (const scenario of SCENARIOS) {
      await load(ctx, scenario, 8, tagged(`warmup/${scenario}`), { seconds: settings.warmupSeconds });
    }

    const phases: PhaseResult[] = [await measurePhase(ctx, 'empty')];
    if (settings.prefillRows !== null) {
      const seconds = await prefill(ctx, settings.prefillRows);
      const full = await measurePhase(ctx, '5m');
      full.prefillSeconds = seconds;
      phases.push(full);
    }
    await cleanUp(ctx);

    let storm: BenchReport['storm'];
    if (settings.stormOrders > 0) {
      log(`notification storm: ${settings.stormOrders} orders × 8 copies…`);
      storm = await runNotificationStorm({
        appUrl: stack.appUrl,
        sandboxUrl: stack.sandboxUrl,
        sql,
        orders: settings.stormOrders,
        copies: 8,
        log,
      });
    }

    machine.loadAverage.end = os.loadavg().map((n) => Math.round(n * 100) / 100);
    const report: BenchReport = {
      at: new Date().toISOString(),
      commit: gitCommit(),
      durationSeconds: (Date.now() - started) / 1000,
      machine,
      settings: {
        quick,
        seconds: settings.seconds,
        rounds: settings.rounds,
        concurrency: settings.concurrency,
        replayKeys: settings.replayKeys,
        prefillRows: settings.prefillRows,
        probeRequests: `max(${quick ? 100 : 200}, 4 × concurrency) requests per scenario and concurrency`,
      },
      method: METHOD,
      phases,
      targets: checkTargets(phases, settings.concurrency),
      ...(storm ? { storm } : {}),
    };
    const markdown = renderMarkdown(report);
    const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results');
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'latest.json'), `${JSON.stringify(report, null, 2)}\n`);
    await writeFile(path.join(dir, 'latest.md'), `${markdown}\n`);
    console.log(markdown);
    log(`results in ${path.relative(process.cwd(), dir)}/latest.{json,md}`);
    if (storm && storm.doubleEffects.total !== 0) process.exitCode = 1;
  } finally {
    await stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
