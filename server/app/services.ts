/**
 * The checkout as the running app sees it: built once per process from the environment and kept on
 * `globalThis` (Next loads route handlers and instrumentation as separate module instances). Built
 * lazily, on the first request, never at module load: `next build` evaluates route modules with no
 * database around.
 */
import { getDatabase } from '@/db/client';
import { createCheckoutIdempotencyStore } from '@/server/checkout/services';
import { serverEnv } from '@/server/config/env';
import { armSandboxFault, journalFault, type DemoServices } from '@/server/demo/drills';
import { FaultInjector, faultsEnabled } from '@/server/demo/faults';
import { DEFAULT_IDEMPOTENCY_OPTIONS } from '@payonce/idempotency';
import { createMetrics, instrumentGateway, observeGuard } from '@/server/metrics/prometheus';
import { orderCapsFromEnv } from '@/server/checkout/orders';
import { feeContractsFromEnv, gatewaysFromEnv } from '@/server/payments';
import { sandboxLedger } from '@/server/payments/ledger';
import { rateLimitPolicyFromEnv } from '@/server/http/rate-limit';

/**
 * The checkout's services, plus what only the app's own control routes use (../demo/drills.ts): the
 * fault injector that /api/faults and demo mode's switchboard arm, and the PSP sandbox of local runs.
 */
export type AppServices = DemoServices;

const globalForServices = globalThis as unknown as { __payonceServices?: AppServices };

export function appServices(): AppServices {
  if (globalForServices.__payonceServices) return globalForServices.__payonceServices;
  const env = serverEnv();
  const { db, sql } = getDatabase({ url: env.DATABASE_URL, max: env.DB_POOL_MAX, pooling: env.DATABASE_POOLING });
  const metrics = createMetrics();
  const gateways = Object.fromEntries(Object.entries(gatewaysFromEnv()).map(([id, gateway]) => [id, instrumentGateway(gateway, metrics)]));
  const faultInjector = faultsEnabled()
    ? new FaultInjector({
        // The 幕后 view's row for each fault: what was broken on purpose, at which point.
        onFire: (fault, site) => journalFault(db, site, fault),
        armSandboxFault: (fault) => armSandboxFault(env.PSP_SANDBOX_URL, { ...fault }),
      })
    : undefined;
  const services: AppServices = {
    db,
    idempotencyStore: createCheckoutIdempotencyStore(sql),
    idempotencyOptions: {
      ...DEFAULT_IDEMPOTENCY_OPTIONS,
      leaseMs: env.IDEMPOTENCY_LEASE_MS,
      claimWaitMs: env.IDEMPOTENCY_CLAIM_WAIT_MS,
      missingKey: env.IDEMPOTENCY_MISSING_KEY,
      observe: observeGuard(metrics),
    },
    gateways,
    publicBaseUrl: env.PUBLIC_BASE_URL ?? `http://127.0.0.1:${env.PORT}`,
    publicOrigins: env.PUBLIC_ORIGINS,
    metrics,
    demo: env.PAYONCE_DEMO,
    pspSandboxUrl: env.PSP_SANDBOX_URL,
    ...(env.PSP_SANDBOX_URL
      ? { gatewayLedger: sandboxLedger(env.PSP_SANDBOX_URL), testBuyerScanUrl: new URL('/sandbox/scan', env.PSP_SANDBOX_URL).toString() }
      : {}),
    rateLimits: rateLimitPolicyFromEnv(),
    orderCaps: orderCapsFromEnv(),
    orderTtlSeconds: env.ORDER_TTL_SECONDS,
    ...(env.MERCHANT_API_TOKEN ? { merchantApiToken: env.MERCHANT_API_TOKEN } : {}),
    feeContracts: feeContractsFromEnv(),
    ...(faultInjector ? { faults: faultInjector, faultInjector } : {}),
  };
  if (services.demo && env.NODE_ENV === 'production') {
    // Demo mode on a production build is how the drills run, and never how customers should be
    // served: anyone may arm a crash, and the 幕后 view shows every customer's orders.
    console.warn("[payonce] DEMO MODE (PAYONCE_DEMO=1): fault injection, /mail and every order's 幕后 view are open to anyone");
  }
  if (env.IDEMPOTENCY_MISSING_KEY === 'run_unguarded') {
    // Rollout mode is for the weeks in which clients learn to send keys: said once at start, and each
    // keyless request is logged and counted (payonce_idempotency_guard_total{outcome="unguarded"}).
    console.warn(
      '[payonce] IDEMPOTENCY_MISSING_KEY=run_unguarded: a mutation without an Idempotency-Key runs unguarded (no replay); switch back to refuse once every client sends keys',
    );
  }
  globalForServices.__payonceServices = services;
  return services;
}
