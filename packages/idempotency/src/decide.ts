/**
 * The guard's branches (docs/lifecycle.md) as one pure function: what a request does with the record
 * it found. No I/O and no clock of its own, so every branch is tested in microseconds
 * (test/unit/idempotency-decide.test.ts), and every path of the engine decides the same way.
 */
import type { KeyRecord, StoredResponse } from './store.js';

export type Decision =
  /** Nobody has the key, or its record expired and nobody works under it: claim it (replacing that record). */
  | { kind: 'claim' }
  /** Answered before: send the stored answer; `expiresInMs` bounds how long a cache may keep it. */
  | { kind: 'replay'; response: StoredResponse; expiresInMs: number }
  /** The key was used for another request: 422. */
  | { kind: 'mismatch' }
  /** Its owner is working (lease live): 409 with Retry-After. */
  | { kind: 'in_progress'; retryAfterMs: number }
  /** Not answered and nobody works on it: take it over if its token is still the one seen, and resume. */
  | { kind: 'take_over'; from: 'stale_lease' | 'released'; observedToken: string | null };

export function decide(record: KeyRecord | undefined, request: { path: string; fingerprint: string }, now: number): Decision {
  if (!record) return { kind: 'claim' };
  const leaseLeftMs = record.leaseExpiresAt === null ? 0 : record.leaseExpiresAt - now;
  // An expired record counts as absent, unless someone still works under it: that work finishes first.
  if (record.expiresAt <= now) return leaseLeftMs > 0 ? { kind: 'in_progress', retryAfterMs: leaseLeftMs } : { kind: 'claim' };
  if (record.fingerprint !== request.fingerprint || record.path !== request.path) return { kind: 'mismatch' };
  if (record.response) return { kind: 'replay', response: record.response, expiresInMs: record.expiresAt - now };
  if (leaseLeftMs > 0) return { kind: 'in_progress', retryAfterMs: leaseLeftMs };
  return { kind: 'take_over', from: record.leaseToken === null ? 'released' : 'stale_lease', observedToken: record.leaseToken };
}
