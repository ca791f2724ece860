/**
 * How the adapters reach a gateway, and what a failed exchange means for the money: a request that
 * certainly never reached the gateway (`not_sent`, safe to send again) or one it may have processed
 * (`in_doubt`, settled only by a query or a notification). Protocol — signing, parsing, what an
 * HTTP status means at one gateway — stays in the adapters; Alipay and Stripe reach the gateway
 * through their official SDKs and use only the classification here.
 */

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
