/**
 * Control routes — fault injection (/api/faults), the demo switchboard (/api/demo/drills) — decide
 * what the next payment does, so only the checkout page itself or a tool on this machine (curl, the
 * drills) may call them. A page on any other site can still make a browser send a "simple" request: a
 * `<form enctype="text/plain">` POST with a body that happens to parse as JSON, which no CORS
 * preflight stops. So a control request is refused when the browser says it came from elsewhere
 * (`Sec-Fetch-Site` other than same-origin or none, an `Origin` naming another host than the one it
 * reached) or when its body is not declared JSON (a form cannot declare it without a preflight).
 *
 * Tools that send neither header (curl, Node's fetch) are let through: they are not a browser that
 * another site can drive.
 */
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH']);

function refusal(status: number, reason: string, message: string): Response {
  return Response.json({ error: message, reason }, { status, headers: { 'Cache-Control': 'no-store' } });
}

export function controlRequestRefusal(request: Request): Response | undefined {
  const site = request.headers.get('sec-fetch-site');
  if (site !== null && site !== 'same-origin' && site !== 'none') {
    return refusal(403, 'CROSS_SITE_REFUSED', `Control requests are accepted from this site only (Sec-Fetch-Site: ${site}).`);
  }
  const origin = request.headers.get('origin');
  if (origin !== null && hostOf(origin) !== request.headers.get('host')) {
    return refusal(403, 'CROSS_SITE_REFUSED', `Control requests are accepted from this site only (Origin: ${origin}).`);
  }
  if (BODY_METHODS.has(request.method) && mediaType(request.headers.get('content-type')) !== 'application/json') {
    return refusal(415, 'UNSUPPORTED_MEDIA_TYPE', 'Send the body as JSON with Content-Type: application/json.');
  }
  return undefined;
}

function hostOf(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined; // "null" (a sandboxed frame, a file) and garbage: never this host
  }
}

function mediaType(contentType: string | null): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase();
}
