/**
 * The only tRPC-aware glue around the idempotency core: one call to executeIdempotent per request,
 * with the key from the Idempotency-Key header and the scope from the customer's session.
 *
 * Usage: `idempotentProcedure(inputSchema).mutation(({ ctx, input }) => …ctx.idempotencyKey…)`.
 * The input is validated before the key is claimed, so bad input costs no write at all.
 */
import type { MiddlewareResult, StandardSchemaV1 } from '@trpc/server/unstable-core-do-not-import';
import { executeIdempotent, IdempotencyError, KeyReusedError, RequestInProgressError, type OwnedKey } from '../idempotency';
import { journalRequest } from '../checkout/journal';
import type { Transaction } from '../../db/client';
import { CheckoutError } from '../checkout/errors';
import { StoredErrorResponse } from './errors';
import { middleware, publicProcedure, type TRPCContext } from './init';
import { rateLimit } from './rate-limit';

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
  const rawKey = ctx.headers.get('idempotency-key');
  let acquisition: OwnedKey<Transaction>['acquisition'] | undefined;
  let result: Awaited<ReturnType<typeof executeIdempotent>>;
  try {
    result = await executeIdempotent<Transaction>(
      ctx.services.idempotencyStore,
      {
        scope: `customer:${ctx.customerId}`,
        key: rawKey,
        path,
        input,
      },
      async (key: OwnedKey<Transaction>) => {
        acquisition = key.acquisition;
        await ctx.services.faults?.hit('after_claim', at);
        const inner = await next({ ctx: { idempotencyKey: key } });
        // A thrown error after the key was completed (a stored 402) is resolved by the core to the
        // stored response; any other error releases the key.
        if (!inner.ok) throw inner.error;
        return key.completed ?? { status: 200, body: inner.data };
      },
      ctx.services.idempotencyOptions,
    );
  } catch (error) {
    // 409 in progress, 422 mismatch, or the handler failed and the key was released for a retry.
    await journalRequestOutcome(ctx, path, input, rawKey, guardOutcomeOf(error, acquisition), statusOf(error), undefined);
    throw error;
  }
  await journalRequestOutcome(
    ctx,
    path,
    input,
    rawKey,
    result.replayed ? 'replayed' : acquisition === 'new' || acquisition === undefined ? 'claimed' : 'taken_over',
    result.status,
    result.body,
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

type RequestOutcome = 'claimed' | 'taken_over' | 'replayed' | 'in_progress' | 'mismatch' | 'released' | 'refused';

function guardOutcomeOf(error: unknown, acquisition: string | undefined): RequestOutcome {
  if (error instanceof RequestInProgressError) return 'in_progress';
  if (error instanceof KeyReusedError) return 'mismatch';
  // Thrown before the key was claimed (a missing or malformed key): nothing was claimed or released.
  return acquisition === undefined ? 'refused' : 'released';
}

function statusOf(error: unknown): number {
  if (error instanceof CheckoutError) return error.httpStatus;
  if (error instanceof IdempotencyError) return error.httpStatus;
  return 500;
}

/**
 * The request's line in the order's journal (the 幕后 view): which key, what the guard did, which
 * status went back. checkout.pay names its order in the input; checkout.createOrder's order exists
 * once its answer does. Journaled only into an order of this customer's.
 */
async function journalRequestOutcome(
  ctx: TRPCContext,
  procedure: string,
  input: unknown,
  key: string | null,
  outcome: RequestOutcome,
  status: number,
  body: unknown,
): Promise<void> {
  const orderId =
    (input as { orderId?: unknown } | undefined)?.orderId ?? (body as { orderId?: unknown } | null | undefined)?.orderId;
  if (typeof orderId !== 'string' || outcome === 'refused') return;
  const gateway = (input as { gateway?: unknown } | undefined)?.gateway;
  try {
    await journalRequest(ctx.services.db, ctx.customerId, orderId, {
      procedure,
      key,
      outcome,
      status,
      ...(typeof gateway === 'string' ? { gateway } : {}),
    });
  } catch (error) {
    // The answer stands (its effects and their own journal lines committed with it); only this
    // request's line is missing, and the answer must not be turned into an error because of it.
    console.error('[journal] could not record the request outcome', error);
  }
}

export function idempotentProcedure<TSchema extends StandardSchemaV1>(input: TSchema) {
  return publicProcedure.input(input).use(rateLimit).use(idempotency);
}
