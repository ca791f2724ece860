/**
 * Stripe's v1 request encoding: `application/x-www-form-urlencoded` with bracket notation for nested
 * values (`metadata[out_trade_no]=PO…`, `payment_method_types[0]=card`), as stripe-node's
 * stringifier writes it (GET parameters travel the same way in the query string). Parsed into plain
 * nested values, then read with typed readers that fail with Stripe's own invalid-request errors.
 */
import { createHash } from 'node:crypto';

export type FormValue = string | FormValue[] | { [key: string]: FormValue };
export type FormHash = { [key: string]: FormValue };

/** A request Stripe refuses before executing it (400 invalid_request_error). */
export class StripeParamError extends Error {
  constructor(
    message: string,
    readonly param: string | undefined,
    readonly code: string | undefined = undefined,
  ) {
    super(message);
  }
}

const NAME_RE = /^([^[\]]+)((?:\[[^[\]]*\])*)$/;

type Tree = Map<string, Tree | string>;

/**
 * Parses `a[b][c]=v&list[0]=x&list[]=y` into nested objects and arrays. A name used both as a value
 * and as a hash (`a=1&a[b]=2`) is refused like Stripe refuses it; a repeated leaf keeps the last value.
 */
export function parseStripeForm(text: string): FormHash {
  const root: Tree = new Map();
  for (const [name, value] of new URLSearchParams(text)) {
    const match = NAME_RE.exec(name);
    if (!match) throw new StripeParamError(`Invalid parameter name: ${name}`, name);
    const path = [match[1] ?? '', ...[...(match[2] ?? '').matchAll(/\[([^[\]]*)\]/g)].map((m) => m[1] ?? '')];
    let node = root;
    for (let i = 0; i < path.length; i += 1) {
      let segment = path[i] ?? '';
      if (segment === '') {
        if (i === 0) throw new StripeParamError(`Invalid parameter name: ${name}`, name);
        segment = String(node.size); // `list[]=x` appends
      }
      const last = i === path.length - 1;
      const existing = node.get(segment);
      if (last) {
        if (existing instanceof Map) throw new StripeParamError(`Invalid hash: ${name} was sent both as a value and as a hash`, name);
        node.set(segment, value);
      } else if (existing === undefined) {
        const child: Tree = new Map();
        node.set(segment, child);
        node = child;
      } else if (existing instanceof Map) {
        node = existing;
      } else {
        throw new StripeParamError(`Invalid hash: ${path.slice(0, i + 1).join('.')} was sent both as a value and as a hash`, name);
      }
    }
  }
  return toHash(root);
}

function toValue(node: Tree | string): FormValue {
  if (typeof node === 'string') return node;
  const keys = [...node.keys()];
  // A hash whose keys are exactly 0..n-1 is an array (that is how the SDK writes arrays).
  if (keys.length > 0 && keys.every((key, index) => key === String(index))) {
    return keys.map((key) => toValue(node.get(key) ?? ''));
  }
  return toHash(node);
}

function toHash(node: Tree): FormHash {
  // A null prototype: a parameter named `__proto__` or `constructor` is just a name here.
  const out = Object.create(null) as FormHash;
  for (const [key, child] of node) out[key] = toValue(child);
  return out;
}

/** Canonical JSON (keys sorted): the "same parameters" test of Stripe's idempotency layer. */
export function canonicalJson(value: FormValue | undefined): string {
  if (value === undefined) return 'null';
  if (typeof value === 'string') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(',')}}`;
}

export function paramsHash(params: FormHash): string {
  return createHash('sha256').update(canonicalJson(params)).digest('hex');
}

// ---------------------------------------------------------------------------------------------
// Typed readers. Each takes the parameter's full name for Stripe's `param` field.

export function rejectUnknown(params: FormHash, allowed: readonly string[], prefix = ''): void {
  for (const key of Object.keys(params)) {
    if (allowed.includes(key)) continue;
    const name = prefix ? `${prefix}[${key}]` : key;
    throw new StripeParamError(`Received unknown parameter: ${name}`, name, 'parameter_unknown');
  }
}

export function readString(value: FormValue | undefined, param: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new StripeParamError(`Invalid string: ${param} must be a string`, param);
  return value;
}

export function readInteger(value: FormValue | undefined, param: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !/^-?\d+$/.test(value) || !Number.isSafeInteger(Number(value))) {
    throw new StripeParamError(
      `Invalid integer: ${typeof value === 'string' ? value : JSON.stringify(value)}`,
      param,
      'parameter_invalid_integer',
    );
  }
  return Number(value);
}

export function readBoolean(value: FormValue | undefined, param: string): boolean | undefined {
  if (value === undefined) return undefined;
  if (value === 'true') return true;
  if (value === 'false') return false;
  throw new StripeParamError(`Invalid boolean: ${typeof value === 'string' ? value : JSON.stringify(value)}`, param);
}

export function readHash(value: FormValue | undefined, param: string): FormHash | undefined {
  if (value === undefined) return undefined;
  // `metadata=` (empty string) is how the API clears a hash; treated as absent here.
  if (value === '') return undefined;
  if (Array.isArray(value)) {
    const out = Object.create(null) as FormHash;
    value.forEach((item, index) => (out[String(index)] = item));
    return out;
  }
  if (typeof value !== 'object') throw new StripeParamError(`Invalid hash: ${param} must be a hash`, param);
  return value;
}

export function readStringArray(value: FormValue | undefined, param: string): string[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || !value.every((item): item is string => typeof item === 'string')) {
    throw new StripeParamError(`Invalid array: ${param} must be an array of strings`, param);
  }
  return value;
}
