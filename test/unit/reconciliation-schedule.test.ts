/** The daily 对账's "yesterday" is the gateway's, cut in its own time zone. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { yesterdayIn } from '@/server/reconciliation/schedule';

describe('yesterdayIn', () => {
  it('at 17:00 UTC on 5 December it is already the 6th in Beijing: yesterday there is the 5th, in UTC the 4th', () => {
    const now = new Date('2026-12-05T17:00:00Z');
    assert.equal(yesterdayIn('Asia/Shanghai', now), '2026-12-05');
    assert.equal(yesterdayIn('UTC', now), '2026-12-04');
    assert.equal(yesterdayIn('Asia/Bangkok', now), '2026-12-05');
  });
  it('crosses months and years', () => {
    assert.equal(yesterdayIn('UTC', new Date('2027-01-01T08:00:00Z')), '2026-12-31');
    assert.equal(yesterdayIn('Asia/Shanghai', new Date('2026-03-01T00:30:00+08:00')), '2026-02-28');
  });
});
