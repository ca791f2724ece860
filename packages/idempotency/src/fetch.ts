/**
 * The fetch adapter: `withIdempotency(config, handler)` turns a handler into a
 * `(Request) => Promise<Response>` for Next.js Route Handlers or any fetch-style server (Hono, Bun,
 * Deno). Web-standard Request and Response only: nothing of Next, tRPC or the checkout.
 *
 *   export const POST = withIdempotency(
 *     { store: () => store, scope: (request) => customerIdOf(request), input: chargeSchema.parse },
 *     { onePhase: async (tx, { input }) => respond(201, await insertCharge(tx, input)) }, // one transaction
 *   );
 *
 * Work in several phases gives a function of the key it owns instead: `async ({ input, key }) => …`.
 * The answer is the stored one (with `Idempotency-Replayed: true` on a retry). Refusals are JSON
 * `{ reason, message }`: 400 (key missing or malformed, body not JSON, `input` refused it), 401 (no
 * scope), 409 + Retry-After (in progress), 413 (body too large), 422 (key reused with another body).
 * A handler refuses by throwing a `Refusal` (or any error carrying `httpStatus` and `reason`), with
 * Retry-After when it names `retryAfterSeconds`; anything else it throws is a 500. Either way the key
 * is released, so a retry runs again.
 */
import { executeIdempotent } from './execute.js';
import { refusalHeaders, refusalOf } from './errors.js';
import type { IdempotencyOptions, IdempotentHandler, OwnedKey, Responded } from './execute.js';
import { MAX_BODY_BYTES, readBodyWithin } from './read-body.js';
import type { IdempotencyStore, StoredResponse } from './store.js';

export { MAX_BODY_BYTES, readBodyWithin, type BoundedBody } from './read-body.js';

export interface FetchIdempotencyConfig<Tx, Input = unknown> {
  /** The store, or a function returning it (so nothing connects while a framework merely loads the module). */
  store: IdempotencyStore<Tx> | (() => IdempotencyStore<Tx>);
  options?: IdempotencyOptions;
  /** Who may see a stored answer (`user:{id}`): keys are unique within a scope. Undefined: 401. */
  scope(request: Request): string | undefined | Promise<string | undefined>;
  /** Validates the body before the key is claimed (a zod `parse`): bad input is a 400 that stores nothing; its result is fingerprinted. */
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
    const input = await inputOf(request, config, maxBodyBytes);
    if (input instanceof Response) return input;

    const store = typeof config.store === 'function' ? config.store() : config.store;
    const guarded: IdempotentHandler<Tx> =
      typeof handler === 'function'
        ? (key) => handler({ request, input: input.value, key })
        : { onePhase: (tx) => handler.onePhase(tx, { request, input: input.value }) };
    // Method and path: one key can never serve two endpoints.
    const path = `${request.method} ${new URL(request.url).pathname}`;
    try {
      const idempotent = { scope, key: request.headers.get('idempotency-key'), path, input: input.value };
      const result = await executeIdempotent(store, idempotent, guarded, config.options);
      return json(result.status, result.body, result.replayed ? { 'Idempotency-Replayed': 'true' } : {});
    } catch (error) {
      return errorResponse(error);
    }
  };
}

/** The body, read only as far as the limit (a client streaming megabytes costs the limit), parsed and validated. */
async function inputOf<Input>(
  request: Request,
  config: FetchIdempotencyConfig<unknown, Input>,
  maxBodyBytes: number,
): Promise<{ value: Input } | Response> {
  const read = await readBodyWithin(request, maxBodyBytes);
  if (read.kind === 'too_large') return refusal(413, 'PAYLOAD_TOO_LARGE', `The request body is larger than ${maxBodyBytes} bytes.`);
  const text = new TextDecoder().decode(read.bytes);
  let body: unknown = null;
  try {
    if (text.trim() !== '') body = JSON.parse(text);
  } catch {
    return refusal(400, 'INVALID_JSON', 'The request body is not valid JSON.');
  }
  try {
    return { value: config.input ? config.input(body) : (body as Input) };
  } catch (error) {
    const issues = (error as { issues?: unknown } | null)?.issues;
    const message = error instanceof Error ? error.message : 'The request body is not valid input.';
    return json(400, { reason: 'INVALID_INPUT', message, ...(issues !== undefined ? { issues } : {}) });
  }
}

/**
 * The guard's refusals, and any handler error that is a refusal (`refusalOf`: a `Refusal`, or an
 * error carrying `httpStatus` and `reason`), are answered as such, with Retry-After when it names one;
 * the key was released, so a retry runs again. Anything else is a 500 whose details stay in the
 * server's log.
 */
function errorResponse(error: unknown): Response {
  const refused = refusalOf(error);
  if (refused) return refusal(refused.httpStatus, refused.reason, refused.message, refusalHeaders(refused));
  console.error('[idempotency] the handler failed; the key is released for a retry', error);
  return refusal(500, 'INTERNAL_ERROR', 'Internal error; retry the request with the same Idempotency-Key.');
}
