import type { AnyRouter } from '@trpc/server';
import { createTRPCRouter } from './init';
import { checkoutRouter } from './routers/checkout';
import { merchantRouter } from './routers/merchant';
import { operatorRouter } from './routers/operator';

const productRouter = createTRPCRouter({
  checkout: checkoutRouter,
  merchant: merchantRouter,
  operator: operatorRouter,
});

/** The public API. */
export type AppRouter = typeof productRouter;

const globalForRouter = globalThis as unknown as {
  __payonceRouterExtension?: Record<string, AnyRouter>;
  __payonceExtendedRouter?: AppRouter;
};

/**
 * A tool that runs the app for measurement adds its own procedures here, through the extension seam
 * (../app/extension.ts, BENCH=1 builds only), before the first request. The product never calls it: without it,
 * every other path answers 404 like any procedure that does not exist.
 */
export function extendAppRouter(routers: Record<string, AnyRouter>): void {
  globalForRouter.__payonceRouterExtension = routers;
  // Typed as the product's API: the extension's paths are reached by name, never through the client.
  globalForRouter.__payonceExtendedRouter = createTRPCRouter({
    ...routers,
    checkout: checkoutRouter,
    merchant: merchantRouter,
    operator: operatorRouter,
  }) as unknown as AppRouter;
}

/**
 * The router the app serves: the product's, or the product's plus a tool's extension. Asked per
 * request, never at module load: `next build` evaluates route modules before any extension exists.
 */
export function createAppRouter(): AppRouter {
  return globalForRouter.__payonceExtendedRouter ?? productRouter;
}
