import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { it } from 'node:test';
import { MIGRATION_FILE, migrationText } from '../scripts/migration.js';

it('ships migrations/0001_idempotency_keys.sql with exactly the statements applyIdempotencySchema runs', () => {
  assert.equal(
    readFileSync(MIGRATION_FILE, 'utf8'),
    migrationText(),
    'the SQL file is stale: node --import tsx packages/idempotency/scripts/migration.ts --write',
  );
});
