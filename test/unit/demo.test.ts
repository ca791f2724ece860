import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { demoMode } from '../../server/demo';
import { faultsEnabled } from '../../server/faults';

describe('demo mode', () => {
  it('is on with PAYONCE_DEMO=1 only', () => {
    assert.equal(demoMode({}), false);
    assert.equal(demoMode({ PAYONCE_DEMO: '0' }), false);
    assert.equal(demoMode({ PAYONCE_DEMO: 'true' }), false);
    assert.equal(demoMode({ PAYONCE_DEMO: '1' }), true);
  });

  it('brings fault injection along; CHECKOUT_FAULTS=1 alone still turns it on', () => {
    assert.equal(faultsEnabled({ PAYONCE_DEMO: '1' }), true);
    assert.equal(faultsEnabled({ CHECKOUT_FAULTS: '1' }), true);
    assert.equal(faultsEnabled({ PAYONCE_DEMO: '0', CHECKOUT_FAULTS: '0' }), false);
    assert.equal(faultsEnabled({}), false);
  });
});
