/**
 * Completed answers kept in this process, so a warm replay costs no statement. Safe because a
 * completed record never changes until it expires, and every entry goes a second before that, on
 * this process's clock counted from before the store was asked; another instance simply asks the
 * store. Two generations bound it (the old one dropped whole; a hit there moves up): no Map deleted
 * from at its front, whose holes V8 walks.
 */
import type { StoredResponse } from './store.js';

export interface CachedAnswer {
  path: string;
  fingerprint: string;
  /** The input's JSON as the request that stored the answer sent it: a retry sending the same text is the same request. */
  inputText: string | undefined;
  response: StoredResponse;
}

/** Indexed by the client's key alone (no string built per lookup); the scope is checked on a hit, so two scopes sharing a key only take each other's place. */
type Entry = CachedAnswer & { scope: string; until: number };

/** The clocks of this process and the database never meet: a second's margin covers their drift. */
const EXPIRY_MARGIN_MS = 1000;

export class ReplayCache {
  #young = new Map<string, Entry>();
  #old = new Map<string, Entry>();

  constructor(
    /** At most this many entries, and at least half as many of the latest. */
    readonly size: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  get(scope: string, key: string): CachedAnswer | undefined {
    if (this.size <= 0) return undefined;
    let entry = this.#young.get(key);
    if (!entry) {
      entry = this.#old.get(key);
      if (entry) this.#keep(key, entry);
    }
    return entry && entry.scope === scope && entry.until > this.now() ? entry : undefined;
  }

  /** `askedAt`: this clock's reading from before the store was asked; `liveMs`: the record's life left then. */
  set(scope: string, key: string, answer: CachedAnswer, askedAt: number, liveMs: number): void {
    const until = askedAt + liveMs - EXPIRY_MARGIN_MS;
    if (this.size <= 0 || until <= this.now()) return;
    this.#keep(key, { ...answer, scope, until });
  }

  #keep(id: string, entry: Entry): void {
    if (this.#young.size >= Math.ceil(this.size / 2)) {
      this.#old = this.#young;
      this.#young = new Map();
    }
    this.#young.set(id, entry);
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
