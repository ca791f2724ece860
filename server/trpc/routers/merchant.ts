import { z } from 'zod';
import { decideCapture, decideRelease } from '@/server/checkout/authorizations';
import { decideRefund } from '@/server/checkout/merchant-refunds';
import { idempotentOnePhase, merchantProcedure } from '@/server/trpc/procedures';
import { createTRPCRouter } from '@/server/trpc/init';

/**
 * The merchant's decisions: refunds of paid orders, and about an authorised order (STRIPE_CAPTURE_METHOD=manual), for the back
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

  /**
   * Give back all or part of a paid order: 202 with the refund decided and what is left; the refund
   * worker sends it through the gateway's own idempotent refund. Never more in total than was charged.
   */
  refund: merchantProcedure(
    z.object({
      orderId: z.uuid(),
      amountMinor: z.number().int().min(1).max(99_999_999),
      reason: z.string().trim().min(1).max(200),
    }),
  ).mutation(idempotentOnePhase(({ ctx, input }) => decideRefund(input, ctx.merchant))),
});
