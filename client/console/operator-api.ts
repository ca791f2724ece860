/**
 * The console's calls, over plain fetch: the operator's session (/api/operator/session) and the tRPC
 * procedures it reads and decides with. A network failure is a value here, not an exception, because
 * it means something different from a refusal: the request may have arrived and been carried out, so
 * the same decision is asked again under the same Idempotency-Key (./money-actions.ts).
 *
 * Plain fetch rather than the typed tRPC client: each mutation needs its own headers per try, and the
 * console must tell "no answer" from "an answer that says no" on every call.
 */
import type { OperatorRole } from '@/db/schema';
import type { OrderListing as ServerOrderListing, OrderTimeline as ServerOrderTimeline } from '@/server/checkout/timeline';

export type { OperatorRole };
/** operator.order: the order's timeline, and who asked for each merchant refund and why (operators only). */
export type OrderTimeline = ServerOrderTimeline & {
  refundRequests: { refundId: string; requestedBy: string | null; note: string | null }[];
};
export type OrderView = OrderTimeline['order'];
/** operator.orders answers a listing without `mine` (an operator owns none of them). */
export type OrderListing = Omit<ServerOrderListing, 'mine'>;

export interface OperatorSession {
  username: string;
  role: OperatorRole;
  /** Sent as X-CSRF-Token with every decision: derived from the session cookie, which a page cannot read. */
  csrfToken: string;
}

/** A refusal the server gave: its HTTP status, machine-readable reason and its own words. */
export interface Refusal {
  status: number;
  reason: string | undefined;
  message: string;
  retryAfterSeconds: number | undefined;
}

/** One call's result: an answer, a refusal, or nothing at all (the request or its answer was lost). */
export type Answer<T> = { kind: 'ok'; status: number; data: T } | ({ kind: 'refused' } & Refusal) | { kind: 'lost'; message: string };

/** A read that did not succeed: what react-query keeps as the query's error. */
export class ConsoleReadError extends Error {
  override name = 'ConsoleReadError';
  constructor(readonly answer: Exclude<Answer<unknown>, { kind: 'ok' }>) {
    super(answer.message);
  }
}

export type Fetch = typeof fetch;

const JSON_HEADERS = { 'content-type': 'application/json' };

async function send(fetcher: Fetch, url: string, init: RequestInit): Promise<Response | { lost: string }> {
  try {
    return await fetcher(url, { ...init, credentials: 'same-origin', cache: 'no-store' });
  } catch (error) {
    return { lost: error instanceof Error ? error.message : String(error) };
  }
}

function retryAfter(response: Response): number | undefined {
  const seconds = Number(response.headers.get('retry-after'));
  return Number.isFinite(seconds) && seconds >= 0 && response.headers.has('retry-after') ? seconds : undefined;
}

/** A tRPC answer (`{ result: { data } }` or `{ error: { message, data: { httpStatus, reason } } }`). */
async function trpcAnswer<T>(response: Response): Promise<Answer<T>> {
  const body = (await response.json().catch(() => undefined)) as
    { result?: { data?: T }; error?: { message?: string; data?: { httpStatus?: number; reason?: string } } } | undefined;
  if (response.ok && body?.result) return { kind: 'ok', status: response.status, data: body.result.data as T };
  return {
    kind: 'refused',
    status: body?.error?.data?.httpStatus ?? response.status,
    reason: body?.error?.data?.reason,
    message: body?.error?.message ?? response.statusText,
    retryAfterSeconds: retryAfter(response),
  };
}

export interface OperatorApi {
  /** The signed-in operator, or null when nobody is (401). */
  session(): Promise<OperatorSession | null>;
  signIn(input: { username: string; password: string }): Promise<Answer<null>>;
  signOut(): Promise<void>;
  /** A tRPC query; throws ConsoleReadError when it gets no data. */
  query<T>(procedure: string, input: unknown): Promise<T>;
  /** A tRPC mutation with its headers (Idempotency-Key, X-CSRF-Token); never throws. */
  mutate<T>(procedure: string, input: unknown, headers: Record<string, string>): Promise<Answer<T>>;
}

export function operatorApi(options: { baseUrl?: string; fetch?: Fetch } = {}): OperatorApi {
  const base = options.baseUrl ?? '';
  const fetcher: Fetch = options.fetch ?? ((...args) => fetch(...args));
  const sessionUrl = `${base}/api/operator/session`;
  return {
    async session() {
      const response = await send(fetcher, sessionUrl, { method: 'GET' });
      if ('lost' in response) throw new ConsoleReadError({ kind: 'lost', message: response.lost });
      if (response.status === 401) return null;
      if (!response.ok) throw new ConsoleReadError(await sessionRefusal(response));
      return (await response.json()) as OperatorSession;
    },
    async signIn(input) {
      const response = await send(fetcher, sessionUrl, { method: 'POST', headers: JSON_HEADERS, body: JSON.stringify(input) });
      if ('lost' in response) return { kind: 'lost', message: response.lost };
      return response.status === 204 ? { kind: 'ok', status: 204, data: null } : sessionRefusal(response);
    },
    async signOut() {
      await send(fetcher, sessionUrl, { method: 'DELETE' });
    },
    async query<T>(procedure: string, input: unknown) {
      const url = `${base}/api/trpc/${procedure}?input=${encodeURIComponent(JSON.stringify(input))}`;
      const response = await send(fetcher, url, { method: 'GET' });
      if ('lost' in response) throw new ConsoleReadError({ kind: 'lost', message: response.lost });
      const answer = await trpcAnswer<T>(response);
      if (answer.kind !== 'ok') throw new ConsoleReadError(answer);
      return answer.data;
    },
    async mutate<T>(procedure: string, input: unknown, headers: Record<string, string>) {
      const init = { method: 'POST', headers: { ...JSON_HEADERS, ...headers }, body: JSON.stringify(input) };
      const response = await send(fetcher, `${base}/api/trpc/${procedure}`, init);
      if ('lost' in response) return { kind: 'lost', message: response.lost };
      return trpcAnswer<T>(response);
    },
  };
}

/** /api/operator/session's refusals: `{ reason, message }` and, past the sign-in limits, Retry-After. */
async function sessionRefusal(response: Response): Promise<{ kind: 'refused' } & Refusal> {
  const body = (await response.json().catch(() => undefined)) as { reason?: string; message?: string } | undefined;
  return {
    kind: 'refused',
    status: response.status,
    reason: body?.reason,
    message: body?.message ?? response.statusText,
    retryAfterSeconds: retryAfter(response),
  };
}

/** Whether a failed read means the operator is no longer signed in (signed out elsewhere, idle too long). */
export function signedOut(error: unknown): boolean {
  return error instanceof ConsoleReadError && error.answer.kind === 'refused' && error.answer.status === 401;
}
