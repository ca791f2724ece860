/**
 * Where idempotency records live. The engine (execute.ts) speaks only to this interface; the
 * PostgreSQL implementation is in postgres-store.ts. Another database can implement the same
 * methods, as long as `claim` is atomic and the in-transaction writes are fenced by the lease token.
 */

/** A response as the guard stores and replays it: an HTTP status and a JSON body. */
export interface StoredResponse<Body = unknown, Status extends number = number> {
  status: Status;
  body: Body;
}

export interface ClaimRequest {
  scope: string;
  key: string;
  path: string;
  fingerprint: string;
  leaseMs: number;
  ttlMs: number;
  /** The new owner's fencing token. */
  leaseToken: string;
  /**
   * How long a claim may wait on a row that a concurrent claim inserted and has not committed yet
   * (PostgreSQL's lock_timeout for that statement): long enough for a one-phase request to commit, so
   * its duplicate replays the answer instead of a 409; short enough that a slow first request turns
   * its duplicates away with 409 + Retry-After rather than holding them.
   */
  waitMs: number;
}

/** A claim that rides in the first atomic phase's own transaction: the record's id is chosen up front. */
export interface PhaseClaimRequest extends ClaimRequest {
  id: string;
}

/**
 * What a claim made inside the first phase's transaction came to: the phase ran and committed
 * (`owned`), the key was found answered or refused (`found`: the phase did not run, nothing was
 * written), or the key is in some other state (`busy`: in flight, idle, expired, or committed by a
 * concurrent claim during the wait) for the ordinary `claim` to decide.
 */
export type PhaseClaimOutcome<R> =
  { kind: 'owned'; value: R } | { kind: 'found'; outcome: Exclude<ClaimOutcome, { kind: 'owned' }> } | { kind: 'busy' };

/** How the owner came by the key: fresh, or taken over from one that can no longer finish it. */
export type Acquisition = 'new' | 'expired_record' | 'stale_lease' | 'released';

export type ClaimOutcome =
  | { kind: 'owned'; id: string; recoveryPoint: string; acquisition: Acquisition }
  /** `expiresInMs`: how long the record stays replayable (a replay cache must not keep it longer). */
  | { kind: 'completed'; response: StoredResponse; expiresInMs?: number }
  | { kind: 'mismatch' }
  | { kind: 'in_progress'; retryAfterMs: number };

export interface KeyRef {
  id: string;
  leaseToken: string;
}

/** What an atomic phase records, fenced by the lease, as the last write of its transaction. */
export type ClosingWrite = { recoveryPoint: string } | { response: StoredResponse };

/** What the store knows of one key, for operators and drills (never for deciding an outcome). */
export interface KeySummary {
  key: string;
  path: string;
  status: number | null;
  recoveryPoint: string;
  completed: boolean;
  leaseHeld: boolean;
  createdAt: Date | string;
}

export interface IdempotencyStore<Tx> {
  /** Claims the key or reports why not, in as few round trips as the store can manage. */
  claim(request: ClaimRequest): Promise<ClaimOutcome>;
  /**
   * Runs `fn` in one database transaction, then writes what `closingWrite` derives from its result
   * (a recovery point or the final response) as that transaction's last statement. The contract: if
   * `ref` no longer holds the lease, the closing write makes the whole transaction roll back and the
   * promise rejects with LeaseLostError. A store may send the write together with the COMMIT.
   */
  atomicPhase<R>(ref: KeyRef, fn: (tx: Tx) => Promise<R>, closingWrite: (result: R) => ClosingWrite | undefined): Promise<R>;
  /**
   * Optional: claims the key inside the transaction of its first atomic phase, so the claim costs no
   * round trip of its own (the PostgreSQL store sends it with the BEGIN). Only a fresh claim runs
   * `fn` (after `afterClaim`); the claim, `fn`'s writes and the closing write commit together or not
   * at all. A store without it is claimed with `claim` first.
   */
  claimingPhase?<R>(
    request: PhaseClaimRequest,
    fn: (tx: Tx) => Promise<R>,
    closingWrite: (result: R) => ClosingWrite | undefined,
    afterClaim?: () => Promise<void>,
  ): Promise<PhaseClaimOutcome<R>>;
  /**
   * Gives the key up after a failure. `forget` deletes it (nothing durable happened, so the next
   * request starts clean); otherwise the record and its recovery point stay and only the lease goes.
   */
  release(ref: KeyRef, options: { forget: boolean }): Promise<void>;
  /** Deletes up to `batchSize` expired, idle records; returns how many went. */
  deleteExpired(batchSize: number): Promise<number>;
  /**
   * Which of these keys (by record id) some request is working on right now: its lease is live. A
   * background job asks before touching the business state a key owns.
   */
  leasesHeld(ids: readonly string[]): Promise<Set<string>>;
  /** The keys of one scope, oldest first, optionally only one path's. */
  listKeys(scope: string, options?: { path?: string }): Promise<KeySummary[]>;
}
