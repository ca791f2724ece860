/**
 * Where idempotency records live. The store only stores: it reads a record, inserts one unless the
 * key holds a live one, changes one only if it is still as the caller saw it, and runs a transaction
 * whose last write is the key's. Every decision (replay, 422, 409, take over) is the engine's
 * (./decide.ts), so a store for another database is these methods and nothing else:
 * ./postgres-store.ts (postgres.js) and ./memory-store.ts (one process; tests and demos).
 *
 * "Live" is the one rule a store applies itself, because it must hold inside one atomic write: a
 * record that expired and that nobody works under (no lease, or a lease run out) counts as absent, and
 * a new record replaces it.
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

/** A record as read, with the store's clock then: times are the database's, so instances with skewed clocks agree. */
export interface KeyRead {
  record: KeyRecord | undefined;
  now: number;
}

/** A record as a request writes it: its path and fingerprint, and how long it is kept. */
export interface NewRecord extends ScopedKey {
  path: string;
  fingerprint: string;
  ttlMs: number;
}

/** What a multi-phase owner writes: also its fencing token and how long it may work. */
export interface Claim extends NewRecord {
  leaseToken: string;
  leaseMs: number;
  /** How long a write may wait on a concurrent request's uncommitted row (IdempotencyOptions.claimWaitMs). */
  waitMs: number;
}

/** A one-phase request's record: born complete, with no lease. */
export interface CompletedKey extends NewRecord {
  response: StoredResponse;
}

/** A request's hold on a key: written only while the record still carries its token. */
export interface KeyRef extends ScopedKey {
  leaseToken: string;
}

/** `busy`: the write waited `waitMs` on a concurrent request's uncommitted row. */
export type ClaimResult = { kind: 'inserted'; id: string } | { kind: 'exists'; read: KeyRead } | { kind: 'busy' };

/** What an atomic phase records, fenced by the lease, as the last write of its transaction. */
export type ClosingWrite = { recoveryPoint: string } | { response: StoredResponse };

/** A one-phase request's plan for the key it read: answer (no transaction), or run `work` and write the record it returns last. */
export type OnePhasePlan<D, Tx> = { kind: 'answer'; value: D } | { kind: 'run'; work: (tx: Tx) => Promise<CompletedKey> };

/** Rolled back because a concurrent request under the key committed first (`conflict`) or stayed uncommitted `waitMs` (`busy`). */
export type OnePhaseEnd<D> = { kind: 'committed' } | { kind: 'answered'; value: D } | { kind: 'conflict' } | { kind: 'busy' };

export interface IdempotencyStore<Tx> {
  read(key: ScopedKey): Promise<KeyRead>;
  /** Inserts a fresh, leased record unless the key holds a live one (atomic); otherwise reads that one. */
  claim(claim: Claim): Promise<ClaimResult>;
  /** Gives an unanswered, unheld record to `claim` if its token is still `observedToken` (one contender wins). */
  takeOver(claim: Claim, observedToken: string | null): Promise<{ id: string; recoveryPoint: string } | undefined>;
  /** Runs `fn` in one transaction whose last write is `closingWrite`'s; if `ref` lost the lease, all rolls back (LeaseLostError). */
  atomicPhase<R>(ref: KeyRef, fn: (tx: Tx) => Promise<R>, closingWrite: (result: R) => ClosingWrite | undefined): Promise<R>;
  /** Reads the key, lets `plan` decide, and runs the work in one transaction whose last write is the completed record. */
  onePhase<D>(key: ScopedKey & { waitMs: number }, plan: (read: KeyRead) => OnePhasePlan<D, Tx>): Promise<OnePhaseEnd<D>>;
  /** Gives the key up after a failure: `forget` deletes it (nothing durable happened); else only the lease goes. */
  release(ref: KeyRef, options: { forget: boolean }): Promise<void>;
  /** Deletes up to `batchSize` expired records nobody holds; returns how many went. */
  deleteExpired(batchSize: number): Promise<number>;
  /** Which of these records a request works on now (a live lease): a job asks before it touches what a key owns. */
  leasesHeld(records: readonly { scope: string; id: string }[]): Promise<Set<string>>;
}
