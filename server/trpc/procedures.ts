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
import { customerScope, merchantScope, operatorScope } from '@/server/checkout/services';
import type { OperatorRole } from '@/db/schema';
import { csrfMatches, roleAllows, sessionOperator, type Operator } from '@/server/operators/sessions';
import type { IdempotencyContext, IdempotencyHooks } from '@payonce/idempotency/trpc';
import type { Transaction } from '@/db/client';
import { middleware, publicProcedure, type TRPCContext } from './init';
import { sameOriginHeaders } from '@/server/http/same-origin';
import { annotateSpan, inSpan } from '@/server/tracing/traces';
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

const guard = middleware(async ({ ctx, path, input, next }) => {
  const key = ctx.headers.get('idempotency-key');
  const idempotency: IdempotencyContext<Transaction> = {
    store: ctx.services.idempotencyStore,
    options: ctx.services.idempotencyOptions,
    scope: customerScope(ctx.customerId),
    key,
    response: ctx.response,
    hooks: checkoutHooks(ctx),
  };
  // The request's span, in its order's trace when it names one (checkout.pay): server/tracing.
  const orderId = (input as { orderId?: unknown } | undefined)?.orderId;
  return inSpan(path, typeof orderId === 'string' ? orderId : null, { 'payonce.idempotency_key': key ?? '' }, () =>
    next({ ctx: { idempotency } }),
  );
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
      annotateSpan({ 'payonce.guard.outcome': outcome, 'http.response.status_code': status, ...outTradeNoOf(body) });
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

/** The out_trade_no an answer names (an order created, paid, awaiting its buyer), for the request's span. */
function outTradeNoOf(body: unknown): { 'payonce.out_trade_no'?: string } {
  const answer = body as { outTradeNo?: unknown; payment?: { outTradeNo?: unknown } } | null | undefined;
  const outTradeNo = answer?.outTradeNo ?? answer?.payment?.outTradeNo;
  return typeof outTradeNo === 'string' ? { 'payonce.out_trade_no': outTradeNo } : {};
}

export function idempotentProcedure<TSchema extends z.ZodType>(input: TSchema) {
  return publicProcedure.input(input).use(rateLimit).use(requireSession).use(guard);
}

/**
 * The merchant's API (capture, release): `Authorization: Bearer <MERCHANT_API_TOKEN>`, compared in
 * constant time; without the variable set, nobody. Checked before the key is claimed, so a stranger's
 * request stores nothing.
 */
const requireMerchant = middleware(async ({ ctx, type, path, input, next }) => {
  // The request's span, in its order's trace (server/tracing).
  const orderId = (input as { orderId?: unknown } | undefined)?.orderId;
  const traced = <R>(work: () => Promise<R>) =>
    inSpan(
      path,
      typeof orderId === 'string' ? orderId : null,
      { 'payonce.idempotency_key': ctx.headers.get('idempotency-key') ?? '' },
      work,
    );
  const given = /^Bearer (.+)$/.exec(ctx.headers.get('authorization') ?? '')?.[1];
  // A signed-in operator of the console, with the role to move money (refunder or admin).
  if (given === undefined && ctx.operatorSessionToken) {
    const operator = await signedInOperator(ctx, 'refunder', type === 'mutation');
    const merchant = `operator:${operator.username}`;
    return traced(() => next({ ctx: { merchant, idempotency: merchantIdempotency(ctx, operatorScope(operator.id), merchant) } }));
  }
  const expected = ctx.services.merchantApiToken;
  if (!expected || given === undefined || !sameSecret(given, expected)) {
    throw new CheckoutError(
      'MERCHANT_AUTH_REQUIRED',
      expected
        ? 'Send Authorization: Bearer <MERCHANT_API_TOKEN>, or sign in to the console.'
        : 'Sign in to the console (or set MERCHANT_API_TOKEN for the back office’s API).',
    );
  }
  const merchant = 'merchant-api-token';
  return traced(() => next({ ctx: { merchant, idempotency: merchantIdempotency(ctx, merchantScope(), merchant) } }));
});

/**
 * The operator of the request's console session, with at least `role`; a mutation must also carry
 * the session's CSRF token (X-CSRF-Token) from this origin. Refused with 401 / 403 otherwise.
 */
async function signedInOperator(ctx: TRPCContext, role: OperatorRole, mutation: boolean): Promise<Operator> {
  const token = ctx.operatorSessionToken;
  const operator = token ? await sessionOperator(ctx.services.db, token) : undefined;
  if (!operator || !token) throw new CheckoutError('OPERATOR_SIGN_IN_REQUIRED', 'Sign in to the console first.');
  if (mutation && (!csrfMatches(token, ctx.headers.get('x-csrf-token')) || !sameOriginHeaders(ctx.headers))) {
    throw new CheckoutError('CSRF_TOKEN_INVALID', 'Send the X-CSRF-Token the console was given, from the console’s own origin.');
  }
  if (!roleAllows(operator.role, role)) {
    throw new CheckoutError('OPERATOR_ROLE_INSUFFICIENT', `This needs the ${role} role; ${operator.username} is a ${operator.role}.`);
  }
  return operator;
}

/** Operator procedures (the console's reads): a signed-in operator with at least `role`. */
export function operatorProcedure(role: OperatorRole) {
  return publicProcedure.use(
    middleware(async ({ ctx, type, next }) => next({ ctx: { operator: await signedInOperator(ctx, role, type === 'mutation') } })),
  );
}

/** The merchant's idempotency context: keys in the scope of who decides (the API token, or one operator). */
function merchantIdempotency(ctx: TRPCContext, scope: string, by: string): IdempotencyContext<Transaction> {
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
      await journalMerchantRequest(ctx.services.db, orderId, { procedure: request.path, key: request.key, outcome, status, by });
    },
  };
  return {
    store: ctx.services.idempotencyStore,
    options: ctx.services.idempotencyOptions,
    scope,
    key: ctx.headers.get('idempotency-key'),
    response: ctx.response,
    hooks,
  };
}

export function merchantProcedure<TSchema extends z.ZodType>(input: TSchema) {
  return publicProcedure.input(input).use(requireMerchant);
}

/** Constant time over the secret: both sides hashed first, so a wrong guess's timing tells nothing. */
function sameSecret(given: string, expected: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(given), digest(expected));
}
