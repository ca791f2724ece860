/**
 * `npx tsx bench/cleanup-at-scale.ts`: what it costs to clean 10 M expired idempotency keys, two ways.
 *
 *   plain        the key table as the app has it (@payonce/idempotency's schema SQL), cleaned by the
 *                store's own bounded DELETE (deleteExpired: 1,000 rows per statement, SKIP LOCKED),
 *                batch after batch until nothing expired is left, then the VACUUM that the dead rows
 *                call for (autovacuum would do it later; its cost is the DELETE's cost too)
 *   partitioned  the same columns range-partitioned by expires_at, one partition an hour (--partition
 *                daily: a day), cleaned by DETACH PARTITION … CONCURRENTLY and DROP TABLE of every
 *                partition whose hour has passed
 *
 * Both tables get the same rows: --rows expired keys (default 10,000,000), completed, spread over the
 * 24 hours before the current hour, and --live unexpired ones (default a tenth) over the next 24 hours.
 * For each: the time, the WAL written (pg_current_wal_lsn before and after), the table's size with its
 * indexes and TOAST before and after, and the latency of a claim-shaped INSERT run on another
 * connection, back to back, before (baseline) and during the cleanup. The partitioned table cannot
 * have a unique (scope, key) — a unique index must include the partition key — so its claim is the
 * uniqueness-keeping one of docs/scaling.md: a transaction-scoped advisory lock on the key, a look
 * for a live record across the partitions, then the INSERT (one statement, a plpgsql function).
 *
 * Its own database (--database, default payonce_cleanup_scale) beside DATABASE_URL's, or in the
 * embedded PostgreSQL; dropped at the end unless --keep. Flags: --rows N, --live N, --partition
 * hourly|daily, --only plain|partitioned, --probe-pause-ms N (default 5), --database NAME, --keep.
 * Results: bench/results/cleanup-at-scale.{json,md}; docs/scaling.md has a run at 10 M.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { dropDatabase, ensureDatabase, startEmbeddedPostgres, type EmbeddedDatabase } from '@/db/embedded';
import { deleteExpiredKeys } from '@payonce/idempotency';
import { applyIdempotencySchema, createPostgresIdempotencyStore } from '@payonce/idempotency/postgres';

const { values: flags } = parseArgs({
  options: {
    rows: { type: 'string', default: '10000000' },
    live: { type: 'string' },
    partition: { type: 'string', default: 'hourly' },
    only: { type: 'string' },
    'probe-pause-ms': { type: 'string', default: '5' },
    database: { type: 'string', default: 'payonce_cleanup_scale' },
    keep: { type: 'boolean', default: false },
  },
});

const ROWS = Number(flags.rows);
const LIVE = Number(flags.live ?? Math.round(ROWS / 10));
const PARTITION = flags.partition === 'daily' ? 'day' : 'hour';
const PROBE_PAUSE_MS = Number(flags['probe-pause-ms']);
const BATCH = 1000; // server/jobs/key-cleanup.ts
const CHUNK = 1_000_000;
if (!Number.isInteger(ROWS) || ROWS < 1000) throw new Error('--rows: a whole number, at least 1000');
if (flags.partition !== 'hourly' && flags.partition !== 'daily') throw new Error('--partition: hourly or daily');
if (flags.only && flags.only !== 'plain' && flags.only !== 'partitioned') throw new Error('--only: plain or partitioned');

const log = (line: string) => console.error(`[cleanup] ${line}`);
const seconds = (since: number) => (performance.now() - since) / 1000;
const PLAIN = 'idempotency_keys';
const PARTED = 'idempotency_keys_by_expiry';

/** The columns of @payonce/idempotency's schema SQL, with the primary key that partitioning allows. */
const PARTITIONED_SCHEMA = [
  `create table ${PARTED} (
    id uuid default gen_random_uuid() not null,
    scope text not null,
    key text not null,
    request_path text not null,
    request_hash text not null,
    response_status integer,
    response_body jsonb,
    locked_at timestamptz,
    lease_expires_at timestamptz,
    lease_token uuid,
    recovery_point text default 'started' not null,
    completed_at timestamptz,
    created_at timestamptz default now() not null,
    expires_at timestamptz default now() + interval '24 hours' not null,
    -- Every unique index of a partitioned table must contain the partition key.
    primary key (id, expires_at)
  ) partition by range (expires_at)`,
  // Unique per partition only: (scope, key) may recur in another hour's partition. The claim below
  // keeps one live record per key; this index is what its look-up and replays use.
  `create unique index ${PARTED}_scope_key_expires on ${PARTED} (scope, key, expires_at)`,
  // No expires_at index: nothing scans for expired rows any more, partitions are dropped whole.
  /**
   * The claim that keeps a key unique across partitions: the key's advisory lock serialises claims of
   * the same key (other keys never wait), then a live record in any partition wins; only partitions
   * whose range is still ahead are looked at (expires_at > now() prunes the rest at run time).
   */
  `create function ${PARTED}_claim(p_scope text, p_key text, p_hash text, p_lease_ms bigint, p_ttl_ms bigint)
   returns uuid language plpgsql as $$
   declare claimed uuid;
   begin
     perform pg_advisory_xact_lock(hashtextextended(p_scope || chr(10) || p_key, 0));
     if exists (select 1 from ${PARTED} where scope = p_scope and key = p_key and expires_at > now()) then
       return null;
     end if;
     insert into ${PARTED} (scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token, expires_at)
     values (p_scope, p_key, 'probe', p_hash, now(), now() + p_lease_ms * interval '1 millisecond', gen_random_uuid(),
             now() + p_ttl_ms * interval '1 millisecond')
     returning id into claimed;
     return claimed;
   end $$`,
];

/** The claim's INSERT as the store sends it (INSERT_OR_READ_SQL's write half), on the plain table. */
const PLAIN_CLAIM = `
  insert into ${PLAIN} (scope, key, request_path, request_hash, locked_at, lease_expires_at, lease_token, expires_at)
  values ($1::text, $2::text, 'probe', $3::text, now(), now() + $4::bigint * interval '1 millisecond', gen_random_uuid(),
          now() + $5::bigint * interval '1 millisecond')
  on conflict (scope, key) do nothing
  returning id`;
const PARTED_CLAIM = `select ${PARTED}_claim($1::text, $2::text, $3::text, $4::bigint, $5::bigint) as id`;

/**
 * Rows i in (from, to]: completed keys of customers with 20 keys each, shaped like checkout.pay's.
 * Expired ones expire evenly over the 24 hours before the current hour; live ones over the next 24.
 */
function fillSql(table: string, kind: 'expired' | 'live', total: number, from: number, to: number): string {
  const expires =
    kind === 'expired'
      ? `date_trunc('hour', now()) - interval '24 hours' + (i::float8 / ${total}) * interval '24 hours' - interval '1 millisecond'`
      : `now() + interval '1 minute' + (i::float8 / ${total}) * interval '23 hours'`;
  return `
    insert into ${table}
      (scope, key, request_path, request_hash, response_status, response_body, recovery_point, completed_at, created_at, expires_at)
    select 'customer:' || md5('${kind}-customer-' || (i / 20))::uuid, md5('${kind}-key-' || i)::uuid::text, 'checkout.pay',
           encode(sha256(('${kind}-' || i)::bytea), 'hex'), 201,
           jsonb_build_object('orderId', md5('order-' || i)::uuid, 'outTradeNo', 'PO' || lpad(i::text, 18, '0'),
                              'status', 'paid', 'amountMinor', 16800, 'currency', 'CNY'),
           'started', e - interval '24 hours', e - interval '24 hours', e
      from (select i, ${expires} as e from generate_series(${from + 1}, ${to}) as i) as s`;
}

async function fill(sql: postgres.Sql, table: string): Promise<number> {
  const started = performance.now();
  for (const [kind, total] of [
    ['expired', ROWS],
    ['live', LIVE],
  ] as const) {
    for (let from = 0; from < total; from += CHUNK) {
      await sql.unsafe(fillSql(table, kind, total, from, Math.min(total, from + CHUNK)));
      log(`${table}: ${Math.min(total, from + CHUNK).toLocaleString('en')} ${kind} rows (${seconds(started).toFixed(0)} s)`);
    }
  }
  // Statistics, the hint bits and visibility map of a settled table, and a checkpoint: the cleanup
  // meets the table as it would days after the writes (its first change to each page after a
  // checkpoint writes the whole page to the WAL, as it would in production).
  await sql.unsafe(`vacuum (analyze) ${table}`);
  await sql.unsafe('checkpoint');
  return seconds(started);
}

async function walLsn(sql: postgres.Sql): Promise<string> {
  return (await sql<{ lsn: string }[]>`select pg_current_wal_lsn()::text as lsn`)[0]!.lsn;
}
async function walSince(sql: postgres.Sql, lsn: string): Promise<number> {
  return Number((await sql<{ n: string }[]>`select pg_wal_lsn_diff(pg_current_wal_lsn(), ${lsn}::pg_lsn)::bigint as n`)[0]!.n);
}

interface Size {
  heap: number;
  indexes: number;
  toast: number;
  total: number;
  partitions: number;
}

/** Heap, indexes and TOAST of a table, or of all its partitions. */
async function sizeOf(sql: postgres.Sql, table: string): Promise<Size> {
  const [row] = await sql<{ heap: string; indexes: string; total: string; partitions: number }[]>`
    with parts as (
      select relid from pg_partition_tree(${table}::regclass) where isleaf
      union select ${table}::regclass where not exists (select 1 from pg_partitioned_table where partrelid = ${table}::regclass)
    )
    select coalesce(sum(pg_relation_size(relid)), 0)::bigint as heap,
           coalesce(sum(pg_indexes_size(relid)), 0)::bigint as indexes,
           coalesce(sum(pg_total_relation_size(relid)), 0)::bigint as total,
           count(*)::int as partitions
      from parts`;
  const heap = Number(row!.heap);
  const indexes = Number(row!.indexes);
  const total = Number(row!.total);
  return { heap, indexes, toast: total - heap - indexes, total, partitions: row!.partitions };
}

interface Latency {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

function latencyOf(samples: number[]): Latency {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
  return {
    count: sorted.length,
    p50: at(50),
    p90: at(90),
    p99: at(99),
    max: sorted[sorted.length - 1] ?? Number.NaN,
    mean: sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length),
  };
}

/** Claims fresh keys back to back on its own connection until stopped; latencies in ms. */
function probeClaims(url: string, claimSql: string, label: string) {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  const samples: number[] = [];
  let running = true;
  let n = 0;
  const done = (async () => {
    while (running) {
      const key = `${label}-${process.pid}-${n++}`;
      const started = performance.now();
      const rows = await sql.unsafe(claimSql, [`customer:probe-${n % 997}`, key, `hash-${n}`, 30_000, 24 * 3600_000], { prepare: true });
      samples.push(performance.now() - started);
      if (rows.length !== 1 || rows[0]!.id === null) throw new Error(`probe claim ${key} was not claimed`);
      if (PROBE_PAUSE_MS > 0) await sleep(PROBE_PAUSE_MS);
    }
  })();
  return {
    async stop(): Promise<Latency> {
      running = false;
      await done;
      await sql.end({ timeout: 5 });
      return latencyOf(samples);
    },
  };
}

async function baseline(url: string, claimSql: string, label: string): Promise<Latency> {
  const probe = probeClaims(url, claimSql, `${label}-baseline`);
  await sleep(5000);
  return probe.stop();
}

interface VariantResult {
  variant: 'plain' | 'partitioned';
  method: string;
  fillSeconds: number;
  before: Size;
  cleanup: { seconds: number; walBytes: number; statements: number; rowsDeleted: number; partitionsDropped: number };
  after: Size;
  /** plain only: the VACUUM the dead rows call for, and the size after it. */
  vacuum?: { seconds: number; walBytes: number; after: Size };
  claimLatencyMs: { baseline: Latency; duringCleanup: Latency };
  rowsLeft: { expired: number; live: number };
}

async function rowsLeft(sql: postgres.Sql, table: string) {
  const [row] = await sql<{ expired: number; live: number }[]>`
    select count(*) filter (where expires_at <= now())::int as expired, count(*) filter (where expires_at > now())::int as live
      from ${sql(table)} where request_path <> 'probe'`;
  return row!;
}

async function runPlain(url: string): Promise<VariantResult> {
  const sql = postgres(url, { max: 2, onnotice: () => {} });
  try {
    await applyIdempotencySchema(sql);
    const fillSeconds = await fill(sql, PLAIN);
    const before = await sizeOf(sql, PLAIN);
    log(`plain: ${(before.total / 2 ** 30).toFixed(2)} GiB before cleanup; claim baseline…`);
    const base = await baseline(url, PLAIN_CLAIM, 'plain');

    // The store's own statement, exactly as the hourly job sends it, until a batch comes back short.
    const cleaner = postgres(url, { max: 1, onnotice: () => {} });
    const store = createPostgresIdempotencyStore(cleaner);
    const lsn = await walLsn(sql);
    const probe = probeClaims(url, PLAIN_CLAIM, 'plain');
    const started = performance.now();
    let deleted = 0;
    let statements = 0;
    for (;;) {
      const n = await deleteExpiredKeys(store, { batchSize: BATCH, maxBatches: 100 });
      deleted += n;
      // deleteExpiredKeys stops after a short batch, or after 100 full ones.
      statements += n === BATCH * 100 ? 100 : Math.floor(n / BATCH) + 1;
      if (n < BATCH * 100) break;
      if (statements % 1000 === 0) log(`plain: ${deleted.toLocaleString('en')} deleted (${seconds(started).toFixed(0)} s)`);
    }
    const cleanupSeconds = seconds(started);
    const during = await probe.stop();
    const walBytes = await walSince(sql, lsn);
    await cleaner.end({ timeout: 5 });
    const after = await sizeOf(sql, PLAIN);
    log(`plain: deleted ${deleted.toLocaleString('en')} in ${cleanupSeconds.toFixed(0)} s; vacuum…`);

    const vacuumLsn = await walLsn(sql);
    const vacuumStarted = performance.now();
    await sql.unsafe(`vacuum ${PLAIN}`);
    const vacuum = { seconds: seconds(vacuumStarted), walBytes: await walSince(sql, vacuumLsn), after: await sizeOf(sql, PLAIN) };
    return {
      variant: 'plain',
      method: `DELETE … LIMIT ${BATCH} (the store's deleteExpired), ${statements.toLocaleString('en')} statements, then VACUUM`,
      fillSeconds,
      before,
      cleanup: { seconds: cleanupSeconds, walBytes, statements, rowsDeleted: deleted, partitionsDropped: 0 },
      after,
      vacuum,
      claimLatencyMs: { baseline: base, duringCleanup: during },
      rowsLeft: await rowsLeft(sql, PLAIN),
    };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

async function runPartitioned(url: string): Promise<VariantResult> {
  const sql = postgres(url, { max: 2, onnotice: () => {} });
  try {
    for (const statement of PARTITIONED_SCHEMA) await sql.unsafe(statement);
    // A partition per hour (or day) from before the oldest expired row to past the newest live one;
    // in production a job creates the next ones ahead of time.
    const unit = PARTITION;
    await sql.unsafe(`
      do $$
      declare start timestamptz := date_trunc('${unit}', now() - interval '25 hours');
      begin
        while start < now() + interval '26 hours' loop
          execute format('create table %I partition of ${PARTED} for values from (%L) to (%L)',
                         '${PARTED}_' || to_char(start at time zone 'UTC', 'YYYYMMDD"T"HH24'), start, start + interval '1 ${unit}');
          start := start + interval '1 ${unit}';
        end loop;
      end $$`);
    const fillSeconds = await fill(sql, PARTED);
    const before = await sizeOf(sql, PARTED);
    const rowsBefore = await rowsLeft(sql, PARTED);
    log(`partitioned: ${(before.total / 2 ** 30).toFixed(2)} GiB in ${before.partitions} partitions before cleanup; claim baseline…`);
    const base = await baseline(url, PARTED_CLAIM, 'partitioned');

    const cleaner = postgres(url, { max: 1, onnotice: () => {} });
    const lsn = await walLsn(sql);
    const probe = probeClaims(url, PARTED_CLAIM, 'partitioned');
    const started = performance.now();
    let statements = 0;
    let dropped = 0;
    // Every partition whose range has ended: all its records have expired.
    const expired = await cleaner<{ name: string }[]>`
      select c.relname as name
        from pg_inherits i join pg_class c on c.oid = i.inhrelid
       where i.inhparent = ${PARTED}::regclass
         and (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz <= now()
       order by 1`;
    statements++;
    for (const partition of expired) {
      // A record still leased (a request working on a key taken over in its last minute) keeps its
      // partition until the next run, as the DELETE's lease condition keeps its row.
      const [held] = await cleaner<{ held: boolean }[]>`
        select exists (select 1 from ${cleaner(partition.name)} where completed_at is null and lease_expires_at > now()) as held`;
      statements++;
      if (held!.held) continue;
      // CONCURRENTLY: claims and replays on the parent go on meanwhile (a plain DETACH or DROP would
      // take an ACCESS EXCLUSIVE lock on the parent and queue them behind it).
      const name = `"${partition.name.replaceAll('"', '""')}"`;
      await cleaner.unsafe(`alter table ${PARTED} detach partition ${name} concurrently`);
      await cleaner.unsafe(`drop table ${name}`);
      statements += 2;
      dropped++;
    }
    const cleanupSeconds = seconds(started);
    const during = await probe.stop();
    const walBytes = await walSince(sql, lsn);
    await cleaner.end({ timeout: 5 });
    const after = await sizeOf(sql, PARTED);
    const left = await rowsLeft(sql, PARTED);
    const rowsDropped = rowsBefore.expired - left.expired;
    log(`partitioned: dropped ${dropped} partitions (${rowsDropped.toLocaleString('en')} rows) in ${cleanupSeconds.toFixed(1)} s`);
    return {
      variant: 'partitioned',
      method: `DETACH PARTITION … CONCURRENTLY + DROP TABLE of each ended ${unit}ly partition`,
      fillSeconds,
      before,
      cleanup: { seconds: cleanupSeconds, walBytes, statements, rowsDeleted: rowsDropped, partitionsDropped: dropped },
      after,
      claimLatencyMs: { baseline: base, duringCleanup: during },
      rowsLeft: left,
    };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

const mib = (bytes: number) => `${(bytes / 2 ** 20).toLocaleString('en', { maximumFractionDigits: 1 })} MiB`;
const ms = (value: number) => value.toFixed(2);
const lat = (l: Latency) => `${ms(l.p50)} / ${ms(l.p99)} / ${ms(l.max)} (n = ${l.count.toLocaleString('en')})`;

function renderMarkdown(report: { at: string; machine: Record<string, unknown>; results: VariantResult[] }): string {
  const lines = [
    `### Cleaning ${ROWS.toLocaleString('en')} expired keys (${LIVE.toLocaleString('en')} live beside them)`,
    '',
    `${report.at}; ${Object.entries(report.machine)
      .map(([k, v]) => `${k} ${String(v)}`)
      .join(', ')}`,
    '',
    '| | cleanup | WAL written | size before → after (heap + indexes + TOAST) | claim p50 / p99 / max ms, baseline | claim p50 / p99 / max ms, during cleanup |',
    '|---|---|---|---|---|---|',
  ];
  for (const r of report.results) {
    lines.push(
      `| **${r.variant}** — ${r.method} | ${r.cleanup.seconds.toFixed(1)} s | ${mib(r.cleanup.walBytes)} | ${mib(r.before.total)} → ${mib(r.after.total)} | ${lat(
        r.claimLatencyMs.baseline,
      )} | ${lat(r.claimLatencyMs.duringCleanup)} |`,
    );
    if (r.vacuum) {
      lines.push(
        `| ↳ then VACUUM (the dead rows' second cost) | ${r.vacuum.seconds.toFixed(1)} s | ${mib(r.vacuum.walBytes)} | → ${mib(r.vacuum.after.total)} | | |`,
      );
    }
  }
  lines.push('');
  for (const r of report.results) {
    lines.push(
      `- ${r.variant}: filled in ${r.fillSeconds.toFixed(0)} s; ${r.before.partitions} relation(s) before, ${r.after.partitions} after; ` +
        `before: heap ${mib(r.before.heap)}, indexes ${mib(r.before.indexes)}, TOAST ${mib(r.before.toast)}; ` +
        `after: heap ${mib(r.after.heap)}, indexes ${mib(r.after.indexes)}; ${r.cleanup.rowsDeleted.toLocaleString('en')} rows removed ` +
        `with ${r.cleanup.statements.toLocaleString('en')} statements; left: ${r.rowsLeft.expired.toLocaleString('en')} expired, ` +
        `${r.rowsLeft.live.toLocaleString('en')} live.`,
    );
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  let embedded: EmbeddedDatabase | undefined;
  let adminUrl: string;
  let url: string;
  if (process.env.DATABASE_URL) {
    adminUrl = process.env.DATABASE_URL;
    const target = new URL(adminUrl);
    target.pathname = `/${flags.database}`;
    url = target.toString();
  } else {
    embedded = await startEmbeddedPostgres({ log: (line) => log(`[postgres] ${line}`) });
    adminUrl = embedded.adminUrl;
    url = embedded.urlFor(flags.database!);
  }
  if (flags.database === new URL(adminUrl).pathname.slice(1)) throw new Error('--database must name a database of its own');
  await dropDatabase(adminUrl, flags.database!);
  await ensureDatabase(adminUrl, flags.database!);
  log(`database ${flags.database}: ${ROWS.toLocaleString('en')} expired + ${LIVE.toLocaleString('en')} live keys per variant`);
  try {
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    const [pg] = await sql<{ version: string; shared_buffers: string; max_wal_size: string; full_page_writes: string }[]>`
      select current_setting('server_version') as version, current_setting('shared_buffers') as shared_buffers,
             current_setting('max_wal_size') as max_wal_size, current_setting('full_page_writes') as full_page_writes`;
    await sql.end();
    const machine = {
      cpu: `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}`,
      ram: `${Math.round(os.totalmem() / 2 ** 30)} GiB`,
      PostgreSQL: pg!.version,
      shared_buffers: pg!.shared_buffers,
      max_wal_size: pg!.max_wal_size,
      full_page_writes: pg!.full_page_writes,
      partitions: `${PARTITION}ly`,
      'probe pause': `${PROBE_PAUSE_MS} ms`,
    };
    const results: VariantResult[] = [];
    if (flags.only !== 'partitioned') results.push(await runPlain(url));
    if (flags.only !== 'plain') results.push(await runPartitioned(url));
    const report = { at: new Date().toISOString(), rows: ROWS, live: LIVE, machine, results };
    const markdown = renderMarkdown(report);
    const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'results');
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'cleanup-at-scale.json'), `${JSON.stringify(report, null, 2)}\n`);
    await writeFile(path.join(dir, 'cleanup-at-scale.md'), `${markdown}\n`);
    console.log(markdown);
  } finally {
    if (!flags.keep) await dropDatabase(adminUrl, flags.database!);
    await embedded?.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
