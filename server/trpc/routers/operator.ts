import { z } from 'zod';
import { eq } from 'drizzle-orm';
import { ORDER_STATUSES, refunds } from '@/db/schema';
import { orderTimeline, recentOrders } from '@/server/checkout/timeline';
import { listMismatches, resolveMismatch } from '@/server/reconciliation/mismatches';
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

  /**
   * One order with its journal and the gateway's ledger, and — for operators only, never in the
   * shopper's view — who asked for each refund and why.
   */
  order: operatorProcedure('viewer')
    .input(z.object({ orderId: z.uuid() }))
    .query(async ({ ctx, input }) => {
      const timeline = await orderTimeline(ctx.services.db, { customerId: '', demo: true }, input.orderId, ctx.services.gatewayLedger);
      const asked = await ctx.services.db
        .select({ refundId: refunds.refundId, requestedBy: refunds.requestedBy, note: refunds.note })
        .from(refunds)
        .where(eq(refunds.orderId, input.orderId));
      return { ...timeline, refundRequests: asked };
    }),

  /** 对账: what the daily reconciliation could not match, open ones first. */
  mismatches: operatorProcedure('viewer')
    .input(
      z
        .object({ open: z.boolean().default(true), limit: z.number().int().min(1).max(500).default(100) })
        .default({ open: true, limit: 100 }),
    )
    .query(({ ctx, input }) => listMismatches(ctx.services.db, input)),

  /** An admin says what a mismatch was and what was done: once, journaled with who. */
  resolveMismatch: operatorProcedure('admin')
    .input(z.object({ id: z.uuid(), resolution: z.string().trim().min(1).max(500) }))
    .mutation(({ ctx, input }) => resolveMismatch(ctx.services.db, input, `operator:${ctx.operator.username}`)),
});
