/**
 * The smallest tRPC app guarded by the idempotency core: one mutation, `charges.create`, served by
 * tRPC's fetch adapter (in Next.js: app/api/trpc/[trpc]/route.ts exporting this handler as GET and
 * POST). What the guard needs travels in the context (`ctx.idempotency`); the resolver is wrapped in
 * `idempotentOnePhase(…)`, whose transaction responds: that response is stored with its effects, and
 * every retry gets it back. (Work with a call to another service between transactions uses
 * `idempotent(async ({ ctx, input, key }) => …)` and `key.atomicPhase` instead.)
 */
import { initTRPC } from '@trpc/server';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import type postgres from 'postgres';
import { z } from 'zod';
import { respond } from '@payonce/idempotency';
import { createPostgresIdempotencyStore } from '@payonce/idempotency/postgres';
import { idempotentOnePhase, StoredErrorResponse, type IdempotencyContext, type ResponseMetaHolder } from '@payonce/idempotency/trpc';

export function createExampleApp(sql: postgres.Sql) {
  // No ORM: each phase writes with the transaction's own postgres.js handle.
  const store = createPostgresIdempotencyStore(sql);

  const createContext = ({ req }: { req: Request }) => {
    const response: ResponseMetaHolder = { headers: {} };
    // Stand-in for your authentication: whoever the session says the caller is.
    const customer = req.headers.get('x-customer-id') ?? 'anonymous';
    const idempotency: IdempotencyContext<postgres.TransactionSql> = {
      store,
      scope: `customer:${customer}`,
      key: req.headers.get('idempotency-key'),
      response,
    };
    return { customer, response, idempotency };
  };

  const t = initTRPC.context<ReturnType<typeof createContext>>().create({
    // A stored error (here none, in the checkout a 402 decline) goes out with its stored body.
    errorFormatter: ({ shape, error }) =>
      error.cause instanceof StoredErrorResponse ? { ...shape, data: { ...shape.data, ...error.cause.body } } : shape,
  });

  const router = t.router({
    charges: t.router({
      create: t.procedure.input(z.object({ amountMinor: z.number().int().positive() })).mutation(
        // One phase: the effect and the stored answer commit together, or not at all.
        idempotentOnePhase(({ ctx, input }) => async (tx) => {
          const [charge] = await tx<{ id: string }[]>`
            insert into example_charges (customer, amount_minor) values (${ctx.customer}, ${input.amountMinor})
            returning id`;
          return respond(201, { chargeId: charge!.id, amountMinor: input.amountMinor });
        }),
      ),
    }),
  });

  const handler = (req: Request) =>
    fetchRequestHandler({
      endpoint: '/api/trpc',
      req,
      router,
      createContext,
      // The guard's status (201) and headers (Idempotency-Replayed) reach the HTTP response here: a
      // status set on ctx itself would be lost, because tRPC copies ctx between middlewares.
      responseMeta: ({ ctx, errors }) => ({
        ...(errors.length === 0 && ctx?.response.status ? { status: ctx.response.status } : {}),
        headers: new Headers(ctx?.response.headers ?? {}),
      }),
    });

  return { router, handler };
}

export type ExampleRouter = ReturnType<typeof createExampleApp>['router'];
