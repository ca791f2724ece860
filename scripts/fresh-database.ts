/**
 * A migrated database of its own for one run (tests, the fuzzer): beside the server DATABASE_URL
 * points at (only its host and credentials are used), or in the embedded PostgreSQL. `drop()` removes
 * it and stops the embedded server.
 */
import { randomBytes } from 'node:crypto';
import { dropDatabase, ensureDatabase, startEmbeddedPostgres, type EmbeddedDatabase } from '@/db/embedded';
import postgres from 'postgres';
import { runMigrations } from '@/db/migrate';

/** The databases test files copied from `template` (named `<template>_f<pid>`). */
async function copiesOf(adminUrl: string, template: string): Promise<string[]> {
  const sql = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    const rows = await sql<{ datname: string }[]>`select datname from pg_database where datname like ${`${template}\\_f%`}`;
    return rows.map((row) => row.datname);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

export interface FreshDatabase {
  url: string;
  /** Where it lives, for the log. */
  server: string;
  /** Drops it, and the copies test files made of it (test/support/file-database.ts). */
  drop(options?: { keep?: boolean }): Promise<void>;
}

/** `migrate: false`: a blank database (what an adopter's app starts from). */
export async function createFreshDatabase(prefix: string, options: { migrate?: boolean } = {}): Promise<FreshDatabase> {
  const databaseName = `${prefix}_${Date.now()}_${randomBytes(3).toString('hex')}`;
  let embedded: EmbeddedDatabase | undefined;
  let adminUrl: string;
  let url: string;
  let server: string;
  if (process.env.DATABASE_URL) {
    const base = new URL(process.env.DATABASE_URL);
    adminUrl = base.toString();
    base.pathname = `/${databaseName}`;
    url = base.toString();
    server = `the PostgreSQL server at ${base.host} (DATABASE_URL)`;
  } else {
    embedded = await startEmbeddedPostgres();
    adminUrl = embedded.adminUrl;
    url = embedded.urlFor(databaseName);
    server = 'the embedded PostgreSQL';
  }
  await ensureDatabase(adminUrl, databaseName);
  if (options.migrate !== false) await runMigrations(url);
  return {
    url,
    server,
    async drop({ keep = false } = {}) {
      if (!keep) {
        for (const copy of await copiesOf(adminUrl, databaseName)) await dropDatabase(adminUrl, copy).catch(() => {});
        await dropDatabase(adminUrl, databaseName).catch(() => {});
      }
      await embedded?.stop();
    },
  };
}
