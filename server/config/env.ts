/**
 * The app server's configuration: every environment variable it reads, with its type, default and
 * bounds, in one schema. .env.example documents the same list (test/unit/env.test.ts keeps the two
 * equal). You probably only need this file to add a variable: add it here and to .env.example.
 *
 * Validated once per process: instrumentation.ts parses it as the server starts, so a typo ("abc",
 * a negative lease, PAYONCE_DEMO=true) stops the start with one line naming the variable, its value
 * and what is expected, rather than turning into NaN or a silent default later. The result is kept
 * on globalThis because Next loads instrumentation and route handlers as separate module instances.
 * Read it at run time only (serverEnv() inside a function), never at a route module's top level:
 * `next build` evaluates route modules with nothing configured.
 *
 * Read raw elsewhere, on purpose: NEXT_RUNTIME and NEXT_PHASE, which Next sets itself
 * (instrumentation.ts; NEXT_RUNTIME is replaced at build time, which keeps Node-only imports out of
 * the edge bundle); NODE_ENV in proxy.ts, whose CSP must fit the React build that was bundled;
 * NEXT_DIST_DIR in next.config.mjs, which Next loads before any TypeScript.
 */
import { z } from 'zod';
import { postgresUrlParts } from '@/db/url';
import { parseFeeContract, type FeeContract } from '@/server/config/fee-contract';

/**
 * The most tries one gateway call may make, each with its own timeout (GATEWAY_TIMEOUT_MS). Stripe's
 * SDK retries timeouts and 5xx itself with the same Idempotency-Key (1 + maxNetworkRetries 2, its
 * own default); the other adapters try once. Whatever waits on a gateway call — the idempotency
 * lease, a refund worker's claim — must outlast this many timeouts (checked below).
 */
export const MAX_TRIES_PER_GATEWAY_CALL = 3;

/** process.env, or a test's or a script's own variables. */
export type RawEnv = Readonly<Record<string, string | undefined>>;

// ---------------------------------------------------------------------------------------------
// One variable

/** Unset, empty or blank: the default applies (scripts switch a variable off with ''). */
function isUnset(raw: string | undefined): raw is undefined {
  return raw === undefined || raw.trim() === '';
}

/**
 * An optional variable: `parse` returns the value, or undefined for a value it refuses, which then
 * fails the start with "expected {expected}".
 */
function optional<T>(expected: string, parse: (raw: string) => T | undefined) {
  return z
    .string()
    .optional()
    .transform((raw, ctx): T | undefined => {
      if (isUnset(raw)) return undefined;
      const value = parse(raw);
      if (value === undefined) {
        ctx.addIssue({ code: 'custom', message: expected });
        return z.NEVER;
      }
      return value;
    });
}

/** A variable with a default, used when it is unset. */
function withDefault<T>(fallback: T, expected: string, parse: (raw: string) => T | undefined) {
  return optional(expected, parse).transform((value): T => value ?? fallback);
}

function wholeNumber(raw: string, min: number, max: number): number | undefined {
  if (!/^\s*[0-9]+\s*$/.test(raw)) return undefined;
  const value = Number(raw);
  return value >= min && value <= max ? value : undefined;
}

/** A whole number of `unit` from `min` to `max`; `fallback` when unset. */
function integer(fallback: number, min: number, max: number, unit: string) {
  return withDefault(fallback, `a whole number of ${unit} from ${min} to ${max}`, (raw) => wholeNumber(raw, min, max));
}

/** A limit where 0 switches the protection off. */
function limit(fallback: number, max: number, unit: string) {
  return withDefault(fallback, `a whole number of ${unit} from 0 (off) to ${max}`, (raw) => wholeNumber(raw, 0, max));
}

/**
 * The merchant's fee contract with a gateway (server/config/fee-contract.ts): what 对账 checks each
 * statement line's fee against. Unset: fees are summed and shown, not checked.
 */
function feeContract() {
  return z
    .string()
    .optional()
    .transform((raw, ctx): FeeContract | undefined => {
      if (isUnset(raw)) return undefined;
      const parsed = parseFeeContract(raw);
      if (typeof parsed !== 'string') return parsed;
      ctx.addIssue({ code: 'custom', message: `a fee contract such as rate=0.6%;refund=pro_rata (${parsed})` });
      return z.NEVER;
    });
}

function port(fallback: number) {
  return integer(fallback, 1, 65_535, 'port');
}

/** 1 on, 0 off; anything else ("true", "yes") is a typo, not "off". */
function flag() {
  return withDefault(false, '1 (on) or 0 (off)', (raw) => (raw.trim() === '1' ? true : raw.trim() === '0' ? false : undefined));
}

function oneOf<const T extends readonly [string, ...string[]]>(values: T, fallback: T[number]) {
  return withDefault<T[number]>(fallback, `one of ${values.join(', ')}`, (raw) => values.find((value) => value === raw.trim()));
}

function url(protocols: readonly string[], example: string) {
  return optional(`a ${protocols.map((p) => p.replace(/:$/, '')).join(' or ')} URL such as ${example}`, (raw) => {
    try {
      return protocols.includes(new URL(raw.trim()).protocol) ? raw.trim() : undefined;
    } catch {
      return undefined;
    }
  });
}

const HTTP = ['http:', 'https:'];

/** A postgres(ql):// URL, with one host or libpq's comma-separated list of them (db/url.ts). */
function postgresUrl(example: string) {
  return optional(`a postgres or postgresql URL such as ${example}`, (raw) => (postgresUrlParts(raw) ? raw.trim() : undefined));
}

/** A comma-separated list of http(s) origins (scheme, host and port; no path). */
function origins(example: string) {
  return optional(`comma-separated http or https origins such as ${example}`, (raw) => {
    const list = raw
      .split(',')
      .map((item) => item.trim())
      .filter(Boolean);
    try {
      const parsed = list.map((item) => new URL(item));
      const valid = parsed.every((u, i) => HTTP.includes(u.protocol) && u.origin === list[i]!.replace(/\/$/, ''));
      return valid && list.length > 0 ? parsed.map((u) => u.origin) : undefined;
    } catch {
      return undefined;
    }
  });
}

function text() {
  return optional('a non-empty value', (raw) => raw);
}

/** The sandbox's test buyers of one gateway, as the sandbox console prints them. */
function testBuyers() {
  const shape = z.object({ ok: z.string(), insufficient_funds: z.string(), account_restricted: z.string() });
  return optional(
    'JSON naming ok, insufficient_funds and account_restricted, e.g. {"ok":"…","insufficient_funds":"…","account_restricted":"…"}',
    (raw) => {
      try {
        const parsed = shape.safeParse(JSON.parse(raw));
        return parsed.success ? parsed.data : undefined;
      } catch {
        return undefined;
      }
    },
  );
}

// ---------------------------------------------------------------------------------------------
// Every variable

/**
 * 30 days. The session is the only key to an anonymous customer's orders, so a copied cookie should
 * not open them for ever; but it must outlive everything a customer may come back for: an open
 * order (30 minutes), its idempotency keys (24 hours) and a look at a paid order's receipt a few
 * weeks later. The lifetime is absolute (not renewed on use): a leaked cookie dies on a known date.
 */
export const DEFAULT_SESSION_MAX_AGE_SECONDS = 30 * 24 * 60 * 60;
/** HMAC-SHA256 keys shorter than this are guessable offline from one cookie; `openssl rand -base64 32` gives 44. */
export const MIN_SESSION_SECRET_LENGTH = 32;

/** Values never printed in an error: a log line must not leak them. */
const SECRETS = new Set([
  'DATABASE_URL',
  'SESSION_SECRET',
  'ALIPAY_APP_PRIVATE_KEY',
  'WECHATPAY_MERCHANT_PRIVATE_KEY',
  'WECHATPAY_API_V3_KEY',
  'STRIPE_SECRET_KEY',
  'STRIPE_WEBHOOK_SECRET',
  'TWOC2P_SECRET_KEY',
  'TWOC2P_MERCHANT_PRIVATE_KEY',
  'METRICS_TOKEN',
  'MERCHANT_API_TOKEN',
]);

const variables = {
  // Database
  /** No default: `npm run dev` and the tests set it; unset, `next start` serves errors until it is. */
  /** One host, or several for a highly available PostgreSQL (host1:5432,host2:5432/payonce?target_session_attrs=primary, docs/scaling.md). */
  DATABASE_URL: postgresUrl('postgres://user:password@db.example.com:5432/payonce'),
  /** postgres.js's own default; instances × DB_POOL_MAX must stay under the server's max_connections (100 by default), or a pooler's max_client_conn. */
  DB_POOL_MAX: integer(10, 1, 1000, 'connections'),
  /**
   * session: DATABASE_URL is one PostgreSQL session per connection (the server itself, or a pooler in
   * session mode), so statements are named and prepared once per connection. transaction: it is a
   * transaction pooler (PgBouncer pool_mode=transaction before 1.21, or without max_prepared_statements),
   * which hands each transaction to any server connection: no named prepared statements. docs/scaling.md.
   */
  DATABASE_POOLING: oneOf(['session', 'transaction'] as const, 'session'),
  /** Off the usual 5432, so the embedded PostgreSQL of `npm run dev` never collides with an installed one. */
  EMBEDDED_PG_PORT: port(54329),
  /** Off: statement counting and the bench.* procedures are for `npm run bench`'s own app process only. */
  BENCH: flag(),

  // Server
  /** Next sets it (`next dev`: development, `next start`: production); anything else is a typo that would skip production's checks. */
  NODE_ENV: oneOf(['development', 'production', 'test'] as const, 'development'),
  /** Next's own default port. */
  PORT: port(3000),
  /** Unset: http://127.0.0.1:{PORT}, which only a gateway on this machine (the sandbox) can reach. */
  PUBLIC_BASE_URL: url(HTTP, 'https://pay.example.com'),
  /**
   * Further origins the checkout is served on (a second domain, a LAN name): a buyer who paid from one
   * of them is sent back there by the gateway's page, where their session is. Unset: only
   * PUBLIC_BASE_URL's, or on a local run any address the page was opened on.
   */
  PUBLIC_ORIGINS: origins('https://www.pay.example.com,http://shop.lan:3000'),
  /** Next's own default; the browser tests build elsewhere so they can run beside `npm run dev`. */
  NEXT_DIST_DIR: withDefault('.next', 'a folder name', (raw) => raw.trim()),

  // Sessions
  /** No default: production refuses to start without one; development keeps a random one in .data/. */
  SESSION_SECRET: text(),
  /** 30 days: long enough to come back for a receipt, short enough that a copied cookie dies. */
  SESSION_MAX_AGE_SECONDS: withDefault(
    DEFAULT_SESSION_MAX_AGE_SECONDS,
    `a positive whole number of seconds: unset it (30 days) or set e.g. SESSION_MAX_AGE_SECONDS=${DEFAULT_SESSION_MAX_AGE_SECONDS}`,
    (raw) => (/^[1-9][0-9]{0,9}$/.test(raw.trim()) ? Number(raw.trim()) : undefined),
  ),

  // Gateways
  /** 5 s per try: far above a healthy gateway's answer, short enough that a stuck one is given up within a lease. */
  GATEWAY_TIMEOUT_MS: integer(5000, 100, 120_000, 'milliseconds'),
  /** Unset: no ledger badge in 幕后 and no buyer drills; real gateways have no sandbox ledger. */
  PSP_SANDBOX_URL: url(HTTP, 'http://127.0.0.1:4010'),
  // A gateway is offered when all its credentials are set (test buyers and STRIPE_API_BASE are optional).
  ALIPAY_APP_ID: text(),
  ALIPAY_APP_PRIVATE_KEY: text(),
  ALIPAY_PUBLIC_KEY: text(),
  ALIPAY_GATEWAY_URL: url(HTTP, 'https://openapi.alipay.com/gateway.do'),
  ALIPAY_TEST_BUYERS: testBuyers(),
  ALIPAY_FEE: feeContract(),
  WECHATPAY_MCHID: text(),
  WECHATPAY_APPID: text(),
  WECHATPAY_MERCHANT_SERIAL_NO: text(),
  WECHATPAY_MERCHANT_PRIVATE_KEY: text(),
  /** AES-256-GCM key of the notifications' resource: WeChat Pay's APIv3 key is exactly 32 bytes. */
  WECHATPAY_API_V3_KEY: optional('exactly 32 bytes (the APIv3 key set in the merchant platform)', (raw) =>
    new TextEncoder().encode(raw).length === 32 ? raw : undefined,
  ),
  WECHATPAY_PLATFORM_PUBLIC_KEY: text(),
  WECHATPAY_PLATFORM_SERIAL_NO: text(),
  WECHATPAY_BASE_URL: url(HTTP, 'https://api.mch.weixin.qq.com'),
  WECHATPAY_TEST_BUYERS: testBuyers(),
  WECHATPAY_FEE: feeContract(),
  STRIPE_SECRET_KEY: text(),
  STRIPE_WEBHOOK_SECRET: text(),
  STRIPE_ACCOUNT_ID: text(),
  /** Unset: the SDK talks to api.stripe.com; the sandbox sets its own address. */
  STRIPE_API_BASE: url(HTTP, 'http://127.0.0.1:4010'),
  STRIPE_TEST_BUYERS: testBuyers(),
  STRIPE_FEE: feeContract(),
  /** Unset: no card step on the page (only test buyers can pay by Stripe). pk_test_… / pk_live_… from the Dashboard. */
  STRIPE_PUBLISHABLE_KEY: text(),
  /** Stripe.js, loaded by the page's card step; the sandbox serves its own copy. */
  STRIPE_JS_URL: url(HTTP, 'https://js.stripe.com/v3/'),
  /**
   * `automatic`: a Stripe payment takes the money at once. `manual`: it only holds it (the order is
   * `authorized`) and the merchant captures at shipment, or releases it (merchant.capture / .release).
   */
  STRIPE_CAPTURE_METHOD: oneOf(['automatic', 'manual'] as const, 'automatic'),
  TWOC2P_MERCHANT_ID: text(),
  TWOC2P_SECRET_KEY: text(),
  TWOC2P_BASE_URL: url(HTTP, 'https://pgw.2c2p.com'),
  /** Refunds: 2C2P's Payment Maintenance API, its own URL (not under TWOC2P_BASE_URL). */
  TWOC2P_MAINTENANCE_URL: url(HTTP, 'https://t.2c2p.com/PaymentAction/2.0/action'),
  /**
   * 对账: where 2C2P's daily reconciliation report is fetched (2C2P drops it on SFTP; the sandbox serves
   * it over HTTP). Unset: 2C2P is not reconciled by `npm run reconcile`.
   */
  TWOC2P_SETTLEMENT_REPORT_URL: url(HTTP, 'https://sftp.2c2p.com/output'),
  /** The merchant's RSA private key whose public key is uploaded to 2C2P's merchant portal (PEM). */
  TWOC2P_MERCHANT_PRIVATE_KEY: text(),
  /** 2C2P's public key from the merchant portal (Account > Options > 2C2P Public Keys > JWE), PEM. */
  TWOC2P_PUBLIC_KEY: text(),
  TWOC2P_TEST_BUYERS: testBuyers(),
  TWOC2P_FEE: feeContract(),

  // Idempotency
  /** 30 s: outlasts a gateway call's every try (3 × 5 s) with room to settle, and keeps the wait after a real crash short. */
  IDEMPOTENCY_LEASE_MS: integer(30_000, 1000, 600_000, 'milliseconds'),
  /** 1 s: how long a duplicate waits on a claim still in its first transaction before 409 + Retry-After (docs/lifecycle.md). */
  IDEMPOTENCY_CLAIM_WAIT_MS: integer(1000, 0, 10_000, 'milliseconds'),
  /**
   * `refuse` (400): a mutation without an Idempotency-Key is refused. `run_unguarded`: for the weeks in
   * which older clients are taught to send keys, it runs unguarded (the order-level guard still holds),
   * is logged and counted (payonce_idempotency_guard_total{outcome="unguarded"}); turn it back after.
   */
  IDEMPOTENCY_MISSING_KEY: oneOf(['refuse', 'run_unguarded'] as const, 'refuse'),

  // Jobs
  /** On: every instance shares the job queue; `off` for a process that must not run jobs (the benchmark's). */
  PAYONCE_JOBS: oneOf(['on', 'off'] as const, 'on'),
  /** 15 s: twice per default lease, so a payment stuck by a crash is settled soon after its lease runs out. */
  JOBS_RECONCILE_SECONDS: integer(15, 1, 86_400, 'seconds'),
  /** 2 s: a confirmation email goes out within seconds of the payment. */
  JOBS_OUTBOX_SECONDS: integer(2, 1, 86_400, 'seconds'),
  /** Hourly: keys live 24 h, so an hour late costs a little disk and nothing else. */
  JOBS_KEY_CLEANUP_SECONDS: integer(3600, 1, 86_400, 'seconds'),
  /** 2 s: money that must go back starts back within seconds. */
  JOBS_REFUND_SECONDS: integer(2, 1, 86_400, 'seconds'),
  /** 10 min: a gateway in doubt about a close usually answers within minutes; stock is not held for ever. */
  ORDER_EXPIRY_CLOSE_GRACE_MS: integer(600_000, 0, 86_400_000, 'milliseconds'),
  /** 2 s, doubling per attempt: quick after a blip, gentle with a gateway that is down. */
  REFUND_BACKOFF_MS: integer(2000, 1, 3_600_000, 'milliseconds'),
  /** 60 s: outlasts one refund call's every try (3 × 5 s) several times over; a crashed worker's refund waits this long. */
  REFUND_LEASE_MS: integer(60_000, 1000, 3_600_000, 'milliseconds'),
  /**
   * 25 s: how long a SIGTERM'd instance lets its requests in flight finish (server/http/drain.ts),
   * inside Kubernetes' default 30 s grace; long enough for a payment's gateway call (3 × 5 s).
   */
  SHUTDOWN_GRACE_MS: integer(25_000, 0, 600_000, 'milliseconds'),

  // Rate limits
  /** 30 a minute: a whole checkout is a handful of calls, so only a script meets it. */
  RATE_LIMIT_SESSION_PER_MINUTE: limit(30, 1_000_000, 'mutations a minute'),
  /** 300 a minute: an office or a carrier's NAT puts many shoppers behind one address. */
  RATE_LIMIT_ADDRESS_PER_MINUTE: limit(300, 1_000_000, 'mutations a minute'),
  /** 0: no proxy is trusted, so X-Forwarded-For (the client's to forge) is ignored and the socket's address counts. */
  TRUST_PROXY: limit(0, 16, 'proxies'),
  /** 5 unpaid orders at once is already a lot of tabs; each holds its stock until it expires. */
  OPEN_ORDERS_PER_CUSTOMER: limit(5, 10_000, 'orders'),
  /** 20 units of one product is more than a household buys from this catalogue. */
  OPEN_ORDER_HELD_UNITS_PER_SKU: limit(20, 1_000_000, 'units'),
  /** 30: six customers' worth from one address (a household, an office NAT); sessions are free, addresses are not. */
  OPEN_ORDERS_PER_ADDRESS: limit(30, 1_000_000, 'orders'),
  /** 100: five customers' worth of one product from one address. */
  OPEN_ORDER_HELD_UNITS_PER_SKU_PER_ADDRESS: limit(100, 1_000_000, 'units'),
  /** 30 minutes: time to scan a code or find a card, short enough that abandoned orders give their stock back soon. */
  ORDER_TTL_SECONDS: integer(1800, 60, 7 * 86_400, 'seconds'),

  // Demo and faults
  /** Off: demo mode opens every customer's mail and the fault switchboard to anyone. */
  PAYONCE_DEMO: flag(),
  /** Off: fault injection lets anyone crash the server; the drills and the soak turn it on. */
  CHECKOUT_FAULTS: flag(),

  // The merchant's API
  /**
   * Unset: merchant.capture and merchant.release answer 401 for everyone. The merchant's back office
   * sends `Authorization: Bearer <token>` (`openssl rand -base64 32`); at least 32 characters.
   */
  MERCHANT_API_TOKEN: optional('at least 32 characters (openssl rand -base64 32)', (raw) => (raw.length >= 32 ? raw : undefined)),

  // Metrics
  /** Unset: /api/metrics needs METRICS_PUBLIC=1 or demo mode, else it is a 404. */
  METRICS_TOKEN: text(),
  /** Off: the counters tell an outsider how much the shop sells. */
  METRICS_PUBLIC: flag(),
};

/** The variables of each gateway that must be set together (the rest are optional). */
export const GATEWAY_CREDENTIALS = {
  alipay: ['ALIPAY_APP_ID', 'ALIPAY_APP_PRIVATE_KEY', 'ALIPAY_PUBLIC_KEY', 'ALIPAY_GATEWAY_URL'],
  wechatpay: [
    'WECHATPAY_MCHID',
    'WECHATPAY_APPID',
    'WECHATPAY_MERCHANT_SERIAL_NO',
    'WECHATPAY_MERCHANT_PRIVATE_KEY',
    'WECHATPAY_API_V3_KEY',
    'WECHATPAY_PLATFORM_PUBLIC_KEY',
    'WECHATPAY_PLATFORM_SERIAL_NO',
    'WECHATPAY_BASE_URL',
  ],
  stripe: ['STRIPE_SECRET_KEY', 'STRIPE_WEBHOOK_SECRET', 'STRIPE_ACCOUNT_ID'],
  '2c2p': [
    'TWOC2P_MERCHANT_ID',
    'TWOC2P_SECRET_KEY',
    'TWOC2P_BASE_URL',
    'TWOC2P_MAINTENANCE_URL',
    'TWOC2P_MERCHANT_PRIVATE_KEY',
    'TWOC2P_PUBLIC_KEY',
  ],
} as const satisfies Record<string, readonly (keyof typeof variables)[]>;

/** A rule over several variables: its message is the whole line. */
function rule(ctx: z.RefinementCtx, variable: string, line: string) {
  ctx.addIssue({ code: 'custom', path: [variable], message: line, params: { line: true } });
}

export const serverEnvSchema = z.object(variables).superRefine((env, ctx) => {
  // A gateway call may take MAX_TRIES_PER_GATEWAY_CALL timeouts: a lease that ran out first would let
  // a retry take over a request that is still waiting on the gateway.
  const callBudgetMs = env.GATEWAY_TIMEOUT_MS * MAX_TRIES_PER_GATEWAY_CALL;
  const budget = `GATEWAY_TIMEOUT_MS=${env.GATEWAY_TIMEOUT_MS} × ${MAX_TRIES_PER_GATEWAY_CALL} tries = ${callBudgetMs} ms`;
  for (const lease of ['IDEMPOTENCY_LEASE_MS', 'REFUND_LEASE_MS'] as const) {
    if (env[lease] <= callBudgetMs) {
      rule(
        ctx,
        lease,
        `${lease}=${env[lease]} must be longer than one gateway call can take (${budget}): raise ${lease} above ${callBudgetMs} or lower GATEWAY_TIMEOUT_MS`,
      );
    }
  }

  if (env.NODE_ENV === 'production') {
    // Every instance must sign with one shared secret: a per-host fallback would make instances
    // reject each other's sessions, and a read-only filesystem would fail every request.
    const secret = env.SESSION_SECRET ?? '';
    if (secret.length < MIN_SESSION_SECRET_LENGTH) {
      rule(
        ctx,
        'SESSION_SECRET',
        `${secret ? `SESSION_SECRET is ${secret.length} characters` : 'SESSION_SECRET is not set'}: production needs at least ${MIN_SESSION_SECRET_LENGTH} random characters, the same on every instance — set SESSION_SECRET="$(openssl rand -base64 32)".`,
      );
    }
  }

  // Half a gateway's credentials is a typo in the other half, not a gateway switched off.
  for (const [gateway, names] of Object.entries(GATEWAY_CREDENTIALS)) {
    const missing = names.filter((name) => env[name] === undefined);
    if (missing.length > 0 && missing.length < names.length) {
      rule(
        ctx,
        missing[0]!,
        `${gateway} is half configured: ${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not set — set all of ${names.join(', ')}, or none to switch ${gateway} off`,
      );
    }
  }
});

export type ServerEnv = z.output<typeof serverEnvSchema>;

/** Every variable the schema reads, in its order (the order of .env.example). */
export const SERVER_ENV_VARIABLES = Object.keys(variables) as (keyof ServerEnv)[];

// ---------------------------------------------------------------------------------------------
// Parsing

/** A configuration the server must not start with. The message is one line naming every problem. */
export class EnvConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('; '));
    this.name = 'EnvConfigError';
  }
}

function describe(issue: z.core.$ZodIssue, raw: RawEnv): string {
  const name = String(issue.path[0] ?? '');
  if (issue.code === 'custom' && issue.params?.line) return issue.message;
  const value = raw[name] ?? '';
  const shown = SECRETS.has(name) ? `${name} (${value.length} characters, not shown)` : `${name}=${JSON.stringify(value)}`;
  return `${shown} is not valid: expected ${issue.message}`;
}

/** The configuration in `raw`, or an EnvConfigError naming each bad variable, its value and what is expected. */
export function parseServerEnv(raw: RawEnv): ServerEnv {
  const result = serverEnvSchema.safeParse(raw);
  if (result.success) return result.data;
  throw new EnvConfigError(result.error.issues.map((issue) => describe(issue, raw)));
}

const globalForEnv = globalThis as unknown as { __payonceServerEnv?: ServerEnv };

/** This process's configuration, parsed from process.env on first use and kept for the process. */
export function serverEnv(): ServerEnv {
  globalForEnv.__payonceServerEnv ??= parseServerEnv(process.env);
  return globalForEnv.__payonceServerEnv;
}

/** For tests that change process.env between requests: the next serverEnv() reads it again. */
export function resetServerEnv(): void {
  globalForEnv.__payonceServerEnv = undefined;
}

/** `raw` parsed when given (a test's or a script's own variables), else this process's configuration. */
export function envFrom(raw?: RawEnv): ServerEnv {
  return raw === undefined ? serverEnv() : parseServerEnv(raw);
}

/**
 * For a server's start (instrumentation.ts): a bad configuration prints one line saying what is
 * wrong and what to set, and ends the process with code 1, before it serves anyone.
 */
export function exitOnBadEnv(): void {
  try {
    serverEnv();
  } catch (error) {
    if (!(error instanceof EnvConfigError)) throw error;
    console.error(`PayOnce cannot start: ${error.message}`);
    process.exit(1);
  }
}
