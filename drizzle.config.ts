import { defineConfig } from 'drizzle-kit';

// `npm run db:generate` turns changes in db/schema.ts (and the idempotency core's own table in
// server/idempotency/schema.ts) into a new SQL migration in db/migrations.
// Migrations are applied at start-up by db/migrate.ts (under an advisory lock), never by drizzle-kit.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./db/schema.ts', './server/idempotency/schema.ts'],
  out: './db/migrations',
  casing: 'snake_case',
});
