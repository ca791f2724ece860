/**
 * `npm run bench -- --in-process`: in ONE Node process, over ONE PostgreSQL, every contender wraps the
 * SAME business transaction (./business.ts) and is driven by the same in-process load loop
 * (./load.ts): our guard, fresh and replayed, the seed's sequence, and the Redis-backed
 * libraries (./peers.ts, on a private redis-server, ./redis.ts), against the unguarded transaction.
 * At each concurrency, rounds each run every contender once in a rotated order, so drift hits all of
 * them alike; latencies are merged across rounds. Then the one-key race (./one-key.ts). A plain
 * `npm run bench` runs this before the HTTP set. docs/benchmark.md has the method and the figures.
 *
 * PostgreSQL: DATABASE_URL, or the HTTP benchmark's embedded database (payonce_bench), migrated as
 * the app migrates (db/migrate.ts). Results: bench/results/in-process.{json,md}, the markdown on stdout.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { runMigrations } from '../../db/migrate';
import { resolveDatabase } from '../../scripts/stack';
import { mergeSorted, percentile } from '../load';
import { AMOUNT_MINOR, cleanUpInProcess, ensureInProcessTables, rowsByTag } from './business';
import { oursContender, seedContender, unguardedContender, type Contender } from './contenders';
import { runLoop, type LoopResult } from './load';
import { lostAnswerProbe } from './lost-answer';
import { oneKeyRace, type OneKeyResult } from './one-key';
import { nodeIdempotencyContender, powertoolsContender } from './peers';
import { startRedis, type RedisServer } from './redis';
import {
  checkTargets,
  compareWithUnguarded,
  isReplay,
  mark,
  renderMarkdown,
  TIMED,
  type InProcessCell,
  type InProcessReport,
  type TimedId,
} from './report';

export interface InProcessOptions {
  quick: boolean;
  /** The command line's --seconds / --rounds, as given (undefined: this set's own defaults). */
  seconds?: string;
  rounds?: string;
  concurrency: number[];
  replayKeys?: number;
  oneKeyCallers?: number;
}

/** The same fixed pool for every contender. */
export const POOL_MAX = 10;
const APPLICATION_NAME = 'payonce-bench-inproc';
const REPLAY_TAG = 'inproc/replay-pool';

const log = (line: string) => console.error(`[bench:in-process] ${line}`);

interface Entry {
  id: TimedId;
  contender: Contender;
  /** Completed keys to cycle through (replay entries). */
  pool?: string[];
}

interface RunRecord {
  id: TimedId;
  concurrency: number;
  round: number;
  tag: string;
  result: LoopResult;
  unexpected: number;
  cpu: { nodeUs: number; postgresNs: number | null; redisNs: number | null };
}

interface CpuSample {
  nodeUs: number;
  postgres: Map<number, number> | undefined;
  redisNs: number | undefined;
}

async function schedstatNs(pid: number): Promise<number | undefined> {
  try {
    return Number((await readFile(`/proc/${pid}/schedstat`, 'utf8')).split(' ')[0]);
  } catch {
    return undefined;
  }
}

function gitCommit(): string | null {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim();
    return dirty ? `${head}+dirty` : head;
  } catch {
    return null;
  }
}

async function packageVersion(name: string): Promise<string> {
  try {
    const text = await readFile(path.join(process.cwd(), 'node_modules', name, 'package.json'), 'utf8');
    return (JSON.parse(text) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/** Runs the in-process set and writes its results; returns the report. */
export async function runInProcessBench(options: InProcessOptions): Promise<InProcessReport> {
  const started = Date.now();
  const quick = options.quick;
  const settings = {
    quick,
    seconds: Number(options.seconds ?? (quick ? 2 : 5)),
    rounds: Number(options.rounds ?? (quick ? 2 : 3)),
    concurrency: options.concurrency,
    warmupSeconds: quick ? 0.5 : 1,
    replayKeys: options.replayKeys ?? (quick ? 500 : 2_000),
    oneKeyCallers: options.oneKeyCallers ?? 50,
  };
  const loadStart = os.loadavg().map((n) => Math.round(n * 100) / 100);
  log(
    `${settings.rounds} rounds × ${settings.seconds} s at concurrency ${settings.concurrency.join(', ')}; ` +
      `${settings.replayKeys} replay keys per guard; pool of ${POOL_MAX}`,
  );

  const database = await resolveDatabase('payonce_bench', (line) => log(line));
  let admin: postgres.Sql | undefined;
  let sql: postgres.Sql | undefined;
  let redis: RedisServer | null = null;
  const contenders: Contender[] = [];
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    for (const c of contenders) await c.close().catch((error: unknown) => log(`closing ${c.id}: ${(error as Error).message}`));
    await redis?.stop().catch((error: unknown) => log(`stopping redis-server: ${(error as Error).message}`));
    await sql?.end({ timeout: 5 }).catch(() => {});
    await admin?.end({ timeout: 5 }).catch(() => {});
    await database.embedded?.stop().catch(() => {});
  };
  const onSigint = () => {
    log('interrupted: stopping redis-server and the pools');
    void close().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSigint);

  try {
    await runMigrations(database.url);
    admin = postgres(database.url, { max: 1, onnotice: () => {}, connection: { application_name: `${APPLICATION_NAME}-admin` } });
    sql = postgres(database.url, { max: POOL_MAX, onnotice: () => {}, connection: { application_name: APPLICATION_NAME } });
    const pool = sql;
    const adminSql = admin;
    await ensureInProcessTables(adminSql);
    await cleanUpInProcess(adminSql);
    const [pg] = await adminSql<{ version: string; shared_buffers: string; synchronous_commit: string }[]>`
      select current_setting('server_version') as version, current_setting('shared_buffers') as shared_buffers,
             current_setting('synchronous_commit') as synchronous_commit`;
    const url = new URL(database.url);
    const localPostgres = ['127.0.0.1', 'localhost', '::1', '[::1]'].includes(url.hostname);

    redis = await startRedis(log);
    const skipped = redis
      ? undefined
      : 'redis-server was not found (REDIS_SERVER, /usr/bin/redis-server, PATH; Debian: apt-get install redis-server): powertools and node-idempotency were not run';

    const unguarded = unguardedContender(pool);
    const ours = oursContender(pool);
    // What the claim inside the phase and the replay cache each buy: the same guard without them.
    const oursClaimFirst = oursContender(pool, 'ours-claim-first', { handler: 'function' });
    const oursUncached = oursContender(pool, 'ours-uncached', { replayCache: false });
    const seed = seedContender(pool);
    contenders.push(unguarded, ours, oursClaimFirst, oursUncached, seed);
    let powertools: Contender | undefined;
    let powertoolsNoContext: Contender | undefined;
    let nodeIdempotency: Contender | undefined;
    if (redis) {
      powertools = await powertoolsContender(pool, redis.url);
      powertoolsNoContext = await powertoolsContender(pool, redis.url, { lambdaContext: false });
      nodeIdempotency = await nodeIdempotencyContender(pool, redis.url);
      contenders.push(powertools, powertoolsNoContext, nodeIdempotency);
    }

    // Completed keys for the replay entries, made through each contender itself.
    const pools = new Map<string, string[]>();
    for (const c of [ours, powertools, nodeIdempotency]) {
      if (!c) continue;
      const keys = Array.from({ length: settings.replayKeys }, () => randomUUID());
      let notRun = 0;
      const made = await runLoop({
        concurrency: 16,
        calls: keys.length,
        call: async (worker, index) => {
          const r = await c.call({ key: keys[index]!, worker, input: { tag: REPLAY_TAG, amountMinor: AMOUNT_MINOR } });
          if (r.outcome !== 'ran') notRun++;
        },
      });
      if (made.errors > 0 || notRun > 0) {
        throw new Error(`creating ${c.id}'s replay keys: ${made.errors} errors ${JSON.stringify(made.errorKinds)}, ${notRun} not run`);
      }
      pools.set(c.id, keys);
      log(`${keys.length} completed keys for ${c.id}-replay`);
    }
    await adminSql`vacuum analyze bench_writes`;
    await adminSql`vacuum analyze idempotency_keys`;
    await adminSql`vacuum analyze bench_naive_keys`;

    const byId: Partial<Record<TimedId, Entry>> = {
      unguarded: { id: 'unguarded', contender: unguarded },
      ours: { id: 'ours', contender: ours },
      'ours-replay': { id: 'ours-replay', contender: ours, pool: pools.get('ours') },
      'ours-claim-first': { id: 'ours-claim-first', contender: oursClaimFirst },
      // ours's completed keys, replayed through a store without the in-process cache.
      'ours-uncached-replay': { id: 'ours-uncached-replay', contender: oursUncached, pool: pools.get('ours') },
      seed: { id: 'seed', contender: seed },
    };
    if (powertools && nodeIdempotency) {
      byId.powertools = { id: 'powertools', contender: powertools };
      byId['powertools-replay'] = { id: 'powertools-replay', contender: powertools, pool: pools.get('powertools') };
      byId['node-idempotency'] = { id: 'node-idempotency', contender: nodeIdempotency };
      byId['node-idempotency-replay'] = { id: 'node-idempotency-replay', contender: nodeIdempotency, pool: pools.get('node-idempotency') };
    }
    const entries = TIMED.map((id) => byId[id]).filter((e): e is Entry => !!e);

    const sampleCpu = async (): Promise<CpuSample> => {
      const cpu = process.cpuUsage();
      let pgCpu: Map<number, number> | undefined;
      if (localPostgres) {
        const backends = await adminSql<{ pid: number }[]>`
          select pid from pg_stat_activity where application_name = ${APPLICATION_NAME} and datname = current_database()`;
        pgCpu = new Map();
        for (const { pid } of backends) {
          const ns = await schedstatNs(pid);
          if (ns === undefined) {
            pgCpu = undefined;
            break;
          }
          pgCpu.set(pid, ns);
        }
      }
      return { nodeUs: cpu.user + cpu.system, postgres: pgCpu, redisNs: redis ? await schedstatNs(redis.pid) : undefined };
    };

    /** One run of one entry: fresh keys and the run's tag, or the pool's keys and the pool's tag. */
    const runEntry = async (entry: Entry, concurrency: number, tag: string, seconds: number) => {
      let next = 0;
      let unexpected = 0;
      const keys = entry.pool;
      const input = { tag: keys ? REPLAY_TAG : tag, amountMinor: AMOUNT_MINOR };
      const expected = keys ? 'replayed' : 'ran';
      const result = await runLoop({
        concurrency,
        seconds,
        call: async (worker) => {
          const key = keys ? keys[next++ % keys.length]! : randomUUID();
          const r = await entry.contender.call({ key, worker, input });
          if (r.outcome !== expected) unexpected++;
        },
      });
      return { result, unexpected };
    };

    log('warming up…');
    for (const entry of entries) await runEntry(entry, 8, `inproc/warmup/${entry.id}`, settings.warmupSeconds * 2);

    const runs: RunRecord[] = [];
    for (const [ci, c] of settings.concurrency.entries()) {
      for (const entry of entries) await runEntry(entry, c, `inproc/warm/c${c}/${entry.id}`, settings.warmupSeconds);
      for (let round = 0; round < settings.rounds; round++) {
        const shift = (round + ci) % entries.length;
        const order = [...entries.slice(shift), ...entries.slice(0, shift)];
        for (const entry of order) {
          await sleep(100);
          const tag = `inproc/run/c${c}/r${round}/${entry.id}`;
          const before = await sampleCpu();
          const { result, unexpected } = await runEntry(entry, c, tag, settings.seconds);
          const after = await sampleCpu();
          let postgresNs: number | null = null;
          if (before.postgres && after.postgres) {
            postgresNs = 0;
            for (const [pid, ns] of after.postgres) postgresNs += ns - (before.postgres.get(pid) ?? 0);
          }
          runs.push({
            id: entry.id,
            concurrency: c,
            round,
            tag,
            result,
            unexpected,
            cpu: {
              nodeUs: after.nodeUs - before.nodeUs,
              postgresNs,
              redisNs: before.redisNs !== undefined && after.redisNs !== undefined ? after.redisNs - before.redisNs : null,
            },
          });
          log(
            `c=${c} round ${round + 1}/${settings.rounds} ${entry.id.padEnd(23)} ` +
              `${(result.ok / result.durationSeconds).toFixed(0).padStart(6)} calls/s` +
              (result.errors + unexpected > 0
                ? `  errors ${result.errors} unexpected ${unexpected} ${JSON.stringify(result.errorKinds)}`
                : ''),
          );
        }
      }
    }

    // Every fresh-key call wrote exactly one business row under its run's tag (every call is awaited
    // before a run ends); no replay wrote any, and the replay pools still hold one row per key.
    const written = await rowsByTag(adminSql, 'inproc/');
    const poolRows = (
      await adminSql<{ scenario: string; n: number }[]>`
      select scenario, count(*)::int as n from bench_writes where tag = ${REPLAY_TAG} group by scenario`
    ).reduce((m, r) => m.set(r.scenario, r.n), new Map<string, number>());
    /** The contender whose replay pool an entry cycles through (the uncached replay uses ours's). */
    const poolOwner = (id: TimedId) => (id === 'ours-uncached-replay' ? 'ours' : id.replace('-replay', ''));
    const poolIntact = (id: TimedId) => poolRows.get(`inproc:${poolOwner(id)}`) === settings.replayKeys;

    const cells: InProcessCell[] = [];
    for (const c of settings.concurrency) {
      for (const entry of entries) {
        const mine = runs.filter((r) => r.id === entry.id && r.concurrency === c).sort((a, b) => a.round - b.round);
        const sorted = mergeSorted(mine.map((r) => r.result.latenciesMs));
        const calls = mine.reduce((n, r) => n + r.result.ok, 0);
        const seconds = mine.reduce((n, r) => n + r.result.durationSeconds, 0);
        const errorKinds: InProcessCell['errorKinds'] = {};
        for (const r of mine) {
          for (const [k, v] of Object.entries(r.result.errorKinds)) {
            const kind = (errorKinds[k] ??= { count: 0, message: v.message });
            kind.count += v.count;
          }
        }
        const cpuNs = (pick: (r: RunRecord) => number | null) => {
          let total = 0;
          for (const r of mine) {
            const v = pick(r);
            if (v === null) return null;
            total += v;
          }
          return total / 1000 / calls;
        };
        cells.push({
          concurrency: c,
          contender: entry.id,
          calls,
          seconds,
          callsPerSecond: calls / seconds,
          callsPerSecondPerRound: mine.map((r) => r.result.ok / r.result.durationSeconds),
          latencyMs: {
            p50: percentile(sorted, 50),
            p90: percentile(sorted, 90),
            p99: percentile(sorted, 99),
            mean: sorted.reduce((a, b) => a + b, 0) / sorted.length,
            max: sorted[sorted.length - 1] ?? Number.NaN,
          },
          errors: mine.reduce((n, r) => n + r.result.errors, 0),
          errorKinds,
          unexpectedOutcomes: mine.reduce((n, r) => n + r.unexpected, 0),
          cpuUsPerCall: {
            node: mine.reduce((n, r) => n + r.cpu.nodeUs, 0) / calls,
            postgres: cpuNs((r) => r.cpu.postgresNs),
            redis: cpuNs((r) => r.cpu.redisNs),
          },
          writesVerified: isReplay(entry.id)
            ? poolIntact(entry.id) && mine.every((r) => !written.has(r.tag))
            : mine.every((r) => written.get(r.tag) === r.result.ok),
        });
      }
    }
    compareWithUnguarded(cells);

    // The one-key race, for every contender (powertools also without a Lambda context, to show why
    // the stand-in context is there).
    const oneKey: OneKeyResult[] = [];
    const race = async (contender: Contender, guarded: boolean) => {
      const tag = `inproc/one-key/${contender.id}`;
      let warnings = 0;
      let firstWarning = '';
      const warn = console.warn;
      // Powertools warns on every call made without a Lambda context: counted, not printed 50 times.
      console.warn = (...args: unknown[]) => {
        warnings++;
        firstWarning ||= args.map(String).join(' ');
      };
      let result: OneKeyResult;
      try {
        result = await oneKeyRace(adminSql, contender, { callers: settings.oneKeyCallers, tag, key: randomUUID(), guarded });
      } finally {
        console.warn = warn;
      }
      if (warnings > 0) result.note = `the library warned ${warnings} times: “${firstWarning}”`;
      oneKey.push(result);
      log(
        `one key × ${result.callers}: ${contender.id.padEnd(22)} ran ${result.businessRuns}×; success ${result.success}, ` +
          `replay ${result.replay}, in progress ${result.inProgress}, other ${result.otherError} ${mark(result.pass)}`,
      );
    };
    await race(unguarded, false);
    await race(ours, true);
    await race(oursClaimFirst, true);
    await race(seed, true);
    if (powertools) await race(powertools, true);
    if (powertoolsNoContext) await race(powertoolsNoContext, true);
    if (nodeIdempotency) await race(nodeIdempotency, true);

    log('lost-answer probe…');
    const lostAnswer = await lostAnswerProbe(pool, redis?.url ?? null);
    for (const r of lostAnswer) {
      log(
        `lost answer: ${r.contender}: ran ${r.businessRuns}×; retry: ${r.immediateRetry}${r.laterRetry ? `; ${r.laterRetry}` : ''}; ${r.keyState}`,
      );
    }

    const versions: Record<string, string> = {
      postgres: await packageVersion('postgres'),
      '@aws-lambda-powertools/idempotency': await packageVersion('@aws-lambda-powertools/idempotency'),
      '@redis/client': await packageVersion('@redis/client'),
      '@node-idempotency/core': await packageVersion('@node-idempotency/core'),
      '@node-idempotency/storage-adapter-redis': await packageVersion('@node-idempotency/storage-adapter-redis'),
      'redis (its client)': await packageVersion('redis'),
    };
    const report: InProcessReport = {
      at: new Date().toISOString(),
      commit: gitCommit(),
      durationSeconds: (Date.now() - started) / 1000,
      machine: {
        cpuModel: os.cpus()[0]?.model ?? 'unknown',
        cores: os.cpus().length,
        ramGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
        os: `${os.type()} ${os.release()} ${os.arch()}`,
        node: process.version,
        postgres: pg?.version ?? 'unknown',
        database: process.env.DATABASE_URL ? 'DATABASE_URL' : 'embedded',
        databaseHost: `${url.hostname}:${url.port || 5432}${url.pathname}`,
        sharedBuffers: pg?.shared_buffers ?? 'unknown',
        synchronousCommit: pg?.synchronous_commit ?? 'unknown',
        poolMax: POOL_MAX,
        redis: redis?.version ?? null,
        loadAverage: { start: loadStart, end: os.loadavg().map((n) => Math.round(n * 100) / 100) },
      },
      settings,
      versions,
      ...(skipped ? { skipped } : {}),
      method: methodLines(contenders),
      cells,
      oneKey,
      lostAnswer,
      targets: checkTargets(cells, settings.concurrency, skipped),
    };
    await cleanUpInProcess(adminSql);

    const markdown = renderMarkdown(report);
    const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'results');
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'in-process.json'), `${JSON.stringify(report, null, 2)}\n`);
    await writeFile(path.join(dir, 'in-process.md'), `${markdown}\n`);
    console.log(markdown);
    log(`results in ${path.relative(process.cwd(), dir)}/in-process.{json,md} (${Math.round(report.durationSeconds)} s)`);
    return report;
  } finally {
    process.removeListener('SIGINT', onSigint);
    await close();
  }
}

function methodLines(contenders: Contender[]): string[] {
  return [
    'One Node process, one PostgreSQL, one postgres.js pool (max ' +
      POOL_MAX +
      ') shared by every contender; the Redis peers each hold one connection to a private redis-server on loopback.',
    'The business transaction, the same for all: BEGIN; INSERT INTO bench_writes …; UPDATE bench_inproc_accounts SET balance_minor = balance_minor + $1 WHERE id = <worker> RETURNING …; COMMIT ' +
      '(each load worker updates its own account row, so workers never wait on each other’s row locks).',
    ...contenders.map((c) => `${c.id}: ${c.describe}.`),
    'Replay entries (`-replay`): the same contender called with keys it has already completed (a pool created through it before the rounds, cycled).',
    'Load: N async workers in this process, each calling the contender again as soon as its previous call settled, for a fixed time; every call is awaited; ' +
      'a fresh random key (UUID) per call. Latency = performance.now() around one call (µs resolution); calls/s = resolved calls / run time.',
    'Interleaved: at each concurrency, a warm-up of every contender, then rounds that each run every contender once, the order rotated by round; ' +
      'percentiles from the merged latencies of all rounds; ratios to unguarded from the same rounds (and per round: min–max).',
    'CPU µs/call: process.cpuUsage() of this process, /proc/<pid>/schedstat of the pool’s PostgreSQL backends and of redis-server’s main thread, over the timed rounds.',
    '“writes ✓”: business rows under each run’s tag = its calls (fresh keys); none for replays, and each replay pool still holds one row per key.',
    'One-key race: that many calls with one key and the same input started in the same tick; “business work ran” counts business rows, not what the contender says.',
    'Lost-answer probe: the write of the answer after the business commit (seed: its UPDATE; Powertools: the SET of the COMPLETED record; node-idempotency: onResponse’s SET) ' +
      'is made to fail once, as a crash at that point would leave things; the same key is then retried at once, and for Powertools again after its in-progress window ' +
      '(the stand-in context’s remaining time, 1 s here; a real Lambda’s remaining time, up to 15 min).',
  ];
}
