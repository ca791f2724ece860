/**
 * The typed tRPC client, for the browser and for Node (the tests and the soak use it too).
 *
 * Mutations go unbatched through httpLink: a batched stream always answers 200 and drops the headers
 * a procedure sets (201, Idempotency-Replayed, Retry-After), and each mutation needs its own
 * Idempotency-Key header, taken from the operation's context (the server refuses batched mutations).
 * Queries may batch, up to the server's bound.
 */
import { createTRPCClient, httpBatchLink, httpLink, splitLink } from '@trpc/client';
import { MAX_QUERY_BATCH_SIZE } from '@/server/trpc/limits';
import type { AppRouter } from '@/server/trpc/root';

export interface CheckoutOperationContext extends Record<string, unknown> {
  idempotencyKey?: string;
}

export function createCheckoutClient(options: { url: string; fetch?: typeof fetch; headers?: () => Record<string, string> }) {
  const extraHeaders = options.headers ?? (() => ({}));
  return createTRPCClient<AppRouter>({
    links: [
      splitLink({
        condition: (op) => op.type === 'mutation',
        true: httpLink({
          url: options.url,
          fetch: options.fetch,
          headers: ({ op }) => {
            const key = (op.context as CheckoutOperationContext).idempotencyKey;
            return { ...extraHeaders(), ...(key ? { 'Idempotency-Key': key } : {}) };
          },
        }),
        false: httpBatchLink({
          url: options.url,
          fetch: options.fetch,
          headers: extraHeaders,
          maxItems: MAX_QUERY_BATCH_SIZE,
        }),
      }),
    ],
  });
}

export type CheckoutClient = ReturnType<typeof createCheckoutClient>;
