/**
 * `npm run check:product`: the product without its laboratory. Copies this repository's tracked
 * files, less sandbox/, bench/, soak/, failover/, flashsale/, e2e/ and test/, into an empty folder (with node_modules
 * hard-linked from here and the package's build), then there:
 *
 *   1. `next build`: Next's bundler and its type check over what is left, so nothing the product
 *      builds from may import the laboratory;
 *   2. `next start` against a blank database, with no PSP sandbox and no gateway configured: the
 *      schema migrates at start, /api/health answers 200, the API creates an order under an
 *      Idempotency-Key and replays it, and the page lists every gateway as not configured.
 *
 * The database is a new one beside DATABASE_URL, or in the embedded PostgreSQL.
 */
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createFreshDatabase } from './fresh-database';
import { freePort, stopChild } from './processes';

/** What the product must build and run without. */
export const LABORATORY = ['sandbox/', 'bench/', 'soak/', 'failover/', 'flashsale/', 'e2e/', 'test/'];

const root = path.resolve(import.meta.dirname, '..');

/** The product's files, as a fresh clone has them, in `into`. */
function copyProduct(into: string): void {
  const tracked = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: root, encoding: 'utf8' })
    .split('\0')
    .filter(Boolean);
  const product = tracked.filter((file) => !LABORATORY.some((folder) => file.startsWith(folder)) && existsSync(path.join(root, file)));
  for (const file of product) {
    mkdirSync(path.dirname(path.join(into, file)), { recursive: true });
    cpSync(path.join(root, file), path.join(into, file));
  }
  // Installed once for the repository: hard links (the build writes only into its own .next).
  execFileSync('cp', ['-al', path.join(root, 'node_modules'), path.join(into, 'node_modules')]);
  cpSync(path.join(root, 'packages/idempotency/dist'), path.join(into, 'packages/idempotency/dist'), { recursive: true });
  const left = LABORATORY.filter((folder) => existsSync(path.join(into, folder)));
  if (left.length) throw new Error(`still in the copy: ${left.join(', ')}`);
  console.log(`copied ${product.length} of ${tracked.length} tracked files: none under ${LABORATORY.join(', ')}`);
}

async function expectStatus(what: string, response: Response, status: number): Promise<string> {
  const text = await response.text();
  if (response.status !== status) throw new Error(`${what}: ${response.status} ${text.slice(0, 300)} (expected ${status})`);
  console.log(`  ✓ ${what}: ${response.status}`);
  return text;
}

/**
 * The product answering as a deployment with no gateway yet: health, one guarded order, its replay;
 * and none of the laboratory's surfaces: no bench procedures, no fault injection, no demo mailbox.
 */
async function exercise(appUrl: string): Promise<void> {
  await expectStatus(
    'GET bench.roundTrips (the benchmark extension is not in the product)',
    await fetch(`${appUrl}/api/trpc/bench.roundTrips`),
    404,
  );
  await expectStatus('GET /api/faults (no fault injection outside demo mode and the drills)', await fetch(`${appUrl}/api/faults`), 404);
  await expectStatus('GET /mail (no demo mailbox)', await fetch(`${appUrl}/mail`), 404);
  // The first query of a new visitor: the catalogue, and the session cookie the mutations need.
  const productsAnswer = await fetch(`${appUrl}/api/trpc/checkout.products`);
  const cookie = productsAnswer.headers.getSetCookie()[0]?.split(';')[0];
  if (!cookie) throw new Error('no session cookie');
  const products = JSON.parse(await expectStatus('GET checkout.products', productsAnswer, 200)) as {
    result: { data: { sku: string }[] };
  };
  const gateways = JSON.parse(await expectStatus('GET checkout.gateways', await fetch(`${appUrl}/api/trpc/checkout.gateways`), 200)) as {
    result: { data: { id: string; available: boolean; sandboxScanUrl: string | null }[] };
  };
  if (gateways.result.data.some((gateway) => gateway.available || gateway.sandboxScanUrl !== null)) {
    throw new Error(`a gateway is offered without configuration: ${JSON.stringify(gateways.result.data)}`);
  }
  const createOrder = () =>
    fetch(`${appUrl}/api/trpc/checkout.createOrder`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', cookie, 'idempotency-key': 'check-product-order-1', origin: appUrl },
      body: JSON.stringify({ items: [{ sku: products.result.data[0]!.sku, quantity: 1 }] }),
    });
  const created = await expectStatus('POST checkout.createOrder (Idempotency-Key)', await createOrder(), 201);
  const replayed = await createOrder();
  const replayText = await expectStatus('the same request again', replayed, 201);
  if (replayText !== created || replayed.headers.get('idempotency-replayed') !== 'true') {
    throw new Error(`the retry was not a replay of the first answer: ${replayed.headers.get('idempotency-replayed')} ${replayText}`);
  }
  console.log('  ✓ … replayed the first answer (Idempotency-Replayed: true)');
}

const work = mkdtempSync(path.join(tmpdir(), 'payonce-product-'));
const database = await createFreshDatabase('payonce_product', { migrate: false });
let status = 1;
try {
  copyProduct(work);
  const env: NodeJS.ProcessEnv = { ...process.env, NEXT_TELEMETRY_DISABLED: '1' };
  for (const name of ['NEXT_DIST_DIR', 'PSP_SANDBOX_URL', 'BENCH', 'PAYONCE_DEMO', 'CHECKOUT_FAULTS']) delete env[name];
  const build = spawnSync(path.join(work, 'node_modules/.bin/next'), ['build'], { cwd: work, stdio: 'inherit', env });
  if (build.status !== 0) throw new Error(`next build failed (${build.status}) without ${LABORATORY.join(', ')}`);

  const port = await freePort();
  const appUrl = `http://127.0.0.1:${port}`;
  const app = spawn(path.join(work, 'node_modules/.bin/next'), ['start', '-p', String(port), '-H', '127.0.0.1'], {
    cwd: work,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: {
      ...env,
      DATABASE_URL: database.url,
      SESSION_SECRET: 'check-product-session-secret-0123456789',
      PUBLIC_BASE_URL: appUrl,
      PORT: String(port),
    },
  });
  try {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const health = await fetch(`${appUrl}/api/health`).catch(() => undefined);
      if (health?.status === 200) break;
      if (Date.now() > deadline) throw new Error(`/api/health did not answer 200 within 60 s (last: ${health?.status ?? 'no answer'})`);
      await sleep(250);
    }
    console.log(`next start without the laboratory: ${appUrl}`);
    await exercise(appUrl);
    status = 0;
  } finally {
    await stopChild(app);
  }
} finally {
  await database.drop();
  rmSync(work, { recursive: true, force: true });
}
console.log(status === 0 ? `the product builds and runs without ${LABORATORY.join(', ')}` : 'FAILED: the product without its laboratory');
process.exit(status);
