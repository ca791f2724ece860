/**
 * `npm run bench -- --in-process`: in ONE Node process, over ONE PostgreSQL, every contender wraps the
 * SAME business transaction (./business.ts) and is driven by the same in-process load loop
 * (./load.ts): our guard, fresh and replayed, the seed's sequence, and the Redis-backed
 * libraries (./peers.ts, on a private redis-server, ./redis.ts), against the unguarded transaction —
 * each under two network conditions (./conditions.ts): loopback, and across zones through a delay
 * proxy (./delay-proxy.ts) in front of PostgreSQL and Redis alike. At each concurrency, rounds each run
 * every contender under both conditions once, in a seeded shuffled order (./rounds.ts), so drift hits
 * all of them alike; latencies are merged across rounds. Then the one-key race (./one-key.ts) and the
 * lost-answer probe (./lost-answer.ts), on loopback, and the targets (./report.ts). A plain
 * `npm run bench` runs this before the HTTP set. docs/benchmark.md has the method and the figures.
 *
 * PostgreSQL: DATABASE_URL, or the HTTP benchmark's embedded database (payonce_bench), migrated as
 * the app migrates (db/migrate.ts). Results: bench/results/in-process.{json,md}, the markdown on stdout.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type postgres from 'postgres';
import { runMigrations } from '@/db/migrate';
import { resolveDatabase } from '@/scripts/stack';
import { gitCommit } from '@/bench/load';
import { AMOUNT_MINOR, cleanUpInProcess, ensureInProcessTables, rowsByTag, SCENARIO_PREFIX } from './business';
import { describeCondition, openPool, startZoneProxy, type Condition, type ConditionId, type ConditionInfo } from './conditions';
import { oursContender, seedContender, unguardedContender, type Contender } from './contenders';
import { DEFAULT_ZONE_DELAY_MS } from './delay-proxy';
import { runLoop } from './load';
import { lostAnswerProbe, type LostAnswerResult } from './lost-answer';
import { oneKeyRace, type OneKeyResult } from './one-key';
import { nodeIdempotencyContender, powertoolsContender } from './peers';
import { startRedis, type RedisServer } from './redis';
import {
  checkTargets,
  compareWithUnguarded,
  mark,
  renderMarkdown,
  targetLine,
  TIMED,
  type InProcessCell,
  type InProcessReport,
  type TimedId,
} from './report';
import { DEFAULT_SEED, PAUSE_BETWEEN_SEGMENTS_MS, summarize, timedRounds, type Entry, type RunRecord } from './rounds';

export interface InProcessOptions {
  quick: boolean;
  /** The command line's --seconds / --rounds / --seed / --zone-delay-ms, as given (undefined: this set's defaults). */
  seconds?: string;
  rounds?: string;
  seed?: string;
  zoneDelayMs?: string;
  concurrency: number[];
  replayKeys?: number;
  oneKeyCallers?: number;
}

/** The same fixed pool size for every contender, under each condition. */
export const POOL_MAX = 10;
/** Each condition's pool has its own application_name: its backends' CPU is read apart. */
const APPLICATION_NAME: Record<ConditionId, string> = { loopback: 'payonce-bench-inproc', zones: 'payonce-bench-inproc-zones' };
const REPLAY_TAG_PREFIX = 'inproc/replay-pool/';

const log = (line: string) => console.error(`[bench:in-process] ${line}`);

type Settings = InProcessReport['settings'];

function settingsOf(options: InProcessOptions): Settings {
  const quick = options.quick;
  const seed = Number(options.seed ?? DEFAULT_SEED);
  const zoneDelayMs = Number(options.zoneDelayMs ?? DEFAULT_ZONE_DELAY_MS);
  if (!Number.isSafeInteger(seed)) throw new Error(`--seed: an integer, not ${options.seed}`);
  if (!(zoneDelayMs >= 0 && zoneDelayMs < 1000)) throw new Error(`--zone-delay-ms: milliseconds ≥ 0, not ${options.zoneDelayMs}`);
  return {
    quick,
    seconds: Number(options.seconds ?? (quick ? 2 : 5)),
    rounds: Number(options.rounds ?? (quick ? 2 : 3)),
    concurrency: options.concurrency,
    warmupSeconds: quick ? 0.5 : 1,
    replayKeys: options.replayKeys ?? (quick ? 500 : 2_000),
    oneKeyCallers: options.oneKeyCallers ?? 50,
    seed,
    zoneDelayMs,
    pauseBetweenSegmentsMs: PAUSE_BETWEEN_SEGMENTS_MS,
  };
}

/** What the set runs on. close() undoes what was opened, last first; it is safe to call twice. */
interface Rig {
  databaseUrl: string;
  embedded: boolean;
  admin: postgres.Sql;
  redis: RedisServer | null;
  proxyPid: number;
  conditions: Record<ConditionId, Condition>;
  /** Closed with the rig, before the pools and servers they use. */
  adopt(contender: Contender): Contender;
  close(): Promise<void>;
}

async function openRig(settings: Settings): Promise<Rig> {
  const undo: { what: string; close: () => Promise<unknown> }[] = [];
  const close = async () => {
    // Last opened, first closed: the contenders' Redis clients before the proxy and redis-server they use.
    for (let step = undo.pop(); step; step = undo.pop()) {
      const { what } = step;
      await step.close().catch((error: unknown) => log(`closing ${what}: ${(error as Error).message}`));
    }
  };
  const opened = <T>(what: string, value: T, closeIt: (value: T) => Promise<unknown>) => {
    undo.push({ what, close: () => closeIt(value) });
    return value;
  };
  try {
    const database = await resolveDatabase('payonce_bench', (line) => log(line));
    if (database.embedded) opened('the embedded PostgreSQL', database.embedded, (db) => db.stop());
    await runMigrations(database.url);
    const admin = opened('the admin pool', openPool(database.url, 1, `${APPLICATION_NAME.loopback}-admin`), (sql) =>
      sql.end({ timeout: 5 }),
    );
    const sql = opened('the loopback pool', openPool(database.url, POOL_MAX, APPLICATION_NAME.loopback), (s) => s.end({ timeout: 5 }));
    const redis = await startRedis(log);
    if (redis) opened('redis-server', redis, (r) => r.stop());
    const zones = await startZoneProxy(database.url, redis, settings.zoneDelayMs);
    opened('the delay proxy', zones.proxy, (p) => p.stop());
    log(`delay proxy (pid ${zones.proxy.pid}, +${settings.zoneDelayMs} ms each way) on ports ${zones.proxy.ports.join(', ')}`);
    const zoneSql = opened('the across-zones pool', openPool(zones.databaseUrl, POOL_MAX, APPLICATION_NAME.zones), (s) =>
      s.end({ timeout: 5 }),
    );
    return {
      databaseUrl: database.url,
      embedded: !!database.embedded,
      admin,
      redis,
      proxyPid: zones.proxy.pid,
      conditions: {
        loopback: { id: 'loopback', sql, applicationName: APPLICATION_NAME.loopback, redisUrl: redis?.url ?? null },
        zones: { id: 'zones', sql: zoneSql, applicationName: APPLICATION_NAME.zones, redisUrl: zones.redisUrl },
      },
      adopt: (contender) => opened(contender.id, contender, (c) => c.close()),
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/** Every contender of the timed rounds, on one condition's pool and Redis URL. */
interface ContenderSet {
  unguarded: Contender;
  ours: Contender;
  oursClaimFirst: Contender;
  oursUncached: Contender;
  seed: Contender;
  powertools?: Contender;
  nodeIdempotency?: Contender;
}

async function contendersFor(rig: Rig, condition: Condition): Promise<ContenderSet> {
  const { sql, redisUrl } = condition;
  const set: ContenderSet = {
    unguarded: unguardedContender(sql),
    ours: oursContender(sql),
    // What the claim inside the phase and the replay cache each buy: the same guard without them.
    oursClaimFirst: oursContender(sql, 'ours-claim-first', { handler: 'function' }),
    oursUncached: oursContender(sql, 'ours-uncached', { replayCache: false }),
    seed: seedContender(sql),
  };
  if (redisUrl) {
    set.powertools = rig.adopt(await powertoolsContender(sql, redisUrl));
    set.nodeIdempotency = rig.adopt(await nodeIdempotencyContender(sql, redisUrl));
  }
  return set;
}

/** Completed keys for a replay entry, made through the contender itself (under its own condition). */
async function replayPool(contender: Contender, condition: ConditionId, count: number): Promise<NonNullable<Entry['pool']>> {
  const keys = Array.from({ length: count }, () => randomUUID());
  const tag = `${REPLAY_TAG_PREFIX}${condition}`;
  let notRun = 0;
  const made = await runLoop({
    concurrency: 16,
    calls: keys.length,
    call: async (worker, index) => {
      const r = await contender.call({ key: keys[index]!, worker, input: { tag, amountMinor: AMOUNT_MINOR } });
      if (r.outcome !== 'ran') notRun++;
    },
  });
  if (made.errors > 0 || notRun > 0) {
    throw new Error(
      `creating ${contender.id}'s replay keys (${condition}): ${made.errors} errors ${JSON.stringify(made.errorKinds)}, ${notRun} not run`,
    );
  }
  log(`${keys.length} completed keys for ${condition}/${contender.id}-replay`);
  return { keys, tag, madeBy: contender.id };
}

async function entriesFor(set: ContenderSet, condition: ConditionId, replayKeys: number): Promise<Entry[]> {
  const oursPool = await replayPool(set.ours, condition, replayKeys);
  const byId: Partial<Record<TimedId, Omit<Entry, 'id' | 'condition'>>> = {
    unguarded: { contender: set.unguarded },
    ours: { contender: set.ours },
    'ours-replay': { contender: set.ours, pool: oursPool },
    'ours-claim-first': { contender: set.oursClaimFirst },
    // ours's completed keys, replayed through a store without the in-process cache.
    'ours-uncached-replay': { contender: set.oursUncached, pool: oursPool },
    seed: { contender: set.seed },
  };
  if (set.powertools && set.nodeIdempotency) {
    byId.powertools = { contender: set.powertools };
    byId['powertools-replay'] = { contender: set.powertools, pool: await replayPool(set.powertools, condition, replayKeys) };
    byId['node-idempotency'] = { contender: set.nodeIdempotency };
    byId['node-idempotency-replay'] = {
      contender: set.nodeIdempotency,
      pool: await replayPool(set.nodeIdempotency, condition, replayKeys),
    };
  }
  return TIMED.flatMap((id) => {
    const entry = byId[id];
    return entry ? [{ ...entry, id, condition }] : [];
  });
}

/** The cells of the report: every entry at every concurrency, its business rows checked. */
async function cellsOf(admin: postgres.Sql, entries: Entry[], runs: RunRecord[], concurrency: number[]): Promise<InProcessCell[]> {
  // Every fresh-key call wrote exactly one business row under its run's tag (every call is awaited
  // before a run ends); no replay wrote any, and the replay pools still hold one row per key.
  const byTag = await rowsByTag(admin, 'inproc/');
  const poolRows = new Map(
    (
      await admin<{ tag: string; scenario: string; n: number }[]>`
        select tag, scenario, count(*)::int as n from bench_writes
         where starts_with(tag, ${REPLAY_TAG_PREFIX}) group by tag, scenario`
    ).map((r) => [`${r.tag} ${r.scenario}`, r.n]),
  );
  const poolIntact = (entry: Entry) =>
    !!entry.pool && poolRows.get(`${entry.pool.tag} ${SCENARIO_PREFIX}${entry.pool.madeBy}`) === entry.pool.keys.length;
  const cells = entries.flatMap((entry) => concurrency.map((c) => summarize(entry, c, runs, { byTag, poolIntact })));
  // By condition, then concurrency, then the contenders' order.
  const rank = (cell: InProcessCell) => entries.findIndex((e) => e.condition === cell.condition && e.id === cell.contender);
  cells.sort((a, b) => (a.condition === b.condition ? a.concurrency - b.concurrency || rank(a) - rank(b) : rank(a) - rank(b)));
  compareWithUnguarded(cells);
  return cells;
}

/** The one-key race for every contender on loopback (powertools also without a Lambda context, to show why the stand-in context is there). */
async function oneKeyRaces(rig: Rig, set: ContenderSet, callers: number): Promise<OneKeyResult[]> {
  const { sql, redisUrl } = rig.conditions.loopback;
  const results: OneKeyResult[] = [];
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
      result = await oneKeyRace(rig.admin, contender, { callers, tag, key: randomUUID(), guarded });
    } finally {
      console.warn = warn;
    }
    if (warnings > 0) result.note = `the library warned ${warnings} times: “${firstWarning}”`;
    results.push(result);
    log(
      `one key × ${result.callers}: ${contender.id.padEnd(22)} ran ${result.businessRuns}×; success ${result.success}, ` +
        `replay ${result.replay}, in progress ${result.inProgress}, other ${result.otherError} ${mark(result.pass)}`,
    );
  };
  await race(set.unguarded, false);
  for (const contender of [set.ours, set.oursClaimFirst, set.seed, set.powertools]) if (contender) await race(contender, true);
  if (redisUrl) await race(rig.adopt(await powertoolsContender(sql, redisUrl, { lambdaContext: false })), true);
  if (set.nodeIdempotency) await race(set.nodeIdempotency, true);
  return results;
}

async function lostAnswers(rig: Rig): Promise<LostAnswerResult[]> {
  log('lost-answer probe…');
  const results = await lostAnswerProbe(rig.conditions.loopback.sql, rig.conditions.loopback.redisUrl);
  for (const r of results) {
    log(
      `lost answer: ${r.contender}: ran ${r.businessRuns}×; retry: ${r.immediateRetry}${r.laterRetry ? `; ${r.laterRetry}` : ''}; ${r.keyState}`,
    );
  }
  return results;
}

/** The tables, each condition's round trips, its contenders and their replay pools. */
async function prepare(rig: Rig, settings: Settings): Promise<{ conditions: ConditionInfo[]; loopback: ContenderSet; entries: Entry[] }> {
  const { admin } = rig;
  await ensureInProcessTables(admin);
  await cleanUpInProcess(admin);
  const conditions: ConditionInfo[] = [
    await describeCondition(rig.conditions.loopback, null),
    await describeCondition(rig.conditions.zones, settings.zoneDelayMs),
  ];
  for (const c of conditions) {
    const { postgres, redis } = c.roundTripMs;
    log(`${c.label}: round trip PostgreSQL ${postgres.toFixed(3)} ms, Redis ${redis?.toFixed(3) ?? 'n/a'} ms (medians)`);
  }
  const loopback = await contendersFor(rig, rig.conditions.loopback);
  const zones = await contendersFor(rig, rig.conditions.zones);
  const entries = [
    ...(await entriesFor(loopback, 'loopback', settings.replayKeys)),
    ...(await entriesFor(zones, 'zones', settings.replayKeys)),
  ];
  await admin`vacuum analyze bench_writes`;
  await admin`vacuum analyze idempotency_keys`;
  await admin`vacuum analyze bench_naive_keys`;
  return { conditions, loopback, entries };
}

/** Runs the in-process set and writes its results; returns the report. */
export async function runInProcessBench(options: InProcessOptions): Promise<InProcessReport> {
  const started = Date.now();
  const settings = settingsOf(options);
  const loadStart = loadAverage();
  log(
    `${settings.rounds} rounds × ${settings.seconds} s at concurrency ${settings.concurrency.join(', ')}, loopback and across zones ` +
      `(+${settings.zoneDelayMs} ms each way); order seed ${settings.seed}; ${settings.replayKeys} replay keys per guard and condition; ` +
      `pool of ${POOL_MAX} per condition`,
  );
  const rig = await openRig(settings);
  const onSigint = () => {
    log('interrupted: stopping the proxy, redis-server and the pools');
    void rig.close().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSigint);
  try {
    const { admin, redis } = rig;
    const skipped = redis
      ? undefined
      : 'redis-server was not found (REDIS_SERVER, /usr/bin/redis-server, PATH; Debian: apt-get install redis-server): powertools and node-idempotency were not run';
    const { conditions, loopback, entries } = await prepare(rig, settings);
    const localPostgres = ['127.0.0.1', 'localhost', '::1', '[::1]'].includes(new URL(rig.databaseUrl).hostname);
    const meters = { admin, localPostgres, applicationName: APPLICATION_NAME, redisPid: redis?.pid ?? null, proxyPid: rig.proxyPid };
    const { runs, orders } = await timedRounds(entries, settings, meters, log);
    const cells = await cellsOf(admin, entries, runs, settings.concurrency);
    const oneKey = await oneKeyRaces(rig, loopback, settings.oneKeyCallers);
    const lostAnswer = await lostAnswers(rig);

    const report: InProcessReport = {
      at: new Date().toISOString(),
      commit: gitCommit(),
      durationSeconds: (Date.now() - started) / 1000,
      machine: await machineOf(rig, loadStart),
      settings,
      versions: await versions(),
      ...(skipped ? { skipped } : {}),
      conditions,
      method: methodLines(Object.values(loopback), settings),
      cells,
      orders,
      oneKey,
      lostAnswer,
      targets: checkTargets(cells, settings.concurrency, skipped),
    };
    await cleanUpInProcess(admin);
    await writeResults(report);
    return report;
  } finally {
    process.removeListener('SIGINT', onSigint);
    await rig.close();
  }
}

async function writeResults(report: InProcessReport): Promise<void> {
  const markdown = renderMarkdown(report);
  const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'results');
  await mkdir(dir, { recursive: true });
  await writeFile(path.join(dir, 'in-process.json'), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(path.join(dir, 'in-process.md'), `${markdown}\n`);
  console.log(markdown);
  log('targets:');
  for (const t of report.targets) log(`  ${targetLine(t)}`);
  log(`results in ${path.relative(process.cwd(), dir)}/in-process.{json,md} (${Math.round(report.durationSeconds)} s)`);
}

const loadAverage = () => os.loadavg().map((n) => Math.round(n * 100) / 100);

async function machineOf(rig: Rig, loadStart: number[]): Promise<InProcessReport['machine']> {
  const [pg] = await rig.admin<{ version: string; shared_buffers: string; synchronous_commit: string }[]>`
    select current_setting('server_version') as version, current_setting('shared_buffers') as shared_buffers,
           current_setting('synchronous_commit') as synchronous_commit`;
  const url = new URL(rig.databaseUrl);
  return {
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    ramGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    postgres: pg?.version ?? 'unknown',
    database: rig.embedded ? 'embedded' : 'DATABASE_URL',
    databaseHost: `${url.hostname}:${url.port || 5432}${url.pathname}`,
    sharedBuffers: pg?.shared_buffers ?? 'unknown',
    synchronousCommit: pg?.synchronous_commit ?? 'unknown',
    poolMax: POOL_MAX,
    redis: rig.redis?.version ?? null,
    loadAverage: { start: loadStart, end: loadAverage() },
  };
}

async function packageVersion(name: string): Promise<string> {
  try {
    const text = await readFile(path.join(process.cwd(), 'node_modules', name, 'package.json'), 'utf8');
    return (JSON.parse(text) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

async function versions(): Promise<Record<string, string>> {
  return {
    postgres: await packageVersion('postgres'),
    '@aws-lambda-powertools/idempotency': await packageVersion('@aws-lambda-powertools/idempotency'),
    '@redis/client': await packageVersion('@redis/client'),
    '@node-idempotency/core': await packageVersion('@node-idempotency/core'),
    '@node-idempotency/storage-adapter-redis': await packageVersion('@node-idempotency/storage-adapter-redis'),
    'redis (its client)': await packageVersion('redis'),
  };
}

function methodLines(contenders: (Contender | undefined)[], settings: Settings): string[] {
  return [
    'One Node process, one PostgreSQL; under each network condition one postgres.js pool (max ' +
      POOL_MAX +
      ') shared by every contender; the Redis peers each hold one connection to a private redis-server.',
    'Network conditions: loopback — PostgreSQL and Redis reached directly; across zones — both reached through a user-space TCP proxy ' +
      `(bench/in-process/delay-proxy.ts, a child process) that holds every chunk ${settings.zoneDelayMs} ms each way in arrival order ` +
      '(a minimum: its timers have a 1 ms grain, so the measured round trips above say what it adds). Its CPU is shown apart (“+ proxy”), not in the Node figure.',
    'The business transaction, the same for all: BEGIN; INSERT INTO bench_writes …; UPDATE bench_inproc_accounts SET balance_minor = balance_minor + $1 WHERE id = <worker> RETURNING …; COMMIT ' +
      '(each load worker updates its own account row, so workers never wait on each other’s row locks).',
    ...contenders.filter((c): c is Contender => !!c).map((c) => `${c.id}: ${c.describe}.`),
    'Replay entries (`-replay`): the same contender called with keys it has already completed under the same condition (a pool created through it before the rounds, cycled).',
    'Load: N async workers in this process, each calling the contender again as soon as its previous call settled, for a fixed time; every call is awaited; ' +
      'a fresh random key (UUID) per call. Latency = performance.now() around one call (µs resolution); calls/s = resolved calls / run time.',
    'Interleaved: at each concurrency, a warm-up of every contender under each condition, then rounds that each run every (condition, contender) segment once, ' +
      `in an order shuffled per round by a seeded PRNG (mulberry32, seed ${settings.seed}; the orders are in the JSON), ${PAUSE_BETWEEN_SEGMENTS_MS} ms apart so that ` +
      'the previous segment’s background work settles; percentiles from the merged latencies of all rounds; ratios to unguarded of the same condition from the same rounds (and per round: min–max).',
    'CPU µs/call: process.cpuUsage() of this process, /proc/<pid>/schedstat of the condition’s PostgreSQL backends and of redis-server’s main thread, ' +
      'and (across zones) of every thread of the proxy, over the timed rounds.',
    'Targets: “best peer” is whichever of powertools and node-idempotency did better on the figure in question, under the same condition and concurrency.',
    '“writes ✓”: business rows under each run’s tag = its calls (fresh keys); none for replays, and each replay pool still holds one row per key.',
    'One-key race (loopback): that many calls with one key and the same input started in the same tick; “business work ran” counts business rows, not what the contender says.',
    'Lost-answer probe (loopback): the write of the answer after the business commit (seed: its UPDATE; Powertools: the SET of the COMPLETED record; node-idempotency: onResponse’s SET) ' +
      'is made to fail once, as a crash at that point would leave things; the same key is then retried at once, and for Powertools again after its in-progress window ' +
      '(the stand-in context’s remaining time, 1 s here; a real Lambda’s remaining time, up to 15 min).',
  ];
}
