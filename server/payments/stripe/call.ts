/**
 * One call to Stripe through stripe-node: the SDK client, whose own Node HTTP client is watched so a
 * call knows whether any of the SDK's tries may have reached Stripe, and `call()`, which hands back
 * either the resource or the call's failure as ./failure reads it.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import Stripe from 'stripe';
import { MAX_TRIES_PER_GATEWAY_CALL } from '@/server/payments/gateway';
import { classifyConnectionFailure, DEFAULT_GATEWAY_TIMEOUT_MS } from '@/server/payments/transport';
import { classifyBareStatus, classifyError, statusMayHaveBeenProcessed, type Called, type Failure } from './failure';
import type { StripeGatewayConfig } from './config';

/** What the tries of one SDK call saw, across the SDK's own retries. */
interface CallTrace {
  mayHaveBeenProcessed: boolean;
  /** The HTTP status of the last try that got an answer. */
  lastStatus?: number;
}

const currentCall = new AsyncLocalStorage<CallTrace>();

/**
 * The SDK's own Node client, watched: every try of the current call (the SDK's retries run inside the
 * same async context) marks the call as possibly processed when it got through to Stripe — a timeout,
 * a reset, a 409 (another request with this key is executing) or a 5xx that is not a refusal.
 */
function tracingHttpClient(): Stripe.HttpClient {
  const inner = Stripe.createNodeHttpClient();
  return {
    getClientName: () => inner.getClientName(),
    makeRequest: (host, port, path, method, headers, requestData, protocol, timeout) =>
      inner.makeRequest(host, port, path, method, headers, requestData, protocol, timeout).then(
        (response) => {
          const trace = currentCall.getStore();
          const status = response.getStatusCode();
          if (trace) trace.lastStatus = status;
          if (trace && statusMayHaveBeenProcessed(status)) trace.mayHaveBeenProcessed = true;
          return response;
        },
        (error: unknown) => {
          const trace = currentCall.getStore();
          if (trace && !classifyConnectionFailure(error).neverSent) trace.mayHaveBeenProcessed = true;
          throw error;
        },
      ),
  };
}

/** The SDK client for one configured adapter: its address, timeout and retries, and the watched HTTP client. */
export function createStripeClient(config: StripeGatewayConfig): Stripe {
  return new Stripe(config.secretKey, {
    ...(config.host !== undefined ? { host: config.host } : {}),
    ...(config.port !== undefined ? { port: config.port } : {}),
    ...(config.protocol !== undefined ? { protocol: config.protocol } : {}),
    maxNetworkRetries: config.maxNetworkRetries ?? MAX_TRIES_PER_GATEWAY_CALL - 1,
    timeout: config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS,
    httpClient: tracingHttpClient(),
  });
}

/**
 * The waits before trying a rate-limited call again (each with jitter, 50–100 % of it). Stripe asks
 * for "an exponential backoff schedule" on 429, and stripe-node retries a 429 only when
 * Stripe-Should-Retry says true — which marks lock timeouts, not rate limits — so the backoff is
 * ours. Short: a shopper waits on it; a call still limited after it is a transient failure
 * (not_sent) that the checkout answers with its retryable 503 + Retry-After.
 * LIBRARY BEHAVIOUR RELIED ON: RequestSender._shouldRetry in stripe-node 23.1, guarded by
 * test/payments/stripe-rate-limit.test.ts.
 */
const RATE_LIMIT_BACKOFF_MS = [250, 500] as const;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A 429 rate limit that proves nothing was executed: trying again cannot charge twice. */
function rateLimited(failure: Failure): boolean {
  return failure.kind === 'not_sent' && failure.code === 'rate_limit';
}

/**
 * Runs one SDK call (the SDK's own retries included, and ours after a rate limit) and reads how it
 * ended: the resource, or why there is none, judged with everything its tries saw (the SDK's final
 * error describes only the last).
 */
export async function call<T>(fn: () => Promise<T>): Promise<Called<T>> {
  for (const waitMs of RATE_LIMIT_BACKOFF_MS) {
    const called = await callOnce(fn);
    if (called.ok || !rateLimited(called.failure)) return called;
    await sleep(waitMs * (0.5 + Math.random() / 2));
  }
  return callOnce(fn);
}

async function callOnce<T>(fn: () => Promise<T>): Promise<Called<T>> {
  const trace: CallTrace = { mayHaveBeenProcessed: false };
  try {
    const value = await currentCall.run(trace, fn);
    const failure = classifyBareStatus(trace.lastStatus ?? 200, trace.mayHaveBeenProcessed);
    return failure ? { ok: false, failure } : { ok: true, value };
  } catch (err) {
    return { ok: false, failure: classifyError(err, trace.mayHaveBeenProcessed) };
  }
}
