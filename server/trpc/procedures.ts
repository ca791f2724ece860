/**
 * The checkout's mutations: every one is guarded by the idempotency core through the tRPC adapter
 * (@payonce/idempotency/trpc), scoped to the customer's session, rate-limited before the claim, journaled into
 * the order's 幕后 timeline, and open to the failure drills' faults.
 *
 * Usage: `idempotentProcedure(inputSchema).mutation(idempotent(async ({ ctx, input, key }) => …))`.
 * The input is validated before the key is claimed, so bad input costs no write at all.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { z } from 'zod';
import { journalMerchantRequest, journalRequest } from '@/server/checkout/journal';
import { CheckoutError } from '@/server/checkout/refusals';
import { customerScope, merchantScope } from '@/server/checkout/services';
import type { IdempotencyContext, IdempotencyHooks } from '@payonce/idempotency/trpc';
import type { Transaction } from '@/db/client';
import { middleware, publicProcedure, type TRPCContext } from './init';
import { rateLimit } from './rate-limit';

export { idempotent, idempotentOnePhase, idempotentPhases } from '@payonce/idempotency/trpc';

const requireSession = middleware(async ({ ctx, next }) => {
  if (ctx.sessionIssued) {
    // A key is scoped to its customer, and this request has none yet: the session issued with this
    // answer would be lost with it if the answer were lost, and the retry would arrive as a stranger
    // and run again. So the first request must establish the session; the retry carries it.
    throw new CheckoutError(
      'SESSION_REQUIRED',
      'No session yet: retry with the session cookie set by this response (any request establishes it).',
    );
  }
  return next();
});

const guard = middleware(async ({ ctx, next }) => {
  const idempotency: IdempotencyContext<Transaction> = {
    store: ctx.services.idempotencyStore,
    options: ctx.services.idempotencyOptions,
    scope: customerScope(ctx.customerId),
    key: ctx.headers.get('idempotency-key'),
    response: ctx.response,
    hooks: checkoutHooks(ctx),
  };
  return next({ ctx: { idempotency } });
});

function checkoutHooks(ctx: TRPCContext): IdempotencyHooks {
  const faults = ctx.services.faults;
  const at = (request: { path: string; input: unknown }) => {
    const input = request.input as { gateway?: string; orderId?: string } | undefined;
    return { procedure: request.path, gateway: input?.gateway, orderId: input?.orderId, customerId: ctx.customerId };
  };
  return {
    // The drills drop requests before the claim, crash after it, and lose answers after the commit.
    ...(faults
      ? {
          beforeClaim: (request) => faults.hit('before_claim', at(request)),
          afterClaim: (request) => faults.hit('after_claim', at(request)),
          afterCommit: (request) => faults.hit('after_commit', at(request)),
        }
      : {}),
    /**
     * The request's line in the order's journal (the 幕后 view): which key, what the guard did, which
     * status went back. checkout.pay names its order in the input; checkout.createOrder's order exists
     * once its answer does. Journaled only into an order of this customer's.
     */
    async onOutcome(request, outcome, status, body) {
      const orderId =
        (request.input as { orderId?: unknown } | undefined)?.orderId ?? (body as { orderId?: unknown } | null | undefined)?.orderId;
      if (typeof orderId !== 'string' || outcome === 'refused') return;
      const gateway = (request.input as { gateway?: unknown } | undefined)?.gateway;
      await journalRequest(ctx.services.db, ctx.customerId, orderId, {
        procedure: request.path,
        key: request.key,
        outcome,
        status,
        ...(typeof gateway === 'string' ? { gateway } : {}),
      });
    },
  };
}

export function idempotentProcedure<TSchema extends z.ZodType>(input: TSchema) {
  return publicProcedure.input(input).use(rateLimit).use(requireSession).use(guard);
}

/**
 * The merchant's API (capture, release): `Authorization: Bearer <MERCHANT_API_TOKEN>`, compared in
 * constant time; without the variable set, nobody. Checked before the key is claimed, so a stranger's
 * request stores nothing.
 */
const requireMerchant = middleware(async ({ ctx, next }) => {
  const expected = ctx.services.merchantApiToken;
  const given = /^Bearer (.+)$/.exec(ctx.headers.get('authorization') ?? '')?.[1];
  if (!expected || given === undefined || !sameSecret(given, expected)) {
    throw new CheckoutError(
      'MERCHANT_AUTH_REQUIRED',
      expected ? 'Send Authorization: Bearer <MERCHANT_API_TOKEN>.' : 'The merchant API is off: set MERCHANT_API_TOKEN to turn it on.',
    );
  }
  return next({ ctx: { merchant: 'merchant-api-token' } });
});

const merchantGuard = middleware(async ({ ctx, next }) => {
  const faults = ctx.services.faults;
  const at = (request: { path: string; input: unknown }) => ({
    procedure: request.path,
    orderId: (request.input as { orderId?: string } | undefined)?.orderId,
  });
  const hooks: IdempotencyHooks = {
    ...(faults
      ? {
          beforeClaim: (request) => faults.hit('before_claim', at(request)),
          afterClaim: (request) => faults.hit('after_claim', at(request)),
          afterCommit: (request) => faults.hit('after_commit', at(request)),
        }
      : {}),
    async onOutcome(request, outcome, status) {
      const orderId = (request.input as { orderId?: unknown } | undefined)?.orderId;
      if (typeof orderId !== 'string' || outcome === 'refused') return;
      await journalMerchantRequest(ctx.services.db, orderId, { procedure: request.path, key: request.key, outcome, status });
    },
  };
  const idempotency: IdempotencyContext<Transaction> = {
    store: ctx.services.idempotencyStore,
    options: ctx.services.idempotencyOptions,
    scope: merchantScope(),
    key: ctx.headers.get('idempotency-key'),
    response: ctx.response,
    hooks,
  };
  return next({ ctx: { idempotency } });
});

export function merchantProcedure<TSchema extends z.ZodType>(input: TSchema) {
  return publicProcedure.input(input).use(requireMerchant).use(merchantGuard);
}

/** Constant time over the secret: both sides hashed first, so a wrong guess's timing tells nothing. */
function sameSecret(given: string, expected: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(given), digest(expected));
}
