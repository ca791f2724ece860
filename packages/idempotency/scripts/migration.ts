/**
 * migrations/0001_idempotency_keys.sql is the statements of src/schema-sql.ts, as a file a DBA or
 * Flyway runs. `node --import tsx scripts/migration.ts --write` writes it; test/migration.test.ts
 * fails when the two differ.
 */
import { writeFileSync } from 'node:fs';
import { IDEMPOTENCY_SCHEMA_SQL } from '../src/schema-sql.js';

export const MIGRATION_FILE = new URL('../migrations/0001_idempotency_keys.sql', import.meta.url);

export const migrationText = (): string =>
  `-- @payonce/idempotency: the key table, its cleanup index and the lease fence.
-- Plain SQL for psql, Flyway or a DBA. Every statement is idempotent (safe to run twice), and the
-- file moves a table made by an earlier version to this one. The same statements as
-- applyIdempotencySchema() from @payonce/idempotency/postgres.

${IDEMPOTENCY_SCHEMA_SQL.map((statement) => `${statement};\n`).join('\n')}`;

if (process.argv.includes('--write')) writeFileSync(MIGRATION_FILE, migrationText());
