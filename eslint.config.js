/**
 * Lint: the recommended JavaScript and TypeScript rules, plus the rules that keep the architecture
 * the folder list promises — an idempotency core that can be lifted into another checkout, a page
 * that never pulls server code into the browser — and no Drizzle delete or update without a where.
 *
 * Formatting is Prettier's (`npm run format`); nothing here argues with it. No type-aware rules: they
 * would type-check the whole project again on every run, and `tsc --noEmit` already does that once.
 */
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import drizzle from 'eslint-plugin-drizzle';
import reactHooks from 'eslint-plugin-react-hooks';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/** Names a Drizzle database or transaction goes by here (`db`, `services.db`, `tx`). */
const DRIZZLE_OBJECTS = ['db', 'tx', 'transaction'];

/**
 * Relative imports cannot be resolved by a pattern, so folders are matched by path segment: from
 * app/_components, `../../db/client` and `../server/checkout/pay` both name a folder the page must
 * not know.
 */
const folder = (...names) => `(^|/)(${names.join('|')})(/|$)`;

/** The app uses the package as any adopter does: through its published entries, never its files. */
const PACKAGE_FILES = {
  regex: folder('packages'),
  message: "Import @payonce/idempotency (or a subpath it exports), not the package's files.",
};

/**
 * The product builds and runs with the laboratory deleted (`npm run check:product`): the sandbox,
 * the benchmark, the soak, the drills and the tests attach through seams (server/app/extension.ts,
 * server/checkout/fault-points.ts), never by being imported.
 */
const LABORATORY = {
  regex: folder('sandbox', 'bench', 'soak', 'failover', 'flashsale', 'e2e', 'test'),
  message: 'The product imports nothing of its laboratory: attach through a seam (server/app/extension.ts, checkout/fault-points.ts).',
};
const PRODUCT = ['app/**', 'server/**', 'db/**', 'client/**', 'instrumentation.ts', 'proxy.ts', 'drizzle.config.ts'];

export default defineConfig(
  {
    ignores: [
      'node_modules/',
      '.next/',
      '.next-*/',
      '.data/',
      'test-results/',
      'playwright-report/',
      'blob-report/',
      'bench-results/',
      'bench/results/',
      'next-env.d.ts',
      'packages/*/dist/',
    ],
  },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node, ...globals.browser } },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // `_`-prefixed parameters and destructured leftovers are deliberate (an interface's argument
      // this implementation does not need, a field removed by rest destructuring).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', ignoreRestSiblings: true }],
      // A late-bound `let` that closures read before it is assigned (a server that refers to itself) is not a const.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    // Tests read arbitrary JSON answers (error bodies, ledgers) whose shape is what they assert.
    files: ['test/**', 'e2e/**', 'soak/**', 'examples/**/*.test.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // The two rules every React codebase runs; the React Compiler's rules in the plugin's
    // recommended set judge code written for the compiler, which this page is not (yet).
    files: ['app/**/*.{ts,tsx}', 'client/**/*.{ts,tsx}'],
    plugins: { 'react-hooks': reactHooks },
    rules: {
      'react-hooks/rules-of-hooks': 'error',
      'react-hooks/exhaustive-deps': 'error',
    },
  },
  {
    plugins: { drizzle },
    rules: {
      'drizzle/enforce-delete-with-where': ['error', { drizzleObjectName: DRIZZLE_OBJECTS }],
      'drizzle/enforce-update-with-where': ['error', { drizzleObjectName: DRIZZLE_OBJECTS }],
    },
  },
  {
    // The package knows no web framework and nothing of this app: a checkout that installs it supplies
    // a store and nothing else. Only its tRPC entry (src/trpc.ts) may import tRPC. Types count too —
    // a type import still ties the package to the module it names.
    files: ['packages/idempotency/src/**'],
    ignores: ['packages/idempotency/src/trpc.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: '^(next|react|react-dom)(/|$)', message: '@payonce/idempotency knows no web framework.' },
            { regex: '^@trpc/', message: '@payonce/idempotency knows tRPC only in its tRPC entry (src/trpc.ts).' },
            { regex: '^\\.\\./\\.\\.', message: '@payonce/idempotency imports nothing of the app around it: it is handed a store.' },
          ],
        },
      ],
    },
  },
  {
    files: ['packages/idempotency/src/trpc.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [{ regex: '^\\.\\./\\.\\.', message: '@payonce/idempotency imports nothing of the app around it.' }],
        },
      ],
    },
  },
  {
    files: ['**/*.ts', '**/*.tsx'],
    ignores: ['packages/**'],
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { patterns: [PACKAGE_FILES] }] },
  },
  {
    files: PRODUCT,
    rules: {
      '@typescript-eslint/no-restricted-imports': ['error', { patterns: [PACKAGE_FILES, LABORATORY] }],
      // import(): what no-restricted-imports does not see.
      'no-restricted-syntax': [
        'error',
        { selector: `ImportExpression[source.value=/${LABORATORY.regex.replaceAll('/', '\\/')}/]`, message: LABORATORY.message },
      ],
    },
  },
  {
    // The page runs in the browser: no database client and no checkout code in its bundle. Type
    // imports are erased, so the page may describe what the server answers.
    files: ['app/_components/**', 'app/admin/**', 'client/**'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: folder('db', 'checkout'),
              allowTypeImports: true,
              message: 'The page talks to the server through tRPC (client/trpc-client.ts), never to server/checkout or db/.',
            },
            PACKAGE_FILES,
            LABORATORY,
          ],
        },
      ],
    },
  },
  {
    // The house rules (CONTRIBUTING.md): a function that outgrows a screen is split by what it
    // decides, and blocks nest at most three deep. Declarative tables are top-level constants.
    files: [...PRODUCT, 'packages/idempotency/src/**'],
    rules: {
      'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true, IIFEs: true }],
      'max-depth': ['error', 3],
    },
  },
);
