/**
 * The guard's branches (docs/lifecycle.md) as one pure function: what a request does with the record
 * it found. No I/O and no clock of its own, so every branch is tested in microseconds
 * (test/unit/idempotency-decide.test.ts) and every path of the engine — one-phase or multi-phase,
 * first read or re-read after a lost race — decides the same way.
 */
import type { KeyRecord, StoredResponse } from './store';

export type Decision =
  /** Nobody has the key: claim it. */
  | { kind: 'claim' }
  /** Answered before: send the stored answer; `expiresInMs` bounds how long a cache may keep it. */
  | { kind: 'replay'; response: StoredResponse; expiresInMs: number }
  /** The key was used for another request: 422. */
  | { kind: 'mismatch' }
  /** Its owner is working (lease live): 409 with Retry-After. */
  | { kind: 'in_progress'; retryAfterMs: number }
  /**
   * Nobody is working on it and it is not answered, or it expired: take it over, conditionally on the
   * token seen here, and resume from its recovery point (an expired record starts over).
   */
  | { kind: 'take_over'; from: 'expired_record' | 'stale_lease' | 'released'; observedToken: string | null };

export interface DecisionRequest {
  path: string;
  fingerprint: string;
}

export function decide(record: KeyRecord | undefined, request: DecisionRequest, now: number): Decision {
  if (!record) return { kind: 'claim' };
  const leaseLeftMs = record.leaseExpiresAt === null ? 0 : record.leaseExpiresAt - now;
  // An expired record counts as absent — unless someone still works under it, whose work must finish
  // before anyone starts over.
  if (record.expiresAt <= now) {
    return leaseLeftMs > 0
      ? { kind: 'in_progress', retryAfterMs: leaseLeftMs }
      : { kind: 'take_over', from: 'expired_record', observedToken: record.leaseToken };
  }
  if (record.fingerprint !== request.fingerprint || record.path !== request.path) return { kind: 'mismatch' };
  if (record.response) return { kind: 'replay', response: record.response, expiresInMs: record.expiresAt - now };
  if (leaseLeftMs > 0) return { kind: 'in_progress', retryAfterMs: leaseLeftMs };
  return { kind: 'take_over', from: record.leaseToken === null ? 'released' : 'stale_lease', observedToken: record.leaseToken };
}
