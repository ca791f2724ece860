import { z } from 'zod';
import { ORDER_STATUSES } from '@/db/schema';
import { orderTimeline, recentOrders } from '@/server/checkout/timeline';
import { operatorProcedure } from '@/server/trpc/procedures';
import { createTRPCRouter } from '@/server/trpc/init';

/**
 * The console's reads, for any signed-in operator (viewer and up): every customer's orders, newest
 * first, and one order with its journal and the gateway's ledger. What an operator may change is in
 * the merchant router (capture, release) and needs the refunder role.
 */
export const operatorRouter = createTRPCRouter({
  me: operatorProcedure('viewer').query(({ ctx }) => ({ username: ctx.operator.username, role: ctx.operator.role })),

  orders: operatorProcedure('viewer')
    .input(
      z.object({ status: z.enum(ORDER_STATUSES).optional(), limit: z.number().int().min(1).max(200).default(50) }).default({ limit: 50 }),
    )
    .query(async ({ ctx, input }) => {
      // An operator sees every customer's orders: the viewer of no customer, with the whole list.
      const listed = await recentOrders(ctx.services.db, { customerId: '', demo: true }, input.status ? 200 : input.limit);
      return (input.status ? listed.filter((order) => order.status === input.status) : listed)
        .slice(0, input.limit)
        .map(({ mine: _mine, ...order }) => order);
    }),

  order: operatorProcedure('viewer')
    .input(z.object({ orderId: z.uuid() }))
    .query(({ ctx, input }) => orderTimeline(ctx.services.db, { customerId: '', demo: true }, input.orderId, ctx.services.gatewayLedger)),
});
