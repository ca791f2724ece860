/**
 * Security headers for the pages: a Content-Security-Policy with a fresh nonce per request (Next
 * puts it on its own inline scripts; the pages are rendered per request), no framing by anyone
 * (frame-ancestors 'none' — a checkout in someone else's frame is a clickjacking target), and a
 * referrer policy that keeps order URLs (/orders/{id}) from leaking to other sites. API routes and
 * static files get their headers from next.config.mjs.
 */
import { NextResponse, type NextRequest } from 'next/server';

/**
 * The origins the card step needs (Stripe's CSP guide): Stripe.js mounts its card field in an iframe
 * from its own origin and talks to Stripe's API and 3-D Secure pages. Only when the card step is
 * configured (STRIPE_PUBLISHABLE_KEY); the sandbox serves its Stripe.js and API from its own origin.
 */
export function cardStepOrigins(env: Record<string, string | undefined>): { frame: string[]; connect: string[] } {
  if (!env.STRIPE_PUBLISHABLE_KEY) return { frame: [], connect: [] };
  const origin = (url: string | undefined, fallback: string) => {
    try {
      return new URL(url ?? fallback).origin;
    } catch {
      return new URL(fallback).origin;
    }
  };
  const script = origin(env.STRIPE_JS_URL, 'https://js.stripe.com/v3/');
  const api = origin(env.STRIPE_API_BASE, 'https://api.stripe.com');
  const frame = [...new Set([script, ...(script === 'https://js.stripe.com' ? ['https://hooks.stripe.com'] : [])])];
  return { frame, connect: [...new Set([script, api])] };
}

export function contentSecurityPolicy(
  nonce: string,
  dev: boolean,
  card: { frame: string[]; connect: string[] } = { frame: [], connect: [] },
): string {
  const more = (origins: string[]) => origins.map((o) => ` ${o}`).join('');
  return [
    "default-src 'self'",
    // 'strict-dynamic': scripts loaded by a nonced script are trusted; nothing else runs. React's
    // development build needs eval for its call stacks; production never does.
    `script-src 'self' 'nonce-${nonce}' 'strict-dynamic'${dev ? " 'unsafe-eval'" : ''}`,
    // Inline style attributes are how React sets a few styles; they cannot run code.
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self'",
    // The page talks only to its own /api (and the card step to Stripe); the development server's hot
    // reload uses a WebSocket.
    `connect-src 'self'${more(card.connect)}${dev ? ' ws: wss:' : ''}`,
    // Frames only for the card step's card field.
    `frame-src 'self'${more(card.frame)}`,
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
}

export function proxy(request: NextRequest) {
  const nonce = Buffer.from(crypto.randomUUID()).toString('base64');
  // NODE_ENV as Next replaces it at build time, not server/config/env.ts's run-time value: the policy must
  // fit the React build that was bundled (only the development build needs eval).
  const policy = contentSecurityPolicy(nonce, process.env.NODE_ENV !== 'production', cardStepOrigins(process.env));
  // Next reads the nonce from the request's policy to put it on the scripts it renders.
  const requestHeaders = new Headers(request.headers);
  requestHeaders.set('x-nonce', nonce);
  requestHeaders.set('Content-Security-Policy', policy);
  const response = NextResponse.next({ request: { headers: requestHeaders } });
  response.headers.set('Content-Security-Policy', policy);
  return response;
}

export const config = {
  // Pages only: not the API, not Next's static files.
  matcher: [
    {
      source: '/((?!api/|_next/static|_next/image|favicon.ico).*)',
      missing: [
        { type: 'header', key: 'next-router-prefetch' },
        { type: 'header', key: 'purpose', value: 'prefetch' },
      ],
    },
  ],
};
