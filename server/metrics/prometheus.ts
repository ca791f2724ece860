/**
 * Prometheus metrics (GET /api/metrics): every guard outcome, gateway call outcomes, notification
 * duplicates and the guard's own latency. One registry per process, kept on globalThis (Next loads
 * route handlers and instrumentation as separate module instances).
 */
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { GuardEvent } from '@payonce/idempotency';
import type { AuthorizationOperations, PaymentGateway } from '@/server/payments/gateway';

export interface CheckoutMetrics {
  registry: Registry;
  guardOutcomes: Counter<'outcome'>;
  guardClaimSeconds: Histogram<'outcome'>;
  keysCleaned: Counter;
  gatewayCalls: Counter<'gateway' | 'operation' | 'outcome'>;
  notifications: Counter<'gateway' | 'result'>;
  refunds: Counter<'gateway' | 'reason' | 'outcome'>;
}

export function createMetrics(): CheckoutMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'payonce_process_' });
  return {
    registry,
    guardOutcomes: new Counter({
      name: 'payonce_idempotency_guard_total',
      help: 'Idempotency guard outcomes: claimed, replayed, in_progress, mismatch, lease_taken_over, released, …',
      labelNames: ['outcome'],
      registers: [registry],
    }),
    guardClaimSeconds: new Histogram({
      name: 'payonce_idempotency_claim_seconds',
      help: 'Time the guard spends claiming a key (one round trip on the happy and replay paths)',
      labelNames: ['outcome'],
      // Sub-millisecond buckets: the guard's budget is a fraction of a millisecond.
      buckets: [0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers: [registry],
    }),
    keysCleaned: new Counter({
      name: 'payonce_idempotency_keys_cleaned_total',
      help: 'Expired idempotency keys deleted by the cleanup job',
      registers: [registry],
    }),
    gatewayCalls: new Counter({
      name: 'payonce_gateway_calls_total',
      help: 'Gateway calls by operation and outcome (succeeded, declined, retryable, indeterminate, answered, unavailable, error)',
      labelNames: ['gateway', 'operation', 'outcome'],
      registers: [registry],
    }),
    notifications: new Counter({
      name: 'payonce_notifications_total',
      help: 'Gateway notifications: processed, duplicate (replayed), in_flight (not acknowledged), rejected, ignored, unplaced (verified, but no order or the wrong amount: recorded for a person, not acknowledged)',
      labelNames: ['gateway', 'result'],
      registers: [registry],
    }),
    refunds: new Counter({
      name: 'payonce_refunds_total',
      help: 'Refunds of money that must not stay: recorded, succeeded, failed (needs a person), retried (in doubt or transient)',
      labelNames: ['gateway', 'reason', 'outcome'],
      registers: [registry],
    }),
  };
}

/** The guard's `observe` hook, counting into `metrics`. */
export function observeGuard(metrics: CheckoutMetrics) {
  return (event: GuardEvent) => {
    metrics.guardOutcomes.inc({ outcome: event.outcome });
    // Rollout mode (IDEMPOTENCY_MISSING_KEY=run_unguarded): say which endpoint a keyless client called.
    if (event.outcome === 'unguarded') console.warn(`[idempotency] ${event.path} ran without an Idempotency-Key, unguarded`);
    if (event.claimMs !== undefined) metrics.guardClaimSeconds.observe({ outcome: event.outcome }, event.claimMs / 1000);
  };
}

/** Wraps an adapter so every charge, query, close and refund is counted by its outcome. */
export function instrumentGateway(gateway: PaymentGateway, metrics: CheckoutMetrics): PaymentGateway {
  async function counted<T>(operation: string, call: () => Promise<T>, outcomeOf: (result: T) => string): Promise<T> {
    try {
      const result = await call();
      metrics.gatewayCalls.inc({ gateway: gateway.id, operation, outcome: outcomeOf(result) });
      return result;
    } catch (error) {
      metrics.gatewayCalls.inc({ gateway: gateway.id, operation, outcome: 'error' });
      throw error;
    }
  }
  return {
    id: gateway.id,
    merchantId: gateway.merchantId,
    oneTradePerOrder: gateway.oneTradePerOrder,
    buyerSteps: gateway.buyerSteps,
    hasTestBuyers: gateway.hasTestBuyers,
    charge: (request) =>
      counted(
        'charge',
        () => gateway.charge(request),
        (o) => o.kind,
      ),
    query: (outTradeNo) =>
      counted(
        'query',
        () => gateway.query(outTradeNo),
        (o) => (o.kind === 'answered' ? o.trade.kind : 'unavailable'),
      ),
    close: (request) =>
      counted(
        'close',
        () => gateway.close(request),
        (o) => o.kind,
      ),
    refund: (request) =>
      counted(
        'refund',
        () => gateway.refund(request),
        (o) => o.kind,
      ),
    queryRefund: (request) =>
      counted(
        'refund_query',
        () => gateway.queryRefund(request),
        (o) => (o.kind === 'answered' ? o.refund.kind : 'unavailable'),
      ),
    verifyNotification: (request) => gateway.verifyNotification(request),
    notificationReply: (ack) => gateway.notificationReply(ack),
    ...(gateway.authorizations ? { authorizations: instrumentAuthorizations(gateway.authorizations, counted) } : {}),
    ...(gateway.statement
      ? {
          statement: (date: string) =>
            counted(
              'statement',
              () => gateway.statement!(date),
              (o) => o.kind,
            ),
        }
      : {}),
  };
}

/** Captures and releases counted like every other gateway call. */
function instrumentAuthorizations(
  operations: AuthorizationOperations,
  counted: <T>(operation: string, call: () => Promise<T>, outcomeOf: (result: T) => string) => Promise<T>,
): AuthorizationOperations {
  return {
    capture: (request) =>
      counted(
        'capture',
        () => operations.capture(request),
        (o) => o.kind,
      ),
    release: (request) =>
      counted(
        'release',
        () => operations.release(request),
        (o) => o.kind,
      ),
  };
}
