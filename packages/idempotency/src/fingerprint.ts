import crypto from 'node:crypto';

/**
 * The value JSON.parse(JSON.stringify(value)) would give, with object keys sorted at every depth —
 * Dates as their ISO strings, undefined members dropped, arrays in their order (order is meaning
 * there) — built directly, without a string round trip. An answer is stored and sent in this form, so
 * the first answer and every replay are byte for byte the same; its JSON is the canonical text a
 * request's fingerprint covers, so `{"a":1,"b":2}` and `{ "b": 2, "a": 1 }` are the same request.
 */
export function canonicalCopy(value: unknown): unknown {
  if (value === null || value === undefined) return null;
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      return Number.isFinite(value) ? value + 0 : null; // + 0: -0 becomes 0, as in JSON
    case 'object':
      break;
    default:
      return typeof value === 'bigint' ? JSON.stringify(value) : null; // BigInt throws, as in JSON
  }
  if (Array.isArray(value)) return value.map((item) => (item === undefined || typeof item === 'function' ? null : canonicalCopy(item)));
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return canonicalCopy((value as { toJSON: () => unknown }).toJSON());
  if (value instanceof String || value instanceof Number || value instanceof Boolean) return canonicalCopy(value.valueOf());
  // A plain loop, not entries/filter/map: this runs on every request's input and answer.
  const object = value as Record<string, unknown>;
  const copy: Record<string, unknown> = {};
  for (const key of Object.keys(object).sort()) {
    const member = object[key];
    if (member === undefined || typeof member === 'function' || typeof member === 'symbol') continue;
    copy[key] = canonicalCopy(member);
  }
  return copy;
}

/** JSON with object keys sorted at every depth (integer-like keys first, in numeric order, as JS keeps them). */
export const canonicalJson = (value: unknown): string => JSON.stringify(canonicalCopy(value));

/** SHA-256 over the procedure path and the canonical input: what "the same request" means. */
export function requestFingerprint(path: string, input: unknown): string {
  return sha256Hex(`${path}\n${canonicalJson(input)}`);
}

/** Node's one-shot hash (20.12+) is several times cheaper than a Hash object; older Nodes get the object. */
const sha256Hex: (text: string) => string =
  typeof crypto.hash === 'function'
    ? (text) => crypto.hash('sha256', text)
    : (text) => crypto.createHash('sha256').update(text).digest('hex');
