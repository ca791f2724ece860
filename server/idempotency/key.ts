import { InvalidKeyError, MissingKeyError } from './errors';

/** Stripe's limit; a UUID (36) fits many times over. */
export const MAX_KEY_LENGTH = 255;

// Printable ASCII only (0x21–0x7E plus space inside): keys travel in HTTP headers and log lines.
const PRINTABLE_ASCII = /^[\x20-\x7E]+$/;

/** Returns the key if it is usable, or throws the 400 the guard's first branch describes. */
export function parseIdempotencyKey(raw: string | null | undefined): string {
  if (raw === null || raw === undefined) throw new MissingKeyError();
  const key = raw.trim();
  if (key.length === 0) throw new InvalidKeyError('it is empty');
  if (key.length > MAX_KEY_LENGTH) {
    throw new InvalidKeyError(`it is longer than ${MAX_KEY_LENGTH} characters`);
  }
  if (!PRINTABLE_ASCII.test(key)) throw new InvalidKeyError('it must be printable ASCII');
  return key;
}
