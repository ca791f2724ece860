import { createTRPCRouter } from './init';
import { checkoutRouter } from './routers/checkout';

export const appRouter = createTRPCRouter({
  checkout: checkoutRouter,
});

export type AppRouter = typeof appRouter;
