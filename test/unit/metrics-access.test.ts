import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { metricsAccess } from '@/server/metrics/access';

const scrape = (authorization?: string) => new Request('http://127.0.0.1/api/metrics', authorization ? { headers: { authorization } } : {});

describe('who may read /api/metrics', () => {
  it('does not exist unless switched on', () => {
    assert.equal(metricsAccess(scrape(), {}), 'not_found');
    assert.equal(metricsAccess(scrape('Bearer anything'), {}), 'not_found');
    assert.equal(metricsAccess(scrape(), { METRICS_PUBLIC: '0', PAYONCE_DEMO: '0', METRICS_TOKEN: '' }), 'not_found');
  });

  it('with METRICS_TOKEN: only the bearer of that token gets in', () => {
    const env = { METRICS_TOKEN: 's3cret-token' };
    assert.equal(metricsAccess(scrape('Bearer s3cret-token'), env), 'allowed');
    assert.equal(metricsAccess(scrape(), env), 'unauthorized');
    assert.equal(metricsAccess(scrape('Bearer s3cret-tokeN'), env), 'unauthorized');
    assert.equal(metricsAccess(scrape('Bearer s3cret'), env), 'unauthorized');
    assert.equal(metricsAccess(scrape('Bearer s3cret-token-and-more'), env), 'unauthorized');
    assert.equal(metricsAccess(scrape('Basic s3cret-token'), env), 'unauthorized');
    assert.equal(metricsAccess(scrape('s3cret-token'), env), 'unauthorized');
  });

  it('a token, once set, is required even in demo mode or with METRICS_PUBLIC=1', () => {
    assert.equal(metricsAccess(scrape(), { METRICS_TOKEN: 't', PAYONCE_DEMO: '1', METRICS_PUBLIC: '1' }), 'unauthorized');
  });

  it('open without a token when explicitly public, or in demo mode', () => {
    assert.equal(metricsAccess(scrape(), { METRICS_PUBLIC: '1' }), 'allowed');
    assert.equal(metricsAccess(scrape(), { PAYONCE_DEMO: '1' }), 'allowed');
  });
});
