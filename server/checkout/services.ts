/**
 * Everything the checkout needs from the outside, passed in rather than imported, so tests and the
 * benchmark can build a checkout on their own database and sandbox.
 */
import type postgres from 'postgres';
import { transactionDatabase, type Database, type Transaction } from '../../db/client';
import { type IdempotencyOptions, type IdempotencyStore } from '@payonce/idempotency';
import { createPostgresIdempotencyStore } from '@payonce/idempotency/postgres';
import type { FaultInjector } from '../faults';
import type { CheckoutMetrics } from '../metrics';
import type { GatewayId, PaymentGateway } from '../payments/gateway';
import type { RateLimitPolicy } from '../rate-limit';
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
  /** Present only with CHECKOUT_FAULTS=1 (failure drills); undefined in every real deployment. */
  faults?: FaultInjector;
  /** Demo mode (PAYONCE_DEMO=1): the 幕后 view may list and show every customer's orders. */
  demo?: boolean;
  /**
   * The PSP sandbox (PSP_SANDBOX_URL), in local runs only: the 幕后 view reads the gateway's own
   * ledger of charges and refunds there, and demo mode's switchboard arms its faults. Unset against
   * real gateways, whose ledgers are their dashboards.
   */
  pspSandboxUrl?: string;
  /** Prometheus counters; optional so that tests and tools can run without them. */
  metrics?: CheckoutMetrics;
  /** Limits on the mutations per session and per address; absent, nothing is counted. */
  rateLimits?: RateLimitPolicy;
  /** How much one customer, and one address, may hold in unpaid orders; absent, no cap. */
  orderCaps?: OrderCaps;
  /** How long an order may stay unpaid (ORDER_TTL_SECONDS); absent, the column's default of 30 minutes. */
  orderTtlSeconds?: number;
}

export function notifyUrlFor(services: CheckoutServices, gateway: GatewayId): string {
  return new URL(`/api/webhooks/${gateway}`, services.publicBaseUrl).toString();
}

/** Whose idempotency keys these are: a key is unique within its customer, never globally. */
export const customerScope = (customerId: string) => `customer:${customerId}`;

/** The idempotency store the checkout uses: its phases write with Drizzle over the phase's transaction. */
export function createCheckoutIdempotencyStore(sql: postgres.Sql): IdempotencyStore<Transaction> {
  return createPostgresIdempotencyStore(sql, { transactionHandle: transactionDatabase });
}
