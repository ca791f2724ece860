/**
 * The seam through which a tool that runs the app for measurement adds to it: the benchmark
 * (bench/app-extension.ts) counts the statements the process sends and serves its own procedures
 * beside the product's (server/trpc/root.ts `extendAppRouter`, db/client.ts `configureConnections`).
 *
 * instrumentation.ts loads `#app-extension` only when BENCH=1, before the first request and the
 * first database connection. The product resolves that name to ./no-extension.ts (tsconfig.json
 * `paths`); a build made with BENCH=1 resolves it to bench/app-extension.ts (next.config.mjs). The
 * product never names a tool's files, and builds without them.
 */
export interface AppExtension {
  /** Runs once per process, before the first request and the first database connection. */
  install(): void;
}
