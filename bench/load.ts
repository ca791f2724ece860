/**
 * One autocannon run against one tRPC mutation, keeping every response's latency (autocannon's own
 * histogram stores whole milliseconds; the guard's budget is a fraction of one).
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';

export interface LoadSpec {
  appUrl: string;
  /** e.g. `bench.guarded` */
  procedure: string;
  connections: number;
  /** Timed run… */
  seconds?: number;
  /** …or exactly this many requests (every one answered before the run ends). */
  amount?: number;
  cookie: string;
  body: string;
  /** The Idempotency-Key of each request; every scenario sends one, so the load generator's work is alike. */
  nextKey: () => string;
}

export interface LoadResult {
  /** Latency in ms of every 2xx response, in arrival order. */
  latenciesMs: Float64Array;
  ok: number;
  non2xx: number;
  statusCodes: Record<string, number>;
  errors: number;
  timeouts: number;
  /** Seconds, as autocannon measured the run. */
  durationSeconds: number;
}

export const freshKey = () => `bench-${randomUUID()}`;

export function runLoad(spec: LoadSpec): Promise<LoadResult> {
  let latencies = new Float64Array(1 << 14);
  let ok = 0;
  let non2xx = 0;
  const statusCodes: Record<string, number> = {};
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: spec.appUrl,
        connections: spec.connections,
        pipelining: 1,
        ...(spec.amount !== undefined ? { amount: spec.amount } : { duration: spec.seconds ?? 10 }),
        timeout: 30,
        requests: [
          {
            method: 'POST',
            path: `/api/trpc/${spec.procedure}`,
            headers: { 'content-type': 'application/json', cookie: spec.cookie },
            body: spec.body,
            setupRequest: (request) => ({
              ...request,
              headers: { ...request.headers, 'idempotency-key': spec.nextKey() },
            }),
          },
        ],
      },
      (error, result) => {
        if (error) return reject(error);
        resolve({
          latenciesMs: latencies.subarray(0, ok),
          ok,
          non2xx,
          statusCodes,
          errors: result.errors,
          timeouts: result.timeouts,
          durationSeconds: result.duration,
        });
      },
    );
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      statusCodes[statusCode] = (statusCodes[statusCode] ?? 0) + 1;
      if (statusCode < 200 || statusCode >= 300) {
        non2xx++;
        return;
      }
      if (ok === latencies.length) {
        const grown = new Float64Array(latencies.length * 2);
        grown.set(latencies);
        latencies = grown;
      }
      latencies[ok++] = responseTime;
    });
  });
}

/** Nearest-rank percentile of sorted values. */
export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

/** p50/p90/p99, mean and max of sorted latencies, as every report prints them. */
export function latencySummary(sorted: Float64Array): { p50: number; p90: number; p99: number; mean: number; max: number } {
  return {
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    mean: sorted.reduce((a, b) => a + b, 0) / sorted.length,
    max: sorted[sorted.length - 1] ?? Number.NaN,
  };
}

/** The commit measured (with `+dirty` when the working tree has changes), for comparing runs. */
export function gitCommit(): string | null {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim();
    return dirty ? `${head}+dirty` : head;
  } catch {
    return null;
  }
}

/** Merges the latencies of several runs and sorts them. */
export function mergeSorted(parts: Float64Array[]): Float64Array {
  const merged = new Float64Array(parts.reduce((n, part) => n + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    merged.set(part, offset);
    offset += part.length;
  }
  return merged.sort();
}
