/**
 * Where idempotency records live. The store only stores: it reads a record, inserts one unless the
 * key exists, changes one only if it is still as the caller saw it, and runs a transaction whose last
 * write is the key's. Every decision (replay, 422, 409, take over) is the engine's (./decide.ts), so
 * a store for another database is these methods and nothing else. Implementations:
 * ./postgres-store.ts (postgres.js) and ./memory-store.ts (one process; tests and demos).
 */

/** A response as the guard stores and replays it: an HTTP status and a JSON body. */
export interface StoredResponse<Body = unknown, Status extends number = number> {
  status: Status;
  body: Body;
}

/** A key as the store indexes it: unique within its scope, never globally. */
export interface ScopedKey {
  scope: string;
  key: string;
}

/** One key's record. Times are milliseconds on the store's own clock (see KeyRead.now). */
export interface KeyRecord {
  id: string;
  path: string;
  fingerprint: string;
  /** The final answer, once the request completed. */
  response: StoredResponse | null;
  /** The last atomic phase that committed; `started` when nothing durable happened yet. */
  recoveryPoint: string;
  /** The current owner's fencing token; null when nobody holds the key (released or completed). */
  leaseToken: string | null;
  leaseExpiresAt: number | null;
  expiresAt: number;
}

/**
 * A record as read, with the store's clock at that instant: leases and expiry are compared with the
 * database's time, never with this process's, so instances with skewed clocks agree.
 */
export interface KeyRead {
  record: KeyRecord | undefined;
  now: number;
}

/** What a new owner writes: its request, its fencing token and how long it may work. */
export interface Claim extends ScopedKey {
  path: string;
  fingerprint: string;
  leaseToken: string;
  leaseMs: number;
  ttlMs: number;
  /**
   * How long a write may wait on a row that a concurrent request inserted and has not committed yet:
   * long enough for a one-phase request to commit, so its duplicate replays the answer instead of a
   * 409; short enough that a slow first request turns its duplicates away with 409 + Retry-After.
   */
  waitMs: number;
}

/** A one-phase request's record: born complete, with no lease. */
export interface CompletedKey extends ScopedKey {
  path: string;
  fingerprint: string;
  ttlMs: number;
  response: StoredResponse;
}

/** A request's hold on a key: written only while the record still carries its token. */
export interface KeyRef extends ScopedKey {
  leaseToken: string;
}

/**
 * `busy`: the write waited `waitMs` on a concurrent request's uncommitted row.
 */
export type ClaimResult = { kind: 'inserted'; id: string } | { kind: 'exists'; read: KeyRead } | { kind: 'busy' };

/** What an atomic phase records, fenced by the lease, as the last write of its transaction. */
export type ClosingWrite = { recoveryPoint: string } | { response: StoredResponse };

/** What a one-phase request does with the key it read. */
export type OnePhasePlan<D, Tx> =
  /** Found answered or refused (`value` says how): nothing runs, no transaction is opened. */
  | { kind: 'answer'; value: D }
  /**
   * Run `work` in a transaction and insert the completed record it returns as that transaction's last
   * write (replacing `replaces`, an expired record, if it is still as read).
   */
  | { kind: 'run'; work: (tx: Tx) => Promise<CompletedKey>; replaces?: KeyRecord };

/**
 * `conflict`: a concurrent request committed the same key first, so this transaction rolled back;
 * `busy`: its record stayed uncommitted for `waitMs`, and this transaction rolled back.
 */
export type OnePhaseEnd<D> = { kind: 'committed' } | { kind: 'answered'; value: D } | { kind: 'conflict' } | { kind: 'busy' };

export interface IdempotencyStore<Tx> {
  read(key: ScopedKey): Promise<KeyRead>;
  /** Inserts a fresh, leased record unless the key exists (atomic); otherwise reads the one there. */
  claim(claim: Claim): Promise<ClaimResult>;
  /**
   * Gives the record to `claim` only if nobody holds it and its token is still `observedToken` (so of
   * several contenders exactly one wins); `reset`: the record expired and starts over as `claim`'s.
   * Returns the record's id and the recovery point to resume from, or undefined if it lost.
   */
  takeOver(claim: Claim, observedToken: string | null, reset: boolean): Promise<{ id: string; recoveryPoint: string } | undefined>;
  /**
   * Runs `fn` in one transaction, then writes what `closingWrite` derives from its result as that
   * transaction's last statement. If `ref` no longer holds the lease, the closing write makes the
   * whole transaction roll back and the promise rejects with LeaseLostError.
   */
  atomicPhase<R>(ref: KeyRef, fn: (tx: Tx) => Promise<R>, closingWrite: (result: R) => ClosingWrite | undefined): Promise<R>;
  /**
   * A one-phase request: reads the key, lets `plan` say what to do, and if it runs, runs the work in
   * one transaction whose last write is the completed record; a duplicate that committed first, or is
   * still uncommitted after `waitMs`, rolls this transaction back. If the work throws, it rolls back.
   * The read costs no round trip of its own on top of the transaction's: BEGIN leaves with the work's
   * first statement, the record with the COMMIT.
   */
  onePhase<D>(key: ScopedKey & { waitMs: number }, plan: (read: KeyRead) => OnePhasePlan<D, Tx>): Promise<OnePhaseEnd<D>>;
  /**
   * Gives the key up after a failure. `forget` deletes it (nothing durable happened, so the next
   * request starts clean); otherwise the record and its recovery point stay and only the lease goes.
   */
  release(ref: KeyRef, options: { forget: boolean }): Promise<void>;
  /** Deletes up to `batchSize` expired records nobody holds; returns how many went. */
  deleteExpired(batchSize: number): Promise<number>;
  /**
   * Which of these records (by id, within their scope) a request is working on right now: its lease is
   * live. A background job asks before touching the business state a key owns.
   */
  leasesHeld(records: readonly { scope: string; id: string }[]): Promise<Set<string>>;
}
