/**
 * A store in this process's memory: the engine's every branch runs against it in microseconds
 * (test/unit/idempotency-engine.test.ts), and a single-process demo can run without a database. It
 * keeps the PostgreSQL store's contract — a phase's effects and its key's write commit together or
 * not at all, a lost lease rolls a phase back, a one-phase duplicate that commits second conflicts —
 * but nothing survives a restart and two processes never share it: production uses a database store.
 */
import { randomUUID } from 'node:crypto';
import { LeaseLostError } from './errors';
import type {
  ClaimResult,
  ClosingWrite,
  IdempotencyStore,
  KeyRead,
  KeyRecord,
  KeyRef,
  OnePhaseEnd,
  OnePhasePlan,
  ScopedKey,
} from './store';

/** A phase's transaction: its effects run at COMMIT, all together with the key's write, or never. */
export class MemoryTransaction {
  readonly #effects: (() => void)[] = [];
  onCommit(effect: () => void): void {
    this.#effects.push(effect);
  }
  /** @internal */
  commit(): void {
    for (const effect of this.#effects) effect();
  }
}

export interface MemoryStoreOptions {
  /** The store's clock in milliseconds (a test moves it to expire leases and records). */
  now?: () => number;
}

export function createMemoryIdempotencyStore(options: MemoryStoreOptions = {}): IdempotencyStore<MemoryTransaction> {
  const now = options.now ?? Date.now;
  const records = new Map<string, KeyRecord>();
  const idOf = ({ scope, key }: ScopedKey) => `${scope}\u0000${key}`;
  const copy = (record: KeyRecord | undefined) => record && { ...record };
  const idle = (record: KeyRecord) => record.leaseExpiresAt === null || record.leaseExpiresAt <= now();
  /** The record `ref` still owns, if it does. */
  const owned = (ref: KeyRef) => {
    const record = records.get(idOf(ref));
    return record && record.leaseToken === ref.leaseToken && record.response === null ? record : undefined;
  };

  function close(ref: KeyRef, write: ClosingWrite | undefined, tx: MemoryTransaction): void {
    if (write) {
      const record = owned(ref);
      if (!record) throw new LeaseLostError();
      if ('recoveryPoint' in write) record.recoveryPoint = write.recoveryPoint;
      else Object.assign(record, { response: write.response, recoveryPoint: 'finished', leaseToken: null, leaseExpiresAt: null });
    }
    tx.commit();
  }

  return {
    async read(key) {
      return { record: copy(records.get(idOf(key))), now: now() };
    },

    async claim(claim): Promise<ClaimResult> {
      const existing = records.get(idOf(claim));
      if (existing) return { kind: 'exists', read: { record: copy(existing), now: now() } };
      const id = randomUUID();
      const at = now();
      records.set(idOf(claim), {
        id,
        path: claim.path,
        fingerprint: claim.fingerprint,
        response: null,
        recoveryPoint: 'started',
        leaseToken: claim.leaseToken,
        leaseExpiresAt: at + claim.leaseMs,
        expiresAt: at + claim.ttlMs,
      });
      return { kind: 'inserted', id };
    },

    async takeOver(claim, observedToken, reset) {
      const record = records.get(idOf(claim));
      if (!record || record.leaseToken !== observedToken || !idle(record)) return undefined;
      if (reset ? record.expiresAt > now() : record.response !== null) return undefined;
      if (reset) {
        Object.assign(record, { path: claim.path, fingerprint: claim.fingerprint, response: null, recoveryPoint: 'started' });
        record.expiresAt = now() + claim.ttlMs;
      }
      Object.assign(record, { leaseToken: claim.leaseToken, leaseExpiresAt: now() + claim.leaseMs });
      return { id: record.id, recoveryPoint: record.recoveryPoint };
    },

    async atomicPhase(ref, fn, closingWrite) {
      const tx = new MemoryTransaction();
      const value = await fn(tx);
      close(ref, closingWrite(value), tx);
      return value;
    },

    async onePhase<D>(key: ScopedKey, plan: (read: KeyRead) => OnePhasePlan<D, MemoryTransaction>): Promise<OnePhaseEnd<D>> {
      const next = plan({ record: copy(records.get(idOf(key))), now: now() });
      if (next.kind === 'answer') return { kind: 'answered', value: next.value };
      const tx = new MemoryTransaction();
      const record = await next.work(tx);
      const current = records.get(idOf(key));
      const replaceable = current && next.replaces && current.leaseToken === next.replaces.leaseToken && current.expiresAt <= now();
      if (current && !replaceable) return { kind: 'conflict' };
      records.set(idOf(key), {
        id: randomUUID(),
        path: record.path,
        fingerprint: record.fingerprint,
        response: record.response,
        recoveryPoint: 'finished',
        leaseToken: null,
        leaseExpiresAt: null,
        expiresAt: now() + record.ttlMs,
      });
      tx.commit();
      return { kind: 'committed' };
    },

    async release(ref, { forget }) {
      const record = owned(ref);
      if (!record) return;
      if (forget && record.recoveryPoint === 'started') records.delete(idOf(ref));
      else Object.assign(record, { leaseToken: null, leaseExpiresAt: null });
    },

    async deleteExpired(batchSize) {
      let deleted = 0;
      for (const [id, record] of records) {
        if (deleted >= batchSize) break;
        if (record.expiresAt <= now() && idle(record)) {
          records.delete(id);
          deleted++;
        }
      }
      return deleted;
    },

    async leasesHeld(wanted) {
      const held = new Set<string>();
      for (const record of records.values()) {
        if (!idle(record) && wanted.some((w) => w.id === record.id)) held.add(record.id);
      }
      return held;
    },
  };
}
