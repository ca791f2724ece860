/**
 * Runs once when a Next server process starts: refuse a configuration that would fail customers
 * later (production without SESSION_SECRET), bring the schema up to date before the first request,
 * then start this instance's background workers (reconciler, outbox relay, key cleanup) on the
 * PostgreSQL job queue. Several instances starting together are serialised by the migration's
 * advisory lock, and share the queue.
 */
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  // `next build` runs with NODE_ENV=production too, and needs no secret: it serves nobody.
  if (process.env.NEXT_PHASE === 'phase-production-build') return;
  // A bad session configuration ends the process here with one line: not a 500 on every request.
  const { exitOnBadSessionConfig } = await import('./server/session');
  exitOnBadSessionConfig(process.env);
  if (!process.env.DATABASE_URL) return; // `next build`, or a misconfigured start: requests will say so
  if (process.env.BENCH === '1') {
    // `npm run bench` only: count statements and serve bench.* (bench/app-extension.ts).
    const { installBenchExtension } = await import('./bench/app-extension');
    installBenchExtension();
  }
  const { runMigrations } = await import('./db/migrate');
  await runMigrations(process.env.DATABASE_URL);
  if (process.env.PAYONCE_JOBS === 'off') return;
  const { startAppJobs } = await import('./server/app-jobs');
  await startAppJobs();
}
