/**
 * Everything the checkout needs from the outside, passed in rather than imported, so tests and the
 * benchmark can build a checkout on their own database and sandbox.
 */
import type postgres from 'postgres';
import { transactionDatabase, type Database, type Transaction } from '@/db/client';
import { type IdempotencyOptions, type IdempotencyStore } from '@payonce/idempotency';
import { createPostgresIdempotencyStore } from '@payonce/idempotency/postgres';
import type { CheckoutMetrics } from '@/server/metrics/prometheus';
import type { GatewayId, PaymentGateway } from '@/server/payments/gateway';
import type { FeeContract } from '@/server/config/fee-contract';
import type { GatewayLedger } from '@/server/payments/ledger';
import type { FaultPoints } from './fault-points';
import type { RateLimitPolicy } from '@/server/http/rate-limit';
import type { OrderCaps } from './orders';

export interface CheckoutServices {
  db: Database;
  idempotencyStore: IdempotencyStore<Transaction>;
  idempotencyOptions: IdempotencyOptions;
  /** The gateways this deployment is configured for; the others answer GATEWAY_NOT_CONFIGURED. */
  gateways: Partial<Record<GatewayId, PaymentGateway>>;
  /** The app's public base URL, where gateways deliver notifications (…/api/webhooks/{gateway}). */
  publicBaseUrl: string;
  /** PUBLIC_ORIGINS: further origins the page is served on, where a buyer may be sent back to (./return-address). */
  publicOrigins?: readonly string[];
  /** Where failures are injected (./fault-points.ts): wired in demo mode and the failure drills only. */
  faults?: FaultPoints;
  /** Demo mode (PAYONCE_DEMO=1): the 幕后 view may list and show every customer's orders. */
  demo?: boolean;
  /** The gateways' own record of an order's charges, for the 幕后 view (../payments/ledger.ts); unset, none is shown. */
  gatewayLedger?: GatewayLedger;
  /** Where a test buyer's phone scans the page's QR code: the PSP sandbox's, in local runs only. */
  testBuyerScanUrl?: string;
  /** Prometheus counters; optional so that tests and tools can run without them. */
  metrics?: CheckoutMetrics;
  /** Limits on the mutations per session and per address; absent, nothing is counted. */
  rateLimits?: RateLimitPolicy;
  /** How much one customer, and one address, may hold in unpaid orders; absent, no cap. */
  orderCaps?: OrderCaps;
  /** How long an order may stay unpaid (ORDER_TTL_SECONDS); absent, the column's default of 30 minutes. */
  orderTtlSeconds?: number;
  /** The bearer token of the merchant's API (MERCHANT_API_TOKEN); absent, that API refuses everyone. */
  merchantApiToken?: string;
  /** Each gateway's fee contract (ALIPAY_FEE, …): 对账 checks every statement line's fee against it; absent, fees are not checked. */
  feeContracts?: Partial<Record<GatewayId, FeeContract>>;
}

/** Whose idempotency keys the merchant's API holds: one merchant, its own scope, apart from every customer's. */
export const merchantScope = () => 'merchant:api-token';

/** An operator's keys (the console's clicks): their own scope, apart from every other operator's. */
export const operatorScope = (operatorId: string) => `operator:${operatorId}`;

export function notifyUrlFor(services: CheckoutServices, gateway: GatewayId): string {
  return new URL(`/api/webhooks/${gateway}`, services.publicBaseUrl).toString();
}

/** Whose idempotency keys these are: a key is unique within its customer, never globally. */
export const customerScope = (customerId: string) => `customer:${customerId}`;

/** The idempotency store the checkout uses: its phases write with Drizzle over the phase's transaction. */
export function createCheckoutIdempotencyStore(sql: postgres.Sql): IdempotencyStore<Transaction> {
  return createPostgresIdempotencyStore(sql, { transactionHandle: transactionDatabase });
}
