/**
 * The only tRPC-aware glue around the idempotency core: one call to executeIdempotent per request,
 * with the key from the Idempotency-Key header and the scope from the customer's session.
 *
 * Usage: `idempotentProcedure(inputSchema).mutation(({ ctx, input }) => …ctx.idempotencyKey…)`.
 * The input is validated before the key is claimed, so bad input costs no write at all.
 */
import type { MiddlewareResult, StandardSchemaV1 } from '@trpc/server/unstable-core-do-not-import';
import { executeIdempotent, type OwnedKey } from '../idempotency';
import type { Transaction } from '../../db/client';
import { CheckoutError } from '../checkout/errors';
import { StoredErrorResponse } from './errors';
import { middleware, publicProcedure } from './init';

const idempotency = middleware(async ({ ctx, path, input, next }) => {
  if (ctx.sessionIssued) {
    // A key is scoped to its customer, and this request has none yet: the session issued with this
    // answer would be lost with it if the answer were lost, and the retry would arrive as a stranger
    // and run again. So the first request must establish the session; the retry carries it.
    throw new CheckoutError(
      401,
      'SESSION_REQUIRED',
      'No session yet: retry with the session cookie set by this response (any request establishes it).',
      0,
    );
  }
  const at = { procedure: path, gateway: (input as { gateway?: string } | undefined)?.gateway };
  await ctx.services.faults?.hit('before_claim', at);
  const result = await executeIdempotent<Transaction>(
    ctx.services.idempotencyStore,
    {
      scope: `customer:${ctx.customerId}`,
      key: ctx.headers.get('idempotency-key'),
      path,
      input,
    },
    async (key: OwnedKey<Transaction>) => {
      await ctx.services.faults?.hit('after_claim', at);
      const inner = await next({ ctx: { idempotencyKey: key } });
      // A thrown error after the key was completed (a stored 402) is resolved by the core to the
      // stored response; any other error releases the key.
      if (!inner.ok) throw inner.error;
      return key.completed ?? { status: 200, body: inner.data };
    },
    ctx.services.idempotencyOptions,
  );

  // Committed (or replayed); the answer has not left yet: the drills lose it here.
  await ctx.services.faults?.hit('after_commit', at);
  ctx.response.status = result.status;
  if (result.replayed) ctx.response.headers['Idempotency-Replayed'] = 'true';
  if (result.status >= 400) {
    throw new StoredErrorResponse(result.status, (result.body ?? {}) as Record<string, unknown>);
  }
  // The stored body is the answer, whether it was produced just now or replayed. Typed with the
  // context the resolver saw, so resolvers get `ctx.idempotencyKey` without a second middleware.
  return { ok: true, data: result.body, marker: 'middlewareMarker' as never } as MiddlewareResult<{
    idempotencyKey: OwnedKey<Transaction>;
  }>;
});

export function idempotentProcedure<TSchema extends StandardSchemaV1>(input: TSchema) {
  return publicProcedure.input(input).use(idempotency);
}
