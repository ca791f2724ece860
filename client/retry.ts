/**
 * The client's retry policy. Retried: network errors (the request may never have arrived, or its
 * answer was lost), 409 for work in progress, 429 and 5xx. Not retried: every other 4xx — a 402 decline or a
 * 422 key mismatch will answer the same forever, so a loop would only hammer the server.
 *
 * Backoff is exponential with full jitter and bounded in both delay and count, so a crowd of clients
 * that failed together does not come back together; a server's Retry-After is honoured as a floor.
 */
import { TRPCClientError } from '@trpc/client';

export interface RetryPolicy {
  /** Retries after the first try. 10 with these delays waits ~40 s in all: longer than a lease. */
  maxRetries: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { maxRetries: 10, baseDelayMs: 300, maxDelayMs: 8000 };

export interface CallFailure {
  /** HTTP status, or undefined when no answer arrived (network error). */
  status: number | undefined;
  reason: string | undefined;
  message: string;
  retryAfterMs: number | undefined;
  retryable: boolean;
  details: Record<string, unknown> | undefined;
}

export function describeFailure(error: unknown): CallFailure {
  if (error instanceof TRPCClientError) {
    const data = error.data as { httpStatus?: number; reason?: string; details?: Record<string, unknown> } | undefined;
    const response = (error.meta as { response?: Response } | undefined)?.response;
    const status = data?.httpStatus ?? (response?.status && response.status >= 400 ? response.status : undefined);
    const retryAfter = Number(response?.headers.get('retry-after'));
    return {
      status,
      reason: data?.reason,
      message: error.message,
      retryAfterMs: Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : undefined,
      // 401 SESSION_REQUIRED: the answer set the session cookie; the retry carries it.
      retryable:
        status === undefined ||
        // 409 only for work in flight (this key, or another attempt on the order): a conflict that
        // will not pass by itself (out of stock, too many open orders) answers the same forever.
        (status === 409 && (data?.reason === 'REQUEST_IN_PROGRESS' || data?.reason === 'ORDER_PAYMENT_IN_PROGRESS')) ||
        // A 429 passes with its window, except the address's hold cap: that waits on unpaid orders
        // expiring, far longer than a shopper should watch a spinner.
        (status === 429 && data?.reason !== 'ADDRESS_HOLD_LIMIT') ||
        status >= 500 ||
        (status === 401 && data?.reason === 'SESSION_REQUIRED'),
      details: data?.details,
    };
  }
  const message = error instanceof Error ? error.message : String(error);
  // Anything that is not a server answer (fetch failed, connection reset) is a network error.
  return { status: undefined, reason: undefined, message, retryAfterMs: undefined, retryable: true, details: undefined };
}

export class RetriesExhaustedError extends Error {
  constructor(
    readonly lastFailure: CallFailure,
    readonly attempts: number,
  ) {
    super(`Gave up after ${attempts} attempts: ${lastFailure.message}`);
    this.name = 'RetriesExhaustedError';
  }
}

export class FinalFailureError extends Error {
  constructor(readonly failure: CallFailure) {
    super(failure.message);
    this.name = 'FinalFailureError';
  }
}

export function backoffDelay(retry: number, policy: RetryPolicy, random: () => number = Math.random): number {
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (retry - 1));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/**
 * Calls `fn` until it succeeds, fails for good (FinalFailureError) or runs out of retries
 * (RetriesExhaustedError). `onRetry(n, failure)` is told before the n-th retry, for "重试中（第 n 次）".
 */
export async function callWithRetry<T>(
  fn: () => Promise<T>,
  options: {
    policy?: RetryPolicy;
    onRetry?: (retry: number, failure: CallFailure) => void;
    sleep?: (ms: number) => Promise<void>;
  } = {},
): Promise<T> {
  const policy = options.policy ?? DEFAULT_RETRY_POLICY;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  for (let retry = 0; ; retry++) {
    try {
      return await fn();
    } catch (error) {
      const failure = describeFailure(error);
      if (!failure.retryable) throw new FinalFailureError(failure);
      if (retry >= policy.maxRetries) throw new RetriesExhaustedError(failure, retry + 1);
      const delay = Math.max(backoffDelay(retry + 1, policy), Math.min(failure.retryAfterMs ?? 0, policy.maxDelayMs));
      options.onRetry?.(retry + 1, failure);
      await sleep(delay);
    }
  }
}
