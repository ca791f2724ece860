/**
 * The in-process set's results: what goes into bench/results/in-process.{json,md}, its targets, and
 * the markdown printed at the end of a run.
 */
import { CONDITION_LABEL, CONDITIONS, type ConditionId, type ConditionInfo } from './conditions';
import type { LostAnswerResult } from './lost-answer';
import type { OneKeyResult } from './one-key';

/** Contenders of the timed rounds, in the order of the tables (the rounds shuffle them, ./rounds.ts). */
export const TIMED = [
  'unguarded',
  'ours',
  'ours-replay',
  'ours-claim-first',
  'ours-uncached-replay',
  'seed',
  'powertools',
  'powertools-replay',
  'node-idempotency',
  'node-idempotency-replay',
] as const;
export type TimedId = (typeof TIMED)[number];
export const PEERS = ['powertools', 'node-idempotency'] as const;
export const isReplay = (id: string) => id.endsWith('-replay');

export interface InProcessCell {
  condition: ConditionId;
  concurrency: number;
  contender: TimedId;
  /** Calls that resolved, over all rounds. */
  calls: number;
  seconds: number;
  callsPerSecond: number;
  callsPerSecondPerRound: number[];
  latencyMs: { p50: number; p90: number; p99: number; mean: number; max: number };
  errors: number;
  errorKinds: Record<string, { count: number; message: string }>;
  /** Calls whose outcome was not the expected one (a fresh key replayed, a completed key run again). */
  unexpectedOutcomes: number;
  /**
   * CPU time per call over the timed rounds: this Node process (load loop, contender, drivers), the
   * condition's PostgreSQL backends, redis-server's main thread, and (across zones) the delay proxy's
   * process — null where it cannot be read or does not apply.
   */
  cpuUsPerCall: { node: number; postgres: number | null; redis: number | null; proxy: number | null };
  /** Business rows match the calls: one per call for a fresh key, none for a replay. */
  writesVerified: boolean;
  vsUnguarded?: {
    throughput: number;
    /** min–max of the per-round ratios (round r of this contender against round r of unguarded). */
    throughputPerRound: [number, number];
    p50Ms: number;
    p99Ms: number;
  };
}

export interface TargetCheck {
  /** The condition the figures come from (a target checked under both has a line for each). */
  condition: ConditionId;
  target: string;
  measured: string;
  pass: boolean | null;
}

/** The shuffled order of one round: `condition/contender` segments, first to last. */
export interface SegmentOrder {
  concurrency: number;
  round: number;
  segments: string[];
}

export interface InProcessReport {
  at: string;
  commit: string | null;
  durationSeconds: number;
  machine: {
    cpuModel: string;
    cores: number;
    ramGiB: number;
    os: string;
    node: string;
    postgres: string;
    database: 'embedded' | 'DATABASE_URL';
    databaseHost: string;
    sharedBuffers: string;
    synchronousCommit: string;
    poolMax: number;
    redis: string | null;
    loadAverage: { start: number[]; end?: number[] };
  };
  settings: {
    quick: boolean;
    seconds: number;
    rounds: number;
    concurrency: number[];
    warmupSeconds: number;
    replayKeys: number;
    oneKeyCallers: number;
    /** The seed of the rounds' shuffled orders (--seed). */
    seed: number;
    /** One-way delay of the across-zones condition (--zone-delay-ms). */
    zoneDelayMs: number;
    pauseBetweenSegmentsMs: number;
  };
  versions: Record<string, string>;
  /** Why the peers are missing, when they are. */
  skipped?: string;
  conditions: ConditionInfo[];
  method: string[];
  cells: InProcessCell[];
  orders: SegmentOrder[];
  oneKey: OneKeyResult[];
  lostAnswer: LostAnswerResult[];
  targets: TargetCheck[];
}

export function cellOf(cells: InProcessCell[], condition: ConditionId, concurrency: number, contender: string): InProcessCell | undefined {
  return cells.find((c) => c.condition === condition && c.concurrency === concurrency && c.contender === contender);
}

/** Fills in each cell's comparison with `unguarded` under the same condition and concurrency, from the same rounds. */
export function compareWithUnguarded(cells: InProcessCell[]): void {
  for (const c of cells) {
    const base = cellOf(cells, c.condition, c.concurrency, 'unguarded');
    if (!base || c.contender === 'unguarded') continue;
    const perRound = c.callsPerSecondPerRound.map((rps, i) => rps / (base.callsPerSecondPerRound[i] ?? Number.NaN));
    c.vsUnguarded = {
      throughput: c.callsPerSecond / base.callsPerSecond,
      throughputPerRound: [Math.min(...perRound), Math.max(...perRound)],
      p50Ms: c.latencyMs.p50 - base.latencyMs.p50,
      p99Ms: c.latencyMs.p99 - base.latencyMs.p99,
    };
  }
}

const ms3 = (n: number) => (Number.isFinite(n) ? n.toFixed(3) : 'n/a');
const signed3 = (n: number) => (Number.isFinite(n) ? `${n >= 0 ? '+' : ''}${n.toFixed(3)}` : 'n/a');
const ratio = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}×` : 'n/a');
const int = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en') : 'n/a');
export const mark = (pass: boolean | null) => (pass === null ? '–' : pass ? '✓' : '✗');

/** Node + PostgreSQL + Redis CPU µs per call; null when PostgreSQL's or Redis's cannot be read. */
function cpuUsPerCall(cell: InProcessCell): number | null {
  const { node, postgres, redis } = cell.cpuUsPerCall;
  return postgres === null || redis === null ? null : node + postgres + redis;
}

/** A target that compares one figure of ours with the better Redis peer's, under one condition. */
interface PeerTarget {
  condition: ConditionId;
  target: string;
  /** Our contender, and the peers' contender suffix (`-replay` for replays). */
  ours: TimedId;
  peerSuffix: '' | '-replay';
  metric: (cell: InProcessCell, cells: InProcessCell[]) => number | null | undefined;
  /** How a cell's figure is shown next to the mark. */
  show: (cell: InProcessCell, value: number) => string;
  higherIsBetter: boolean;
  /** Ours must be at least (or, lower being better, at most) this many times the best peer's figure. */
  factor: number;
}

function compareWithBestPeer(cells: InProcessCell[], spec: PeerTarget, c: number): { measured: string; pass: boolean | null } {
  const figure = (cell: InProcessCell | undefined) => {
    const value = cell ? spec.metric(cell, cells) : undefined;
    return cell && typeof value === 'number' && Number.isFinite(value) ? { cell, value } : undefined;
  };
  const ours = figure(cellOf(cells, spec.condition, c, spec.ours));
  const peers = PEERS.map((p) => figure(cellOf(cells, spec.condition, c, `${p}${spec.peerSuffix}`))).filter((p) => !!p);
  if (!ours || peers.length === 0) return { measured: 'not measured', pass: null };
  const best = peers.reduce((a, b) => ((spec.higherIsBetter ? b.value > a.value : b.value < a.value) ? b : a));
  const bar = spec.factor * best.value;
  const needs = spec.factor === 1 ? '' : ` (needs ${spec.higherIsBetter ? '≥' : '≤'} ${spec.show(best.cell, bar)})`;
  const them = peers.map((p) => `${p.cell.contender.replace('-replay', '')} ${spec.show(p.cell, p.value)}`).join(', ');
  return {
    measured: `ours ${spec.show(ours.cell, ours.value)} vs ${them}${needs}`,
    pass: spec.higherIsBetter ? ours.value >= bar : ours.value <= bar,
  };
}

/** One line: at one concurrency, or over several (every figure shown, passed only if each passes). */
function checkAt(cells: InProcessCell[], spec: PeerTarget, at: number[], peersSkipped: string | undefined): TargetCheck {
  const each = at.map((c) => ({ c, ...compareWithBestPeer(cells, spec, c) }));
  const pass = each.some((e) => e.pass === null) ? null : each.every((e) => e.pass);
  const measured =
    peersSkipped && pass === null
      ? peersSkipped
      : at.length === 1
        ? each[0]!.measured
        : each.map((e) => `c=${e.c}: ${e.measured} ${mark(e.pass)}`).join('; ');
  const where = at.length === 1 ? `at c=${at[0]}` : 'at every concurrency';
  return { condition: spec.condition, target: `${spec.target}, ${where}`, measured, pass };
}

/** Node + PostgreSQL + Redis CPU µs per call over the unguarded transaction's, same condition and concurrency. */
function cpuOverUnguarded(cell: InProcessCell, cells: InProcessCell[]): number | null {
  const base = cellOf(cells, cell.condition, cell.concurrency, 'unguarded');
  const mine = cpuUsPerCall(cell);
  const unguarded = base ? cpuUsPerCall(base) : null;
  return mine === null || unguarded === null ? null : mine - unguarded;
}

const callsPerSecond = (cell: InProcessCell) => cell.callsPerSecond;
const showCalls = (_cell: InProcessCell, value: number) => `${int(value)}/s`;
const FRESH_KEYS = { ours: 'ours', peerSuffix: '' } as const;

const THROUGHPUT_RATIO: PeerTarget = {
  ...FRESH_KEYS,
  condition: 'loopback',
  target: "throughput ratio to unguarded ≥ the best peer's",
  metric: (cell) => cell.vsUnguarded?.throughput,
  show: (cell, value) => `${ratio(value)} (${int(cell.callsPerSecond)}/s)`,
  higherIsBetter: true,
  factor: 1,
};
const CPU_OVERHEAD: PeerTarget = {
  ...FRESH_KEYS,
  condition: 'loopback',
  target: "CPU per call over unguarded (Node + PostgreSQL + Redis) ≤ the best peer's",
  metric: cpuOverUnguarded,
  show: (_cell, value) => `${value >= 0 ? '+' : ''}${int(value)} µs`,
  higherIsBetter: false,
  factor: 1,
};
const ZONES_THROUGHPUT: PeerTarget = {
  ...FRESH_KEYS,
  condition: 'zones',
  target: "throughput ≥ 1.3 × the best peer's",
  metric: callsPerSecond,
  show: showCalls,
  higherIsBetter: true,
  factor: 1.3,
};
const replayTarget = (condition: ConditionId, ours: TimedId, factor: number, target: string): PeerTarget => ({
  condition,
  target,
  ours,
  peerSuffix: '-replay',
  metric: callsPerSecond,
  show: showCalls,
  higherIsBetter: true,
  factor,
});

/**
 * The targets, from this run's cells. "Best peer" is whichever Redis-backed library did better on the
 * figure in question. Throughput, CPU and latency are for fresh keys, at c=1 and at c=32 (or, without
 * 32 in the run, the highest concurrency measured); the replay targets under each condition, at every
 * concurrency.
 */
export function checkTargets(cells: InProcessCell[], concurrency: number[], peersSkipped: string | undefined): TargetCheck[] {
  const ends = [...new Set([1, concurrency.includes(32) ? 32 : Math.max(...concurrency)])];
  const check = (spec: PeerTarget, at: number[]) => checkAt(cells, spec, at, peersSkipped);
  return [
    ...ends.map((c) => check(THROUGHPUT_RATIO, [c])),
    ...ends.map((c) => check(CPU_OVERHEAD, [c])),
    p50OverheadTarget(cells),
    ...ends.map((c) => check(ZONES_THROUGHPUT, [c])),
    ...CONDITIONS.map((condition) =>
      check(
        replayTarget(condition, 'ours-uncached-replay', 1, "uncached replay (ours-uncached-replay) ≥ the best peer's replay"),
        concurrency,
      ),
    ),
    ...CONDITIONS.map((condition) =>
      check(
        replayTarget(condition, 'ours-replay', 5, "warm replay (ours-replay, in-process cache) ≥ 5 × the best peer's replay"),
        concurrency,
      ),
    ),
  ];
}

function p50OverheadTarget(cells: InProcessCell[]): TargetCheck {
  const ours = cellOf(cells, 'loopback', 1, 'ours');
  return {
    condition: 'loopback',
    target: 'p50 latency over unguarded ≤ 0.2 ms, at c=1',
    measured: ours?.vsUnguarded
      ? `${signed3(ours.vsUnguarded.p50Ms)} ms (ours ${ms3(ours.latencyMs.p50)} ms, unguarded ${ms3(ours.latencyMs.p50 - ours.vsUnguarded.p50Ms)} ms)`
      : 'not measured',
    pass: ours?.vsUnguarded ? ours.vsUnguarded.p50Ms <= 0.2 : null,
  };
}

/** A target as one line of the log. */
export const targetLine = (t: TargetCheck) => `${mark(t.pass)} [${CONDITION_LABEL[t.condition]}] ${t.target}: ${t.measured}`;

export function renderMarkdown(report: InProcessReport): string {
  const lines: string[] = ['## In-process: our guard against the Redis-backed idempotency libraries', '', headline(report), ''];
  if (report.skipped) lines.push(`**Peers skipped:** ${report.skipped}`, '');
  for (const condition of report.conditions) lines.push(...conditionTable(report, condition), '');
  const errors = report.cells.filter((c) => c.errors > 0);
  if (errors.length) {
    lines.push(
      'Errors: ' + errors.map((c) => `${c.contender} at ${c.concurrency} (${c.condition}): ${JSON.stringify(c.errorKinds)}`).join('; '),
      '',
    );
  }
  lines.push(...oneKeyTable(report), '', ...lostAnswerTable(report), '');
  lines.push('**Targets**', '', '| condition | target | measured | |', '|---|---|---|:---:|');
  for (const t of report.targets) lines.push(`| ${CONDITION_LABEL[t.condition]} | ${t.target} | ${t.measured} | ${mark(t.pass)} |`);
  lines.push(
    '',
    '**Versions:** ' +
      Object.entries(report.versions)
        .map(([k, v]) => `${k} ${v}`)
        .join(', '),
  );
  lines.push('', '**Method**', '', ...report.method.map((line) => `- ${line}`));
  return lines.join('\n');
}

function headline(report: InProcessReport): string {
  const m = report.machine;
  const s = report.settings;
  return (
    `${report.at} (commit ${report.commit ?? 'unknown'}), ${Math.round(report.durationSeconds)} s. ${m.cpuModel}, ${m.cores} cores, ` +
    `${m.ramGiB} GiB; ${m.os}; Node ${m.node}; PostgreSQL ${m.postgres} (${m.database}: ${m.databaseHost}; shared_buffers ` +
    `${m.sharedBuffers}, synchronous_commit ${m.synchronousCommit}); a postgres.js pool of ${m.poolMax} per network condition for every contender; ` +
    `redis-server ${m.redis ?? 'absent'} (private, no persistence); everything on one machine. ` +
    `${s.rounds} rounds × ${s.seconds} s per contender, condition and concurrency (after ${s.warmupSeconds} s of warm-up each), ` +
    `in an order shuffled per round (seed ${s.seed}), ${s.pauseBetweenSegmentsMs} ms apart; ` +
    `load average ${m.loadAverage.start.join(' ')} → ${m.loadAverage.end?.join(' ') ?? '?'}.`
  );
}

function conditionTitle(condition: ConditionInfo): string {
  const rtt = condition.roundTripMs;
  const measured = `measured round trip: PostgreSQL ${ms3(rtt.postgres)} ms, Redis ${rtt.redis === null ? 'n/a' : `${ms3(rtt.redis)} ms`} (medians)`;
  return condition.delayMsEachWay === null
    ? `### Loopback: PostgreSQL and Redis reached directly — ${measured}`
    : `### Across zones: PostgreSQL and Redis through the delay proxy, +${condition.delayMsEachWay} ms each way — ${measured}`;
}

function conditionTable(report: InProcessReport, condition: ConditionInfo): string[] {
  const zones = condition.id === 'zones';
  const lines = [
    conditionTitle(condition),
    '',
    `| conc. | contender | calls/s | rounds min–max | p50 ms | p90 ms | p99 ms | vs unguarded | rounds min–max | Δp50 ms | Δp99 ms | CPU µs/call node + PG + redis${zones ? ' (+ proxy)' : ''} | errors | writes ✓ |`,
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|',
  ];
  const known = (n: number | null) => (n === null ? '?' : int(n));
  for (const c of report.cells.filter((cell) => cell.condition === condition.id)) {
    const v = c.vsUnguarded;
    const cpu = c.cpuUsPerCall;
    lines.push(
      `| ${c.concurrency} | ${c.contender} | ${int(c.callsPerSecond)} | ${int(Math.min(...c.callsPerSecondPerRound))}–${int(Math.max(...c.callsPerSecondPerRound))} | ` +
        `${ms3(c.latencyMs.p50)} | ${ms3(c.latencyMs.p90)} | ${ms3(c.latencyMs.p99)} | ` +
        `${v ? ratio(v.throughput) : '—'} | ${v ? `${v.throughputPerRound[0].toFixed(2)}–${v.throughputPerRound[1].toFixed(2)}` : '—'} | ` +
        `${v ? signed3(v.p50Ms) : '—'} | ${v ? signed3(v.p99Ms) : '—'} | ` +
        `${int(cpu.node)} + ${known(cpu.postgres)} + ${known(cpu.redis)}${zones ? ` (+ ${known(cpu.proxy)})` : ''} | ` +
        `${c.errors + c.unexpectedOutcomes} | ${c.writesVerified ? '✓' : '✗'} |`,
    );
  }
  return lines;
}

function oneKeyTable(report: InProcessReport): string[] {
  const lines = [
    `**${report.oneKey[0]?.callers ?? report.settings.oneKeyCallers} concurrent calls with ONE key** (same input, started in the same tick; loopback)`,
    '',
    '| contender | business work ran | success | replay | in-progress error | other error | distinct answers | exactly once |',
    '|---|---:|---:|---:|---:|---:|---:|:---:|',
  ];
  for (const r of report.oneKey) {
    const other = r.otherError
      ? ` (${Object.entries(r.otherErrors)
          .map(([k, n]) => `${n}× ${k}`)
          .join('; ')})`
      : '';
    lines.push(
      `| ${r.contender} | ${r.businessRuns} | ${r.success} | ${r.replay} | ${r.inProgress} | ${r.otherError}${other} | ${r.distinctAnswers} | ${mark(r.pass)} |`,
    );
  }
  const notes = report.oneKey.filter((r) => r.note);
  if (notes.length) lines.push('', ...notes.map((r) => `- ${r.contender}: ${r.note}`));
  return lines;
}

function lostAnswerTable(report: InProcessReport): string[] {
  const lines = [
    '**The answer lost after the business commit** (its write made to fail once, as a crash there would; then the same key retried; loopback)',
    '',
    '| guard | first call | retry at once | retry later | business work ran | the key afterwards |',
    '|---|---|---|---|---:|---|',
    '| ours | — | — | — | — | no such window: the answer is written in the business transaction and commits with it, or neither does |',
  ];
  for (const r of report.lostAnswer) {
    lines.push(`| ${r.contender} | ${r.firstCall} | ${r.immediateRetry} | ${r.laterRetry ?? '—'} | ${r.businessRuns} | ${r.keyState} |`);
  }
  return lines;
}
