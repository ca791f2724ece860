/**
 * Rate limits on the mutations: per session (customer) and per client address, counted in
 * PostgreSQL so that every app instance sees the same counts. Framework-free — it imports nothing
 * from next or @trpc; the tRPC glue is server/trpc/rate-limit.ts.
 *
 * Fixed windows, one row per bucket, one statement per check. A fixed window lets a script through
 * twice its limit across a window's edge; with limits set far above what a shopper does, that is a
 * fair price for a check that costs one upsert and never a scan.
 */
import { isIP } from 'node:net';
import { sql } from 'drizzle-orm';
import type { Database } from '@/db/client';
import { envFrom, type RawEnv } from '@/server/config/env';
import { PEER_ADDRESS_HEADER } from './peer-address';

export interface RateLimitPolicy {
  /** Mutations per window per session (customer id); 0 switches the session limit off. */
  sessionPerWindow: number;
  /** Mutations per window per client address, across its sessions; 0 switches it off. */
  addressPerWindow: number;
  windowSeconds: number;
  /**
   * How many proxies in front of the app append to X-Forwarded-For (TRUST_PROXY). 0: none are
   * trusted, and the address is the socket's — see clientAddress.
   */
  trustProxy: number;
}

/**
 * 30 mutations a minute per session: a shopper's whole checkout is a handful (create the order, pay,
 * perhaps a retry or another gateway), so only a script meets it. 300 a minute per address: an
 * office, a campus or a mobile carrier's NAT puts many shoppers behind one address.
 */
export const DEFAULT_RATE_LIMIT_POLICY: RateLimitPolicy = {
  sessionPerWindow: 30,
  addressPerWindow: 300,
  windowSeconds: 60,
  trustProxy: 0,
};

/**
 * RATE_LIMIT_SESSION_PER_MINUTE, RATE_LIMIT_ADDRESS_PER_MINUTE and TRUST_PROXY (server/config/env.ts): a
 * typo stops the server's start, so it can neither switch a protection off silently nor turn every
 * request into a 500.
 */
export function rateLimitPolicyFromEnv(env?: RawEnv): RateLimitPolicy {
  const config = envFrom(env);
  return {
    sessionPerWindow: config.RATE_LIMIT_SESSION_PER_MINUTE,
    addressPerWindow: config.RATE_LIMIT_ADDRESS_PER_MINUTE,
    windowSeconds: 60,
    trustProxy: config.TRUST_PROXY,
  };
}

/**
 * The client's address, or undefined when the request carries none that can be trusted.
 *
 * Without proxies (TRUST_PROXY=0, the default) it is the socket's address, stamped by the server
 * itself (./peer-address.ts) where no client can choose it: X-Forwarded-For is never read then, since
 * `next start` fills it with the socket's address only when the request has none (base-server: `??=`),
 * and a client that sends its own would choose the value — rotating addresses at will, or exhausting
 * another shopper's. Behind N proxies (TRUST_PROXY=N) each appends the address it received from, so
 * the N-th entry from the right was written by our first proxy: the rightmost hop no client can forge;
 * a request that reached the app past the proxies (no such hop) counts by its socket.
 */
export function clientAddress(headers: Headers, trustProxy: number): string | undefined {
  const peer = () => {
    const address = headers.get(PEER_ADDRESS_HEADER);
    return address ? normalizeAddress(address) : undefined;
  };
  if (trustProxy <= 0) return peer();
  // Repeated headers arrive joined with ", ", the same separator proxies use within one header.
  const hops = (headers.get('x-forwarded-for') ?? '')
    .split(',')
    .map((hop) => hop.trim())
    .filter((hop) => hop !== '');
  if (hops.length < trustProxy) return peer();
  const hop = hops[hops.length - trustProxy];
  return hop === undefined ? undefined : normalizeAddress(hop);
}

/**
 * One bucket per IPv4 address and per IPv6 /64: a single subscriber is usually given a whole /64,
 * and counting each of its 2^64 addresses apart would make the limit free to walk around.
 */
export function normalizeAddress(raw: string): string | undefined {
  let address = raw.replace(/^\[(.*)\](:\d+)?$/, '$1');
  // An IPv4 address with a port (some proxies append one).
  if (/^\d{1,3}(\.\d{1,3}){3}:\d+$/.test(address)) address = address.slice(0, address.lastIndexOf(':'));
  address = address.toLowerCase().replace(/^::ffff:(\d{1,3}(\.\d{1,3}){3})$/, '$1');
  const version = isIP(address);
  if (version === 4) return address;
  if (version !== 6) return undefined;
  const [head = '', tail] = address.split('::') as [string, string | undefined];
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = [...headGroups, ...Array(8 - headGroups.length - tailGroups.length).fill('0'), ...tailGroups];
  // An IPv4 tail (::1.2.3.4 forms) lies beyond the /64 prefix either way.
  return `${groups
    .slice(0, 4)
    .map((group) => group.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}

export type RateLimitVerdict =
  { limited: false } | { limited: true; bucket: 'session' | 'address'; limit: number; retryAfterSeconds: number };

/**
 * Counts one mutation against its session's and its address's buckets and says whether either is
 * over its limit. Every call counts, refused ones too: a script that keeps hammering stays limited
 * until the window ends, and a shopper's counter resets with the window all the same.
 */
export async function hitRateLimits(
  db: Database,
  policy: RateLimitPolicy,
  subject: { customerId?: string; address?: string },
): Promise<RateLimitVerdict> {
  const buckets: { bucket: string; kind: 'session' | 'address'; limit: number }[] = [];
  if (policy.sessionPerWindow > 0 && subject.customerId) {
    buckets.push({ bucket: `session:${subject.customerId}`, kind: 'session', limit: policy.sessionPerWindow });
  }
  if (policy.addressPerWindow > 0 && subject.address) {
    buckets.push({ bucket: `address:${subject.address}`, kind: 'address', limit: policy.addressPerWindow });
  }
  if (buckets.length === 0) return { limited: false };

  // The window is computed from the database's clock, the one clock every instance shares. The
  // rows are always upserted session first, then address, so two checks never wait on each other's
  // rows in opposite orders.
  const window = policy.windowSeconds;
  const rows = await db.execute<{ bucket: string; hits: number; retry_after: number }>(sql`
    insert into rate_limits as r (bucket, window_start, window_ends_at, hits)
    select b.bucket, w.start, w.start + make_interval(secs => ${window}), 1
      from (values ${sql.join(
        buckets.map((b, i) => sql`(${b.bucket}, ${i})`),
        sql`, `,
      )}) as b(bucket, position)
     cross join (select to_timestamp(floor(extract(epoch from now()) / ${window}) * ${window}) as start) w
     order by b.position
    on conflict (bucket) do update
       set hits = case when r.window_start >= excluded.window_start then r.hits + 1 else 1 end,
           window_start = greatest(r.window_start, excluded.window_start),
           window_ends_at = greatest(r.window_ends_at, excluded.window_ends_at)
    returning r.bucket, r.hits, greatest(1, ceil(extract(epoch from r.window_ends_at - now())))::int as retry_after`);

  let verdict: RateLimitVerdict = { limited: false };
  for (const b of buckets) {
    const row = rows.find((r) => r.bucket === b.bucket);
    if (!row || row.hits <= b.limit) continue;
    if (!verdict.limited || row.retry_after > verdict.retryAfterSeconds) {
      verdict = { limited: true, bucket: b.kind, limit: b.limit, retryAfterSeconds: row.retry_after };
    }
  }
  return verdict;
}

/**
 * Deletes rows whose window has ended, in bounded batches: a bucket that is hit again simply starts
 * a new row. SKIP LOCKED so that cleanup never waits on a request counting in the same bucket.
 */
export async function deleteEndedRateLimitWindows(
  db: Database,
  { batchSize = 1000, maxBatches = 50 }: { batchSize?: number; maxBatches?: number } = {},
): Promise<number> {
  let total = 0;
  for (let batch = 0; batch < maxBatches; batch++) {
    const rows = await db.execute(sql`
      with ended as (
        select bucket from rate_limits where window_ends_at <= now() limit ${batchSize} for update skip locked
      )
      delete from rate_limits r using ended where r.bucket = ended.bucket
      returning 1`);
    total += rows.length;
    if (rows.length < batchSize) break;
  }
  return total;
}
