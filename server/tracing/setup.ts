/**
 * Turns tracing on for this process when OpenTelemetry's standard variables ask for it:
 * OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (OTLP over HTTP, e.g.
 * http://collector:4318), with OTEL_SERVICE_NAME (default `payonce`) and the exporter's own
 * OTEL_EXPORTER_OTLP_* variables. Unset — the default — nothing is registered, and ./traces.ts costs
 * nothing. Spans are batched and exported off the request path; on shutdown the rest is flushed.
 */
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, TracerProvider, type SpanProcessor } from '@opentelemetry/sdk-trace';
import { markTracingOn } from './traces';

export interface Tracing {
  shutdown(): Promise<void>;
}

/** Registers `processors` as this process's tracing (the OTLP exporter in production, a test's in-memory one). */
export function registerTracing(processors: SpanProcessor[], serviceName = 'payonce'): Tracing {
  const provider = new TracerProvider({ resource: resourceFromAttributes({ 'service.name': serviceName }), spanProcessors: processors });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  markTracingOn();
  return { shutdown: () => provider.shutdown() };
}

/** The OTLP exporter when configured; undefined (tracing off) otherwise. */
export function startTracingFromEnv(env: NodeJS.ProcessEnv = process.env): Tracing | undefined {
  if (!env.OTEL_EXPORTER_OTLP_ENDPOINT && !env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return undefined;
  return registerTracing([new BatchSpanProcessor({ exporter: new OTLPTraceExporter() })], env.OTEL_SERVICE_NAME || 'payonce');
}
