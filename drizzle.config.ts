import { defineConfig } from 'drizzle-kit';

// `npm run db:generate` turns changes in db/schema.ts (and in the key table that @payonce/idempotency
// declares for Drizzle, as any adopter lists it) into a new SQL migration in db/migrations.
// Migrations are applied at start-up by db/migrate.ts (under an advisory lock), never by drizzle-kit.
export default defineConfig({
  dialect: 'postgresql',
  schema: ['./db/schema.ts', './node_modules/@payonce/idempotency/dist/drizzle.js'],
  out: './db/migrations',
  casing: 'snake_case',
});
