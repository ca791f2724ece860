/**
 * A store in this process's memory: the engine's every branch runs against it in microseconds
 * (test/unit/idempotency-engine.test.ts), and a single-process demo runs without a database. It keeps
 * the PostgreSQL store's contract — a phase's effects and its key's write commit together or not at
 * all, a lost lease rolls a phase back, a one-phase duplicate that commits second conflicts — but
 * nothing survives a restart and two processes never share it: production uses a database store.
 */
import { randomUUID } from 'node:crypto';
import { LeaseLostError } from './errors.js';
import type { IdempotencyStore, KeyRecord, KeyRef, NewRecord, ScopedKey } from './store.js';

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

/** What an answered record holds besides its answer: no lease (its recovery point stays its last phase). */
const ANSWERED = { leaseToken: null, leaseExpiresAt: null } as const;

export interface MemoryStoreOptions {
  /** The store's clock in milliseconds (a test moves it to expire leases and records). */
  now?: () => number;
}

export function createMemoryIdempotencyStore(options: MemoryStoreOptions = {}): IdempotencyStore<MemoryTransaction> {
  const now = options.now ?? Date.now;
  const records = new Map<string, KeyRecord>();
  const idOf = ({ scope, key }: ScopedKey) => `${scope}\u0000${key}`;
  const idle = (record: KeyRecord) => record.leaseExpiresAt === null || record.leaseExpiresAt <= now();
  /** The record under `key`, unless it expired with nobody working under it (then it counts as absent). */
  const live = (key: ScopedKey) => {
    const record = records.get(idOf(key));
    return record && (record.expiresAt > now() || !idle(record)) ? record : undefined;
  };
  /** The record `ref` still owns, if it does. */
  const owned = (ref: KeyRef) => {
    const record = records.get(idOf(ref));
    return record && record.leaseToken === ref.leaseToken && record.response === null ? record : undefined;
  };
  const write = (r: NewRecord, fields: Pick<KeyRecord, 'response' | 'recoveryPoint' | 'leaseToken' | 'leaseExpiresAt'>) => {
    const record = { id: randomUUID(), path: r.path, fingerprint: r.fingerprint, expiresAt: now() + r.ttlMs, ...fields };
    records.set(idOf(r), record);
    return record;
  };

  return {
    read: async (key) => ({ record: records.has(idOf(key)) ? { ...records.get(idOf(key))! } : undefined, now: now() }),

    async claim(claim) {
      if (live(claim)) return { kind: 'exists', read: { record: { ...live(claim)! }, now: now() } };
      const leased = { leaseToken: claim.leaseToken, leaseExpiresAt: now() + claim.leaseMs };
      return { kind: 'inserted', id: write(claim, { response: null, recoveryPoint: 'started', ...leased }).id };
    },

    async takeOver(claim, observedToken) {
      const record = records.get(idOf(claim));
      if (!record || record.leaseToken !== observedToken || !idle(record) || record.response !== null) return undefined;
      Object.assign(record, { leaseToken: claim.leaseToken, leaseExpiresAt: now() + claim.leaseMs });
      return { id: record.id, recoveryPoint: record.recoveryPoint };
    },

    async atomicPhase(ref, fn, closingWrite) {
      const tx = new MemoryTransaction();
      const value = await fn(tx);
      const closing = closingWrite(value);
      const record = closing && owned(ref);
      if (closing && !record) throw new LeaseLostError();
      if (record && closing) Object.assign(record, 'recoveryPoint' in closing ? closing : { ...closing, ...ANSWERED });
      tx.commit();
      return value;
    },
    async onePhase(key, plan) {
      const current = records.get(idOf(key));
      const next = plan({ record: current && { ...current }, now: now() });
      if (next.kind === 'answer') return { kind: 'answered', value: next.value };
      const tx = new MemoryTransaction();
      const completed = await next.work(tx);
      if (live(key)) return { kind: 'conflict' };
      write(completed, { response: completed.response, recoveryPoint: 'started', ...ANSWERED });
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
        if (record.expiresAt <= now() && idle(record)) deleted += Number(records.delete(id));
      }
      return deleted;
    },

    async leasesHeld(wanted) {
      const ids = new Set(wanted.map((w) => w.id));
      return new Set([...records.values()].filter((r) => ids.has(r.id) && !idle(r)).map((r) => r.id));
    },
  };
}
