import { createTRPCRouter } from './init';
import { benchRouter } from './routers/bench';
import { checkoutRouter } from './routers/checkout';

const productRouter = createTRPCRouter({
  checkout: checkoutRouter,
});

/** The public API; the benchmark's procedures are deliberately not part of it. */
export type AppRouter = typeof productRouter;

/**
 * The router the app serves. BENCH=1 (set by `npm run bench` on its own app process only) adds
 * `bench.*`; without it those paths answer 404, like any procedure that does not exist.
 */
export function createAppRouter(env: Record<string, string | undefined> = process.env): AppRouter {
  if (env.BENCH !== '1') return productRouter;
  return createTRPCRouter({ checkout: checkoutRouter, bench: benchRouter });
}

export const appRouter = createAppRouter();
