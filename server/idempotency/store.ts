/**
 * Where idempotency records live. The engine (execute.ts) speaks only to this interface; the
 * PostgreSQL implementation is in postgres-store.ts. Another database can implement the same
 * methods, as long as `claim` is atomic and the in-transaction writes are fenced by the lease token.
 */

/** A response as the guard stores and replays it: an HTTP status and a JSON body. */
export interface StoredResponse {
  status: number;
  body: unknown;
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

export interface IdempotencyStore<Tx> {
  /** Claims the key or reports why not, in as few round trips as the store can manage. */
  claim(request: ClaimRequest): Promise<ClaimOutcome>;
  /** Runs `fn` in one database transaction. */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * Records a recovery point as the last write of the caller's transaction, fenced by the lease.
   * The caller starts it last and awaits it only after the transaction has settled, so a store may
   * send it together with the COMMIT. Its contract: if `ref` no longer holds the lease, the write
   * must make the whole transaction roll back, and the promise rejects with LeaseLostError.
   */
  saveRecoveryPoint(tx: Tx, ref: KeyRef, recoveryPoint: string): Promise<void>;
  /** Stores the final response, on the same terms as saveRecoveryPoint. */
  complete(tx: Tx, ref: KeyRef, response: StoredResponse): Promise<void>;
  /**
   * Gives the key up after a failure. `forget` deletes it (nothing durable happened, so the next
   * request starts clean); otherwise the record and its recovery point stay and only the lease goes.
   */
  release(ref: KeyRef, options: { forget: boolean }): Promise<void>;
  /** Deletes up to `batchSize` expired, idle records; returns how many went. */
  deleteExpired(batchSize: number): Promise<number>;
}
