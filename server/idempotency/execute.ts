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
 * A one-phase request needs no claim row, lease or fence: its transaction looks the key up (sent with
 * the BEGIN), runs the work, and inserts the key with its answer as the last statement (sent with the
 * COMMIT). A duplicate blocks on that insert and, once the first commits, rolls its own work back and
 * replays the answer. A crash simply rolls back.
 *
 * The engine decides (./decide.ts), the store stores (./store.ts). It knows no HTTP framework:
 * adapters (the tRPC middleware, the webhook handlers, ./fetch.ts) turn its result and its errors into
 * their own responses, each with one call to it.
 */
import { randomUUID } from 'node:crypto';
import { decide, type Decision } from './decide';
import { KeyReusedError, LeaseLostError, RequestInProgressError } from './errors';
import { canonicalCopy, requestFingerprint } from './fingerprint';
import { parseIdempotencyKey } from './key';
import { replayCacheOf, type ReplayCache } from './replay-cache';
import type { Claim, ClosingWrite, IdempotencyStore, KeyRef, OnePhaseEnd, StoredResponse } from './store';

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
   * How long a duplicate waits on the uncommitted record of a request still in its transaction. A
   * one-phase request commits within milliseconds, so a duplicate arriving meanwhile gets its answer
   * replayed; one second is the most a client should be held before it is told 409 + Retry-After.
   */
  claimWaitMs?: number;
  /**
   * How many completed answers this process keeps for replay without asking the store (0: none).
   * Default 10,000 (a few MB). See ./replay-cache.ts for why this is safe.
   */
  replayCacheSize?: number;
  /** Told of every outcome, e.g. to count them for metrics. */
  observe?: (event: GuardEvent) => void;
}

export const DEFAULT_IDEMPOTENCY_OPTIONS: IdempotencyOptions = { leaseMs: 30_000, ttlMs: 24 * 60 * 60 * 1000, claimWaitMs: 1000 };
const DEFAULT_REPLAY_CACHE_SIZE = 10_000;
/** How often a claim re-reads a record that changed under it before giving up with a 409. */
const MAX_CLAIM_ROUNDS = 5;

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
   * Called once this request owns the key, before any of the handler's work (inside the transaction
   * of a one-phase request). It may throw to abandon the request: the key is given up. The failure
   * drills pause or fail requests here.
   */
  afterClaim?: () => Promise<void>;
}

/** Work that is one database transaction: it responds, and the answer commits with its effects. */
export interface OnePhaseHandler<Tx, R extends StoredResponse = StoredResponse> {
  onePhase: (tx: Tx) => Promise<Responded<R>>;
}

/**
 * Work in several phases: runs with the key it owns, resumes from `key.recoveryPoint`, and returns
 * the response its last atomic phase committed (or one to store now, for side-effect-free work).
 */
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

/**
 * The final answer, typed by its status and body. The body is stored as canonical JSON, so the first
 * answer and every replay are byte for byte the same (a Date becomes its ISO string, as on the wire).
 */
export const respond = <B, S extends number>(status: S, body: B): Responded<StoredResponse<B, S>> => ({
  kind: 'response',
  response: { status, body: canonicalCopy(body) as B },
});

/** The recovery point of a key on which nothing durable has happened yet. */
export const STARTED = 'started';

/** How the owner came by the key: fresh, or taken over from one that can no longer finish it. */
export type Acquisition = 'new' | 'expired_record' | 'stale_lease' | 'released';

/** The handler's grip on the key it owns for the duration of one request. */
export class OwnedKey<Tx> {
  #recoveryPoint: string;
  #completed: StoredResponse | undefined;

  constructor(
    private readonly store: IdempotencyStore<Tx>,
    /** @internal the key and this request's fencing token */
    readonly ref: KeyRef,
    /** The record's id: what business rows that belong to this request refer to. */
    readonly id: string,
    recoveryPoint: string,
    /** How this request came to own the key; anything but `new` means it resumes someone's work. */
    readonly acquisition: Acquisition,
  ) {
    this.#recoveryPoint = recoveryPoint;
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
    const result = await this.store.atomicPhase(this.ref, fn, closingWriteOf);
    // Only after the commit is the new state true.
    if (result.kind === 'recovery_point') this.#recoveryPoint = result.name;
    if (result.kind === 'response') this.#completed = result.response;
    return result;
  }
}

function closingWriteOf(phase: PhaseResult): ClosingWrite | undefined {
  if (phase.kind === 'recovery_point') return { recoveryPoint: phase.name };
  return phase.kind === 'response' ? { response: phase.response } : undefined;
}

/**
 * Runs `handler` at most once per (scope, key) to completion and replays its stored answer to every
 * retry. A one-phase handler commits its answer with its effects or nothing at all. A phases handler
 * owns a leased key; if it throws, the key is released (kept at its recovery point) so a retry can
 * run — safe because every gateway call is itself idempotent by a stable identifier — and exactly
 * one retry resumes it after a crash.
 */
export async function executeIdempotent<Tx>(
  store: IdempotencyStore<Tx>,
  request: IdempotentRequest,
  handler: IdempotentHandler<Tx>,
  options: IdempotencyOptions = DEFAULT_IDEMPOTENCY_OPTIONS,
): Promise<IdempotentResult> {
  const call = new GuardedCall(store, request, options);
  const cached = call.cache.get(request.scope, call.key);
  if (cached) {
    const same = cached.fingerprint === call.fingerprint && cached.path === request.path;
    return call.answer(same ? { kind: 'replay', response: cached.response, expiresInMs: 0 } : { kind: 'mismatch' });
  }
  return typeof handler === 'function' ? runPhases(call, handler) : runOnePhase(call, handler.onePhase);
}

async function runOnePhase<Tx>(call: GuardedCall<Tx>, work: OnePhaseHandler<Tx>['onePhase']): Promise<IdempotentResult> {
  const { scope, path } = call.request;
  let ran = false;
  let answer: StoredResponse | undefined;
  let end: OnePhaseEnd<Decision>;
  try {
    end = await call.store.onePhase({ scope, key: call.key, waitMs: call.waitMs }, (read) => {
      const decision = decide(read.record, call, read.now);
      const expired = decision.kind === 'take_over' && decision.from === 'expired_record';
      if (decision.kind !== 'claim' && !expired) return { kind: 'answer', value: decision };
      return {
        kind: 'run',
        replaces: expired ? read.record : undefined,
        work: async (tx) => {
          call.acquired(expired ? 'expired_record' : 'new');
          ran = true;
          await call.request.afterClaim?.();
          answer = (await work(tx)).response;
          return { scope, key: call.key, path, fingerprint: call.fingerprint, ttlMs: call.options.ttlMs, response: answer };
        },
      };
    });
  } catch (error) {
    if (!ran) throw error;
    call.observe('released');
    // A duplicate that committed meanwhile answers for this request too (its failure may be the
    // duplicate's doing, e.g. the last unit of stock), and so does this request's own commit if only
    // its acknowledgement was lost.
    const found = await call.reread().catch(() => undefined);
    if (found?.kind === 'replay' || found?.kind === 'mismatch') return call.answer(found);
    throw error;
  }
  switch (end.kind) {
    case 'committed':
      return call.completed(answer!);
    case 'answered':
      return call.answer(end.value);
    case 'conflict':
      return call.answer(await call.reread());
    case 'busy':
      return call.answer({ kind: 'in_progress', retryAfterMs: 1000 });
  }
}

async function runPhases<Tx>(call: GuardedCall<Tx>, handler: PhasesHandler<Tx>): Promise<IdempotentResult> {
  const owned = await acquire(call);
  if (!(owned instanceof OwnedKey)) return owned;
  let returned: StoredResponse | void;
  try {
    await call.request.afterClaim?.();
    returned = await handler(owned);
  } catch (error) {
    // The handler committed its final answer and then threw it (an adapter's way of sending a
    // stored error): that answer stands.
    if (owned.completed) return call.completed(owned.completed);
    if (error instanceof LeaseLostError) {
      // Another request took the key over while this one was presumed dead; it owns the outcome.
      call.observe('lease_lost');
      throw new RequestInProgressError(1);
    }
    call.observe('released');
    await call.store.release(owned.ref, { forget: owned.recoveryPoint === STARTED }).catch(() => {
      // If even the release fails (database gone), the lease simply runs out and a retry takes the
      // key over: the original error is the one worth reporting.
    });
    throw error;
  }
  if (owned.completed) {
    if (returned && returned !== owned.completed) {
      // The committed answer is the one every retry will replay, so it is the one that goes back now.
      console.error(
        `[idempotency] ${call.request.path}: the handler returned a response other than the one it committed; that one is sent`,
      );
    }
    return call.completed(owned.completed);
  }
  // Side-effect-free work (or work whose effects are themselves idempotent) may return its answer
  // instead of completing inside a phase; it is stored on its own.
  const { response } = await owned.atomicPhase(async () => respond(returned?.status ?? 200, returned?.body ?? null));
  return call.completed(response);
}

/** Claims the key for a phases handler, or says why this request does not get it. */
async function acquire<Tx>(call: GuardedCall<Tx>): Promise<OwnedKey<Tx> | IdempotentResult> {
  const claim = call.claim();
  let found = await call.store.claim(claim);
  for (let round = 0; round < MAX_CLAIM_ROUNDS; round++) {
    if (found.kind === 'inserted') return call.own(claim, found.id, STARTED, 'new');
    if (found.kind === 'busy') return call.answer({ kind: 'in_progress', retryAfterMs: 1000 });
    const decision = decide(found.read.record, call, found.read.now);
    if (decision.kind === 'claim') {
      found = await call.store.claim(claim); // forgotten since it was read: claim afresh
      continue;
    }
    if (decision.kind !== 'take_over') return call.answer(decision);
    const taken = await call.store.takeOver(claim, decision.observedToken, decision.from === 'expired_record');
    if (taken) return call.own(claim, taken.id, taken.recoveryPoint, decision.from);
    found = { kind: 'exists', read: await call.store.read(claim) }; // someone else won it: look again
  }
  // The record kept changing under us: another request is clearly active on this key.
  return call.answer({ kind: 'in_progress', retryAfterMs: 1000 });
}

/** One request's dealings with the guard: its key, its fingerprint, and how each answer is given. */
class GuardedCall<Tx> {
  readonly key: string;
  readonly fingerprint: string;
  readonly path: string;
  readonly cache: ReplayCache;
  readonly waitMs: number;
  readonly #startedAt = performance.now();
  #claimObserved = false;

  constructor(
    readonly store: IdempotencyStore<Tx>,
    readonly request: IdempotentRequest,
    readonly options: IdempotencyOptions,
  ) {
    this.key = parseIdempotencyKey(request.key);
    this.path = request.path;
    this.fingerprint = requestFingerprint(request.path, request.input);
    this.cache = replayCacheOf(store, options.replayCacheSize ?? DEFAULT_REPLAY_CACHE_SIZE);
    this.waitMs = options.claimWaitMs ?? DEFAULT_IDEMPOTENCY_OPTIONS.claimWaitMs!;
  }

  /** A new owner's record: a fresh fencing token each time. */
  claim(): Claim {
    const { scope, path } = this.request;
    const { leaseMs, ttlMs } = this.options;
    return { scope, key: this.key, path, fingerprint: this.fingerprint, leaseToken: randomUUID(), leaseMs, ttlMs, waitMs: this.waitMs };
  }

  own(claim: Claim, id: string, recoveryPoint: string, acquisition: Acquisition): OwnedKey<Tx> {
    this.acquired(acquisition);
    return new OwnedKey(this.store, { scope: claim.scope, key: claim.key, leaseToken: claim.leaseToken }, id, recoveryPoint, acquisition);
  }

  acquired(acquisition: Acquisition): void {
    const outcomes = {
      new: 'claimed',
      stale_lease: 'lease_taken_over',
      released: 'released_taken_over',
      expired_record: 'expired_taken_over',
    } as const;
    this.observe(outcomes[acquisition]);
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
        if (decision.expiresInMs > 0) this.#remember(decision.response, decision.expiresInMs);
        return { ...decision.response, body: canonicalCopy(decision.response.body), replayed: true };
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
    this.#remember(response, this.options.ttlMs);
    return { ...response, replayed: false };
  }

  observe(outcome: GuardOutcome): void {
    if (!this.options.observe) return;
    const first = !this.#claimObserved;
    this.#claimObserved = true;
    this.options.observe(first ? { outcome, claimMs: performance.now() - this.#startedAt } : { outcome });
  }

  #remember(response: StoredResponse, liveMs: number): void {
    this.cache.set(this.request.scope, this.key, { path: this.path, fingerprint: this.fingerprint, response }, this.#startedAt, liveMs);
  }
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
