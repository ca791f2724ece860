/**
 * `npm run audit`: verifies the payment journal's hash chains and names the first broken link.
 * Exit 0: every chain holds. Exit 1: a row was edited, deleted or cut off (printed). Exit 2: the audit
 * could not run.
 *
 * The database is the app's: DATABASE_URL if set, else the embedded PostgreSQL (database `payonce`,
 * or --database NAME).
 *   --heads FILE    also write every stream's head (seq and hash) to FILE, to keep somewhere safe
 *   --against FILE  also fail if a stream ends before a head saved earlier (rows cut off its end)
 */
import fs from 'node:fs/promises';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { auditJournal } from '@/server/checkout/journal-audit';
import { resolveDatabase } from './stack';

const { values } = parseArgs({
  options: {
    database: { type: 'string' },
    heads: { type: 'string' },
    against: { type: 'string' },
  },
});

const database = await resolveDatabase(values.database ?? 'payonce', () => {}, values.database !== undefined);
const sql = postgres(database.url, { max: 1, onnotice: () => {} });
let exitCode = 2;
try {
  const against = values.against
    ? new Map(Object.entries(JSON.parse(await fs.readFile(values.against, 'utf8')) as Record<string, { seq: number; hash: string }>))
    : undefined;
  let lastReport = 0;
  const audit = await auditJournal(sql, {
    against,
    onProgress: (rows) => {
      if (rows - lastReport >= 50_000) {
        lastReport = rows;
        process.stdout.write(`  … ${rows} rows checked\n`);
      }
    },
  });
  if (values.heads) {
    await fs.writeFile(values.heads, JSON.stringify(Object.fromEntries(audit.heads), null, 1));
    console.log(`heads of ${audit.streams} streams written to ${values.heads}`);
  }
  if (audit.broken) {
    const b = audit.broken;
    console.log(`BROKEN: payment_events ${b.id ? `id ${b.id}, ` : ''}stream ${b.stream}, seq ${b.seq}: ${b.reason} (${b.detail})`);
    console.log(`checked ${audit.rows} rows in ${audit.streams} streams; the chain is broken from that row on`);
    exitCode = 1;
  } else {
    console.log(`OK: ${audit.rows} journal rows in ${audit.streams} streams, every hash chain intact`);
    exitCode = 0;
  }
} catch (error) {
  console.error(`audit could not run: ${error instanceof Error ? error.message : String(error)}`);
  if ((error as { code?: string }).code === '42P01') console.error('(no payment_events table: start the app once so that migrations run)');
} finally {
  await sql.end({ timeout: 5 });
  await database.embedded?.stop();
}
process.exit(exitCode);
