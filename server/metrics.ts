/**
 * Prometheus metrics (GET /api/metrics): every guard outcome, gateway call outcomes, notification
 * duplicates and the guard's own latency. One registry per process, kept on globalThis (Next loads
 * route handlers and instrumentation as separate module instances).
 */
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { GuardEvent } from './idempotency';
import type { ChargeOutcome, PaymentGateway, QueryOutcome } from './payments/gateway';

export interface CheckoutMetrics {
  registry: Registry;
  guardOutcomes: Counter<'outcome'>;
  guardClaimSeconds: Histogram<'outcome'>;
  keysCleaned: Counter;
  gatewayCalls: Counter<'gateway' | 'operation' | 'outcome'>;
  notifications: Counter<'gateway' | 'result'>;
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
      help: 'Gateway notifications: processed, duplicate (replayed), in_flight (not acknowledged), rejected, ignored',
      labelNames: ['gateway', 'result'],
      registers: [registry],
    }),
  };
}

/** The guard's `observe` hook, counting into `metrics`. */
export function observeGuard(metrics: CheckoutMetrics) {
  return (event: GuardEvent) => {
    metrics.guardOutcomes.inc({ outcome: event.outcome });
    if (event.claimMs !== undefined) metrics.guardClaimSeconds.observe({ outcome: event.outcome }, event.claimMs / 1000);
  };
}

/** Wraps an adapter so every charge and query is counted by its outcome. */
export function instrumentGateway(gateway: PaymentGateway, metrics: CheckoutMetrics): PaymentGateway {
  const count = (operation: string, outcome: string) =>
    metrics.gatewayCalls.inc({ gateway: gateway.id, operation, outcome });
  return {
    id: gateway.id,
    merchantId: gateway.merchantId,
    async charge(request) {
      try {
        const outcome: ChargeOutcome = await gateway.charge(request);
        count('charge', outcome.kind);
        return outcome;
      } catch (error) {
        count('charge', 'error');
        throw error;
      }
    },
    async query(outTradeNo) {
      try {
        const outcome: QueryOutcome = await gateway.query(outTradeNo);
        count('query', outcome.kind === 'answered' ? outcome.trade.kind : 'unavailable');
        return outcome;
      } catch (error) {
        count('query', 'error');
        throw error;
      }
    },
    verifyNotification: (request) => gateway.verifyNotification(request),
    notificationReply: (ack) => gateway.notificationReply(ack),
  };
}
