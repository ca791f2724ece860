/**
 * The client side: mutations unbatched through httpLink (a batch answers 200 for all and shares one
 * set of headers, so it cannot carry a key per mutation or a 201 per answer), each with its own
 * Idempotency-Key taken from the operation's context. Queries may batch.
 */
import { createTRPCClient, httpBatchLink, httpLink, splitLink } from '@trpc/client';
import type { ExampleRouter } from './server';

export function createExampleClient(url: string, customer: string) {
  const headers = { 'x-customer-id': customer };
  return createTRPCClient<ExampleRouter>({
    links: [
      splitLink({
        condition: (op) => op.type === 'mutation',
        true: httpLink({
          url,
          headers: ({ op }) => {
            const key = (op.context as { idempotencyKey?: string }).idempotencyKey;
            return { ...headers, ...(key ? { 'Idempotency-Key': key } : {}) };
          },
        }),
        false: httpBatchLink({ url, headers }),
      }),
    ],
  });
}

/**
 * A mutation that survives a lost answer: the key is made once per intent (persist it, e.g. in
 * localStorage, before the first try), and every retry sends the same one. Only answers that say
 * "nothing happened yet, try again" are retried: network errors, 409 in progress, 5xx; with
 * exponential backoff and full jitter so that clients do not retry in step.
 */
export async function withRetries<T>(attempt: () => Promise<T>, tries = 5): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (error) {
      const status = (error as { data?: { httpStatus?: number } }).data?.httpStatus;
      const retriable = status === undefined || status === 409 || status >= 500;
      if (!retriable || n >= tries) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2000, 100 * 2 ** n)));
    }
  }
}
