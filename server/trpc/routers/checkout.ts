import { z } from 'zod';
import { listProducts } from '@/server/checkout/catalogue';
import { CheckoutError } from '@/server/checkout/refusals';
import { createOrder, getOrder } from '@/server/checkout/orders';
import { payOrder } from '@/server/checkout/pay';
import { orderTimeline, recentOrders } from '@/server/checkout/timeline';
import { GATEWAY_IDS } from '@/server/payments/gateway-ids';
import { clientAddress } from '@/server/http/rate-limit';
import { BUYER_STEPS } from '@/server/payments/gateway';
import { idempotentOnePhase, idempotentPhases, idempotentProcedure } from '@/server/trpc/procedures';
import { createTRPCRouter, publicProcedure } from '@/server/trpc/init';

const createOrderInput = z.object({
  items: z
    .array(
      z.object({
        sku: z.string().min(1).max(64),
        quantity: z.number().int().min(1).max(99),
      }),
    )
    .min(1)
    .max(20),
});

const payInput = z.object({
  orderId: z.uuid(),
  gateway: z.enum(GATEWAY_IDS),
  /** A sandbox test buyer (a barcode or saved card): the answer is synchronous, 201 or 402. */
  buyer: z.enum(['ok', 'insufficient_funds', 'account_restricted']).optional(),
  /** Without `buyer`: the buyer's own step the page offers (QR code, redirect, card); 202 awaiting_buyer. */
  buyerStep: z.enum(BUYER_STEPS).optional(),
});

const viewerOf = (ctx: { customerId: string; services: { demo?: boolean } }) => ({
  customerId: ctx.customerId,
  demo: ctx.services.demo === true,
});

export const checkoutRouter = createTRPCRouter({
  products: publicProcedure.query(({ ctx }) => listProducts(ctx.services.db)),

  /**
   * Which gateways this deployment is configured for, so the page offers only those: the buyer steps
   * each offers, whether sandbox test buyers exist, and where the sandbox's phone scans a QR code
   * (local runs only: a real deployment has no such phone).
   */
  gateways: publicProcedure.query(({ ctx }) =>
    GATEWAY_IDS.map((id) => {
      const gateway = ctx.services.gateways[id];
      return {
        id,
        available: gateway !== undefined,
        buyerSteps: gateway?.buyerSteps ?? [],
        testBuyers: gateway?.hasTestBuyers ?? false,
        sandboxScanUrl: gateway?.hasTestBuyers ? (ctx.services.testBuyerScanUrl ?? null) : null,
      };
    }),
  ),

  createOrder: idempotentProcedure(createOrderInput).mutation(
    idempotentOnePhase(({ ctx, input }) =>
      createOrder(ctx.customerId, input.items, {
        caps: ctx.services.orderCaps,
        address: clientAddress(ctx.headers, ctx.services.rateLimits?.trustProxy ?? 0),
        ttlSeconds: ctx.services.orderTtlSeconds,
      }),
    ),
  ),

  /**
   * 201 with the paid order; 202 awaiting_buyer with the buyer's step (no test buyer); 402 for a
   * terminal decline — each stored and replayed per key.
   */
  pay: idempotentProcedure(payInput).mutation(
    idempotentPhases(({ ctx, input }) => payOrder(ctx.services, ctx.customerId, input, ctx.returnTo)),
  ),

  order: publicProcedure
    .input(z.object({ orderId: z.uuid() }))
    .query(({ ctx, input }) => getOrder(ctx.services.db, ctx.customerId, input.orderId)),

  /**
   * The order a buyer comes back to from a gateway's page, by the token in the return link instead of
   * the session: they may land in a browser or on an address without it. A wrong token answers like
   * a missing order.
   */
  returnedOrder: publicProcedure.input(z.object({ orderId: z.uuid(), token: z.string().max(64) })).query(({ ctx, input }) => {
    if (!ctx.isReturnToken(input.orderId, input.token)) throw new CheckoutError('ORDER_NOT_FOUND', 'No such order.');
    return getOrder(ctx.services.db, null, input.orderId);
  }),

  /** The 幕后 view: the order's journal, its chain check and the gateway ledger's count. */
  timeline: publicProcedure
    .input(z.object({ orderId: z.uuid() }))
    .query(({ ctx, input }) => orderTimeline(ctx.services.db, viewerOf(ctx), input.orderId, ctx.services.gatewayLedger)),

  /** The customer's newest orders (every customer's in demo mode), for the 幕后 view's list. */
  recentOrders: publicProcedure.query(({ ctx }) => recentOrders(ctx.services.db, viewerOf(ctx))),
});
