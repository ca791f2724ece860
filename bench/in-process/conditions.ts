/**
 * The two network conditions every timed contender runs under:
 *
 *   loopback  PostgreSQL and redis-server reached directly on this machine (round trips of ~0.1 ms);
 *   zones     both reached through the delay proxy (./delay-proxy.ts), as from an application in
 *             another availability zone of the same region: every round trip pays the delay twice.
 *
 * Each condition has its own postgres.js pool of the same size and settings, and its own Redis
 * clients on the same redis-server, so the only difference between them is the network. Before the
 * rounds, the round trips of each condition are measured, and a proxy that does not delay stops the run:
 * the "across zones" figures would silently be a second loopback run.
 */
import postgres from 'postgres';
import { roundTripsMs, startDelayProxy, type ChildDelayProxy } from './delay-proxy';
import type { RedisServer } from './redis';

export const CONDITIONS = ['loopback', 'zones'] as const;
export type ConditionId = (typeof CONDITIONS)[number];
export const CONDITION_LABEL: Record<ConditionId, string> = { loopback: 'loopback', zones: 'across zones' };

/** What the report says of a condition. */
export interface ConditionInfo {
  id: ConditionId;
  label: string;
  /** The one-way delay the proxy adds; null on loopback. */
  delayMsEachWay: number | null;
  /** Median round trip measured before the rounds, ms: PostgreSQL `select 1`, Redis PING (null without Redis). */
  roundTripMs: { postgres: number; redis: number | null };
}

/** A condition as the bench uses it: its pool, its application_name (to find its backends), its Redis URL. */
export interface Condition {
  id: ConditionId;
  sql: postgres.Sql;
  applicationName: string;
  redisUrl: string | null;
}

const PROBE_ROUND_TRIPS = 50;

export function openPool(url: string, max: number, applicationName: string): postgres.Sql {
  return postgres(url, { max, onnotice: () => {}, connection: { application_name: applicationName } });
}

/** The delay proxy in front of PostgreSQL and (when there is one) the bench's redis-server. */
export async function startZoneProxy(
  databaseUrl: string,
  redis: RedisServer | null,
  delayMs: number,
): Promise<{ proxy: ChildDelayProxy; databaseUrl: string; redisUrl: string | null }> {
  const database = new URL(databaseUrl);
  const upstreams = [{ host: database.hostname.replace(/^\[|\]$/g, ''), port: Number(database.port || 5432) }];
  if (redis) upstreams.push({ host: '127.0.0.1', port: redis.port });
  const proxy = await startDelayProxy(upstreams, delayMs);
  const throughProxy = new URL(databaseUrl);
  throughProxy.hostname = '127.0.0.1';
  throughProxy.port = String(proxy.ports[0]);
  return {
    proxy,
    databaseUrl: throughProxy.toString(),
    redisUrl: redis ? `redis://127.0.0.1:${proxy.ports[1]}` : null,
  };
}

async function postgresRoundTripsMs(sql: postgres.Sql): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < PROBE_ROUND_TRIPS; i++) {
    const started = performance.now();
    await sql`select 1`;
    times.push(performance.now() - started);
  }
  return times.sort((a, b) => a - b);
}

function redisRoundTripsMs(redisUrl: string): Promise<number[]> {
  return roundTripsMs(Number(new URL(redisUrl).port), { request: 'PING\r\n', replyEnd: '\r\n', times: PROBE_ROUND_TRIPS });
}

const median = (sorted: number[]) => sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;

/**
 * Measures a condition's round trips; for `zones`, throws unless even the fastest took twice the
 * delay — the proxy's own self-check, on the very connections the contenders use.
 */
export async function describeCondition(condition: Condition, delayMs: number | null): Promise<ConditionInfo> {
  const postgresTimes = await postgresRoundTripsMs(condition.sql);
  const redisTimes = condition.redisUrl ? await redisRoundTripsMs(condition.redisUrl) : null;
  if (delayMs !== null) {
    for (const [name, times] of [
      ['PostgreSQL', postgresTimes],
      ['Redis', redisTimes],
    ] as const) {
      if (times && times[0]! < 2 * delayMs) {
        throw new Error(
          `the delay proxy does not delay: the fastest ${name} round trip through it took ${times[0]!.toFixed(3)} ms, ` +
            `less than twice the ${delayMs} ms one-way delay`,
        );
      }
    }
  }
  return {
    id: condition.id,
    label: CONDITION_LABEL[condition.id],
    delayMsEachWay: delayMs,
    roundTripMs: { postgres: median(postgresTimes), redis: redisTimes ? median(redisTimes) : null },
  };
}
