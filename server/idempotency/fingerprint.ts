import { createHash } from 'node:crypto';

/**
 * JSON with object keys sorted at every depth, so `{"a":1,"b":2}` and `{ "b": 2, "a": 1 }` are the
 * same request. Arrays keep their order (order is meaning there). `undefined` members are dropped,
 * as JSON.stringify drops them.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    // JSON.stringify(undefined) is undefined; a missing input fingerprints like `null`.
    return JSON.stringify(value) ?? 'null';
  }
  if (Array.isArray(value)) {
    return `[${value.map((item) => canonicalJson(item ?? null)).join(',')}]`;
  }
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    return canonicalJson((value as { toJSON: () => unknown }).toJSON());
  }
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/** SHA-256 over the procedure path and the canonical input: what "the same request" means. */
export function requestFingerprint(path: string, input: unknown): string {
  return createHash('sha256').update(path).update('\n').update(canonicalJson(input)).digest('hex');
}
