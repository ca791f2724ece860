/**
 * `npm run dev`: the embedded PostgreSQL (or DATABASE_URL), the PSP sandbox on :4010 and the app on
 * :3000 with hot reload. `npm start` does the same on a production build (`npm run build` first).
 *
 * `npm run demo` (--demo) does the same in demo mode (PAYONCE_DEMO=1, server/demo/mode.ts): fault
 * injection, the /mail demo mailbox and token-less /api/metrics are on. Never for real customers.
 *
 * Flags: --prod (builds first when there is no build), --build (rebuild), --demo, --port N (app),
 * --sandbox-port N, --database NAME (its own database, also on a DATABASE_URL server), --dist-dir DIR,
 * --instances N (with --prod: N app processes on consecutive ports, sharing the database).
 */
import { parseArgs } from 'node:util';
import { exitBecauseStartFailed } from './start-failure';
import { startStack } from './stack';

const { values } = (() => {
  try {
    return parseArgs({
      options: {
        prod: { type: 'boolean', default: false },
        build: { type: 'boolean', default: false },
        demo: { type: 'boolean', default: false },
        instances: { type: 'string', default: '1' },
        port: { type: 'string', default: process.env.PORT ?? '3000' },
        'sandbox-port': { type: 'string', default: process.env.PSP_SANDBOX_PORT ?? '4010' },
        database: { type: 'string' },
        'dist-dir': { type: 'string' },
      },
    });
  } catch (error) {
    return exitBecauseStartFailed(error);
  }
})();

const stack = await startStack({
  appPort: Number(values.port),
  sandboxPort: Number(values['sandbox-port']),
  mode: values.prod ? 'prod' : 'dev',
  databaseName: values.database ?? 'payonce',
  // An explicit --database is honoured on a DATABASE_URL server too (the browser tests' two stacks).
  separateDatabase: values.database !== undefined,
  distDir: values['dist-dir'],
  build: values.build,
  instances: Number(values.instances),
  // Only the app process: the sandbox and the build have no demo mode. PAYONCE_DEMO=1 already in
  // the environment (the drills' stack) is passed on either way.
  ...(values.demo ? { appEnv: { PAYONCE_DEMO: '1' } } : {}),
}).catch((error: unknown) => exitBecauseStartFailed(error));

// The embedded database is a throwaway on this machine, reachable only on loopback: its URL is printed
// whole so that psql can be pointed at it. A server of the user's own (DATABASE_URL) keeps its password.
const databaseShown = process.env.DATABASE_URL ? stack.databaseUrl.replace(/:[^:@/]+@/, ':***@') : stack.databaseUrl;
console.log(`
  PayOnce is ready:  ${stack.appUrl.replace('127.0.0.1', 'localhost')}
  PSP sandbox:       ${stack.sandboxUrl}   (ledger: ${stack.sandboxUrl}/sandbox/ledger)
  Database:          ${databaseShown}
  ${
    stack.demo
      ? 'Demo mode:         the fault switchboard is at the bottom of the page; /mail is the demo mailbox'
      : 'Break it on purpose: npm run demo adds a fault switchboard to the page (docs/demo.md)'
  }
  Press Ctrl-C to stop.
`);

let stopping = false;
async function shutdown() {
  if (stopping) return;
  stopping = true;
  await stack.stop();
  process.exit(0);
}
process.on('SIGINT', shutdown);
process.on('SIGTERM', shutdown);
