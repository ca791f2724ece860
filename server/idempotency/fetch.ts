/**
 * The fetch adapter of the idempotency core: `withIdempotency(config, handler)` turns a handler into a
 * `(Request) => Promise<Response>` for Next.js Route Handlers (`export const POST = withIdempotency(…)`)
 * or any fetch-style server (Hono, Bun, Deno, node:http through a small bridge). Web-standard Request
 * and Response only: nothing of Next, tRPC or the checkout.
 *
 *   export const POST = withIdempotency(
 *     { store: () => store, scope: (request) => customerIdOf(request), input: chargeSchema.parse },
 *     // One phase: the work is one transaction, and the answer commits with it.
 *     { onePhase: async (tx, { input }) => respond(201, await insertCharge(tx, input)) },
 *   );
 *
 * Work in several phases (a call to another service between transactions) gives a function of the
 * key it owns instead: `async ({ input, key }) => (await key.atomicPhase(…)).response`.
 *
 * The answer is the stored one: its status and JSON body the first time and, with
 * `Idempotency-Replayed: true`, on every retry with the same key and body. Refusals are JSON
 * `{ reason, message }`: 400 (key missing or malformed, body not JSON, `input` refused it), 401 (no
 * scope), 409 + Retry-After (in progress), 413 (body too large), 422 (key reused with another body).
 * A handler refuses with a 4xx by throwing an error that carries `httpStatus` (4xx) and `reason`;
 * anything else it throws is a 500 (the key is released, so a retry runs again).
 */
import { executeIdempotent } from './execute';
import { IdempotencyError, RequestInProgressError } from './errors';
import type { IdempotencyOptions, IdempotentHandler, IdempotentResult, OwnedKey, Responded } from './execute';
import { MAX_BODY_BYTES, readBodyWithin } from './read-body';
import type { IdempotencyStore, StoredResponse } from './store';

export interface FetchIdempotencyConfig<Tx, Input = unknown> {
  /** The store, or a function returning it (so nothing connects while a framework merely loads the module). */
  store: IdempotencyStore<Tx> | (() => IdempotencyStore<Tx>);
  options?: IdempotencyOptions;
  /**
   * Who may see a stored answer: typically the authenticated user or session (`user:{id}`). Keys
   * are unique within a scope, never globally. Undefined refuses the request with 401.
   */
  scope(request: Request): string | undefined | Promise<string | undefined>;
  /**
   * Validates the JSON body before the key is claimed (e.g. a zod schema's `parse`), so bad input is
   * a 400 INVALID_INPUT that claims and stores nothing. What it returns is the handler's `input` and
   * what the key's fingerprint covers. Without it, the body is passed on as parsed.
   */
  input?: (body: unknown) => Input;
  /** The largest request body read, in bytes; 64 KiB by default (./read-body.ts). */
  maxBodyBytes?: number;
}

export interface GuardedRequestContext<Tx, Input = unknown> {
  request: Request;
  /** The JSON body as `input` returned it (the parsed body, null when empty, without `input`). */
  input: Input;
  key: OwnedKey<Tx>;
}

/** The handler: a function of the key it owns (several phases), or one transaction's work. */
export type FetchHandler<Tx, Input> =
  | ((context: GuardedRequestContext<Tx, Input>) => Promise<StoredResponse>)
  | { onePhase: (tx: Tx, context: { request: Request; input: Input }) => Promise<Responded> };

const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  new Response(status === 204 ? null : JSON.stringify(body), {
    status,
    headers: { ...(status === 204 ? {} : { 'content-type': 'application/json' }), ...headers },
  });

const refusal = (status: number, reason: string, message: string, headers: Record<string, string> = {}) =>
  json(status, { reason, message }, headers);

export function withIdempotency<Tx, Input = unknown>(
  config: FetchIdempotencyConfig<Tx, Input>,
  handler: FetchHandler<Tx, Input>,
): (request: Request) => Promise<Response> {
  const maxBodyBytes = config.maxBodyBytes ?? MAX_BODY_BYTES;
  return async (request) => {
    const scope = await config.scope(request);
    if (!scope) return refusal(401, 'UNAUTHENTICATED', 'This request needs an authenticated caller.');

    // Read only as far as the limit: a client streaming megabytes costs the limit, not megabytes.
    const read = await readBodyWithin(request, maxBodyBytes);
    if (read.kind === 'too_large') return tooLarge(maxBodyBytes);
    const text = new TextDecoder().decode(read.bytes);
    let body: unknown = null;
    if (text.trim() !== '') {
      try {
        body = JSON.parse(text);
      } catch {
        return refusal(400, 'INVALID_JSON', 'The request body is not valid JSON.');
      }
    }
    let input: Input;
    try {
      input = config.input ? config.input(body) : (body as Input);
    } catch (error) {
      const issues = (error as { issues?: unknown } | null)?.issues;
      return json(400, {
        reason: 'INVALID_INPUT',
        message: error instanceof Error ? error.message : 'The request body is not valid input.',
        ...(issues !== undefined ? { issues } : {}),
      });
    }

    const store = typeof config.store === 'function' ? config.store() : config.store;
    const guarded: IdempotentHandler<Tx> =
      typeof handler === 'function'
        ? (key) => handler({ request, input, key })
        : { onePhase: (tx) => handler.onePhase(tx, { request, input }) };
    let result: IdempotentResult;
    try {
      result = await executeIdempotent(
        store,
        {
          scope,
          key: request.headers.get('idempotency-key'),
          // Method and path: one key can never serve two endpoints.
          path: `${request.method} ${new URL(request.url).pathname}`,
          input,
        },
        guarded,
        config.options,
      );
    } catch (error) {
      return errorResponse(error);
    }
    return json(result.status, result.body, result.replayed ? { 'Idempotency-Replayed': 'true' } : {});
  };
}

function tooLarge(maxBodyBytes: number): Response {
  return refusal(413, 'PAYLOAD_TOO_LARGE', `The request body is larger than ${maxBodyBytes} bytes.`);
}

/**
 * The guard's refusals, and any handler error that names its own status (`httpStatus` 4xx and a
 * `reason`), are answered as such; the key was released, so a retry runs again. Anything else is a
 * 500 whose details stay in the server's log.
 */
function errorResponse(error: unknown): Response {
  if (error instanceof IdempotencyError) {
    const headers: Record<string, string> =
      error instanceof RequestInProgressError ? { 'Retry-After': String(error.retryAfterSeconds) } : {};
    return refusal(error.httpStatus, error.reason, error.message, headers);
  }
  const own = error as { httpStatus?: unknown; reason?: unknown; message?: unknown } | null;
  if (typeof own?.httpStatus === 'number' && own.httpStatus >= 400 && own.httpStatus < 500 && typeof own.reason === 'string') {
    return refusal(own.httpStatus, own.reason, typeof own.message === 'string' ? own.message : own.reason);
  }
  console.error('[idempotency] the handler failed; the key is released for a retry', error);
  return refusal(500, 'INTERNAL_ERROR', 'Internal error; retry the request with the same Idempotency-Key.');
}
