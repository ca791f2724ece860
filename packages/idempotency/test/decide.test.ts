/**
 * The guard's branches as a pure function (src/decide.ts), and the replay cache on a
 * clock of the test's own: no database, no timers.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decide, ReplayCache, type KeyRecord } from '../src/index.js';

const request = { path: 'checkout.pay', fingerprint: 'f1' };
const NOW = 1_000_000;
const record = (changes: Partial<KeyRecord> = {}): KeyRecord => ({
  id: 'r1',
  path: 'checkout.pay',
  fingerprint: 'f1',
  response: null,
  recoveryPoint: 'started',
  leaseToken: 't1',
  leaseExpiresAt: NOW + 5_000,
  expiresAt: NOW + 86_400_000,
  ...changes,
});

describe('decide', () => {
  it('1. no record: claim', () => {
    assert.deepEqual(decide(undefined, request, NOW), { kind: 'claim' });
  });

  it('2. another fingerprint or another path: mismatch (422)', () => {
    assert.deepEqual(decide(record({ fingerprint: 'f2' }), request, NOW), { kind: 'mismatch' });
    assert.deepEqual(decide(record({ path: 'checkout.createOrder' }), request, NOW), { kind: 'mismatch' });
  });

  it('3. completed: replay, with how long the record still lives', () => {
    const response = { status: 402, body: { reason: 'INSUFFICIENT_FUNDS' } };
    const completed = record({ response, leaseToken: null, leaseExpiresAt: null, expiresAt: NOW + 60_000 });
    assert.deepEqual(decide(completed, request, NOW), { kind: 'replay', response, expiresInMs: 60_000 });
  });

  it('4. in flight with a live lease: in progress, Retry-After from the lease left', () => {
    assert.deepEqual(decide(record(), request, NOW), { kind: 'in_progress', retryAfterMs: 5_000 });
  });

  it('5. in flight with a stale lease: take over from the token seen', () => {
    assert.deepEqual(decide(record({ leaseExpiresAt: NOW }), request, NOW), {
      kind: 'take_over',
      from: 'stale_lease',
      observedToken: 't1',
    });
  });

  it('6. released (no lease, not completed): take over at once', () => {
    const released = record({ leaseToken: null, leaseExpiresAt: null, recoveryPoint: 'attempt_started' });
    assert.deepEqual(decide(released, request, NOW), { kind: 'take_over', from: 'released', observedToken: null });
  });

  it('7. expired counts as absent, whatever it held — even another request — unless its owner still works', () => {
    const expired = record({
      fingerprint: 'other',
      response: { status: 201, body: {} },
      leaseToken: null,
      leaseExpiresAt: null,
      expiresAt: NOW,
    });
    assert.deepEqual(decide(expired, request, NOW), { kind: 'claim' });
    assert.deepEqual(decide({ ...expired, leaseToken: 't0', leaseExpiresAt: NOW }, request, NOW), { kind: 'claim' }, 'a lease run out too');
    assert.deepEqual(decide(record({ expiresAt: NOW - 1 }), request, NOW), { kind: 'in_progress', retryAfterMs: 5_000 });
  });

  it('8. a mismatch is told before a lease: a different request never waits for another one to finish', () => {
    assert.deepEqual(decide(record({ fingerprint: 'f2' }), request, NOW), { kind: 'mismatch' });
  });
});

describe('the replay cache', () => {
  const answer = { path: 'p', fingerprint: 'f', inputText: '{}', response: { status: 201, body: { ok: true } } };

  it('1. keeps an answer until a second before its record expires, on its own clock', () => {
    let now = 0;
    const cache = new ReplayCache(10, () => now);
    cache.set('s', 'k', answer, 0, 5_000);
    now = 3_999;
    assert.deepEqual(cache.get('s', 'k'), { ...answer, scope: 's', until: 4_000 });
    now = 4_000;
    assert.equal(cache.get('s', 'k'), undefined);
  });

  it('2. counts from before the store was asked, and keeps nothing that would already be gone', () => {
    let now = 2_000;
    const cache = new ReplayCache(10, () => now);
    cache.set('s', 'k', answer, 0, 2_500); // asked at 0: until 1,500, already past
    assert.equal(cache.get('s', 'k'), undefined);
    now = 0;
  });

  it('3. is bounded: the oldest entry goes first', () => {
    const cache = new ReplayCache(2, () => 0);
    for (const key of ['a', 'b', 'c']) cache.set('s', key, answer, 0, 60_000);
    assert.equal(cache.get('s', 'a'), undefined);
    assert.ok(cache.get('s', 'b') && cache.get('s', 'c'));
  });

  it('4. keeps scopes apart, and size 0 keeps nothing', () => {
    const cache = new ReplayCache(10, () => 0);
    cache.set('customer:1', 'k', answer, 0, 60_000);
    assert.equal(cache.get('customer:2', 'k'), undefined);
    const none = new ReplayCache(0, () => 0);
    none.set('s', 'k', answer, 0, 60_000);
    assert.equal(none.get('s', 'k'), undefined);
  });
});
