/**
 * `npm run check:package`: @payonce/idempotency as an adopter gets it. Packs the package (`npm pack`),
 * installs the tarball into an empty project with nothing of this repository but examples/ (the
 * smallest tRPC app, Route Handler and node-postgres app), runs their tests against a blank database
 * (the embedded PostgreSQL, or a new one beside DATABASE_URL) — with postgres.js and with pg, the
 * table made only by what the package ships — and builds both Next.js examples with `next build`
 * (Next's bundler and its type check, on the installed package; without DATABASE_URL, so a build
 * that opened the database would fail): the Route Handler (examples/route-handler) and the tRPC app
 * wired as docs/adopt.md says (examples/trpc, app/api/trpc/[trpc]/route.ts). Then it serves each with
 * `next start` and calls it over HTTP as an adopter's client does — a first request with an
 * Idempotency-Key answers 201, the same request again the same 201 with `Idempotency-Replayed: true`,
 * the same key with another body 422, and one row in `example_charges` — the Route Handler on the
 * tests' database (its tables are made by its test), the tRPC app on a second, blank one (it makes
 * its tables on its first request). Exits non-zero if any step or check fails.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { createFreshDatabase, type FreshDatabase } from './fresh-database';
import { freePort, stopChild } from './processes';

const root = path.resolve(import.meta.dirname, '..');
const rootPackage = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};
const versionOf = (name: string) => rootPackage.dependencies[name] ?? rootPackage.devDependencies[name]!;

const work = mkdtempSync(path.join(tmpdir(), 'payonce-adopter-'));
const database = await createFreshDatabase('payonce_adopter', { migrate: false });
let blank: FreshDatabase | undefined;
let status = 1;
try {
  // 1. The tarball, exactly as `npm publish` would upload it: built from the sources first (its
  //    `prepack`), unless the caller has just built it (PAYONCE_PACKAGE_BUILT=1: `npm test`, which runs
  //    this beside the browser tests, whose processes import the package's files meanwhile).
  if (process.env.PAYONCE_PACKAGE_BUILT !== '1')
    execFileSync('npm', ['run', 'build', '-w', '@payonce/idempotency'], { cwd: root, stdio: 'inherit' });
  const [packed] = JSON.parse(
    execFileSync('npm', ['pack', '-w', '@payonce/idempotency', '--ignore-scripts', '--pack-destination', work, '--json'], {
      cwd: root,
      encoding: 'utf8',
    }),
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
  const run = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=1', ...tests], {
    // A test that leaves a handle open would wait for ever: past this it is ended and the check fails.
    timeout: 10 * 60_000,
    cwd: project,
    stdio: 'inherit',
    env: { ...process.env, DATABASE_URL: database.url },
  });
  status = run.status ?? 1;

  // 4. Both Next.js examples, bundled and type-checked by Next, with no database to reach.
  const nextApps = ['examples/route-handler', 'examples/trpc'];
  const { DATABASE_URL: _unset, ...buildEnvironment } = process.env;
  for (const app of nextApps) {
    if (status !== 0) break;
    const build = spawnSync('npx', ['next', 'build', app], {
      cwd: project,
      stdio: 'inherit',
      env: { ...buildEnvironment, NEXT_TELEMETRY_DISABLED: '1' },
    });
    status = build.status ?? 1;
  }

  // 5. Each built app served by `next start` and called over HTTP, as an adopter's client calls it.
  if (status === 0) {
    blank = await createFreshDatabase('payonce_adopter_trpc', { migrate: false });
    const served: Served[] = [
      {
        app: 'examples/route-handler',
        databaseUrl: database.url,
        path: '/api/charges',
        data: (body) => body,
      },
      {
        app: 'examples/trpc',
        databaseUrl: blank.url,
        blank: true,
        path: '/api/trpc/charges.create',
        // tRPC's answer to an unbatched call: { result: { data } }.
        data: (body) => (body as { result?: { data?: unknown } } | null)?.result?.data,
      },
    ];
    for (const app of served) {
      if (!(await serveAndCall(project, app))) status = 1;
    }
  }
} finally {
  await blank?.drop();
  await database.drop();
  rmSync(work, { recursive: true, force: true });
}
console.log(
  status === 0
    ? 'the packed package passes the examples, and both Next.js examples build, serve and answer as they should'
    : 'FAILED: the packed package, installed in an empty project',
);
process.exit(status);

interface Served {
  /** The Next.js app's folder, in the adopter project. */
  app: string;
  databaseUrl: string;
  /** The database has no table yet: the app makes its own on its first request. */
  blank?: boolean;
  /** The mutation's URL path. */
  path: string;
  /** The charge in a 201's JSON body. */
  data: (body: unknown) => unknown;
}

/**
 * `next start` on a free port with DATABASE_URL, then the adopter's three requests and the count of
 * charges; one line per check. True if every check passed. Next's own output is shown only on a
 * failure.
 */
async function serveAndCall(project: string, { app, databaseUrl, blank, path: mutationPath, data }: Served): Promise<boolean> {
  let passed = true;
  const check = (what: string, ok: boolean, detail = '') => {
    console.log(`${ok ? '✔' : '✘'} ${app}: ${what}${!ok && detail ? ` (${detail})` : ''}`);
    passed &&= ok;
  };
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const output: string[] = [];
  const started = Date.now();
  const child: ChildProcess = spawn(
    process.execPath,
    [path.join(project, 'node_modules/next/dist/bin/next'), 'start', app, '-p', String(port), '-H', '127.0.0.1'],
    {
      cwd: project,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, DATABASE_URL: databaseUrl, NEXT_TELEMETRY_DISABLED: '1' },
    },
  );
  child.stdout!.on('data', (chunk: Buffer) => output.push(chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => output.push(chunk.toString()));
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  try {
    // Ready once it answers anything; `/` is Next's 404, which runs none of the app's code.
    let ready = false;
    while (!ready && Date.now() - started < 60_000 && child.exitCode === null) {
      ready = await fetch(`${base}/`).then(
        () => true,
        () => new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 200)),
      );
    }
    check(`next start answers on ${base} (${Date.now() - started} ms)`, ready, `exit code ${child.exitCode}`);
    if (!ready) return false;

    if (blank) {
      const [tables] = await sql<{ n: number }[]>`
        select count(*)::int as n from pg_tables where tablename in ('idempotency_keys', 'example_charges')`;
      check('no idempotency_keys or example_charges table before the first request', tables!.n === 0, `${tables!.n} found`);
    }

    const customer = `adopter-${randomUUID()}`;
    const key = randomUUID();
    const call = async (amountMinor: number) => {
      const response = await fetch(`${base}${mutationPath}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-customer-id': customer, 'idempotency-key': key },
        body: JSON.stringify({ amountMinor }),
      });
      const text = await response.text();
      return { status: response.status, replayed: response.headers.get('idempotency-replayed'), text };
    };
    const json = (text: string): unknown => {
      try {
        return JSON.parse(text);
      } catch {
        return undefined;
      }
    };
    const attempt = async <T>(what: string, run: () => Promise<T>): Promise<T | undefined> => {
      try {
        return await run();
      } catch (error) {
        check(what, false, error instanceof Error ? error.message : String(error));
        return undefined;
      }
    };

    const first = await attempt(`first POST ${mutationPath}`, () => call(1200));
    const charge = first && (data(json(first.text)) as { chargeId?: unknown; amountMinor?: unknown } | undefined);
    if (first) {
      check(
        `first POST ${mutationPath} with an Idempotency-Key → 201, a charge`,
        first.status === 201 && first.replayed === null && typeof charge?.chargeId === 'string' && charge.amountMinor === 1200,
        `${first.status}, Idempotency-Replayed ${first.replayed}: ${first.text.slice(0, 300)}`,
      );
    }
    const again = await attempt('the same request again', () => call(1200));
    if (again && first) {
      check(
        'the same request again → 201, Idempotency-Replayed: true, the same body byte for byte',
        again.status === 201 && again.replayed === 'true' && again.text === first.text,
        `${again.status}, Idempotency-Replayed ${again.replayed}: ${again.text.slice(0, 300)}`,
      );
    }
    const other = await attempt('the same key with another body', () => call(999));
    if (other) {
      check('the same key with another body → 422', other.status === 422, `${other.status}: ${other.text.slice(0, 300)}`);
    }
    const rows = await attempt('count example_charges', async () => {
      const [row] = await sql<{ n: number }[]>`select count(*)::int as n from example_charges where customer = ${customer}`;
      return row!.n;
    });
    if (rows !== undefined) check(`one row in example_charges for the customer`, rows === 1, `${rows} rows`);
    return passed;
  } finally {
    await sql.end({ timeout: 5 });
    await stopChild(child);
    if (!passed) process.stdout.write(`next start ${app} said:\n${output.join('')}\n`);
  }
}
