/**
 * PostgreSQL connection URLs, including libpq's multi-host form that postgres.js also speaks:
 *
 *   postgres://user:password@db1.example.com:5432,db2.example.com:5432/payonce?target_session_attrs=primary
 *
 * A highly available PostgreSQL (docs/scaling.md, "When PostgreSQL fails over") is reached that way:
 * the driver tries each host in turn and keeps the one that is the primary. WHATWG `URL` cannot parse
 * a host list, so the URL is checked here with its hosts taken apart.
 */

export interface PostgresUrlParts {
  /** Each host and port, in the order the driver tries them (5432 when none is given; none at all for the driver's default). */
  hosts: { host: string; port: number }[];
  /** The same URL with only its first host: what WHATWG `URL` and single-host tools can read. */
  firstHostUrl: URL;
}

const AUTHORITY = /^(postgres(?:ql)?:\/\/)(?:([^@/?#]*)@)?([^/?#]*)(.*)$/;

/** The URL's parts, or undefined if it is not a postgres(ql):// URL with one or more valid hosts. */
export function postgresUrlParts(raw: string): PostgresUrlParts | undefined {
  const match = AUTHORITY.exec(raw.trim());
  if (!match) return undefined;
  const [, scheme, userinfo, hostList, rest] = match;
  // No host at all (postgres:///payonce): the driver's default, a local socket or localhost.
  if (hostList === '') return parsedAlone(raw.trim());
  const items = hostList!.split(',');
  const hosts: PostgresUrlParts['hosts'] = [];
  for (const item of items) {
    const parsed = hostOf(item);
    if (!parsed) return undefined;
    hosts.push(parsed);
  }
  try {
    const firstHostUrl = new URL(`${scheme}${userinfo !== undefined ? `${userinfo}@` : ''}${items[0]}${rest}`);
    return { hosts, firstHostUrl };
  } catch {
    return undefined;
  }
}

function parsedAlone(raw: string): PostgresUrlParts | undefined {
  try {
    return { hosts: [], firstHostUrl: new URL(raw) };
  } catch {
    return undefined;
  }
}

function hostOf(item: string): { host: string; port: number } | undefined {
  if (item === '') return undefined;
  try {
    const url = new URL(`postgres://${item}`);
    if (url.username || url.pathname || url.search) return undefined;
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    return host ? { host, port: url.port ? Number(url.port) : 5432 } : undefined;
  } catch {
    return undefined;
  }
}
