/**
 * Runs once when a Next server process starts: bring the schema up to date before the first request.
 * Several instances starting together are serialised by the migration's advisory lock.
 */
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== 'nodejs') return;
  if (!process.env.DATABASE_URL) return; // `next build`, or a misconfigured start: requests will say so
  const { runMigrations } = await import('./db/migrate');
  await runMigrations(process.env.DATABASE_URL);
}
