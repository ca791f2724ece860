/**
 * The app's configuration (server/config/env.ts): .env.example documents exactly the variables the schema
 * reads, every default is the one the code it configures falls back to, good values parse, and a
 * bad one gets one line naming the variable, its value and what is expected.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { DEFAULT_REFUND_BACKOFF_MS, DEFAULT_REFUND_LEASE_MS } from '@/server/jobs/refund-worker';
import { DEFAULT_ORDER_CAPS } from '@/server/checkout/orders';
import { EnvConfigError, parseServerEnv, SERVER_ENV_VARIABLES, type RawEnv } from '@/server/config/env';
import { DEFAULT_IDEMPOTENCY_OPTIONS } from '@payonce/idempotency';
import { DEFAULT_JOB_INTERVALS } from '@/server/jobs/queue';
import { DEFAULT_EXPIRY_CLOSE_GRACE_MS } from '@/server/jobs/reconciler';
import { MAX_TRIES_PER_GATEWAY_CALL } from '@/server/payments/gateway';
import { DEFAULT_RATE_LIMIT_POLICY } from '@/server/http/rate-limit';
import { DEFAULT_SESSION_MAX_AGE_SECONDS } from '@/server/http/session';

/** `NAME=value` lines of .env.example, commented out or not. */
function exampleEntries(): Map<string, string> {
  const text = readFileSync(path.join(import.meta.dirname, '..', '..', '.env.example'), 'utf8');
  const entries = new Map<string, string>();
  for (const line of text.split('\n')) {
    const match = /^#?\s?([A-Z][A-Z0-9_]*)=(.*)$/.exec(line);
    if (!match) continue;
    const [, name, value] = match as unknown as [string, string, string];
    assert.ok(!entries.has(name), `${name} appears twice in .env.example`);
    // A quoted value is the shell's (and dotenv's) way to hold a PEM's "\n".
    entries.set(name, /^".*"$/.test(value) ? value.slice(1, -1).replaceAll('\\n', '\n') : value);
  }
  return entries;
}

/** The one line parseServerEnv refuses `raw` with. */
function refusal(raw: RawEnv): string {
  try {
    parseServerEnv(raw);
  } catch (error) {
    assert.ok(error instanceof EnvConfigError, String(error));
    assert.doesNotMatch(error.message, /\n/, 'one line');
    return error.message;
  }
  assert.fail(`accepted ${JSON.stringify(raw)}`);
}

describe('.env.example', () => {
  it('documents every variable of the schema, and nothing else', () => {
    const documented = [...exampleEntries().keys()];
    const missing = SERVER_ENV_VARIABLES.filter((name) => !documented.includes(name));
    const unknown = documented.filter((name) => !(SERVER_ENV_VARIABLES as string[]).includes(name));
    assert.deepEqual(missing, [], 'in server/config/env.ts but not in .env.example');
    assert.deepEqual(unknown, [], 'in .env.example but not in server/config/env.ts');
  });

  it('gives example values that parse, all of them at once', () => {
    const env = parseServerEnv(Object.fromEntries(exampleEntries()));
    assert.equal(env.NODE_ENV, 'production');
    assert.equal(env.TRUST_PROXY, 1);
    assert.equal(env.WECHATPAY_TEST_BUYERS?.ok, '134567890123456789');
  });
});

describe('serverEnv schema', () => {
  it('parses an empty environment to the defaults the code falls back to', () => {
    const env = parseServerEnv({});
    assert.equal(env.IDEMPOTENCY_LEASE_MS, DEFAULT_IDEMPOTENCY_OPTIONS.leaseMs);
    assert.equal(env.IDEMPOTENCY_CLAIM_WAIT_MS, DEFAULT_IDEMPOTENCY_OPTIONS.claimWaitMs);
    assert.equal(env.DATABASE_POOLING, 'session');
    assert.equal(env.GATEWAY_TIMEOUT_MS, 5000);
    assert.equal(env.SESSION_MAX_AGE_SECONDS, DEFAULT_SESSION_MAX_AGE_SECONDS);
    assert.deepEqual(
      [env.JOBS_RECONCILE_SECONDS, env.JOBS_OUTBOX_SECONDS, env.JOBS_KEY_CLEANUP_SECONDS, env.JOBS_REFUND_SECONDS],
      [
        DEFAULT_JOB_INTERVALS.reconcileSeconds,
        DEFAULT_JOB_INTERVALS.outboxSeconds,
        DEFAULT_JOB_INTERVALS.keyCleanupSeconds,
        DEFAULT_JOB_INTERVALS.refundSeconds,
      ],
    );
    assert.equal(env.ORDER_EXPIRY_CLOSE_GRACE_MS, DEFAULT_EXPIRY_CLOSE_GRACE_MS);
    assert.equal(env.REFUND_BACKOFF_MS, DEFAULT_REFUND_BACKOFF_MS);
    assert.equal(env.REFUND_LEASE_MS, DEFAULT_REFUND_LEASE_MS);
    assert.equal(env.RATE_LIMIT_SESSION_PER_MINUTE, DEFAULT_RATE_LIMIT_POLICY.sessionPerWindow);
    assert.equal(env.RATE_LIMIT_ADDRESS_PER_MINUTE, DEFAULT_RATE_LIMIT_POLICY.addressPerWindow);
    assert.equal(env.TRUST_PROXY, DEFAULT_RATE_LIMIT_POLICY.trustProxy);
    assert.equal(env.OPEN_ORDERS_PER_CUSTOMER, DEFAULT_ORDER_CAPS.openOrders);
    assert.equal(env.OPEN_ORDER_HELD_UNITS_PER_SKU, DEFAULT_ORDER_CAPS.heldUnitsPerSku);
    assert.equal(env.NODE_ENV, 'development');
    assert.equal(env.PAYONCE_JOBS, 'on');
    assert.equal(env.PAYONCE_DEMO, false);
    assert.equal(env.DATABASE_URL, undefined);
  });

  it('parses good values, and treats an empty one as unset', () => {
    const env = parseServerEnv({
      IDEMPOTENCY_LEASE_MS: ' 8000 ',
      IDEMPOTENCY_CLAIM_WAIT_MS: '250',
      DATABASE_POOLING: 'transaction',
      GATEWAY_TIMEOUT_MS: '2000',
      RATE_LIMIT_SESSION_PER_MINUTE: '0',
      PAYONCE_DEMO: '1',
      CHECKOUT_FAULTS: '',
      PAYONCE_JOBS: 'off',
      PUBLIC_BASE_URL: 'https://pay.example.com',
      DATABASE_URL: 'postgresql://u:p@db:5432/payonce',
    });
    assert.equal(env.IDEMPOTENCY_LEASE_MS, 8000);
    assert.equal(env.IDEMPOTENCY_CLAIM_WAIT_MS, 250);
    assert.equal(env.DATABASE_POOLING, 'transaction');
    assert.equal(env.GATEWAY_TIMEOUT_MS, 2000);
    assert.equal(env.RATE_LIMIT_SESSION_PER_MINUTE, 0);
    assert.equal(env.PAYONCE_DEMO, true);
    assert.equal(env.CHECKOUT_FAULTS, false);
    assert.equal(env.PAYONCE_JOBS, 'off');
    assert.equal(env.PUBLIC_BASE_URL, 'https://pay.example.com');
  });

  it('refuses a value that is not a number, naming the variable, the value and what is expected', () => {
    assert.equal(
      refusal({ IDEMPOTENCY_LEASE_MS: 'abc' }),
      'IDEMPOTENCY_LEASE_MS="abc" is not valid: expected a whole number of milliseconds from 1000 to 600000',
    );
    assert.match(
      refusal({ RATE_LIMIT_SESSION_PER_MINUTE: 'thirty' }),
      /^RATE_LIMIT_SESSION_PER_MINUTE="thirty" is not valid: expected a whole number of mutations a minute from 0 \(off\) to/,
    );
    assert.match(refusal({ GATEWAY_TIMEOUT_MS: 'NaN' }), /^GATEWAY_TIMEOUT_MS="NaN" is not valid/);
    assert.match(refusal({ IDEMPOTENCY_CLAIM_WAIT_MS: '60000' }), /^IDEMPOTENCY_CLAIM_WAIT_MS="60000" is not valid/);
    assert.match(refusal({ DATABASE_POOLING: 'pgbouncer' }), /^DATABASE_POOLING="pgbouncer" is not valid/);
    assert.match(refusal({ GATEWAY_TIMEOUT_MS: '5000.5' }), /^GATEWAY_TIMEOUT_MS="5000.5" is not valid/);
  });

  it('refuses a negative or out-of-bounds value', () => {
    assert.match(
      refusal({ GATEWAY_TIMEOUT_MS: '-5' }),
      /^GATEWAY_TIMEOUT_MS="-5" is not valid: expected a whole number of milliseconds from 100 to 120000$/,
    );
    assert.match(refusal({ TRUST_PROXY: '-1' }), /^TRUST_PROXY="-1" is not valid/);
    assert.match(
      refusal({ JOBS_RECONCILE_SECONDS: '0' }),
      /^JOBS_RECONCILE_SECONDS="0" is not valid: expected a whole number of seconds from 1 to 86400$/,
    );
    assert.match(refusal({ PORT: '70000' }), /^PORT="70000" is not valid/);
  });

  it('refuses a lease no longer than a gateway call can take (timeout × tries), naming both', () => {
    assert.equal(MAX_TRIES_PER_GATEWAY_CALL, 3);
    // 8000 ms outlasts one 5 s try, but not Stripe's three.
    assert.equal(
      refusal({ IDEMPOTENCY_LEASE_MS: '8000' }),
      'IDEMPOTENCY_LEASE_MS=8000 must be longer than one gateway call can take (GATEWAY_TIMEOUT_MS=5000 × 3 tries = 15000 ms): raise IDEMPOTENCY_LEASE_MS above 15000 or lower GATEWAY_TIMEOUT_MS',
    );
    assert.match(refusal({ IDEMPOTENCY_LEASE_MS: '15000' }), /^IDEMPOTENCY_LEASE_MS=15000 must be longer/);
    assert.equal(parseServerEnv({ IDEMPOTENCY_LEASE_MS: '15001' }).IDEMPOTENCY_LEASE_MS, 15001);
    assert.match(
      refusal({ GATEWAY_TIMEOUT_MS: '10000' }),
      /^IDEMPOTENCY_LEASE_MS=30000 must be longer .*GATEWAY_TIMEOUT_MS=10000 × 3 tries = 30000 ms/,
    );
    assert.match(refusal({ REFUND_LEASE_MS: '10000', GATEWAY_TIMEOUT_MS: '4000' }), /^REFUND_LEASE_MS=10000 must be longer/);
    // What the drills and the soak run with.
    assert.doesNotThrow(() => parseServerEnv({ IDEMPOTENCY_LEASE_MS: '16000', REFUND_LEASE_MS: '20000' }));
    assert.doesNotThrow(() => parseServerEnv({ IDEMPOTENCY_LEASE_MS: '7000', GATEWAY_TIMEOUT_MS: '2000', REFUND_LEASE_MS: '10000' }));
  });

  it('refuses a value outside its set: a flag is 1 or 0, not "true"', () => {
    assert.equal(refusal({ PAYONCE_DEMO: 'true' }), 'PAYONCE_DEMO="true" is not valid: expected 1 (on) or 0 (off)');
    assert.equal(refusal({ NODE_ENV: 'prod' }), 'NODE_ENV="prod" is not valid: expected one of development, production, test');
    assert.match(refusal({ PAYONCE_JOBS: 'no' }), /^PAYONCE_JOBS="no" is not valid: expected one of on, off$/);
  });

  it('refuses malformed URLs, test buyers and WeChat Pay keys', () => {
    assert.match(
      refusal({ PUBLIC_BASE_URL: 'pay.example.com' }),
      /^PUBLIC_BASE_URL="pay.example.com" is not valid: expected a http or https URL/,
    );
    assert.match(
      refusal({ ALIPAY_TEST_BUYERS: '{"ok":"x"}' }),
      /^ALIPAY_TEST_BUYERS=.* expected JSON naming ok, insufficient_funds and account_restricted/,
    );
    assert.match(
      refusal({ WECHATPAY_API_V3_KEY: 'short' }),
      /^WECHATPAY_API_V3_KEY \(5 characters, not shown\) is not valid: expected exactly 32 bytes/,
    );
  });

  it('takes a highly available PostgreSQL by all its hosts, and refuses a broken host list', () => {
    const ha = 'postgres://u:p@db1:5432,db2:6432/payonce?target_session_attrs=primary';
    assert.equal(parseServerEnv({ DATABASE_URL: ha }).DATABASE_URL, ha);
    assert.match(
      refusal({ DATABASE_URL: 'postgres://u:p@db1:5432,,db2/payonce' }),
      /^DATABASE_URL .* expected a postgres or postgresql URL/,
    );
    assert.match(refusal({ DATABASE_URL: 'postgres://u:p@db1:5432,db2:99999/payonce' }), /^DATABASE_URL .* expected a postgres/);
  });

  it('never prints a secret', () => {
    const line = refusal({ DATABASE_URL: 'mysql://root:hunter2@db/payonce' });
    assert.match(line, /^DATABASE_URL \(\d+ characters, not shown\) is not valid: expected a postgres or postgresql URL/);
    assert.doesNotMatch(line, /hunter2/);
  });

  it('reads a gateway’s fee contract, and refuses one it cannot read with what is wrong', () => {
    assert.equal(parseServerEnv({ ALIPAY_FEE: 'rate=0.6%;refund=pro_rata' }).ALIPAY_FEE?.ratePpm, 6000);
    assert.equal(
      refusal({ STRIPE_FEE: 'rate=3.4' }),
      'STRIPE_FEE="rate=3.4" is not valid: expected a fee contract such as rate=0.6%;refund=pro_rata (rate: a percentage such as 0.6%, got 3.4)',
    );
  });

  it('refuses half a gateway, naming what is missing', () => {
    assert.equal(
      refusal({ STRIPE_SECRET_KEY: 'sk_test_x', STRIPE_ACCOUNT_ID: 'acct_1' }),
      'stripe is half configured: STRIPE_WEBHOOK_SECRET is not set — set all of STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET, STRIPE_ACCOUNT_ID, or none to switch stripe off',
    );
  });

  it('refuses production without a long enough SESSION_SECRET, and lists every problem on one line', () => {
    assert.match(refusal({ NODE_ENV: 'production' }), /^SESSION_SECRET is not set: .*openssl rand -base64 32/);
    const line = refusal({ NODE_ENV: 'production', SESSION_SECRET: 'k'.repeat(32), TRUST_PROXY: 'x', PAYONCE_DEMO: 'yes' });
    assert.match(line, /^TRUST_PROXY="x" is not valid: .*; PAYONCE_DEMO="yes" is not valid: /);
  });
});

describe("the server's start (instrumentation.ts)", () => {
  /** Runs register() as `next start` would, in a process of its own, with no database to reach. */
  function register(env: Record<string, string>) {
    const childEnv: NodeJS.ProcessEnv = { PATH: process.env.PATH, NODE_ENV: 'development', NEXT_RUNTIME: 'nodejs', ...env };
    return spawnSync(process.execPath, ['--import', 'tsx', '-e', "await (await import('./instrumentation.ts')).register()"], {
      env: childEnv,
      encoding: 'utf8',
      timeout: 60_000,
    });
  }

  it('ends with exit code 1 and one line naming the variable, its value and what is expected', () => {
    const result = register({ IDEMPOTENCY_LEASE_MS: 'abc' });
    assert.equal(result.status, 1, result.stderr);
    assert.deepEqual(result.stderr.trim().split('\n'), [
      'PayOnce cannot start: IDEMPOTENCY_LEASE_MS="abc" is not valid: expected a whole number of milliseconds from 1000 to 600000',
    ]);
  });

  it('starts with good values (and no database configured, it stops there)', () => {
    const result = register({ IDEMPOTENCY_LEASE_MS: '16000', PAYONCE_DEMO: '1' });
    assert.equal(result.status, 0, result.stderr);
  });
});
