/**
 * Runs once when a Next server process starts: bring the schema up to date before the first request,
 * then start this instance's background workers (reconciler, outbox relay, key cleanup) on the
 * PostgreSQL job queue. Several instances starting together are serialised by the migration's
 * advisory lock, and share the queue.
 */
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  if (!process.env.DATABASE_URL) return; // `next build`, or a misconfigured start: requests will say so
  const { runMigrations } = await import('./db/migrate');
  await runMigrations(process.env.DATABASE_URL);
  if (process.env.PAYONCE_JOBS === 'off') return;
  const { startAppJobs } = await import('./server/app-jobs');
  await startAppJobs();
}
