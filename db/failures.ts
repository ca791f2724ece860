/**
 * Whether an error means "the database could not be reached or is not the primary right now", as
 * opposed to a query that failed. Such a failure is transient by nature — a restart, a failover, a
 * dropped connection — and the app answers it with 503 + Retry-After (DATABASE_UNAVAILABLE): the
 * client retries with the same Idempotency-Key and the guard resolves whatever the failure left.
 *
 * A COMMIT whose answer was lost this way is in doubt: it may or may not have committed. Nothing is
 * concluded from the error itself; the retry looks at what the database holds (the key's recovery
 * point, the order's status) and goes on from there (docs/scaling.md, "When PostgreSQL fails over").
 */

/** postgres.js's own codes for a connection that failed, closed or could not be made. */
const DRIVER_CODES = new Set(['CONNECTION_CLOSED', 'CONNECTION_ENDED', 'CONNECTION_DESTROYED', 'CONNECT_TIMEOUT']);

/** Node's socket errors. */
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);

/**
 * PostgreSQL's: class 08 (connection exception); 57P01–57P03 (the server is shutting down, crashed,
 * or not yet accepting connections); 25006 (a write reached a read-only server: a standby, or a
 * primary being demoted).
 */
const SQLSTATES = new Set(['57P01', '57P02', '57P03', '25006']);

/** The connection failure in the error or its causes (Drizzle wraps the driver's error in a DrizzleQueryError). */
export function databaseUnavailability(error: unknown): Error | undefined {
  for (let e = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) if (isConnectionFailure(e)) return e;
  return undefined;
}

export function isDatabaseUnavailable(error: unknown): boolean {
  return databaseUnavailability(error) !== undefined;
}

function isConnectionFailure(error: Error): boolean {
  const code = (error as { code?: unknown }).code;
  if (typeof code !== 'string') return false;
  return (
    DRIVER_CODES.has(code) || SOCKET_CODES.has(code) || SQLSTATES.has(code) || (error.name === 'PostgresError' && code.startsWith('08'))
  );
}
