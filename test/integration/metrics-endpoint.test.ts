/**
 * GET /api/metrics as the app serves it (the route handler itself, called with a real Request): a
 * 404 until switched on, then only for the bearer of METRICS_TOKEN. The decision's every case is
 * in test/unit/metrics-access.test.ts; this checks the route answers by it.
 */
import assert from 'node:assert/strict';
import { after, afterEach, describe, it } from 'node:test';
import { GET } from '@/app/api/metrics/route';
import { closeDatabase } from '@/db/client';
import { resetServerEnv } from '@/server/config/env';

const SWITCHES = ['METRICS_TOKEN', 'METRICS_PUBLIC', 'PAYONCE_DEMO'] as const;
const saved = Object.fromEntries(SWITCHES.map((name) => [name, process.env[name]]));

function setSwitches(values: Partial<Record<(typeof SWITCHES)[number], string>>): void {
  for (const name of SWITCHES) {
    const value = values[name];
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  // The server reads its environment once; this one changes between requests.
  resetServerEnv();
}

const scrape = (authorization?: string) =>
  GET(new Request('http://127.0.0.1:3000/api/metrics', authorization ? { headers: { authorization } } : {}));

afterEach(() => setSwitches(saved));
after(async () => {
  await closeDatabase();
});

describe('GET /api/metrics', () => {
  it('is a 404 with no switch set', async () => {
    setSwitches({});
    const response = await scrape('Bearer anything');
    assert.equal(response.status, 404);
    assert.doesNotMatch(await response.text(), /payonce_/);
  });

  it('with METRICS_TOKEN: 401 for a wrong or missing token, 200 and the metrics for the right one', async () => {
    setSwitches({ METRICS_TOKEN: 'scrape-me-9f2c' });

    const wrong = await scrape('Bearer scrape-me-9f2d');
    assert.equal(wrong.status, 401);
    assert.equal(wrong.headers.get('www-authenticate'), 'Bearer realm="metrics"');
    assert.doesNotMatch(await wrong.text(), /payonce_/);
    assert.equal((await scrape()).status, 401);

    const right = await scrape('Bearer scrape-me-9f2c');
    assert.equal(right.status, 200);
    assert.match(right.headers.get('content-type') ?? '', /^text\/plain/);
    assert.match(await right.text(), /^# TYPE payonce_idempotency_guard_total counter$/m);
  });

  it('opens without a token only when explicitly public or in demo mode', async () => {
    setSwitches({ METRICS_PUBLIC: '1' });
    assert.equal((await scrape()).status, 200);
    setSwitches({ PAYONCE_DEMO: '1' });
    assert.equal((await scrape()).status, 200);
  });
});
