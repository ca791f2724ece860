/**
 * How a start-up script ends when it cannot start: whatever the tools printed above, the last line
 * says why and what to do, and the exit code is 1 — never a bare stack trace or "undefined".
 */
export function exitBecauseStartFailed(error: unknown, what = 'PayOnce'): never {
  const reason = error instanceof Error ? error.message : error === undefined ? 'an unknown error (see the log above)' : String(error);
  console.error(`\n${what} did not start: ${reason}`);
  process.exit(1);
}
