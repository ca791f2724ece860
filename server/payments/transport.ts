/**
 * How the adapters reach a gateway, and what a failed exchange means for the money: a request that
 * certainly never reached the gateway (`not_sent`, safe to send again) or one it may have processed
 * (`in_doubt`, settled only by a query or a notification). Protocol — signing, parsing, what an
 * HTTP status means at one gateway — stays in the adapters; Alipay and Stripe reach the gateway
 * through their official SDKs and use only the classification here.
 */

import type { ChargeOutcome, QueryOutcome, RefundOutcome, RefundStatus } from './gateway';

/**
 * Per-request timeout unless configured (GATEWAY_TIMEOUT_MS). It must stay well inside the
 * idempotency lease, or a slow call could outlive the lease of the request that made it.
 */
export const DEFAULT_GATEWAY_TIMEOUT_MS = 5000;

/** Why an exchange has no answer to read. */
export type TransportFailure = { kind: 'not_sent' | 'in_doubt'; code: string; message: string };

/** A complete HTTP answer, body read; whether it means anything is the adapter's business. */
export interface HttpAnswer {
  kind: 'received';
  status: number;
  headers: Headers;
  text: string;
}

export interface HttpRequest {
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  redirect: RequestRedirect;
}

/**
 * One request and its whole answer under one timeout: the signal covers the body too, so a gateway
 * that stalls mid-answer is a timeout like one that never answers.
 */
export async function exchangeHttp(url: string | URL, request: HttpRequest, timeoutMs: number): Promise<HttpAnswer | TransportFailure> {
  try {
    const response = await fetch(url, { ...request, signal: AbortSignal.timeout(timeoutMs) });
    const text = await response.text();
    return { kind: 'received', status: response.status, headers: response.headers, text };
  } catch (err) {
    return fetchFailure(err);
  }
}

/** A failed fetch(): undici's "fetch failed" carries the socket error as its cause. */
export function fetchFailure(err: unknown): TransportFailure {
  const error = err instanceof Error ? err : new Error(String(err));
  if (error.name === 'TimeoutError' || error.name === 'AbortError') {
    // The request was (or may have been) sent and no full answer came back.
    return { kind: 'in_doubt', code: 'TIMEOUT', message: error.message };
  }
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
  return connectionFailure(error.cause, `${error.message}${cause}`, 'NETWORK_ERROR');
}

/**
 * A connection failure (a socket error, or what an SDK wraps one in) in the adapters' terms;
 * `fallbackCode` names it when no error in the chain has a code.
 */
export function connectionFailure(err: unknown, message: string, fallbackCode: string): TransportFailure {
  const failure = classifyConnectionFailure(err);
  // A reset, "other side closed", a timeout after connecting: the gateway may have processed it.
  return { kind: failure.neverSent ? 'not_sent' : 'in_doubt', code: failure.code ?? fallbackCode, message };
}

/** Connection failures that happen before a single byte of the request reaches the gateway. */
export const NEVER_SENT_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/**
 * Every error code in a transport failure: the error's own, its causes (undici's "fetch failed" wraps
 * the socket error, sometimes one level deeper) and the per-address errors of an AggregateError
 * (happy eyeballs tries several addresses of one host).
 */
export function transportErrorCodes(err: unknown, depth = 0): string[] {
  if (typeof err !== 'object' || err === null || depth > 4) return [];
  const codes: string[] = [];
  const code = errorCode(err);
  if (code) codes.push(code);
  const errors = (err as { errors?: unknown }).errors;
  if (Array.isArray(errors)) for (const inner of errors) codes.push(...transportErrorCodes(inner, depth + 1));
  codes.push(...transportErrorCodes((err as { cause?: unknown }).cause, depth + 1));
  return codes;
}

/**
 * Whether a transport failure certainly happened before the request reached the gateway (every
 * code found is a never-sent one), and the code to report. Anything else — a reset, a timeout, no
 * code at all — may have been processed: only a query can tell.
 */
export function classifyConnectionFailure(err: unknown): { neverSent: boolean; code: string | undefined } {
  const codes = transportErrorCodes(err);
  return { neverSent: codes.length > 0 && codes.every((code) => NEVER_SENT_CODES.has(code)), code: codes[0] };
}

/** The `code` of a Node or undici error, if it has one. */
export function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

/** A field of a gateway's answer that must be a non-empty string: the string, else undefined. */
export function stringField(fields: Readonly<Record<string, unknown>> | null | undefined, key: string): string | undefined {
  const value = fields?.[key];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

/** The end of an exhaustive switch over a closed union: a case left out is a type error. */
export function assertNever(value: never): never {
  throw new Error(`unhandled case: ${JSON.stringify(value)}`);
}

/** A failure in the shape of an outcome: its code, and its message prefixed with what was called. */
type Failed<K extends string> = { kind: K; code: string; message: string };

function failed<K extends string>(kind: K, failure: TransportFailure, call?: string): Failed<K> {
  return { kind, code: failure.code, message: call ? `${call}: ${failure.message}` : failure.message };
}

/**
 * A failed exchange as the outcome of a charge or a refund: never sent → `retryable` (the same
 * request may go again), maybe processed → `indeterminate` (only a query or a notification settles it).
 */
export function chargeOrRefundFailure(failure: TransportFailure, call?: string): Failed<'retryable' | 'indeterminate'> {
  return failed(failure.kind === 'not_sent' ? 'retryable' : 'indeterminate', failure, call);
}

/**
 * A failed exchange as the outcome of a close: `indeterminate` either way. Close has no "retryable":
 * until a later close (closing is idempotent) or a query settles it, the trade may still take money.
 */
export function closeFailure(failure: TransportFailure, call?: string): Failed<'indeterminate'> {
  return failed('indeterminate', failure, call);
}

/** A failed exchange as the outcome of a query (of a trade or a refund): the gateway could not tell. */
export function queryFailure(failure: TransportFailure, call?: string): Failed<'unavailable'> {
  return failed('unavailable', failure, call);
}

/**
 * A charge the gateway says was already paid (a retry whose first answer was lost, or the buyer paid
 * by their own step): believe it only if a query shows the trade succeeded for this very amount, in
 * this currency.
 * Anything else is `indeterminate` under `code`, for a later query or the notification to settle.
 */
export async function confirmPaidByQuery(
  query: () => Promise<QueryOutcome>,
  expected: { amountMinor: number; currency: string },
  code: string,
): Promise<ChargeOutcome> {
  const found = await query();
  const trade = found.kind === 'answered' ? found.trade : undefined;
  if (trade?.kind === 'succeeded' && trade.amountMinor === expected.amountMinor && trade.currency === expected.currency) {
    return { kind: 'succeeded', gatewayTradeNo: trade.gatewayTradeNo, amountMinor: trade.amountMinor, currency: trade.currency };
  }
  const message = found.kind === 'answered' ? `trade is ${found.trade.kind} for another amount or state` : found.message;
  return { kind: 'indeterminate', code, message };
}

/**
 * The refund a refund call's answer carries, as that call's outcome: final success or failure as it
 * is, not final yet as pending (under `pendingId`, the gateway's id for it when it gave one), and an
 * answer that holds no refund at all as `indeterminate` under `missing` — settled by queryRefund.
 */
export function refundOutcomeOf(status: RefundStatus, pendingId: string | null, missing: { code: string; message: string }): RefundOutcome {
  switch (status.kind) {
    case 'succeeded':
    case 'failed':
      return status;
    case 'pending':
      return { kind: 'pending', gatewayRefundId: pendingId };
    case 'not_found':
      return { kind: 'indeterminate', ...missing };
    default:
      return assertNever(status);
  }
}
