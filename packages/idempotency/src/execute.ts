/**
 * The idempotency engine: one call wraps one request, in one of two shapes.
 *
 *   // One phase: the work is one database transaction (create an order, process a notification).
 *   executeIdempotent(store, request, { onePhase: async (tx) => respond(201, await createOrder(tx)) })
 *
 *   // Several phases: a gateway call between transactions (pay). Claim, then phases with recovery points.
 *   executeIdempotent(store, request, async (key) => {
 *     if (key.recoveryPoint === 'started') await key.atomicPhase(async (tx) => { …; return recoveryPoint('charge_started') });
 *     … call the gateway (outside any transaction) …
 *     return (await key.atomicPhase(async (tx) => { …; return respond(201, body) })).response;
 *   })
 *
 * The engine decides (./decide.ts), the store stores (./store.ts). It knows no HTTP framework: adapters
 * (the tRPC middleware, the webhook handlers, ./fetch.ts) turn its result and errors into responses.
 */
import { randomUUID } from 'node:crypto';
import { decide, type Decision } from './decide.js';
import { KeyReusedError, LeaseLostError, RequestInProgressError } from './errors.js';
import { canonicalCopy, requestFingerprint } from './fingerprint.js';
import { parseIdempotencyKey } from './key.js';
import { replayCacheOf, type CachedAnswer, type ReplayCache } from './replay-cache.js';
import type { Claim, ClosingWrite, IdempotencyStore, KeyRef, StoredResponse } from './store.js';

export interface IdempotencyOptions {
  /** How long an owner may work before others presume it dead: past the slowest request (a 5 s gateway timeout), short after a crash. */
  leaseMs: number;
  /** How long a completed answer is kept for replay (Stripe keeps 24 h). */
  ttlMs: number;
  /** How long a duplicate waits on a request's uncommitted record (then 409 + Retry-After); a one-phase request commits in ms. */
  claimWaitMs?: number;
  /** Completed answers this process keeps for replay without asking the store (./replay-cache.ts); 0: none. */
  replayCacheSize?: number;
  /** Told of every outcome, e.g. to count them for metrics. */
  observe?: (event: GuardEvent) => void;
  /**
   * A request without an Idempotency-Key: `refuse` it (400, the default), or — while clients are
   * being taught to send keys — `run_unguarded`: the work runs as it would with no guard at all (no
   * record, no replay, no at-most-once), and `observe` is told `unguarded` with the path, to log and
   * count. A key that is present but malformed is refused either way.
   */
  missingKey?: 'refuse' | 'run_unguarded';
}

export const DEFAULT_IDEMPOTENCY_OPTIONS: IdempotencyOptions = { leaseMs: 30_000, ttlMs: 24 * 60 * 60 * 1000, claimWaitMs: 1000 };
/** 10,000 answers: a few MB. */
const DEFAULT_REPLAY_CACHE_SIZE = 10_000;
/** How often a claim looks again at a record that changed under it before it answers 409. */
const MAX_CLAIM_ROUNDS = 5;
/** A request that lost a race to one still running: ask again in a second. */
const BUSY: Decision = { kind: 'in_progress', retryAfterMs: 1000 };

export type GuardOutcome =
  | 'claimed'
  | 'lease_taken_over'
  | 'released_taken_over'
  | 'replayed'
  | 'in_progress'
  | 'mismatch'
  | 'completed'
  | 'released'
  | 'lease_lost'
  | 'unguarded';

export interface GuardEvent {
  outcome: GuardOutcome;
  /** The procedure or route of the request. */
  path: string;
  /** On the first event of a request: how long the guard took to decide. */
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
  /** Called once this request owns the key, before the work (the drills pause or fail requests here); throwing gives the key up. */
  afterClaim?: () => Promise<void>;
}

/** Work that is one database transaction: it responds, and the answer commits with its effects. */
export interface OnePhaseHandler<Tx, R extends StoredResponse = StoredResponse> {
  onePhase: (tx: Tx) => Promise<Responded<R>>;
}

/** Work in several phases, from `key.recoveryPoint`: returns what its last phase committed (or, side-effect-free, one to store now). */
export type PhasesHandler<Tx> = (key: OwnedKey<Tx>) => Promise<StoredResponse | void>;

export type IdempotentHandler<Tx> = OnePhaseHandler<Tx> | PhasesHandler<Tx>;

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

/** The final answer, its body in canonical form (./fingerprint.ts), so the first answer and every replay are byte for byte the same. */
export const respond = <B, S extends number>(status: S, body: B): Responded<StoredResponse<B, S>> => ({
  kind: 'response',
  response: { status, body: canonicalCopy(body) as B },
});

/** The recovery point of a key on which nothing durable has happened yet. */
export const STARTED = 'started';

/** How the owner came by the key: fresh, or taken over from one that can no longer finish it. */
export type Acquisition = 'new' | 'stale_lease' | 'released';

/** The handler's grip on the key it owns for the duration of one request. */
export interface OwnedKey<Tx> {
  /** The record's id: what business rows that belong to this request refer to. */
  readonly id: string;
  /** How this request came to own the key; anything but `new` means it resumes someone's work. */
  readonly acquisition: Acquisition;
  /** Where a previous owner got to (`started` for a fresh key), then each phase this request commits. */
  readonly recoveryPoint: string;
  /** The response committed by this request, once one has been. */
  readonly completed: StoredResponse | undefined;
  /** Runs `fn` in one transaction that records what it returns, fenced by the lease: if the key was taken over, all rolls back. */
  atomicPhase<R extends PhaseResult>(fn: (tx: Tx) => Promise<R>): Promise<R>;
}

/**
 * `recorded: false` (rollout mode, a request without a key): there is no record to write to, and each
 * phase is a plain transaction of the store.
 */
function ownedKey<Tx>(
  store: IdempotencyStore<Tx>,
  ref: KeyRef,
  id: string,
  recoveryPoint: string,
  acquisition: Acquisition,
  recorded = true,
) {
  const closingWrite = (phase: PhaseResult): ClosingWrite | undefined =>
    !recorded
      ? undefined
      : phase.kind === 'recovery_point'
        ? { recoveryPoint: phase.name }
        : phase.kind === 'response'
          ? { response: phase.response }
          : undefined;
  const key = {
    id,
    acquisition,
    ref,
    recoveryPoint,
    completed: undefined as StoredResponse | undefined,
    async atomicPhase<R extends PhaseResult>(fn: (tx: Tx) => Promise<R>): Promise<R> {
      const result = await store.atomicPhase(ref, fn, closingWrite);
      // Only after the commit is the new state true.
      if (result.kind === 'recovery_point') key.recoveryPoint = result.name;
      if (result.kind === 'response') key.completed = result.response;
      return result;
    },
  };
  return key satisfies OwnedKey<Tx>;
}

/**
 * Runs `handler` at most once per (scope, key) to completion and replays its stored answer to every
 * retry. A phases handler that throws releases the key at its recovery point, so a retry can run —
 * safe because every gateway call is itself idempotent by a stable identifier.
 */
export async function executeIdempotent<Tx>(
  store: IdempotencyStore<Tx>,
  request: IdempotentRequest,
  handler: IdempotentHandler<Tx>,
  options: IdempotencyOptions = DEFAULT_IDEMPOTENCY_OPTIONS,
): Promise<IdempotentResult> {
  if (request.key == null && options.missingKey === 'run_unguarded') return runUnguarded(store, request, handler, options);
  const call = new GuardedCall(store, request, options);
  const cached = call.cache.get(request.scope, call.key);
  if (cached)
    return call.answer(call.sameAs(cached) ? { kind: 'replay', response: cached.response, expiresInMs: 0 } : { kind: 'mismatch' });
  call.fingerprint ||= requestFingerprint(request.path, request.input);
  return typeof handler === 'function' ? runPhases(call, handler) : runOnePhase(call, handler.onePhase);
}

/** Reads the key; if it is free, runs the work in a transaction that inserts the key with its answer. */
async function runOnePhase<Tx>(call: GuardedCall<Tx>, work: OnePhaseHandler<Tx>['onePhase']): Promise<IdempotentResult> {
  let answer: StoredResponse | undefined;
  try {
    const end = await call.store.onePhase({ scope: call.request.scope, key: call.key, waitMs: call.waitMs }, (read) => {
      const decision = decide(read.record, call, read.now);
      if (decision.kind !== 'claim') return { kind: 'answer', value: decision };
      return {
        kind: 'run',
        work: async (tx) => {
          call.claimed = true;
          call.observe('claimed');
          await call.request.afterClaim?.();
          answer = (await work(tx)).response;
          return { ...call.record(), response: answer };
        },
      };
    });
    if (end.kind === 'committed') return call.completed(answer!);
    if (end.kind === 'answered') return call.answer(end.value);
    return call.answer(end.kind === 'conflict' ? await call.reread() : BUSY);
  } catch (error) {
    if (!call.claimed) throw error;
    call.observe('released');
    // A duplicate that committed meanwhile answers for this request too (its failure may be the
    // duplicate's doing, e.g. the last unit of stock), and so does this request's own commit if only
    // its acknowledgement was lost.
    const found = await call.reread().catch(() => undefined);
    if (found?.kind === 'replay' || found?.kind === 'mismatch') return call.answer(found);
    throw error;
  }
}

/** Claims the key, runs the handler with it, and releases it if the handler throws. */
async function runPhases<Tx>(call: GuardedCall<Tx>, handler: PhasesHandler<Tx>): Promise<IdempotentResult> {
  const owned = await acquire(call);
  if (!('atomicPhase' in owned)) return owned;
  let returned: StoredResponse | void;
  try {
    await call.request.afterClaim?.();
    returned = await handler(owned);
  } catch (error) {
    // A handler that committed its answer and then threw it (an adapter's way of sending a stored
    // error): that answer stands.
    if (owned.completed) return call.completed(owned.completed);
    if (error instanceof LeaseLostError) {
      // Another request took the key over while this one was presumed dead; it owns the outcome.
      call.observe('lease_lost');
      throw new RequestInProgressError(1);
    }
    call.observe('released');
    // If even the release fails (database gone), the lease runs out and a retry takes the key over.
    await call.store.release(owned.ref, { forget: owned.recoveryPoint === STARTED }).catch(() => {});
    throw error;
  }
  // The committed answer is the one every retry replays, so it is the one that goes back now. Work
  // that completed in no phase (side-effect-free) has what it returned stored on its own.
  const { response } = owned.completed
    ? { response: owned.completed }
    : await owned.atomicPhase(async () => respond(returned?.status ?? 200, returned?.body ?? null));
  return call.completed(response);
}

/** Rollout (`missingKey: 'run_unguarded'`): the work in plain transactions, as without the guard. */
async function runUnguarded<Tx>(
  store: IdempotencyStore<Tx>,
  request: IdempotentRequest,
  handler: IdempotentHandler<Tx>,
  options: IdempotencyOptions,
): Promise<IdempotentResult> {
  options.observe?.({ outcome: 'unguarded', path: request.path });
  const key = ownedKey(store, { scope: request.scope, key: '', leaseToken: '' }, randomUUID(), STARTED, 'new', false);
  const work = typeof handler === 'function' ? handler : async () => (await key.atomicPhase(handler.onePhase)).response;
  const returned = await work(key);
  return { ...(key.completed ?? { status: returned?.status ?? 200, body: canonicalCopy(returned?.body ?? null) }), replayed: false };
}

/** Claims the key for a phases handler, or says why this request does not get it. */
async function acquire<Tx>(call: GuardedCall<Tx>): Promise<ReturnType<typeof ownedKey<Tx>> | IdempotentResult> {
  const claim: Claim = { ...call.record(), leaseToken: randomUUID(), leaseMs: call.options.leaseMs, waitMs: call.waitMs };
  for (let round = 0; round < MAX_CLAIM_ROUNDS; round++) {
    const claimed = await call.store.claim(claim);
    if (claimed.kind === 'inserted') return call.own(claim, claimed.id, STARTED, 'new');
    if (claimed.kind === 'busy') break;
    const decision = decide(claimed.read.record, call, claimed.read.now);
    if (decision.kind === 'claim') continue; // gone, or past its life, since the claim: claim afresh
    if (decision.kind !== 'take_over') return call.answer(decision);
    const taken = await call.store.takeOver(claim, decision.observedToken);
    if (taken) return call.own(claim, taken.id, taken.recoveryPoint, decision.from);
  }
  // The record kept changing under us, or stayed uncommitted: another request is clearly active on it.
  return call.answer(BUSY);
}

/** One request's dealings with the guard: its key, its fingerprint, and how each answer is given. */
class GuardedCall<Tx> {
  readonly key: string;
  /** Taken before the store is asked; a warm replay of the same text needs none. */
  fingerprint = '';
  readonly path: string;
  readonly cache: ReplayCache;
  readonly waitMs: number;
  /** Whether this request came to own the key (so a failure now gives it up). */
  claimed = false;
  readonly #startedAt = performance.now();
  #observed = false;
  #inputText: string | undefined;

  constructor(
    readonly store: IdempotencyStore<Tx>,
    readonly request: IdempotentRequest,
    readonly options: IdempotencyOptions,
  ) {
    this.key = parseIdempotencyKey(request.key);
    this.path = request.path;
    this.cache = replayCacheOf(store, options.replayCacheSize ?? DEFAULT_REPLAY_CACHE_SIZE);
    this.waitMs = options.claimWaitMs ?? DEFAULT_IDEMPOTENCY_OPTIONS.claimWaitMs!;
  }

  record() {
    return { scope: this.request.scope, key: this.key, path: this.path, fingerprint: this.fingerprint, ttlMs: this.options.ttlMs };
  }

  /**
   * Whether a cached answer is this request's: the input's JSON text as the request that stored it
   * sent it settles it (equal texts mean equal canonical forms); a differently ordered text is hashed.
   */
  sameAs(cached: CachedAnswer): boolean {
    if (cached.path !== this.path) return false;
    if (cached.inputText === this.#text()) return true;
    this.fingerprint ||= requestFingerprint(this.path, this.request.input);
    return cached.fingerprint === this.fingerprint;
  }

  own(claim: Claim, id: string, recoveryPoint: string, acquisition: Acquisition) {
    const outcomes = { new: 'claimed', stale_lease: 'lease_taken_over', released: 'released_taken_over' } as const;
    this.claimed = true;
    this.observe(outcomes[acquisition]);
    return ownedKey(this.store, { scope: claim.scope, key: claim.key, leaseToken: claim.leaseToken }, id, recoveryPoint, acquisition);
  }

  /** What the store holds now, decided: after a lost race, or to learn whether a lost COMMIT landed. */
  async reread(): Promise<Decision> {
    const read = await this.store.read({ scope: this.request.scope, key: this.key });
    return decide(read.record, this, read.now);
  }

  /** The answer of a request that does not run the work: a replay, or the guard's refusal. */
  answer(decision: Decision): IdempotentResult {
    switch (decision.kind) {
      case 'replay':
        this.observe('replayed');
        if (decision.expiresInMs === 0) return { ...decision.response, replayed: true }; // from the cache: canonical and frozen
        return { ...this.#remember(canonicalResponse(decision.response), decision.expiresInMs), replayed: true };
      case 'mismatch':
        this.observe('mismatch');
        throw new KeyReusedError();
      case 'in_progress':
        this.observe('in_progress');
        throw new RequestInProgressError(Math.max(1, Math.ceil(decision.retryAfterMs / 1000)));
      case 'claim':
      case 'take_over':
        // Only after a lost race: the winner's record is gone or idle again by now. Ask again shortly.
        this.observe('in_progress');
        throw new RequestInProgressError(1);
    }
  }

  completed(response: StoredResponse): IdempotentResult {
    this.observe('completed');
    return { ...this.#remember(response, this.options.ttlMs), replayed: false };
  }

  observe(outcome: GuardOutcome): void {
    if (!this.options.observe) return;
    const first = !this.#observed;
    this.#observed = true;
    this.options.observe(first ? { outcome, path: this.path, claimMs: performance.now() - this.#startedAt } : { outcome, path: this.path });
  }

  /** Keeps an answer for warm replays; frozen, as every caller now shares it. */
  #remember(response: StoredResponse, liveMs: number): StoredResponse {
    if (this.cache.size <= 0) return response;
    const answer = { path: this.path, fingerprint: this.fingerprint, inputText: this.#text(), response: deepFreeze(response) };
    this.cache.set(this.request.scope, this.key, answer, this.#startedAt, liveMs);
    return response;
  }

  #text(): string | undefined {
    return (this.#inputText ??= JSON.stringify(this.request.input));
  }
}

/** A stored answer in canonical form: a database may hand its JSON back with keys reordered (JSONB does). */
const canonicalResponse = (response: StoredResponse): StoredResponse => ({ ...response, body: canonicalCopy(response.body) });

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const member of Object.values(value)) deepFreeze(member);
    Object.freeze(value);
  }
  return value;
}

/** Deletes expired records in bounded batches so no single DELETE holds locks for long. */
export async function deleteExpiredKeys<Tx>(store: IdempotencyStore<Tx>, options: { batchSize?: number; maxBatches?: number } = {}) {
  // 1,000 rows per statement keeps each DELETE to a few milliseconds; the cap bounds one run.
  const { batchSize = 1000, maxBatches = 100 } = options;
  let total = 0;
  for (let batch = 0; batch < maxBatches; batch++) {
    const deleted = await store.deleteExpired(batchSize);
    total += deleted;
    if (deleted < batchSize) break;
  }
  return total;
}
