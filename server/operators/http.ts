/**
 * `/api/operator/session`, framework-free (a standard Request in, a Response out; the route handler
 * is one call to it):
 *
 *   GET     the signed-in operator: { username, role, csrfToken }, or 401
 *   POST    sign in with { username, password }: 204 and the session cookie, 401 (the same answer
 *           for a wrong name and a wrong password), 429 with Retry-After past the sign-in limits
 *   DELETE  sign out: 204, the cookie cleared
 *
 * POST and DELETE must come from this origin (Origin, or Sec-Fetch-Site: same-origin): a page on
 * another site cannot sign a browser in to an account of its choosing, nor out.
 */
import type { Database } from '@/db/client';
import { sameOriginHeaders } from '@/server/http/same-origin';
import { isSecureRequest } from '@/server/http/session';
import { clearedOperatorCookie, csrfTokenFor, operatorCookie, operatorToken, sessionOperator, signIn, signOut } from './sessions';

const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  Response.json(body, { status, headers: { 'cache-control': 'no-store', ...headers } });

export async function handleOperatorSession(request: Request, db: Database, address: string | undefined): Promise<Response> {
  const secure = isSecureRequest(request);
  const token = operatorToken(request.headers.get('cookie'), secure);
  if (request.method === 'GET') {
    const operator = token ? await sessionOperator(db, token) : undefined;
    if (!operator || !token) return json(401, { reason: 'OPERATOR_SIGN_IN_REQUIRED' });
    return json(200, { username: operator.username, role: operator.role, csrfToken: csrfTokenFor(token) });
  }
  if (request.method !== 'POST' && request.method !== 'DELETE')
    return json(405, { reason: 'METHOD_NOT_ALLOWED' }, { allow: 'GET, POST, DELETE' });
  if (!sameOriginHeaders(request.headers)) return json(403, { reason: 'CROSS_SITE_REQUEST' });
  if (request.method === 'DELETE') {
    if (token) await signOut(db, token);
    return new Response(null, { status: 204, headers: { 'set-cookie': clearedOperatorCookie(secure), 'cache-control': 'no-store' } });
  }
  const input = await request.json().catch(() => undefined);
  const { username, password } = (input ?? {}) as { username?: unknown; password?: unknown };
  if (typeof username !== 'string' || typeof password !== 'string' || username === '' || password === '') {
    return json(400, { reason: 'INVALID_INPUT', message: 'Send { "username", "password" }.' });
  }
  const result = await signIn(db, { username, password, address });
  switch (result.kind) {
    case 'signed_in':
      return new Response(null, {
        status: 204,
        headers: { 'set-cookie': operatorCookie(result.token, secure), 'cache-control': 'no-store' },
      });
    case 'refused':
      return json(401, { reason: 'SIGN_IN_REFUSED', message: 'Wrong username or password, or the account is disabled.' });
    case 'rate_limited':
      return json(
        429,
        { reason: 'RATE_LIMITED', message: 'Too many sign-in attempts; wait and try again.' },
        { 'retry-after': String(result.retryAfterSeconds) },
      );
    default: {
      const unknown: never = result;
      throw new Error(`unknown sign-in result ${JSON.stringify(unknown)}`);
    }
  }
}
