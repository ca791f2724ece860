/**
 * Whether a state-changing request came from a page of this origin: a browser says so with
 * Sec-Fetch-Site (same-origin) or an Origin naming this host; a client that is no browser (curl, a
 * back office) sends neither and is judged by its credentials alone.
 */
export function sameOriginHeaders(headers: Headers): boolean {
  const site = headers.get('sec-fetch-site');
  if (site && site !== 'same-origin' && site !== 'none') return false;
  const origin = headers.get('origin');
  if (!origin) return true;
  const host = headers.get('x-forwarded-host') ?? headers.get('host');
  try {
    return new URL(origin).host === host;
  } catch {
    return false;
  }
}
