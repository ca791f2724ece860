/**
 * Operators' passwords, hashed with scrypt (a memory-hard KDF in Node's own crypto: no native
 * module to build, nothing to approve at install) at OWASP's recommended cost: N = 2^17, r = 8,
 * p = 1 — 128 MiB and about 0.7 s per hash on two busy cores, which is what makes a stolen table slow to
 * guess and why sign-ins are rate-limited.
 *
 * Stored as `scrypt$N$r$p$salt$hash` (salt and hash base64url), so the cost can be raised later:
 * `needsRehash` tells the sign-in to store a new hash at the new cost while it has the password.
 */
import { randomBytes, scrypt as scryptCallback, timingSafeEqual, type ScryptOptions } from 'node:crypto';

const COST = { N: 2 ** 17, r: 8, p: 1 } as const;
const KEY_LENGTH = 32;
const SALT_LENGTH = 16;
/** The shortest password accepted: a passphrase, not a PIN. */
export const MIN_PASSWORD_LENGTH = 12;
/** The longest: scrypt reads all of it, so an unbounded one is a way to make a sign-in expensive. */
export const MAX_PASSWORD_LENGTH = 256;

function scrypt(password: string, salt: Buffer, cost: { N: number; r: number; p: number }): Promise<Buffer> {
  // maxmem: Node's default (32 MiB) is below what N = 2^17, r = 8 needs (128 × N × r = 128 MiB).
  const options: ScryptOptions = { ...cost, maxmem: 256 * 1024 * 1024 };
  return new Promise((resolve, reject) =>
    scryptCallback(password.normalize('NFKC'), salt, KEY_LENGTH, options, (error, key) => (error ? reject(error) : resolve(key))),
  );
}

/** Why a password is refused, or undefined when it is acceptable. */
export function passwordProblem(password: string): string | undefined {
  if (password.length < MIN_PASSWORD_LENGTH) return `at least ${MIN_PASSWORD_LENGTH} characters`;
  if (password.length > MAX_PASSWORD_LENGTH) return `at most ${MAX_PASSWORD_LENGTH} characters`;
  return undefined;
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(SALT_LENGTH);
  const hash = await scrypt(password, salt, COST);
  return ['scrypt', COST.N, COST.r, COST.p, salt.toString('base64url'), hash.toString('base64url')].join('$');
}

interface Parsed {
  cost: { N: number; r: number; p: number };
  salt: Buffer;
  hash: Buffer;
}

function parse(stored: string): Parsed | undefined {
  const [scheme, n, r, p, salt, hash] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !hash) return undefined;
  const cost = { N: Number(n), r: Number(r), p: Number(p) };
  if (![cost.N, cost.r, cost.p].every((x) => Number.isSafeInteger(x) && x > 0)) return undefined;
  return { cost, salt: Buffer.from(salt, 'base64url'), hash: Buffer.from(hash, 'base64url') };
}

/** Whether `password` is the one `stored` was made from; false for a malformed hash. */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parsed = parse(stored);
  if (!parsed || password.length > MAX_PASSWORD_LENGTH) return false;
  const candidate = await scrypt(password, parsed.salt, parsed.cost);
  return candidate.length === parsed.hash.length && timingSafeEqual(candidate, parsed.hash);
}

/** Made at a cost below today's: store a new hash at the next successful sign-in. */
export function needsRehash(stored: string): boolean {
  const parsed = parse(stored);
  return !parsed || parsed.cost.N < COST.N || parsed.cost.r < COST.r || parsed.cost.p < COST.p;
}

/**
 * A hash of nothing, made once: a sign-in for an unknown username is checked against it, so that it
 * takes as long as one for a real operator and the answer's timing does not tell which names exist.
 */
let decoy: Promise<string> | undefined;
export function decoyHash(): Promise<string> {
  decoy ??= hashPassword(randomBytes(24).toString('base64url'));
  return decoy;
}
