/**
 * The in-process load loop: `concurrency` async workers, each calling `call` again as soon as its
 * previous call settled, for a fixed time (or until a fixed number of calls has started). Every call
 * is awaited before the run ends, and its latency kept with performance.now()'s resolution.
 */

export interface LoopSpec {
  concurrency: number;
  /** Timed run: no call starts after this many seconds… */
  seconds?: number;
  /** …or exactly this many calls. */
  calls?: number;
  /** One call; `worker` is 0…concurrency-1, `index` the call's number in the run. */
  call: (worker: number, index: number) => Promise<unknown>;
}

export interface LoopResult {
  /** Latency in ms of every call that resolved, in completion order. */
  latenciesMs: Float64Array;
  ok: number;
  errors: number;
  /** Errors by name (or code), with the first message of each. */
  errorKinds: Record<string, { count: number; message: string }>;
  /** From the first call's start to the last call's end. */
  durationSeconds: number;
}

function errorName(error: unknown): string {
  if (error && typeof error === 'object') {
    const e = error as { code?: unknown; name?: unknown };
    if (typeof e.code === 'string' && e.code) return `${String(e.name ?? 'Error')}(${e.code})`;
    if (typeof e.name === 'string') return e.name;
  }
  return typeof error;
}

export async function runLoop(spec: LoopSpec): Promise<LoopResult> {
  if (spec.seconds === undefined && spec.calls === undefined) throw new Error('runLoop: give seconds or calls');
  let latencies = new Float64Array(1 << 14);
  let ok = 0;
  let errors = 0;
  let started = 0;
  const errorKinds: LoopResult['errorKinds'] = {};
  const begin = performance.now();
  const deadline = spec.seconds === undefined ? Infinity : begin + spec.seconds * 1000;
  const limit = spec.calls ?? Infinity;

  const worker = async (w: number) => {
    while (started < limit && performance.now() < deadline) {
      const index = started++;
      const t0 = performance.now();
      try {
        await spec.call(w, index);
      } catch (error) {
        errors++;
        const name = errorName(error);
        const kind = (errorKinds[name] ??= { count: 0, message: String((error as Error)?.message ?? error).slice(0, 300) });
        kind.count++;
        continue;
      }
      const elapsed = performance.now() - t0;
      if (ok === latencies.length) {
        const grown = new Float64Array(latencies.length * 2);
        grown.set(latencies);
        latencies = grown;
      }
      latencies[ok++] = elapsed;
    }
  };
  await Promise.all(Array.from({ length: spec.concurrency }, (_, w) => worker(w)));
  return {
    latenciesMs: latencies.slice(0, ok),
    ok,
    errors,
    errorKinds,
    durationSeconds: (performance.now() - begin) / 1000,
  };
}
