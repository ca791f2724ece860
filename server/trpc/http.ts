/**
 * The tRPC endpoint as a standard `(Request) => Response` function: the Next route handler is one
 * call to it, and the tests serve the very same function.
 *
 * Before tRPC sees a request, the endpoint enforces what the contract says about the transport: plain
 * calls (mutations never batched, queries batched up to a bound) and a bounded body. A refusal here
 * runs no procedure, so it touches no session, key or order.
 */
import { TRPCError } from '@trpc/server';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { getHTTPStatusCodeFromError } from '@trpc/server/http';
import { getTRPCErrorShape } from '@trpc/server';
import type { CheckoutServices } from '@/server/checkout/services';
import { MAX_BODY_BYTES, readBodyWithin } from '@payonce/idempotency/fetch';
import { CheckoutError } from '@/server/checkout/refusals';
import { toTRPCError } from './errors';
import { isDraining } from '@/server/http/drain';
import { isSecureRequest } from '@/server/http/session';
import { refusalHeaders } from '@payonce/idempotency';
import { createTRPCContext, type TRPCContext } from './init';
import { MAX_QUERY_BATCH_SIZE } from './limits';
import { createAppRouter, type AppRouter } from './root';

export const TRPC_ENDPOINT = '/api/trpc';

export interface TrpcHandlerOptions {
  services: () => CheckoutServices;
  sessionSecret: () => string;
}

export function createTrpcHandler(options: TrpcHandlerOptions) {
  return async (req: Request): Promise<Response> => {
    const appRouter = createAppRouter();
    const url = new URL(req.url);
    const procedurePath = procedurePathOf(url);
    const refusal = isDraining() ? SHUTTING_DOWN : batchRefusal(appRouter, url, procedurePath);
    if (refusal) return refusalResponse(appRouter, refusal, procedurePath);
    return handle(options, appRouter, req, procedurePath);
  };
}

/** The refusal of a new request while this instance drains (../http/drain.ts): before anything is claimed. */
const SHUTTING_DOWN = new CheckoutError(
  'SHUTTING_DOWN',
  'This instance is shutting down; retry the request (a mutation with the same Idempotency-Key).',
);

async function handle(options: TrpcHandlerOptions, appRouter: AppRouter, req: Request, procedurePath: string): Promise<Response> {
  let request = req;
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    const body = await readBodyWithin(req, MAX_BODY_BYTES);
    if (body.kind === 'too_large') {
      return refusalResponse(
        appRouter,
        new CheckoutError('PAYLOAD_TOO_LARGE', `The request body is larger than ${MAX_BODY_BYTES} bytes.`),
        procedurePath,
      );
    }
    // tRPC's fetch adapter reads the body itself and has no size limit: it gets the bytes already
    // read within ours.
    request = new Request(req, { body: body.bytes });
  }

  return privateAnswer(
    await fetchRequestHandler({
      endpoint: TRPC_ENDPOINT,
      req: request,
      router: appRouter,
      // Also enforced above, with our reason; this keeps tRPC's own guard on should the path parsing
      // ever disagree with tRPC's.
      maxBatchSize: MAX_QUERY_BATCH_SIZE,
      createContext: ({ req: incoming, resHeaders }) =>
        createTRPCContext({
          headers: incoming.headers,
          resHeaders,
          services: options.services(),
          sessionSecret: options.sessionSecret(),
          secureCookies: isSecureRequest(incoming),
        }),
      onError({ error, ctx, path }) {
        // Procedures' unexpected errors are logged by the domain-error middleware; these failed before
        // a procedure ran (no context), and their body says only "Internal error".
        if (error.code === 'INTERNAL_SERVER_ERROR' && !ctx) console.error(`[trpc] unexpected error on ${path}`, error.cause ?? error);
      },
      responseMeta({ ctx, errors }) {
        const holder = (ctx as TRPCContext | undefined)?.response;
        if (!holder) return {};
        // On success the procedure's own status (201); on error tRPC derives it from the error code.
        return {
          ...(errors.length === 0 && holder.status ? { status: holder.status } : {}),
          headers: new Headers(holder.headers),
        };
      },
    }),
  );
}

/**
 * Every answer here is one customer's (their order, their journal, their stored response) or sets
 * their session cookie, and even the catalogue's first answer carries a Set-Cookie. A shared cache in
 * front (a CDN, a corporate proxy) must never keep one to serve to another: `private, no-store`, and
 * `Vary: Cookie` for any cache that ignores the first.
 */
function privateAnswer(response: Response): Response {
  const headers = new Headers(response.headers);
  headers.set('Cache-Control', 'private, no-store');
  const vary = headers.get('Vary');
  if (!vary?.split(',').some((v) => v.trim().toLowerCase() === 'cookie')) headers.set('Vary', vary ? `${vary}, Cookie` : 'Cookie');
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

/**
 * Mutations are never batched: each needs its own Idempotency-Key header and its own status (201,
 * 402, Idempotency-Replayed), which a batch cannot carry — a two-call batch would share one key.
 * Queries may batch, up to a bound. Read from the URL (`?batch=1`, comma-separated paths), so a
 * refused batch costs no body read and no procedure call.
 */
function batchRefusal(appRouter: AppRouter, url: URL, procedurePath: string): CheckoutError | undefined {
  if (url.searchParams.get('batch') !== '1') return undefined;
  const paths = procedurePath.split(',');
  // Flat at run time ('checkout.pay' → procedure), though typed as the nested router record.
  const procedures = appRouter._def.procedures as unknown as Record<string, { _def: { type: string } } | undefined>;
  if (paths.some((path) => procedures[path]?._def.type === 'mutation')) {
    return new CheckoutError(
      'BATCH_NOT_ALLOWED',
      'Mutations are not batched: send each one as its own request with its own Idempotency-Key.',
    );
  }
  if (paths.length > MAX_QUERY_BATCH_SIZE) {
    return new CheckoutError(
      'BATCH_TOO_LARGE',
      `A batch may hold at most ${MAX_QUERY_BATCH_SIZE} queries; this one holds ${paths.length}.`,
    );
  }
  return undefined;
}

function procedurePathOf(url: URL): string {
  const raw = url.pathname.slice(TRPC_ENDPOINT.length + 1);
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw; // a malformed escape names no procedure; tRPC answers it 404
  }
}

/** A refusal in the same tRPC error body every procedure error has (data.httpStatus, data.reason). */
function refusalResponse(appRouter: AppRouter, refusal: CheckoutError, path: string): Response {
  const error = toTRPCError(refusal) as TRPCError;
  const shape = getTRPCErrorShape({
    config: appRouter._def._config,
    error,
    type: 'unknown',
    path,
    input: undefined,
    ctx: undefined,
  });
  return privateAnswer(Response.json({ error: shape }, { status: getHTTPStatusCodeFromError(error), headers: refusalHeaders(refusal) }));
}
