/**
 * The in-process set's results: what goes into bench/results/in-process.{json,md}, its targets, and
 * the markdown printed at the end of a run.
 */
import type { LostAnswerResult } from './lost-answer';
import type { OneKeyResult } from './one-key';

/** Contenders of the timed rounds, in their base order (rotated per round). */
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
   * pool's PostgreSQL backends and redis-server's main thread (null where it cannot be read).
   */
  cpuUsPerCall: { node: number; postgres: number | null; redis: number | null };
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
  target: string;
  measured: string;
  pass: boolean | null;
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
  };
  versions: Record<string, string>;
  /** Why the peers are missing, when they are. */
  skipped?: string;
  method: string[];
  cells: InProcessCell[];
  oneKey: OneKeyResult[];
  lostAnswer: LostAnswerResult[];
  targets: TargetCheck[];
}

export function cellOf(cells: InProcessCell[], concurrency: number, contender: string): InProcessCell | undefined {
  return cells.find((c) => c.concurrency === concurrency && c.contender === contender);
}

/** Fills in each cell's comparison with `unguarded` at the same concurrency, from the same rounds. */
export function compareWithUnguarded(cells: InProcessCell[]): void {
  for (const c of cells) {
    const base = cellOf(cells, c.concurrency, 'unguarded');
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

export function checkTargets(cells: InProcessCell[], concurrency: number[], peersSkipped: string | undefined): TargetCheck[] {
  const checks: TargetCheck[] = [];
  for (const c of [1, 32]) {
    const ours = cellOf(cells, c, 'ours');
    const peers = PEERS.map((p) => cellOf(cells, c, p)).filter((x): x is InProcessCell => !!x?.vsUnguarded);
    const target = `our guard's throughput ratio (vs unguarded) ≥ the best Redis peer's, at c=${c}`;
    if (!ours?.vsUnguarded || peers.length === 0) {
      checks.push({
        target,
        measured: !concurrency.includes(c) ? `c=${c} not measured` : (peersSkipped ?? 'not measured'),
        pass: null,
      });
      continue;
    }
    const best = peers.reduce((a, b) => (b.vsUnguarded!.throughput > a.vsUnguarded!.throughput ? b : a));
    checks.push({
      target,
      measured:
        `ours ${ratio(ours.vsUnguarded.throughput)} (${int(ours.callsPerSecond)}/s); ` +
        peers.map((p) => `${p.contender} ${ratio(p.vsUnguarded!.throughput)} (${int(p.callsPerSecond)}/s)`).join(', '),
      pass: ours.vsUnguarded.throughput >= best.vsUnguarded!.throughput,
    });
  }
  const ours1 = cellOf(cells, 1, 'ours');
  checks.push({
    target: 'our p50 overhead vs unguarded ≤ 0.2 ms, at c=1',
    measured: ours1?.vsUnguarded ? `${signed3(ours1.vsUnguarded.p50Ms)} ms (p50 ${ms3(ours1.latencyMs.p50)} ms)` : 'c=1 not measured',
    pass: ours1?.vsUnguarded ? ours1.vsUnguarded.p50Ms <= 0.2 : null,
  });
  const parts: string[] = [];
  let all: boolean | null = null;
  for (const c of concurrency) {
    const ours = cellOf(cells, c, 'ours-replay');
    const peers = PEERS.map((p) => cellOf(cells, c, `${p}-replay`)).filter((x): x is InProcessCell => !!x);
    if (!ours || peers.length === 0) continue;
    const ok = peers.every((p) => ours.callsPerSecond >= p.callsPerSecond);
    all = (all ?? true) && ok;
    parts.push(
      `c=${c}: ${int(ours.callsPerSecond)} vs ${peers.map((p) => `${int(p.callsPerSecond)} (${p.contender.replace('-replay', '')})`).join(', ')} ${mark(ok)}`,
    );
  }
  checks.push({
    target: "our warm replay throughput ≥ each peer's replay, every concurrency",
    measured: parts.length ? `calls/s ${parts.join('; ')}` : (peersSkipped ?? 'not measured'),
    pass: all,
  });
  return checks;
}

export function renderMarkdown(report: InProcessReport): string {
  const m = report.machine;
  const s = report.settings;
  const lines: string[] = [];
  lines.push('## In-process: our guard against the Redis-backed idempotency libraries', '');
  lines.push(
    `${report.at} (commit ${report.commit ?? 'unknown'}), ${Math.round(report.durationSeconds)} s. ${m.cpuModel}, ${m.cores} cores, ` +
      `${m.ramGiB} GiB; ${m.os}; Node ${m.node}; PostgreSQL ${m.postgres} (${m.database}: ${m.databaseHost}; shared_buffers ` +
      `${m.sharedBuffers}, synchronous_commit ${m.synchronousCommit}); postgres.js pool of ${m.poolMax} for every contender; ` +
      `redis-server ${m.redis ?? 'absent'} (private, no persistence); everything in one process on one machine. ` +
      `${s.rounds} interleaved rounds × ${s.seconds} s per contender and concurrency (after ${s.warmupSeconds} s of warm-up each); ` +
      `load average ${m.loadAverage.start.join(' ')} → ${m.loadAverage.end?.join(' ') ?? '?'}.`,
    '',
  );
  if (report.skipped) lines.push(`**Peers skipped:** ${report.skipped}`, '');
  lines.push(
    '| conc. | contender | calls/s | rounds min–max | p50 ms | p90 ms | p99 ms | vs unguarded | rounds min–max | Δp50 ms | Δp99 ms | CPU µs/call node + PG + redis | errors | writes ✓ |',
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|',
  );
  for (const c of report.cells) {
    const v = c.vsUnguarded;
    const cpu = c.cpuUsPerCall;
    lines.push(
      `| ${c.concurrency} | ${c.contender} | ${int(c.callsPerSecond)} | ${int(Math.min(...c.callsPerSecondPerRound))}–${int(Math.max(...c.callsPerSecondPerRound))} | ` +
        `${ms3(c.latencyMs.p50)} | ${ms3(c.latencyMs.p90)} | ${ms3(c.latencyMs.p99)} | ` +
        `${v ? ratio(v.throughput) : '—'} | ${v ? `${v.throughputPerRound[0].toFixed(2)}–${v.throughputPerRound[1].toFixed(2)}` : '—'} | ` +
        `${v ? signed3(v.p50Ms) : '—'} | ${v ? signed3(v.p99Ms) : '—'} | ` +
        `${int(cpu.node)} + ${cpu.postgres === null ? '?' : int(cpu.postgres)} + ${cpu.redis === null ? '?' : int(cpu.redis)} | ` +
        `${c.errors + c.unexpectedOutcomes} | ${c.writesVerified ? '✓' : '✗'} |`,
    );
  }
  const errors = report.cells.filter((c) => c.errors > 0);
  if (errors.length) {
    lines.push('', 'Errors: ' + errors.map((c) => `${c.contender} at ${c.concurrency}: ${JSON.stringify(c.errorKinds)}`).join('; '));
  }
  lines.push(
    '',
    `**${report.oneKey[0]?.callers ?? s.oneKeyCallers} concurrent calls with ONE key** (same input, started in the same tick)`,
    '',
  );
  lines.push(
    '| contender | business work ran | success | replay | in-progress error | other error | distinct answers | exactly once |',
    '|---|---:|---:|---:|---:|---:|---:|:---:|',
  );
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
  lines.push(
    '',
    '**The answer lost after the business commit** (its write made to fail once, as a crash there would; then the same key retried)',
    '',
    '| guard | first call | retry at once | retry later | business work ran | the key afterwards |',
    '|---|---|---|---|---:|---|',
    '| ours | — | — | — | — | no such window: the answer is written in the business transaction and commits with it, or neither does |',
  );
  for (const r of report.lostAnswer) {
    lines.push(`| ${r.contender} | ${r.firstCall} | ${r.immediateRetry} | ${r.laterRetry ?? '—'} | ${r.businessRuns} | ${r.keyState} |`);
  }
  lines.push('', '**Targets**', '', '| target | measured | |', '|---|---|:---:|');
  for (const t of report.targets) lines.push(`| ${t.target} | ${t.measured} | ${mark(t.pass)} |`);
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
