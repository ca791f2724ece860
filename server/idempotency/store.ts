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
}

/** How the owner came by the key: fresh, or taken over from one that can no longer finish it. */
export type Acquisition = 'new' | 'expired_record' | 'stale_lease' | 'released';

export type ClaimOutcome =
  | { kind: 'owned'; id: string; recoveryPoint: string; acquisition: Acquisition }
  | { kind: 'completed'; response: StoredResponse }
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
