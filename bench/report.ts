/**
 * The benchmark's results: what goes into bench/results/latest.json, the targets of the issue checked
 * against it, and the markdown table printed at the end of a run.
 */
import type { MachineInfo } from './environment';
import type { StormResult } from './notification-storm';
import { stormMarkdown } from './notification-storm';

export const SCENARIOS = ['control', 'guarded', 'replay', 'naive'] as const;
export type ScenarioId = (typeof SCENARIOS)[number];
export type PhaseId = 'empty' | '5m';

export interface RoundTrips {
  /** Wire round trips to PostgreSQL per request (socket writes ending in a Sync, Flush or Query that the client then waits on). */
  perRequest: number;
  /** Statements sent per request, BEGIN and COMMIT included. */
  statementsPerRequest: number;
  beginPerRequest: number;
  commitPerRequest: number;
  rollbackPerRequest: number;
  /** Requests of the fixed-size run they were counted over (every one answered before counting). */
  requests: number;
}

export interface CellResult {
  phase: PhaseId;
  concurrency: number;
  scenario: ScenarioId;
  /** 2xx answers over all rounds. */
  requests: number;
  seconds: number;
  rps: number;
  rpsPerRound: number[];
  latencyMs: { p50: number; p90: number; p99: number; mean: number; max: number };
  non2xx: number;
  errors: number;
  timeouts: number;
  statusCodes: Record<string, number>;
  roundTrips: RoundTrips;
  /**
   * CPU time per request over the same fixed-size run: the app process (process.cpuUsage) and its
   * PostgreSQL backends (/proc/<pid>/schedstat; null when PostgreSQL is on another machine). Far less
   * sensitive than wall time to other work on a shared machine.
   */
  cpuUsPerRequest: { app: number; postgres: number | null };
  /** Business rows written match the answers (one per handled request; none for a replay). */
  writesVerified: boolean;
  vsControl?: { p50Ms: number; p90Ms: number; p99Ms: number; throughput: number };
}

export interface PhaseResult {
  phase: PhaseId;
  /** How the phase is named in the tables: `empty table`, `5 M keys`. */
  label: string;
  /** Rows in idempotency_keys / bench_naive_keys when the phase began. */
  keyRows: number;
  naiveKeyRows: number;
  prefillSeconds?: number;
  cells: CellResult[];
}

export interface TargetCheck {
  target: string;
  phase: PhaseId | 'both';
  measured: string;
  pass: boolean | null;
}

export interface BenchReport {
  at: string;
  commit: string | null;
  durationSeconds: number;
  machine: MachineInfo;
  settings: {
    quick: boolean;
    seconds: number;
    rounds: number;
    concurrency: number[];
    replayKeys: number;
    prefillRows: number | null;
    probeRequests: string;
  };
  method: string[];
  phases: PhaseResult[];
  targets: TargetCheck[];
  storm?: StormResult;
}

const f2 = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : 'n/a');
const signed = (n: number) => (Number.isFinite(n) ? `${n >= 0 ? '+' : ''}${n.toFixed(2)}` : 'n/a');
const ratio = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}×` : 'n/a');
const mark = (pass: boolean | null) => (pass === null ? '–' : pass ? '✅' : '❌');

export function cell(phase: PhaseResult | undefined, concurrency: number, scenario: ScenarioId): CellResult | undefined {
  return phase?.cells.find((c) => c.concurrency === concurrency && c.scenario === scenario);
}

/** Fills in each cell's comparison with the control of its phase and concurrency. */
export function compareWithControl(phase: PhaseResult): void {
  for (const c of phase.cells) {
    const control = cell(phase, c.concurrency, 'control');
    if (!control || c.scenario === 'control') continue;
    c.vsControl = {
      p50Ms: c.latencyMs.p50 - control.latencyMs.p50,
      p90Ms: c.latencyMs.p90 - control.latencyMs.p90,
      p99Ms: c.latencyMs.p99 - control.latencyMs.p99,
      throughput: c.rps / control.rps,
    };
  }
}

/** The issue's targets, each checked where it applies. */
export function checkTargets(phases: PhaseResult[], concurrency: number[]): TargetCheck[] {
  const fullLabel = phases.find((p) => p.phase === '5m')?.label ?? '5 M keys';
  const checks: TargetCheck[] = [];
  const empty = phases.find((p) => p.phase === 'empty');
  const full = phases.find((p) => p.phase === '5m');
  for (const phase of phases) {
    const label = phase.label;
    const g32 = cell(phase, 32, 'guarded');
    checks.push({
      target: `guard overhead p50 ≤ 0.3 ms at 32 concurrent (${label})`,
      phase: phase.phase,
      measured: g32?.vsControl ? `${signed(g32.vsControl.p50Ms)} ms` : 'not measured',
      pass: g32?.vsControl ? g32.vsControl.p50Ms <= 0.3 : null,
    });
    checks.push({
      target: `guard overhead p99 ≤ 1.5 ms at 32 concurrent (${label})`,
      phase: phase.phase,
      measured: g32?.vsControl ? `${signed(g32.vsControl.p99Ms)} ms` : 'not measured',
      pass: g32?.vsControl ? g32.vsControl.p99Ms <= 1.5 : null,
    });
    checks.push({
      target: `guarded throughput ≥ 0.9× control at 32 concurrent (${label})`,
      phase: phase.phase,
      measured: g32?.vsControl ? `${ratio(g32.vsControl.throughput)} (${Math.round(g32.rps)} req/s)` : 'not measured',
      pass: g32?.vsControl ? g32.vsControl.throughput >= 0.9 : null,
    });
    const worst = <T>(scenario: ScenarioId, value: (c: CellResult) => T, pick: (a: T, b: T) => boolean) => {
      let found: { c: number; v: T } | undefined;
      for (const c of concurrency) {
        const x = cell(phase, c, scenario);
        if (!x?.vsControl) continue;
        const v = value(x);
        if (!found || pick(v, found.v)) found = { c, v };
      }
      return found;
    };
    const throughput = worst(
      'guarded',
      (x) => x.vsControl!.throughput,
      (a, b) => a < b,
    );
    checks.push({
      target: `guarded throughput ≥ 0.9× control, every concurrency (${label})`,
      phase: phase.phase,
      measured: throughput ? `worst ${ratio(throughput.v)} at ${throughput.c}` : 'not measured',
      pass: throughput ? throughput.v >= 0.9 : null,
    });
    const replay = worst(
      'replay',
      (x) => x.vsControl!.p50Ms,
      (a, b) => a > b,
    );
    checks.push({
      target: `replay p50 no slower than control, every concurrency (${label})`,
      phase: phase.phase,
      measured: replay ? `worst ${signed(replay.v)} ms at ${replay.c}` : 'not measured',
      pass: replay ? replay.v <= 0 : null,
    });
    let naiveWorst: { c: number; rps: number; p50: number } | undefined;
    for (const c of concurrency) {
      const g = cell(phase, c, 'guarded');
      const n = cell(phase, c, 'naive');
      if (!g || !n) continue;
      const v = { c, rps: g.rps / n.rps, p50: g.latencyMs.p50 - n.latencyMs.p50 };
      if (!naiveWorst || v.rps < naiveWorst.rps) naiveWorst = v;
    }
    checks.push({
      target: `clearly ahead of the naive baseline: ≥ 1.1× its throughput and a lower p50, every concurrency (${label})`,
      phase: phase.phase,
      measured: naiveWorst
        ? `worst ${ratio(naiveWorst.rps)} throughput, p50 ${signed(naiveWorst.p50)} ms at ${naiveWorst.c}`
        : 'not measured',
      pass: naiveWorst ? naiveWorst.rps >= 1.1 && naiveWorst.p50 < 0 : null,
    });
  }
  for (const scenario of ['guarded', 'replay'] as const) {
    let worstP50: { c: number; v: number } | undefined;
    let worstRps: { c: number; v: number } | undefined;
    for (const c of concurrency) {
      const a = cell(empty, c, scenario);
      const b = cell(full, c, scenario);
      if (!a || !b) continue;
      const p50 = b.latencyMs.p50 / a.latencyMs.p50;
      const rps = a.rps / b.rps;
      if (!worstP50 || p50 > worstP50.v) worstP50 = { c, v: p50 };
      if (!worstRps || rps > worstRps.v) worstRps = { c, v: rps };
    }
    checks.push({
      target: `${scenario} with ${fullLabel} within 1.2× of an empty table (p50 and throughput, every concurrency)`,
      phase: 'both',
      measured:
        worstP50 && worstRps
          ? `p50 worst ${ratio(worstP50.v)} at ${worstP50.c}; throughput worst ${ratio(worstRps.v)} slower at ${worstRps.c}`
          : 'not measured',
      pass: worstP50 && worstRps ? worstP50.v <= 1.2 && worstRps.v <= 1.2 : null,
    });
  }
  return checks;
}

function phaseTable(phase: PhaseResult): string[] {
  const lines = [
    '| conc. | scenario | req/s | rounds min–max | p50 ms | p90 ms | p99 ms | Δp50 vs control | Δp99 vs control | req/s vs control | PG round trips / req | statements / req (of which BEGIN + COMMIT) | CPU µs / req app + PG | non-2xx / errors | writes ✓ |',
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|',
  ];
  for (const c of phase.cells) {
    const v = c.vsControl;
    const rt = c.roundTrips;
    lines.push(
      `| ${c.concurrency} | ${c.scenario} | ${c.rps.toFixed(0)} | ${Math.min(...c.rpsPerRound)}–${Math.max(...c.rpsPerRound)} | ${f2(c.latencyMs.p50)} | ${f2(c.latencyMs.p90)} | ${f2(c.latencyMs.p99)} | ` +
        `${v ? signed(v.p50Ms) : '—'} | ${v ? signed(v.p99Ms) : '—'} | ${v ? ratio(v.throughput) : '—'} | ` +
        `${f2(rt.perRequest)} | ${f2(rt.statementsPerRequest)} (${f2(rt.beginPerRequest + rt.commitPerRequest)}) | ` +
        `${c.cpuUsPerRequest.app.toFixed(0)} + ${c.cpuUsPerRequest.postgres === null ? '?' : c.cpuUsPerRequest.postgres.toFixed(0)} | ${c.non2xx} / ${c.errors + c.timeouts} | ${c.writesVerified ? '✓' : '✗'} |`,
    );
  }
  return lines;
}

function comparisonTable(empty: PhaseResult, full: PhaseResult): string[] {
  const lines = [
    `| conc. | scenario | req/s empty → ${full.label} | ratio | p50 ms empty → ${full.label} | ratio | p99 ms empty → ${full.label} |`,
    '|---:|---|---:|---:|---:|---:|---:|',
  ];
  for (const a of empty.cells) {
    const b = cell(full, a.concurrency, a.scenario);
    if (!b) continue;
    lines.push(
      `| ${a.concurrency} | ${a.scenario} | ${a.rps.toFixed(0)} → ${b.rps.toFixed(0)} | ${ratio(b.rps / a.rps)} | ` +
        `${f2(a.latencyMs.p50)} → ${f2(b.latencyMs.p50)} | ${ratio(b.latencyMs.p50 / a.latencyMs.p50)} | ${f2(a.latencyMs.p99)} → ${f2(b.latencyMs.p99)} |`,
    );
  }
  return lines;
}

export function renderMarkdown(report: BenchReport): string {
  const m = report.machine;
  const s = report.settings;
  const out = [
    `## PayOnce guard benchmark — ${report.at}${report.commit ? `, commit ${report.commit}` : ''}${s.quick ? ' (quick run: indicative only)' : ''}`,
    '',
    `**Machine:** ${m.cpuModel}, ${m.cores} cores, ${m.ramGiB} GiB RAM, ${m.os}; Node ${m.node}; PostgreSQL ${m.postgres} ` +
      `(${m.database === 'embedded' ? 'embedded' : 'DATABASE_URL'} at ${m.databaseHost}; shared_buffers ${m.sharedBuffers}, ` +
      `synchronous_commit ${m.synchronousCommit}); app: \`next start\` production build, one process, DB pool ${m.appDbPoolMax}; ` +
      `load: ${m.loadGenerator}. Load average ${m.loadAverage.start.join(' / ')} at start` +
      `${m.loadAverage.end ? `, ${m.loadAverage.end.join(' / ')} at end` : ''}.`,
    '',
    `**Run:** ${s.rounds} interleaved rounds × ${s.seconds} s per scenario at concurrency ${s.concurrency.join(', ')}; ` +
      `${s.replayKeys} completed keys cycled for replay; round trips counted over ${s.probeRequests}; ` +
      `total ${Math.round(report.durationSeconds / 60)} min.`,
    '',
    ...report.method.map((line) => `- ${line}`),
    '',
  ];
  for (const phase of report.phases) {
    out.push(
      phase.phase === 'empty'
        ? `### Empty key table (${phase.keyRows.toLocaleString('en')} rows at start)`
        : `### Key table pre-filled (${phase.label}): ${phase.keyRows.toLocaleString('en')} rows in idempotency_keys, ${phase.naiveKeyRows.toLocaleString('en')} in the naive table` +
            (phase.prefillSeconds !== undefined ? ` (filled in ${phase.prefillSeconds.toFixed(0)} s)` : ''),
      '',
      ...phaseTable(phase),
      '',
    );
  }
  const empty = report.phases.find((p) => p.phase === 'empty');
  const full = report.phases.find((p) => p.phase === '5m');
  if (empty && full) out.push(`### Empty → ${full.label}`, '', ...comparisonTable(empty, full), '');
  out.push('### Targets', '', '| target | measured | |', '|---|---|:---:|');
  for (const t of report.targets) out.push(`| ${t.target} | ${t.measured} | ${mark(t.pass)} |`);
  out.push('');
  if (report.storm) out.push(stormMarkdown(report.storm), '');
  return out.join('\n');
}
