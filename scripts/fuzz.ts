/**
 * `npm run fuzz`: the hostile-input fuzzer (test/hostile/fuzz.test.ts) for longer than `npm test`
 * runs it — 2,000 cases per property by default (`npm run fuzz -- 10000` for more) — in a fresh
 * database beside DATABASE_URL or in the embedded PostgreSQL, and prints the figures: cases and the
 * statuses answered (any 5xx fails the run, with fast-check's seed to replay it: FUZZ_SEED=…).
 */
import { spawn } from 'node:child_process';
import { createFreshDatabase } from './fresh-database';

const runs = process.argv[2] ?? '2000';
const database = await createFreshDatabase('payonce_fuzz');
const databaseUrl = database.url;
const started = Date.now();
const code = await new Promise<number>((resolve) => {
  const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-reporter=spec', 'test/hostile/fuzz.test.ts'], {
    env: { ...process.env, DATABASE_URL: databaseUrl, FUZZ_RUNS: runs, FUZZ_REPORT: '1' },
    stdio: 'inherit',
  });
  child.on('exit', (exitCode) => resolve(exitCode ?? 1));
});
console.log(`fuzz: ${runs} cases per property, ${((Date.now() - started) / 1000).toFixed(0)} s, exit ${code}`);
await database.drop();
process.exit(code);
