/**
 * `npm run check:package`: @payonce/idempotency as an adopter gets it. Packs the package (`npm pack`),
 * installs the tarball into an empty project with nothing of this repository but examples/ (the
 * smallest tRPC app, Route Handler and node-postgres app), runs their tests against a blank database
 * (the embedded PostgreSQL, or a new one beside DATABASE_URL) — with postgres.js and with pg, the
 * table made only by what the package ships — and builds the Route Handler example with `next build`
 * (Next's bundler and its type check, on the installed package).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createFreshDatabase } from './fresh-database';

const root = path.resolve(import.meta.dirname, '..');
const rootPackage = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};
const versionOf = (name: string) => rootPackage.dependencies[name] ?? rootPackage.devDependencies[name]!;

const work = mkdtempSync(path.join(tmpdir(), 'payonce-adopter-'));
const database = await createFreshDatabase('payonce_adopter', { migrate: false });
let status = 1;
try {
  // 1. The tarball, exactly as `npm publish` would upload it.
  const [packed] = JSON.parse(
    execFileSync('npm', ['pack', '-w', '@payonce/idempotency', '--pack-destination', work, '--json'], { cwd: root, encoding: 'utf8' }),
  ) as { filename: string; files: { path: string }[] }[];
  console.log(`packed ${packed!.filename}: ${packed!.files.map((file) => file.path).join(', ')}`);

  // 2. An empty project that installs it, with the examples' own dependencies and nothing else.
  const project = path.join(work, 'adopter');
  cpSync(path.join(root, 'examples'), path.join(project, 'examples'), { recursive: true });
  const dependencies = Object.fromEntries(
    [
      'postgres',
      'pg',
      '@trpc/server',
      '@trpc/client',
      'zod',
      'tsx',
      'next',
      'react',
      'react-dom',
      'typescript',
      '@types/react',
      '@types/node',
    ].map((name) => [name, versionOf(name)]),
  );
  writeFileSync(
    path.join(project, 'package.json'),
    JSON.stringify(
      {
        name: 'adopter',
        private: true,
        type: 'module',
        dependencies: { '@payonce/idempotency': `file:../${packed!.filename}`, ...dependencies },
      },
      null,
      2,
    ),
  );
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'], { cwd: project, stdio: 'inherit' });

  // 3. The examples' tests, on the installed package only.
  const tests = readdirSync(path.join(project, 'examples'), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.test.ts'))
    .map((file) => path.join('examples', file))
    .sort();
  console.log(`running ${tests.join(', ')} in ${project} on ${database.server}`);
  const run = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=1', '--test-force-exit', ...tests], {
    cwd: project,
    stdio: 'inherit',
    env: { ...process.env, DATABASE_URL: database.url },
  });
  status = run.status ?? 1;

  // 4. The Route Handler example as a Next.js app: bundled and type-checked by Next.
  if (status === 0) {
    const build = spawnSync('npx', ['next', 'build', 'examples/route-handler'], {
      cwd: project,
      stdio: 'inherit',
      env: { ...process.env, NEXT_TELEMETRY_DISABLED: '1' },
    });
    status = build.status ?? 1;
  }
} finally {
  await database.drop();
  rmSync(work, { recursive: true, force: true });
}
console.log(
  status === 0
    ? 'the packed package passes the examples and builds with Next'
    : 'FAILED: the packed package, installed in an empty project',
);
process.exit(status);
