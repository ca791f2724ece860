import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { demoMode } from '@/server/demo/mode';
import { EnvConfigError } from '@/server/config/env';
import { faultsEnabled } from '@/server/demo/faults';

describe('demo mode', () => {
  it('is on with PAYONCE_DEMO=1 only', () => {
    assert.equal(demoMode({}), false);
    assert.equal(demoMode({ PAYONCE_DEMO: '0' }), false);
    assert.equal(demoMode({ PAYONCE_DEMO: '' }), false);
    assert.equal(demoMode({ PAYONCE_DEMO: '1' }), true);
  });

  it('refuses anything but 1 or 0, rather than reading a typo as off', () => {
    assert.throws(() => demoMode({ PAYONCE_DEMO: 'true' }), EnvConfigError);
    assert.throws(() => faultsEnabled({ CHECKOUT_FAULTS: 'yes' }), /CHECKOUT_FAULTS="yes" is not valid: expected 1 \(on\) or 0 \(off\)/);
  });

  it('brings fault injection along; CHECKOUT_FAULTS=1 alone still turns it on', () => {
    assert.equal(faultsEnabled({ PAYONCE_DEMO: '1' }), true);
    assert.equal(faultsEnabled({ CHECKOUT_FAULTS: '1' }), true);
    assert.equal(faultsEnabled({ PAYONCE_DEMO: '0', CHECKOUT_FAULTS: '0' }), false);
    assert.equal(faultsEnabled({}), false);
  });
});
