/**
 * The timed rounds of the in-process set. A segment is one contender under one network condition
 * (./conditions.ts). At each concurrency: a warm-up of every segment, then rounds that each run every
 * segment once, in an order shuffled by a seeded PRNG — so that no contender always follows the same
 * one, and so that a seed gives the same orders again — with a pause before each segment. CPU time is
 * read around every segment; the cells of the report are the rounds merged.
 */
import { randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type postgres from 'postgres';
import { latencySummary, mergeSorted } from '@/bench/load';
import { AMOUNT_MINOR } from './business';
import type { ConditionId } from './conditions';
import type { Contender } from './contenders';
import { runLoop, type LoopResult } from './load';
import { isReplay, type InProcessCell, type SegmentOrder, type TimedId } from './report';

/**
 * Before every segment: the previous contender's background work — autovacuum and the WAL writer
 * after its inserts, Redis's expiry cycle, the proxy's last chunks — settles instead of being billed
 * (in time or CPU) to whichever contender comes next.
 */
export const PAUSE_BETWEEN_SEGMENTS_MS = 250;
/** Any fixed seed makes runs reproducible; this one is simply the default. */
export const DEFAULT_SEED = 1;

export interface Entry {
  condition: ConditionId;
  id: TimedId;
  contender: Contender;
  /** Completed keys to cycle through (replay entries), the tag their business rows carry, the contender that made them. */
  pool?: { keys: string[]; tag: string; madeBy: string };
}

export const segmentName = (entry: Entry) => `${entry.condition}/${entry.id}`;

export interface RunRecord {
  entry: Entry;
  concurrency: number;
  round: number;
  tag: string;
  result: LoopResult;
  unexpected: number;
  cpu: { nodeUs: number; postgresNs: number | null; redisNs: number | null; proxyNs: number | null };
}

/** mulberry32: a tiny PRNG whose sequence depends on the seed alone, the same on every machine. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Fisher–Yates with the given PRNG. */
export function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const order = [...items];
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order;
}

/** Where CPU time is read from: this process, the conditions' PostgreSQL backends, redis-server, the proxy. */
export interface CpuMeters {
  admin: postgres.Sql;
  /** PostgreSQL on this machine: its backends' CPU can be read from /proc. */
  localPostgres: boolean;
  applicationName: Record<ConditionId, string>;
  redisPid: number | null;
  proxyPid: number | null;
}

interface CpuSample {
  nodeUs: number;
  postgres: Map<number, number> | undefined;
  redisNs: number | undefined;
  proxyNs: number | undefined;
}

async function schedstatNs(pid: number | string, task?: string): Promise<number | undefined> {
  try {
    const file = task ? `/proc/${pid}/task/${task}/schedstat` : `/proc/${pid}/schedstat`;
    return Number((await readFile(file, 'utf8')).split(' ')[0]);
  } catch {
    return undefined;
  }
}

/** Every thread of a process (the proxy is a Node process: its GC and libuv threads count too). */
async function processCpuNs(pid: number): Promise<number | undefined> {
  try {
    let total = 0;
    for (const task of await readdir(`/proc/${pid}/task`)) total += (await schedstatNs(pid, task)) ?? 0;
    return total;
  } catch {
    return undefined;
  }
}

async function postgresCpuNs(meters: CpuMeters, condition: ConditionId): Promise<Map<number, number> | undefined> {
  if (!meters.localPostgres) return undefined;
  const backends = await meters.admin<{ pid: number }[]>`
    select pid from pg_stat_activity
     where application_name = ${meters.applicationName[condition]} and datname = current_database()`;
  const cpu = new Map<number, number>();
  for (const { pid } of backends) {
    const ns = await schedstatNs(pid);
    if (ns === undefined) return undefined;
    cpu.set(pid, ns);
  }
  return cpu;
}

async function sampleCpu(meters: CpuMeters, condition: ConditionId): Promise<CpuSample> {
  const cpu = process.cpuUsage();
  return {
    nodeUs: cpu.user + cpu.system,
    postgres: await postgresCpuNs(meters, condition),
    redisNs: meters.redisPid === null ? undefined : await schedstatNs(meters.redisPid),
    proxyNs: meters.proxyPid === null ? undefined : await processCpuNs(meters.proxyPid),
  };
}

function cpuBetween(before: CpuSample, after: CpuSample): RunRecord['cpu'] {
  let postgresNs: number | null = null;
  if (before.postgres && after.postgres) {
    postgresNs = 0;
    for (const [pid, ns] of after.postgres) postgresNs += ns - (before.postgres.get(pid) ?? 0);
  }
  const delta = (a: number | undefined, b: number | undefined) => (a !== undefined && b !== undefined ? b - a : null);
  return {
    nodeUs: after.nodeUs - before.nodeUs,
    postgresNs,
    redisNs: delta(before.redisNs, after.redisNs),
    proxyNs: delta(before.proxyNs, after.proxyNs),
  };
}

/** One run of one entry: fresh keys and the run's tag, or the pool's keys and the pool's tag. */
export async function runEntry(entry: Entry, concurrency: number, tag: string, seconds: number) {
  let next = 0;
  let unexpected = 0;
  const keys = entry.pool?.keys;
  const input = { tag: entry.pool?.tag ?? tag, amountMinor: AMOUNT_MINOR };
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
}

export interface RoundsSettings {
  concurrency: number[];
  rounds: number;
  seconds: number;
  warmupSeconds: number;
  seed: number;
}

/** The warm-ups and the timed rounds of every segment at every concurrency. */
export async function timedRounds(
  entries: Entry[],
  settings: RoundsSettings,
  meters: CpuMeters,
  log: (line: string) => void,
): Promise<{ runs: RunRecord[]; orders: SegmentOrder[] }> {
  const random = mulberry32(settings.seed);
  const runs: RunRecord[] = [];
  const orders: SegmentOrder[] = [];
  log('warming up…');
  for (const entry of entries) await runEntry(entry, 8, `inproc/warmup/${segmentName(entry)}`, settings.warmupSeconds * 2);
  for (const c of settings.concurrency) {
    // Connections, JIT and caches at this concurrency before anything is recorded.
    for (const entry of entries) await runEntry(entry, c, `inproc/warm/c${c}/${segmentName(entry)}`, settings.warmupSeconds);
    for (let round = 0; round < settings.rounds; round++) {
      const order = shuffled(entries, random);
      orders.push({ concurrency: c, round, segments: order.map(segmentName) });
      for (const entry of order) {
        await sleep(PAUSE_BETWEEN_SEGMENTS_MS);
        runs.push(await timedSegment(entry, c, round, settings.seconds, meters));
        logRun(runs[runs.length - 1]!, settings.rounds, log);
      }
    }
  }
  return { runs, orders };
}

async function timedSegment(entry: Entry, c: number, round: number, seconds: number, meters: CpuMeters): Promise<RunRecord> {
  const tag = `inproc/run/${entry.condition}/c${c}/r${round}/${entry.id}`;
  const before = await sampleCpu(meters, entry.condition);
  const { result, unexpected } = await runEntry(entry, c, tag, seconds);
  const after = await sampleCpu(meters, entry.condition);
  return { entry, concurrency: c, round, tag, result, unexpected, cpu: cpuBetween(before, after) };
}

function logRun(run: RunRecord, rounds: number, log: (line: string) => void): void {
  const { result, unexpected } = run;
  log(
    `c=${run.concurrency} round ${run.round + 1}/${rounds} ${segmentName(run.entry).padEnd(32)} ` +
      `${(result.ok / result.durationSeconds).toFixed(0).padStart(6)} calls/s` +
      (result.errors + unexpected > 0 ? `  errors ${result.errors} unexpected ${unexpected} ${JSON.stringify(result.errorKinds)}` : ''),
  );
}

/** What the business rows say: rows per run tag, and whether each replay pool still holds one row per key. */
export interface WritesSeen {
  byTag: Map<string, number>;
  poolIntact: (entry: Entry) => boolean;
}

/** One cell: an entry's rounds at one concurrency, merged. */
export function summarize(entry: Entry, concurrency: number, runs: RunRecord[], writes: WritesSeen): InProcessCell {
  const mine = runs.filter((r) => r.entry === entry && r.concurrency === concurrency).sort((a, b) => a.round - b.round);
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
  const cpuUs = (pick: (cpu: RunRecord['cpu']) => number | null) => {
    let totalNs = 0;
    for (const r of mine) {
      const ns = pick(r.cpu);
      if (ns === null) return null;
      totalNs += ns;
    }
    return totalNs / 1000 / calls;
  };
  return {
    condition: entry.condition,
    concurrency,
    contender: entry.id,
    calls,
    seconds,
    callsPerSecond: calls / seconds,
    callsPerSecondPerRound: mine.map((r) => r.result.ok / r.result.durationSeconds),
    latencyMs: latencySummary(sorted),
    errors: mine.reduce((n, r) => n + r.result.errors, 0),
    errorKinds,
    unexpectedOutcomes: mine.reduce((n, r) => n + r.unexpected, 0),
    cpuUsPerCall: {
      node: mine.reduce((n, r) => n + r.cpu.nodeUs, 0) / calls,
      postgres: cpuUs((cpu) => cpu.postgresNs),
      redis: cpuUs((cpu) => cpu.redisNs),
      proxy: entry.condition === 'zones' ? cpuUs((cpu) => cpu.proxyNs) : null,
    },
    writesVerified: isReplay(entry.id)
      ? writes.poolIntact(entry) && mine.every((r) => !writes.byTag.has(r.tag))
      : mine.every((r) => writes.byTag.get(r.tag) === r.result.ok),
  };
}
