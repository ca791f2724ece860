import { z } from 'zod';
import { decideCapture, decideRelease } from '@/server/checkout/authorizations';
import { idempotentOnePhase, merchantProcedure } from '@/server/trpc/procedures';
import { createTRPCRouter } from '@/server/trpc/init';

/**
 * The merchant's decisions about an authorised order (STRIPE_CAPTURE_METHOD=manual), for the back
 * office that ships it: capture when it ships (all, or part when some of it cannot), release when it
 * will not. Each answers 202 with the decision; the authorization worker carries it out at the
 * gateway and checkout.order shows the result. Bearer MERCHANT_API_TOKEN; Idempotency-Key required.
 */
export const merchantRouter = createTRPCRouter({
  capture: merchantProcedure(
    z.object({
      orderId: z.uuid(),
      /** Default: all that is held. Less captures part and releases the rest. */
      amountMinor: z.number().int().min(1).max(99_999_999).optional(),
    }),
  ).mutation(idempotentOnePhase(({ ctx, input }) => decideCapture(input, ctx.merchant))),

  release: merchantProcedure(z.object({ orderId: z.uuid() })).mutation(
    idempotentOnePhase(({ ctx, input }) => decideRelease(input, ctx.merchant)),
  ),
});
