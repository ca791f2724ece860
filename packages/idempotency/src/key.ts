import { InvalidKeyError, MissingKeyError } from './errors.js';

/** Stripe's limit; a UUID (36) fits many times over. */
export const MAX_KEY_LENGTH = 255;

// The rule: 1–255 characters of printable ASCII (0x20–0x7E), without a comma. Keys travel in HTTP
// headers and log lines, so no control characters (a tab is legal in a header value, so it does reach
// us). No comma, because a client that sends two Idempotency-Key headers gets them joined as
// "k1, k2" by every HTTP stack on the way: read as one key, that would be a new key never seen
// before, and the request would run again instead of being refused.
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
  if (key.includes(',')) {
    throw new InvalidKeyError('it contains a comma (was the header sent twice? send exactly one key)');
  }
  return key;
}
