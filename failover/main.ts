/**
 * The failover drill: `npm run drill:failover`.
 *
 * A highly available PostgreSQL (scripts/ha-postgres.ts: pg_auto_failover, a primary and a
 * synchronous standby) under two app instances that reach it by a multi-host URL; shoppers pay order
 * after order through the page's own retrying flow. At each point that matters (failover/points.ts)
 * the primary is killed — its postmaster and its keeper, SIGKILL, as a machine lost — the standby is
 * promoted, the old primary is started again and rejoins as a standby, and the next point follows.
 * Then the invariants are checked against the sandbox's ledger (soak/invariants.ts) and the drill's
 * own promises:
 *
 *   - every order a shopper was told was paid (a 201) is still paid;
 *   - no idempotency key completed before a kill is lost, or uncompleted;
 *   - shoppers saw only retries: no 500, only the documented 503 + Retry-After;
 *   - money kept per order is its amount or 0, no charge twice, the journal's chains intact.
 *
 * With `--replication async` the standby is asynchronous and a little behind at each kill (its WAL
 * receiver paused for `--lag-ms`, as a loaded or distant standby is): the same checks then count what
 * the promotion lost, to show why docs/scaling.md requires synchronous commit. `--replication both`
 * (the default) runs both, synchronous first; only the synchronous run's violations fail the drill.
 *
 *   npm run drill:failover -- [--points key_claimed,commit_in_flight] [--replication sync|async|both]
 *                             [--shoppers 4] [--dist-dir .next-soak] [--no-build]
 */
import { parseArgs } from 'node:util';
import { runReplication, type ReplicationReport } from './run';
import { POINT_NAMES, type PointName } from './points';
import { printReport } from './report';

const { values: args } = parseArgs({
  options: {
    points: { type: 'string', default: POINT_NAMES.join(',') },
    replication: { type: 'string', default: 'both' },
    shoppers: { type: 'string', default: '4' },
    'lag-ms': { type: 'string', default: '1500' },
    'app-port': { type: 'string', default: '3600' },
    'sandbox-port': { type: 'string', default: '4610' },
    'ha-port': { type: 'string', default: '6400' },
    'dist-dir': { type: 'string', default: '.next-soak' },
    'no-build': { type: 'boolean', default: false },
    'log-file': { type: 'string' },
  },
  allowPositionals: false,
});

function fail(message: string): never {
  console.error(message);
  process.exit(2);
}

const points = args.points!.split(',').map((p) => p.trim()) as PointName[];
for (const point of points) if (!POINT_NAMES.includes(point)) fail(`--points: unknown point ${point} (known: ${POINT_NAMES.join(', ')})`);
const modes = args.replication === 'both' ? (['sync', 'async'] as const) : [args.replication];
for (const mode of modes) if (mode !== 'sync' && mode !== 'async') fail(`--replication must be sync, async or both, got ${mode}`);
const shoppers = Number(args.shoppers);
if (!Number.isInteger(shoppers) || shoppers < 1 || shoppers > 32) fail(`--shoppers must be 1–32, got ${args.shoppers}`);
const lagMs = Number(args['lag-ms']);
if (!Number.isFinite(lagMs) || lagMs < 0 || lagMs > 10_000) fail(`--lag-ms must be 0–10000, got ${args['lag-ms']}`);

// A connection of the drill's own tooling that fails while a node restarts must not end the run
// unreported: say where it came from, and let the run's own checks decide.
process.on('unhandledRejection', (error) => console.error('[drill] a promise of the drill failed unhandled:', error));

const reports: ReplicationReport[] = [];
let build = !args['no-build'];
for (const mode of modes as ('sync' | 'async')[]) {
  const report = await runReplication({
    synchronous: mode === 'sync',
    points,
    shoppers,
    lagMs,
    appPort: Number(args['app-port']),
    sandboxPort: Number(args['sandbox-port']),
    haPort: Number(args['ha-port']),
    distDir: args['dist-dir']!,
    build,
    ...(args['log-file'] ? { logFile: args['log-file'] } : {}),
  });
  build = false; // one build serves both runs
  reports.push(report);
  printReport(report);
}

const failed = reports.filter((r) => r.synchronous && (r.violations.length > 0 || r.error));
if (reports.length > 1) {
  console.log('\n=== synchronous against asynchronous replication ===');
  for (const r of reports) {
    console.log(
      `  ${r.synchronous ? 'synchronous ' : 'asynchronous'}: ${r.losses.paidOrdersLost} paid orders lost, ` +
        `${r.losses.completedKeysLost} completed keys lost, ${r.losses.ordersLost} orders lost, ${r.violations.length} invariant violations`,
    );
  }
}
process.exit(failed.length > 0 ? 1 : 0);
