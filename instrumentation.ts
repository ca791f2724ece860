/**
 * Runs once when a Next server process starts: refuse a configuration that would fail customers
 * later (an invalid variable, production without SESSION_SECRET: server/config/env.ts), bring the schema
 * up to date before the first request, then start this instance's background workers (reconciler,
 * outbox relay, key cleanup) on the PostgreSQL job queue. Several instances starting together are serialised by the migration's
 * advisory lock, and share the queue.
 */
export async function register(): Promise<void> {
  // Next's own variables, not configuration: NEXT_RUNTIME is replaced at compile time, so the edge
  // bundle drops everything below.
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  // `next build` runs with NODE_ENV=production too, and needs no secret: it serves nobody.
  if (process.env.NEXT_PHASE === 'phase-production-build') return;
  // Before anything else: the per-address limits count the socket's address, which only this sees.
  const { installPeerAddressStamp } = await import('./server/http/peer-address');
  installPeerAddressStamp();
  // A bad configuration ends the process here with one line: not a 500 on every request.
  const { exitOnBadEnv, serverEnv } = await import('./server/config/env');
  exitOnBadEnv();
  const env = serverEnv();
  // Traces, when OpenTelemetry's OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set; off by default (server/tracing).
  const { startTracingFromEnv } = await import('./server/tracing/setup');
  const tracing = startTracingFromEnv();
  if (!env.DATABASE_URL) return; // a misconfigured start: requests will say so
  if (env.BENCH) {
    // `npm run bench`'s build only: the extension seam (server/app/extension.ts).
    const { default: extension } = await import('#app-extension');
    extension?.install();
  }
  const { runMigrations } = await import('./db/migrate');
  await runMigrations(env.DATABASE_URL);
  // `next start` with NEXT_MANUAL_SIG_HANDLE (the start scripts set it) leaves SIGTERM to the app:
  // drain, then stop the jobs and close the pool (server/http/drain.ts).
  if (process.env.NEXT_MANUAL_SIG_HANDLE) {
    const { exitGracefullyOnSignals } = await import('./server/http/drain');
    const { closeDatabase } = await import('./db/client');
    const { stopAppJobs } = await import('./server/app/jobs');
    exitGracefullyOnSignals({
      graceMs: env.SHUTDOWN_GRACE_MS,
      close: [
        { name: 'background jobs', run: stopAppJobs },
        { name: 'database pool', run: closeDatabase },
        ...(tracing ? [{ name: 'traces', run: () => tracing.shutdown() }] : []),
      ],
    });
  }
  if (env.PAYONCE_JOBS === 'off') return;
  const { startAppJobs } = await import('./server/app/jobs');
  await startAppJobs();
}
