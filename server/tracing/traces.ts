/**
 * One trace per payment, across every process that touches it: the pay request and the guard's
 * verdict, each gateway call, the notification that settles it, the reconciler's questions and the
 * refund and authorization workers. They run in different requests, jobs and instances, with nothing
 * to carry a trace context between them but the order itself — so the trace is the order's: its id
 * is derived from the order id (SHA-256), and each piece of work starts as a child of that derived
 * context. A tracing backend shows them as one trace whose root is the order.
 *
 * Off unless tracing is configured (./setup.ts): without a registered provider the OpenTelemetry API
 * is a no-op and every span here costs nothing but a function call.
 *
 * Attributes are PayOnce's own identifiers — order id, out_trade_no, idempotency key, gateway,
 * operation, outcome, refund and capture ids — never card data, buyer details or secrets.
 */
import { createHash } from 'node:crypto';
import { context, SpanStatusCode, trace, TraceFlags, type Attributes, type Context } from '@opentelemetry/api';

const tracer = () => trace.getTracer('payonce');

/**
 * Set when a provider is registered (./setup.ts). Off — the default — a span is not even begun, so
 * the pay path pays nothing for tracing (no hash of the order id, no context objects).
 */
let tracingOn = false;
export function markTracingOn(): void {
  tracingOn = true;
}

/** The order's trace, as a parent: the same trace id and root span id wherever the order is worked on. */
export function orderTraceContext(orderId: string, parent: Context = context.active()): Context {
  const digest = createHash('sha256').update(`payonce-order:${orderId}`).digest('hex');
  return trace.setSpanContext(parent, {
    traceId: digest.slice(0, 32),
    spanId: digest.slice(32, 48),
    traceFlags: TraceFlags.SAMPLED,
    isRemote: true,
  });
}

/** The trace id of an order's trace (for logs, the console and tests). */
export function orderTraceId(orderId: string): string {
  return trace.getSpanContext(orderTraceContext(orderId))!.traceId;
}

/**
 * Runs `work` in a span `name`. Inside a span of the same order already (a gateway call inside the pay
 * request), it is that span's child; otherwise a child of the order's trace; with no order, of
 * whatever is active. A throw is recorded on the span and rethrown.
 */
export async function inSpan<T>(
  name: string,
  orderId: string | null | undefined,
  attributes: Attributes,
  work: () => Promise<T>,
): Promise<T> {
  if (!tracingOn) return work();
  const active = trace.getActiveSpan();
  const inOrder = orderId && active?.spanContext().traceId === orderTraceId(orderId);
  const parent = orderId && !inOrder ? orderTraceContext(orderId) : context.active();
  return tracer().startActiveSpan(
    name,
    { attributes: { ...(orderId ? { 'payonce.order_id': orderId } : {}), ...attributes } },
    parent,
    async (span) => {
      try {
        return await work();
      } catch (error) {
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
        throw error;
      } finally {
        span.end();
      }
    },
  );
}

/** Adds what was learnt along the way (the guard's verdict, an answer's outcome) to the current span. */
export function annotateSpan(attributes: Attributes): void {
  trace.getActiveSpan()?.setAttributes(attributes);
}
