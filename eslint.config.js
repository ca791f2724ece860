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
 * server/idempotency, `../../db/client` and `../checkout/pay` both name a folder the core must not
 * know.
 */
const folder = (...names) => `(^|/)(${names.join('|')})(/|$)`;

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
    files: ['app/**/*.tsx', 'client/**/*.tsx'],
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
    // The core knows no web framework, no tRPC, no React and not this app's database or business
    // code: a checkout that lifts it supplies a store and nothing else. Types count too — a type
    // import still ties the core to the module it names.
    files: ['server/idempotency/**'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: '^(next|react|react-dom)(/|$)', message: 'The idempotency core knows no web framework.' },
            { regex: '^@trpc/', message: 'The idempotency core knows no tRPC: server/trpc/idempotency.ts is the glue.' },
            {
              regex: folder('db', 'checkout', 'trpc', 'payments', 'app'),
              message: "The idempotency core imports nothing of this app's: it is handed a store (IdempotencyStore).",
            },
          ],
        },
      ],
    },
  },
  {
    // The page runs in the browser: no database client and no checkout code in its bundle. Type
    // imports are erased, so the page may describe what the server answers.
    files: ['app/_components/**', 'client/**'],
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
          ],
        },
      ],
    },
  },
);
