/**
 * The idempotency engine: one call wraps one request.
 *
 *   executeIdempotent(store, request, {
 *     // The claim rides in this phase's own transaction (no round trip of its own).
 *     firstPhase: async (tx, key) => { …; return recoveryPoint('charge_started') },
 *     // The rest, once the first phase has committed (or resuming a key taken over from a dead owner).
 *     then: async (key) => {
 *       … call the gateway (outside any transaction) …
 *       return (await key.atomicPhase(async (tx) => { …; return respond(201, body) })).response;
 *     },
 *   })
 *
 * A one-phase request (the business transaction is all there is) gives only `firstPhase`, which
 * responds: claim, effects and answer then commit in one transaction that costs no more round trips
 * than the business work alone. A plain function handler is claimed first, with a statement of its
 * own, and may do anything before its first phase.
 *
 * It knows no HTTP framework: adapters (the tRPC middleware, the webhook handlers) turn its result
 * and its errors into their own responses, each with one call to it.
 */
import { randomUUID } from 'node:crypto';
import { canonicalJson, requestFingerprint } from './fingerprint';
import { KeyReusedError, LeaseLostError, RequestInProgressError } from './errors';
import { parseIdempotencyKey } from './key';
import type { Acquisition, ClaimOutcome, ClaimRequest, ClosingWrite, IdempotencyStore, KeyRef, StoredResponse } from './store';

export interface IdempotencyOptions {
  /**
   * How long an owner may work before others presume it dead. It must outlast the slowest request
   * (a gateway call times out after 5 s by default, plus a few short transactions), or a live
   * request would be taken over; 30 s keeps the wait after a real crash short.
   */
  leaseMs: number;
  /** How long a completed answer is kept for replay (Stripe keeps 24 h). */
  ttlMs: number;
  /**
   * How long a duplicate waits on the row of a claim that has not committed yet (see
   * ClaimRequest.waitMs). A one-phase request commits within milliseconds, so a duplicate arriving
   * meanwhile gets its answer replayed; one second is the most a client should be held before it is
   * told 409 + Retry-After.
   */
  claimWaitMs?: number;
  /**
   * How many completed answers this process keeps for replay without asking the store (0: none).
   * A completed answer never changes until its record expires, so a cached one is the stored one;
   * entries are dropped before the record's own expiry. Default 10,000 (a few MB).
   */
  replayCacheSize?: number;
  /** Told of every outcome, e.g. to count them for metrics. */
  observe?: (event: GuardEvent) => void;
}

const DEFAULT_CLAIM_WAIT_MS = 1000;

export const DEFAULT_IDEMPOTENCY_OPTIONS: IdempotencyOptions = {
  leaseMs: 30_000,
  ttlMs: 24 * 60 * 60 * 1000,
  claimWaitMs: DEFAULT_CLAIM_WAIT_MS,
};
const DEFAULT_REPLAY_CACHE_SIZE = 10_000;

export type GuardOutcome =
  | 'claimed'
  | 'lease_taken_over'
  | 'released_taken_over'
  | 'expired_taken_over'
  | 'replayed'
  | 'in_progress'
  | 'mismatch'
  | 'completed'
  | 'released'
  | 'lease_lost';

export interface GuardEvent {
  outcome: GuardOutcome;
  /** On the claim's outcome (the first event of a request): how long the claim took. */
  claimMs?: number;
}

export interface IdempotentRequest {
  /** Who may see the answer: `customer:{id}` or `webhook:{gateway}`. */
  scope: string;
  /** The raw Idempotency-Key as received (validated here). */
  key: string | null | undefined;
  /** The procedure or route; part of the fingerprint, so one key cannot serve two endpoints. */
  path: string;
  /** The parsed input; canonicalised, so key order and whitespace never matter. */
  input: unknown;
  /**
   * Called once this request owns the key, before any of the handler's work (inside the first phase's
   * transaction when the claim rides in it). It may throw to abandon the request: the key is given
   * up. The failure drills pause or fail requests here.
   */
  afterClaim?: () => Promise<void>;
}

/**
 * A handler in phases, whose first atomic phase carries the claim. `firstPhase` is all that runs
 * before the key is owned, so a duplicate runs nothing; it runs again only for a key taken over at
 * `started` (its previous run never committed).
 */
export interface PhasedHandler<Tx, R extends StoredResponse = StoredResponse> {
  firstPhase: (tx: Tx, key: OwnedKey<Tx>) => Promise<PhaseResult<R>>;
  /**
   * Everything after the first phase, outside its transaction: given its committed result, or
   * `undefined` when this request took the key over past the first phase (resume from
   * `key.recoveryPoint`). Without it the first phase must respond.
   */
  then?: (key: OwnedKey<Tx>, first: PhaseResult<R> | undefined) => Promise<R | void>;
}

export type IdempotentHandler<Tx> = ((key: OwnedKey<Tx>) => Promise<StoredResponse | void>) | PhasedHandler<Tx>;

export interface IdempotentResult extends StoredResponse {
  /** True when this answer is the stored one, replayed without running the handler. */
  replayed: boolean;
}

/** A phase's final answer: the response it stores, in the same transaction as its effects. */
export interface Responded<R extends StoredResponse = StoredResponse> {
  kind: 'response';
  response: R;
}

/** What an atomic phase decides, written in the same transaction as its business effects. */
export type PhaseResult<R extends StoredResponse = StoredResponse> =
  { kind: 'recovery_point'; name: string } | Responded<R> | { kind: 'none' };

export const recoveryPoint = (name: string): { kind: 'recovery_point'; name: string } => ({ kind: 'recovery_point', name });

/**
 * The final answer, typed by its status and body. The body is stored as canonical JSON, so the first
 * answer and every replay are byte for byte the same (a Date becomes its ISO string, as on the wire).
 */
export const respond = <B, S extends number>(status: S, body: B): Responded<StoredResponse<B, S>> => ({
  kind: 'response',
  response: { status, body: canonicalise(body) as B },
});

/** The recovery point of a key on which nothing durable has happened yet. */
export const STARTED = 'started';

/** JSON round trip with sorted keys: the first answer and every replay are byte-for-byte equal. */
function canonicalise(body: unknown): unknown {
  return body === undefined ? null : JSON.parse(canonicalJson(body));
}

/** The handler's grip on the key it owns for the duration of one request. */
export class OwnedKey<Tx> {
  #recoveryPoint: string;
  #completed: StoredResponse | undefined;

  constructor(
    private readonly store: IdempotencyStore<Tx>,
    /** @internal the record and this request's fencing token */
    readonly ref: KeyRef,
    recoveryPoint: string,
    /** How this request came to own the key; anything but `new` means it resumes someone's work. */
    readonly acquisition: Acquisition,
  ) {
    this.#recoveryPoint = recoveryPoint;
  }

  get id(): string {
    return this.ref.id;
  }

  /** Where a previous owner got to; `started` for a fresh key. */
  get recoveryPoint(): string {
    return this.#recoveryPoint;
  }

  /** The response committed by this request, once one has been. */
  get completed(): StoredResponse | undefined {
    return this.#completed;
  }

  /**
   * Runs `fn` in one transaction and records what it returns — a recovery point or the final
   * response — in that same transaction, fenced by the lease token: if this request lost the key to a
   * takeover, the whole transaction rolls back and nothing it did is kept.
   */
  async atomicPhase<R extends PhaseResult>(fn: (tx: Tx) => Promise<R>): Promise<R> {
    return this.#committed(await this.store.atomicPhase(this.ref, fn, closingWriteOf));
  }

  /** The first phase with the claim in its transaction (the engine's, for a PhasedHandler). */
  async claimingPhase<R extends PhaseResult>(request: ClaimRequest, fn: (tx: Tx) => Promise<R>, afterClaim?: () => Promise<void>) {
    const outcome = await this.store.claimingPhase!({ ...request, id: this.ref.id }, fn, closingWriteOf, afterClaim);
    if (outcome.kind === 'owned') this.#committed(outcome.value);
    return outcome;
  }

  /** Only after the commit is the new state true. */
  #committed<R extends PhaseResult>(result: R): R {
    if (result.kind === 'recovery_point') this.#recoveryPoint = result.name;
    if (result.kind === 'response') this.#completed = result.response;
    return result;
  }
}

function closingWriteOf(phase: PhaseResult): ClosingWrite | undefined {
  return phase.kind === 'recovery_point'
    ? { recoveryPoint: phase.name }
    : phase.kind === 'response'
      ? { response: phase.response }
      : undefined;
}

/**
 * Completed answers of one store, kept in this process: a replay of a warm key costs no statement.
 * Safe because a completed record is immutable until it expires (the store never changes it; only an
 * expired one is taken over or deleted), and every entry is dropped a margin before that expiry, on
 * this process's monotonic clock, counted from before the store was asked. Bounded: the oldest entry
 * goes first (a Map iterates in insertion order).
 */
class ReplayCache {
  readonly #entries = new Map<string, { path: string; fingerprint: string; response: StoredResponse; expiresAt: number }>();
  constructor(readonly size: number) {}

  get(scope: string, key: string) {
    if (this.size <= 0) return undefined;
    const id = `${scope}\u0000${key}`;
    const entry = this.#entries.get(id);
    if (entry && entry.expiresAt <= performance.now()) {
      this.#entries.delete(id);
      return undefined;
    }
    return entry;
  }

  set(
    scope: string,
    key: string,
    entry: { path: string; fingerprint: string; response: StoredResponse },
    startedAt: number,
    liveMs: number,
  ) {
    // A second less than the record lives: the clocks of this process and the database never meet.
    const expiresAt = startedAt + liveMs - 1000;
    if (this.size <= 0 || expiresAt <= performance.now()) return;
    const id = `${scope}\u0000${key}`;
    this.#entries.delete(id);
    this.#entries.set(id, { ...entry, expiresAt });
    if (this.#entries.size > this.size) this.#entries.delete(this.#entries.keys().next().value!);
  }
}

const replayCaches = new WeakMap<object, ReplayCache>();

const NO_REPLAY_CACHE = new ReplayCache(0);

/** The store's cache in this process; a call that asks for none neither reads nor fills it. */
function replayCacheOf(store: object, size: number): ReplayCache {
  if (size <= 0) return NO_REPLAY_CACHE;
  let cache = replayCaches.get(store);
  if (!cache) replayCaches.set(store, (cache = new ReplayCache(size)));
  return cache;
}

/**
 * Runs `handler` at most once per (scope, key) to completion, replays its stored answer to every
 * retry, and lets exactly one retry resume it after a crash. The handler either completes the key in
 * an atomic phase or returns a response for side-effect-free work; if it throws, the key is released
 * (kept at its recovery point) so a retry can run — safe because every gateway call is itself
 * idempotent by a stable identifier.
 *
 * A PhasedHandler on a store with `claimingPhase` is claimed inside its first phase's transaction; a
 * duplicate of a request still in that transaction waits on its row (`claimWaitMs`) and is then
 * answered from what committed. A function handler, or a store without it, is claimed first.
 */
export async function executeIdempotent<Tx>(
  store: IdempotencyStore<Tx>,
  request: IdempotentRequest,
  handler: IdempotentHandler<Tx>,
  options: IdempotencyOptions = DEFAULT_IDEMPOTENCY_OPTIONS,
): Promise<IdempotentResult> {
  const observe = options.observe ?? (() => {});
  const key = parseIdempotencyKey(request.key);
  const fingerprint = requestFingerprint(request.path, request.input);
  const cache = replayCacheOf(store, options.replayCacheSize ?? DEFAULT_REPLAY_CACHE_SIZE);
  const claimStarted = performance.now();

  const cached = cache.get(request.scope, key);
  if (cached) {
    if (cached.fingerprint !== fingerprint || cached.path !== request.path) {
      observe({ outcome: 'mismatch', claimMs: performance.now() - claimStarted });
      throw new KeyReusedError();
    }
    observe({ outcome: 'replayed', claimMs: performance.now() - claimStarted });
    return { ...cached.response, body: canonicalise(cached.response.body), replayed: true };
  }

  const claimRequest: ClaimRequest = {
    scope: request.scope,
    key,
    path: request.path,
    fingerprint,
    leaseMs: options.leaseMs,
    ttlMs: options.ttlMs,
    leaseToken: randomUUID(),
    waitMs: options.claimWaitMs ?? DEFAULT_CLAIM_WAIT_MS,
  };
  const remember = (response: StoredResponse, liveMs: number) =>
    cache.set(request.scope, key, { path: request.path, fingerprint, response }, claimStarted, liveMs);
  /** The answer to a request that does not own the key. */
  const unowned = (outcome: Exclude<ClaimOutcome, { kind: 'owned' }>): IdempotentResult => {
    const claimMs = performance.now() - claimStarted;
    switch (outcome.kind) {
      case 'completed':
        observe({ outcome: 'replayed', claimMs });
        if (outcome.expiresInMs !== undefined) remember(outcome.response, outcome.expiresInMs);
        return { ...outcome.response, body: canonicalise(outcome.response.body), replayed: true };
      case 'mismatch':
        observe({ outcome: 'mismatch', claimMs });
        throw new KeyReusedError();
      case 'in_progress':
        observe({ outcome: 'in_progress', claimMs });
        throw new RequestInProgressError(Math.max(1, Math.ceil(outcome.retryAfterMs / 1000)));
      default: {
        const unreachable: never = outcome;
        throw new Error(`unknown claim outcome ${JSON.stringify(unreachable)}`);
      }
    }
  };

  const phased = typeof handler === 'function' ? undefined : handler;
  let owned: OwnedKey<Tx>;
  /** The handler's work once the key is owned (its first phase already done when `first` is set). */
  let work: (key: OwnedKey<Tx>) => Promise<StoredResponse | void>;

  const claimedInPhase = phased && store.claimingPhase ? await claimInFirstPhase(phased) : undefined;
  if (claimedInPhase?.kind === 'found') return unowned(claimedInPhase.outcome);
  if (claimedInPhase?.kind === 'owned') {
    owned = claimedInPhase.key;
    work = (k) => rest(phased!, k, claimedInPhase.first);
  } else {
    const claim = await store.claim(claimRequest);
    if (claim.kind !== 'owned') return unowned(claim);
    observeAcquisition(claim.acquisition);
    owned = new OwnedKey(store, { id: claim.id, leaseToken: claimRequest.leaseToken }, claim.recoveryPoint, claim.acquisition);
    work = phased
      ? async (k) => {
          const first = k.recoveryPoint === STARTED ? await k.atomicPhase((tx) => phased.firstPhase(tx, k)) : undefined;
          return rest(phased, k, first);
        }
      : (handler as (key: OwnedKey<Tx>) => Promise<StoredResponse | void>);
    const afterClaim = request.afterClaim;
    if (afterClaim) {
      const inner = work;
      work = async (k) => {
        await afterClaim();
        return inner(k);
      };
    }
  }

  async function claimInFirstPhase(phasedHandler: PhasedHandler<Tx>) {
    const key = new OwnedKey(store, { id: randomUUID(), leaseToken: claimRequest.leaseToken }, STARTED, 'new');
    let claimed = false;
    const afterClaim = async () => {
      claimed = true;
      observeAcquisition('new');
      await request.afterClaim?.();
    };
    let outcome;
    try {
      outcome = await key.claimingPhase(claimRequest, (tx) => phasedHandler.firstPhase(tx, key), afterClaim);
    } catch (error) {
      // Nothing was kept (the claim rolled back with the phase): there is nothing to release.
      if (claimed) observe({ outcome: 'released' });
      throw error;
    }
    if (outcome.kind === 'busy') return undefined;
    if (outcome.kind === 'found') return outcome;
    return { kind: 'owned' as const, key, first: outcome.value };
  }

  function observeAcquisition(acquisition: Acquisition) {
    observe({
      outcome:
        acquisition === 'new'
          ? 'claimed'
          : acquisition === 'stale_lease'
            ? 'lease_taken_over'
            : acquisition === 'released'
              ? 'released_taken_over'
              : 'expired_taken_over',
      claimMs: performance.now() - claimStarted,
    });
  }

  let returned: StoredResponse | void;
  try {
    returned = owned.completed ?? (await work(owned));
  } catch (error) {
    // The handler committed its final answer and then threw it (an adapter's way of sending a
    // stored error): that answer stands.
    if (owned.completed) {
      observe({ outcome: 'completed' });
      remember(owned.completed, options.ttlMs);
      return { ...owned.completed, replayed: false };
    }
    if (error instanceof LeaseLostError) {
      // Another request took the key over while this one was presumed dead; it owns the outcome.
      observe({ outcome: 'lease_lost' });
      throw new RequestInProgressError(1);
    }
    observe({ outcome: 'released' });
    await store.release(owned.ref, { forget: owned.recoveryPoint === STARTED }).catch(() => {
      // If even the release fails (database gone), the lease simply runs out and a retry takes
      // the key over: the original error is the one worth reporting.
    });
    throw error;
  }

  if (owned.completed) {
    if (returned && returned !== owned.completed) {
      // The committed answer is the one every retry will replay, so it is the one that goes back now.
      console.error(
        `[idempotency] ${request.path}: the handler returned a response other than the one its phase committed; the committed one is sent`,
      );
    }
    observe({ outcome: 'completed' });
    remember(owned.completed, options.ttlMs);
    return { ...owned.completed, replayed: false };
  }
  // Side-effect-free work (or work whose effects are themselves idempotent) may return its answer
  // instead of completing inside a phase; it is stored on its own.
  const response = respond(returned?.status ?? 200, returned?.body ?? null);
  await owned.atomicPhase(async () => response);
  observe({ outcome: 'completed' });
  remember(response.response, options.ttlMs);
  return { ...response.response, replayed: false };
}

/** A phased handler's work after its first phase (`first` undefined: resumed past it). */
async function rest<Tx>(handler: PhasedHandler<Tx>, key: OwnedKey<Tx>, first: PhaseResult | undefined): Promise<StoredResponse | void> {
  if (handler.then) return handler.then(key, first);
  if (first?.kind === 'response') return first.response;
  throw new Error('a phased handler without `then` must respond in its first phase');
}

/** Deletes expired records in bounded batches so no single DELETE holds locks for long. */
export async function deleteExpiredKeys<Tx>(
  store: IdempotencyStore<Tx>,
  options: { batchSize?: number; maxBatches?: number } = {},
): Promise<number> {
  // 1,000 rows per statement keeps each DELETE to a few milliseconds; the cap bounds one run.
  const batchSize = options.batchSize ?? 1000;
  const maxBatches = options.maxBatches ?? 100;
  let total = 0;
  for (let batch = 0; batch < maxBatches; batch++) {
    const deleted = await store.deleteExpired(batchSize);
    total += deleted;
    if (deleted < batchSize) break;
  }
  return total;
}
