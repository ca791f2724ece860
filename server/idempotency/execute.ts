/**
 * The idempotency engine: one call wraps one request.
 *
 *   executeIdempotent(store, request, async (key) => {
 *     await key.atomicPhase(async (tx) => { …; return recoveryPoint('charge_started') });
 *     … call the gateway (outside any transaction) …
 *     return (await key.atomicPhase(async (tx) => { …; return respond(201, body) })).response;
 *   })
 *
 * It knows no HTTP framework: adapters (the tRPC middleware, the webhook handlers) turn its result
 * and its errors into their own responses, each with one call to it.
 */
import { randomUUID } from 'node:crypto';
import { canonicalJson, requestFingerprint } from './fingerprint';
import { KeyReusedError, LeaseLostError, RequestInProgressError } from './errors';
import { parseIdempotencyKey } from './key';
import type { Acquisition, IdempotencyStore, KeyRef, StoredResponse } from './store';

export interface IdempotencyOptions {
  /**
   * How long an owner may work before others presume it dead. It must outlast the slowest request
   * (a gateway call times out after 5 s by default, plus a few short transactions), or a live
   * request would be taken over; 30 s keeps the wait after a real crash short.
   */
  leaseMs: number;
  /** How long a completed answer is kept for replay (Stripe keeps 24 h). */
  ttlMs: number;
  /** Told of every outcome, e.g. to count them for metrics. */
  observe?: (event: GuardEvent) => void;
}

export const DEFAULT_IDEMPOTENCY_OPTIONS: IdempotencyOptions = {
  leaseMs: 30_000,
  ttlMs: 24 * 60 * 60 * 1000,
};

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
}

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
    private readonly ref: KeyRef,
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
    const result = await this.store.atomicPhase(this.ref, fn, (phase) =>
      phase.kind === 'recovery_point'
        ? { recoveryPoint: phase.name }
        : phase.kind === 'response'
          ? { response: phase.response }
          : undefined,
    );
    // Only now, after the commit, is the new state true.
    if (result.kind === 'recovery_point') this.#recoveryPoint = result.name;
    if (result.kind === 'response') this.#completed = result.response;
    return result;
  }
}

/**
 * Runs `handler` at most once per (scope, key) to completion, replays its stored answer to every
 * retry, and lets exactly one retry resume it after a crash. The handler either completes the key in
 * an atomic phase or returns a response for side-effect-free work; if it throws, the key is released
 * (kept at its recovery point) so a retry can run — safe because every gateway call is itself
 * idempotent by a stable identifier.
 */
export async function executeIdempotent<Tx>(
  store: IdempotencyStore<Tx>,
  request: IdempotentRequest,
  handler: (key: OwnedKey<Tx>) => Promise<StoredResponse | void>,
  options: IdempotencyOptions = DEFAULT_IDEMPOTENCY_OPTIONS,
): Promise<IdempotentResult> {
  const observe = options.observe ?? (() => {});
  const key = parseIdempotencyKey(request.key);
  const leaseToken = randomUUID();
  const claimStarted = performance.now();
  const claim = await store.claim({
    scope: request.scope,
    key,
    path: request.path,
    fingerprint: requestFingerprint(request.path, request.input),
    leaseMs: options.leaseMs,
    ttlMs: options.ttlMs,
    leaseToken,
  });
  const claimMs = performance.now() - claimStarted;

  switch (claim.kind) {
    case 'completed':
      observe({ outcome: 'replayed', claimMs });
      return { ...claim.response, body: canonicalise(claim.response.body), replayed: true };
    case 'mismatch':
      observe({ outcome: 'mismatch', claimMs });
      throw new KeyReusedError();
    case 'in_progress':
      observe({ outcome: 'in_progress', claimMs });
      throw new RequestInProgressError(Math.max(1, Math.ceil(claim.retryAfterMs / 1000)));
    case 'owned':
      break;
    default: {
      const unreachable: never = claim;
      throw new Error(`unknown claim outcome ${JSON.stringify(unreachable)}`);
    }
  }

  observe({
    outcome:
      claim.acquisition === 'new'
        ? 'claimed'
        : claim.acquisition === 'stale_lease'
          ? 'lease_taken_over'
          : claim.acquisition === 'released'
            ? 'released_taken_over'
            : 'expired_taken_over',
    claimMs,
  });
  const ref: KeyRef = { id: claim.id, leaseToken };
  const owned = new OwnedKey(store, ref, claim.recoveryPoint, claim.acquisition);

  let returned: StoredResponse | void;
  try {
    returned = await handler(owned);
  } catch (error) {
    // The handler committed its final answer and then threw it (an adapter's way of sending a
    // stored error): that answer stands.
    if (owned.completed) {
      observe({ outcome: 'completed' });
      return { ...owned.completed, replayed: false };
    }
    if (error instanceof LeaseLostError) {
      // Another request took the key over while this one was presumed dead; it owns the outcome.
      observe({ outcome: 'lease_lost' });
      throw new RequestInProgressError(1);
    }
    observe({ outcome: 'released' });
    await store.release(ref, { forget: owned.recoveryPoint === STARTED }).catch(() => {
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
    return { ...owned.completed, replayed: false };
  }
  // Side-effect-free work (or work whose effects are themselves idempotent) may return its answer
  // instead of completing inside a phase; it is stored on its own.
  const response = respond(returned?.status ?? 200, returned?.body ?? null);
  await owned.atomicPhase(async () => response);
  observe({ outcome: 'completed' });
  return { ...response.response, replayed: false };
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
