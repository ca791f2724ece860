/**
 * A whole PayOnce for one test file: real PostgreSQL (DATABASE_URL, set by `npm test` to a fresh
 * database), the PSP sandbox, and the app's own HTTP handlers served on a real socket. Only the Next
 * shell around the handlers is left out here; the browser tests cover it.
 */
import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { openDatabase, type Database, type Transaction } from '@/db/client';
import { runMigrations } from '@/db/migrate';
import { startSandbox } from '@/sandbox/server';
import { handleGatewayNotification } from '@/server/checkout/notifications';
import { FaultInjector } from '@/server/demo/faults';
import { sandboxLedger } from '@/server/payments/ledger';
import { createMetrics, instrumentGateway, observeGuard } from '@/server/metrics/prometheus';
import { createCheckoutIdempotencyStore, type CheckoutServices } from '@/server/checkout/services';
import type { OrderCaps } from '@/server/checkout/orders';
import type { RateLimitPolicy } from '@/server/http/rate-limit';
import { DEFAULT_IDEMPOTENCY_OPTIONS, type IdempotencyOptions, type IdempotencyStore } from '@payonce/idempotency';
import { feeContractsFromEnv, gatewaysFromEnv } from '@/server/payments';
import { sandboxCredentialsToEnv } from '@/server/payments/sandbox-credentials';
import type { GatewayId, TestBuyer } from '@/server/payments/gateway';
import { createTrpcHandler } from '@/server/trpc/http';
import { registerStripeWebhookEndpoint } from '@/scripts/stripe-listen';
import Stripe from 'stripe';
import { handleOperatorSession } from '@/server/operators/http';
import { waitFor } from './harness';
import { serveFetch } from './serve-fetch';

export function requireDatabaseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url) {
    throw new Error('DATABASE_URL is not set: run the tests with `npm test`, which provides a fresh database.');
  }
  return url;
}

export interface LedgerCharge {
  gateway: string;
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  status: string;
  gatewayTradeNo: string | null;
  createdAt: string;
}

export interface Ledger {
  charges: LedgerCharge[];
  notifications: { gateway: string; outTradeNo: string; attempt: number; acknowledged: boolean; at: string }[];
  refunds: { gateway: string; outTradeNo: string; amountMinor: number; currency: string; status: string; refundId: string }[];
}

export interface ApiResponse<T = unknown> {
  status: number;
  headers: Headers;
  text: string;
  json: T;
}

/** One anonymous customer: a cookie jar over raw HTTP, so every status and header is visible. */
export class ApiCustomer {
  cookie: string | undefined;

  constructor(private readonly baseUrl: string) {}

  async send<T = any>(
    method: 'GET' | 'POST',
    procedure: string,
    options: { input?: unknown; key?: string | null; rawBody?: string; headers?: Record<string, string>; signal?: AbortSignal } = {},
  ): Promise<ApiResponse<T>> {
    // Like the page, which loads the catalogue first: a mutation needs an established session.
    if (method === 'POST' && !this.cookie && !options.headers?.['x-no-session']) await this.query('checkout.products');
    const headers: Record<string, string> = { ...options.headers };
    delete headers['x-no-session'];
    if (this.cookie) headers.cookie = this.cookie;
    if (options.key !== undefined && options.key !== null) headers['idempotency-key'] = options.key;
    let url = `${this.baseUrl}/api/trpc/${procedure}`;
    let body: string | undefined;
    if (method === 'GET') {
      if (options.input !== undefined) url += `?input=${encodeURIComponent(JSON.stringify(options.input))}`;
    } else {
      headers['content-type'] = 'application/json';
      body = options.rawBody ?? JSON.stringify(options.input ?? null);
    }
    const response = await fetch(url, { method, headers, body, signal: options.signal });
    const setCookie = response.headers.getSetCookie()[0];
    if (setCookie) this.cookie = setCookie.split(';')[0];
    const text = await response.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: response.status, headers: response.headers, text, json };
  }

  mutate<T = any>(procedure: string, input: unknown, key: string | null = randomUUID()) {
    return this.send<T>('POST', procedure, { input, key });
  }

  query<T = any>(procedure: string, input?: unknown) {
    return this.send<T>('GET', procedure, { input });
  }

  /** Creates an order for `items` and returns its id and out_trade_no (asserting success). */
  async createOrder(items: { sku: string; quantity: number }[] = [{ sku: 'MUG-CELADON', quantity: 1 }]) {
    const response = await this.mutate('checkout.createOrder', { items });
    if (response.status !== 201) throw new Error(`createOrder answered ${response.status}: ${response.text}`);
    return response.json.result.data as { orderId: string; outTradeNo: string; amountMinor: number; currency: string };
  }

  /**
   * checkout.pay as the sandbox's barcode / saved-card payment: test buyer `ok` unless told otherwise.
   * `buyer: null` sends no test buyer (the buyer's own step, 202 awaiting_buyer), with `buyerStep` if given.
   */
  pay(orderId: string, options: { buyer?: TestBuyer | null; buyerStep?: string; key?: string; gateway?: string } = {}) {
    const buyer = options.buyer === undefined ? 'ok' : options.buyer;
    return this.mutate(
      'checkout.pay',
      {
        orderId,
        gateway: options.gateway ?? 'alipay',
        ...(buyer ? { buyer } : {}),
        ...(options.buyerStep ? { buyerStep: options.buyerStep } : {}),
      },
      options.key ?? randomUUID(),
    );
  }
}

export interface TestStack {
  appUrl: string;
  sandboxUrl: string;
  db: Database;
  /** Raw SQL for assertions on tables. */
  sql: postgres.Sql;
  services: CheckoutServices;
  store: IdempotencyStore<Transaction>;
  /** With `faults: true`: the injector wired in as the checkout's fault points, to arm. */
  faults?: FaultInjector;
  customer(): ApiCustomer;
  ledger(outTradeNo?: string): Promise<Ledger>;
  /** The sandbox's Stripe account, and the webhook endpoint the stack registered for the app on it. */
  stripe: { secretKey: string; accountId: string; webhookSecret: string; webhookEndpointId: string; client: Stripe };
  /** Arms a fault on the sandbox (POST /sandbox/faults). */
  sandboxFault(spec: {
    gateway?: string;
    operation?: string;
    action: string;
    delayMs?: number;
    times?: number;
    outTradeNo?: string;
  }): Promise<void>;
  succeededCharges(outTradeNo: string): Promise<LedgerCharge[]>;
  close(): Promise<void>;
}

export async function startTestStack(
  options: {
    idempotency?: Partial<IdempotencyOptions>;
    faults?: boolean;
    gatewayTimeoutMs?: number;
    metrics?: boolean;
    /** Off unless given: the tests hammer one address and one session far past any real limit. */
    rateLimits?: RateLimitPolicy;
    /** Off unless given: tests create many orders per customer and leave them unpaid. */
    orderCaps?: OrderCaps;
    /** Where the app's own pool connects (e.g. through test/support/db-proxy.ts); the sandbox and `sql` stay on DATABASE_URL. */
    appDatabaseUrl?: string;
    /** `manual`: Stripe payments only authorise (STRIPE_CAPTURE_METHOD). */
    stripeCaptureMethod?: 'automatic' | 'manual';
    /** Turns the merchant's API on with this bearer token (MERCHANT_API_TOKEN). */
    merchantApiToken?: string;
  } = {},
): Promise<TestStack> {
  const databaseUrl = requireDatabaseUrl();
  await runMigrations(databaseUrl);
  // Notifications are retried on Alipay's schedule compressed a thousandfold: 4 min → 240 ms.
  const sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001 });
  // Configured exactly as the app is: the sandbox console's credentials, as environment variables.
  const credentials = (await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as Parameters<typeof sandboxCredentialsToEnv>[0];
  const gatewayEnv: Record<string, string> = sandboxCredentialsToEnv(credentials);
  if (options.gatewayTimeoutMs) gatewayEnv.GATEWAY_TIMEOUT_MS = String(options.gatewayTimeoutMs);
  if (options.stripeCaptureMethod) gatewayEnv.STRIPE_CAPTURE_METHOD = options.stripeCaptureMethod;

  const handle = openDatabase(options.appDatabaseUrl ?? databaseUrl, { max: 20 });
  const sql = options.appDatabaseUrl ? postgres(databaseUrl, { max: 4, onnotice: () => {} }) : handle.sql;
  const store = createCheckoutIdempotencyStore(handle.sql);
  const metrics = options.metrics ? createMetrics() : undefined;
  const instrumented = (env: Record<string, string>) => {
    const gateways = gatewaysFromEnv(env);
    return metrics ? Object.fromEntries(Object.entries(gateways).map(([id, g]) => [id, instrumentGateway(g, metrics)])) : gateways;
  };
  const faults = options.faults ? new FaultInjector() : undefined;
  const services: CheckoutServices = {
    db: handle.db,
    idempotencyStore: store,
    idempotencyOptions: {
      ...DEFAULT_IDEMPOTENCY_OPTIONS,
      ...options.idempotency,
      ...(metrics ? { observe: observeGuard(metrics) } : {}),
    },
    gateways: instrumented(gatewayEnv), // rebuilt below with the Stripe endpoint's signing secret
    feeContracts: feeContractsFromEnv(gatewayEnv),
    publicBaseUrl: 'http://127.0.0.1:1', // replaced once the server has its port
    ...(faults ? { faults } : {}),
    ...(metrics ? { metrics } : {}),
    ...(options.rateLimits ? { rateLimits: options.rateLimits } : {}),
    ...(options.orderCaps ? { orderCaps: options.orderCaps } : {}),
    ...(options.merchantApiToken ? { merchantApiToken: options.merchantApiToken } : {}),
  };
  const trpc = createTrpcHandler({ services: () => services, sessionSecret: () => 'test-session-secret' });
  const app = await serveFetch((pathname) => {
    if (pathname.startsWith('/api/trpc/')) return trpc;
    if (pathname === '/api/operator/session') return (request) => handleOperatorSession(request, services.db, undefined);
    const webhook = /^\/api\/webhooks\/(alipay|wechatpay|stripe|2c2p)$/.exec(pathname)?.[1] as GatewayId | undefined;
    if (webhook) return (request) => handleGatewayNotification(services, webhook, request);
    return undefined;
  });
  services.publicBaseUrl = app.url;
  // Stripe delivers events only to registered endpoints: as scripts/stack.ts does at start (what
  // `stripe listen` does), the app's endpoint is registered and its signing secret configured.
  const stripeWebhookSecret = await registerStripeWebhookEndpoint(gatewayEnv, app.url);
  if (!stripeWebhookSecret) throw new Error('the sandbox offered no Stripe credentials');
  gatewayEnv.STRIPE_WEBHOOK_SECRET = stripeWebhookSecret;
  services.gateways = instrumented(gatewayEnv);
  const stripeApi = new URL(gatewayEnv.STRIPE_API_BASE ?? sandbox.url);
  const stripeClient = new Stripe(gatewayEnv.STRIPE_SECRET_KEY ?? '', { host: stripeApi.hostname, port: stripeApi.port, protocol: 'http' });
  const webhookUrl = new URL('/api/webhooks/stripe', app.url).toString();
  const endpoint = (await stripeClient.webhookEndpoints.list({ limit: 100 })).data.find((e) => e.url === webhookUrl);
  if (!endpoint) throw new Error(`the Stripe webhook endpoint for ${webhookUrl} was not registered`);
  services.gatewayLedger = sandboxLedger(sandbox.url);
  services.testBuyerScanUrl = new URL('/sandbox/scan', sandbox.url).toString();

  const ledger = async (outTradeNo?: string): Promise<Ledger> => {
    const query = outTradeNo ? `?outTradeNo=${encodeURIComponent(outTradeNo)}` : '';
    return (await (await fetch(`${sandbox.url}/ledger${query}`)).json()) as Ledger;
  };

  return {
    appUrl: app.url,
    sandboxUrl: sandbox.url,
    db: handle.db,
    sql,
    services,
    store,
    ...(faults ? { faults } : {}),
    customer: () => new ApiCustomer(app.url),
    stripe: {
      secretKey: gatewayEnv.STRIPE_SECRET_KEY ?? '',
      accountId: gatewayEnv.STRIPE_ACCOUNT_ID ?? '',
      webhookSecret: stripeWebhookSecret,
      webhookEndpointId: endpoint.id,
      client: stripeClient,
    },
    ledger,
    async sandboxFault(spec) {
      const response = await fetch(`${sandbox.url}/sandbox/faults`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(spec),
      });
      if (response.status !== 201) throw new Error(`arming a sandbox fault failed: ${await response.text()}`);
    },
    succeededCharges: async (outTradeNo) => (await ledger(outTradeNo)).charges.filter((charge) => charge.status === 'succeeded'),
    async close() {
      // The endpoint goes with the app: nothing is left to deliver to a closed port.
      await stripeClient.webhookEndpoints.del(endpoint.id).catch(() => {});
      await app.close();
      await sandbox.close();
      await handle.sql.end({ timeout: 5 });
      if (sql !== handle.sql) await sql.end({ timeout: 5 });
    },
  };
}

/** Polls `check` until it returns a value other than undefined, or fails after `timeoutMs`. */
export function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 10_000, what = 'condition'): Promise<T> {
  return waitFor(what, check, timeoutMs);
}
