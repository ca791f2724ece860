/**
 * Completed answers kept in this process, so a replay of a warm key costs no statement. Safe because
 * a completed record never changes until it expires (only an expired one is taken over or deleted),
 * and every entry is dropped a second before that expiry, on this process's monotonic clock counted
 * from before the store was asked. Bounded: the oldest entry goes first (a Map iterates in insertion
 * order). Nothing correctness depends on lives here: another instance, or this one after a restart,
 * simply asks the store.
 */
import type { StoredResponse } from './store';

export interface CachedAnswer {
  path: string;
  fingerprint: string;
  response: StoredResponse;
}

/** The clocks of this process and the database never meet: a second's margin covers their drift. */
const EXPIRY_MARGIN_MS = 1000;

export class ReplayCache {
  readonly #entries = new Map<string, CachedAnswer & { until: number }>();

  constructor(
    readonly size: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  get(scope: string, key: string): CachedAnswer | undefined {
    if (this.size <= 0) return undefined;
    const id = `${scope}\u0000${key}`;
    const entry = this.#entries.get(id);
    if (entry && entry.until <= this.now()) {
      this.#entries.delete(id);
      return undefined;
    }
    return entry;
  }

  /** `askedAt`: this clock's reading from before the store was asked; `liveMs`: the record's life left then. */
  set(scope: string, key: string, answer: CachedAnswer, askedAt: number, liveMs: number): void {
    const until = askedAt + liveMs - EXPIRY_MARGIN_MS;
    if (this.size <= 0 || until <= this.now()) return;
    const id = `${scope}\u0000${key}`;
    this.#entries.delete(id);
    this.#entries.set(id, { ...answer, until });
    if (this.#entries.size > this.size) this.#entries.delete(this.#entries.keys().next().value!);
  }
}

const caches = new WeakMap<object, ReplayCache>();
const NONE = new ReplayCache(0);

/** The one cache of `store` in this process; a call that asks for none neither reads nor fills it. */
export function replayCacheOf(store: object, size: number): ReplayCache {
  if (size <= 0) return NONE;
  let cache = caches.get(store);
  if (!cache) caches.set(store, (cache = new ReplayCache(size)));
  return cache;
}
