/**
 * The tRPC endpoint as a standard `(Request) => Response` function: the Next route handler is one
 * call to it, and the tests serve the very same function.
 */
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import type { CheckoutServices } from '../checkout/services';
import { createTRPCContext, type TRPCContext } from './init';
import { appRouter } from './root';

export const TRPC_ENDPOINT = '/api/trpc';

export interface TrpcHandlerOptions {
  services: () => CheckoutServices;
  sessionSecret: () => string;
}

export function createTrpcHandler(options: TrpcHandlerOptions) {
  return (req: Request): Promise<Response> =>
    fetchRequestHandler({
      endpoint: TRPC_ENDPOINT,
      req,
      router: appRouter,
      createContext: ({ req: request, resHeaders }) =>
        createTRPCContext({
          headers: request.headers,
          resHeaders,
          services: options.services(),
          sessionSecret: options.sessionSecret(),
          secureCookies:
            new URL(request.url).protocol === 'https:' || request.headers.get('x-forwarded-proto') === 'https',
        }),
      responseMeta({ ctx, errors }) {
        const holder = (ctx as TRPCContext | undefined)?.response;
        if (!holder) return {};
        // On success the procedure's own status (201); on error tRPC derives it from the error code.
        return {
          ...(errors.length === 0 && holder.status ? { status: holder.status } : {}),
          headers: new Headers(holder.headers),
        };
      },
    });
}
