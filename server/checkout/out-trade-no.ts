/**
 * The merchant reference sent to every gateway, derived from the order id once, when the order is
 * created, and stored with it.
 *
 * `PO` + a digit + 17 characters of digits and consonants = 20 characters of [0-9A-Z]: the one format
 * that Alipay (letters, digits, underscore, ≤ 64), WeChat Pay (6–32) and 2C2P (alphanumeric, ≤ 20 for
 * QR) all accept. The seed's `ORDER-{uuid}` is 42 characters with hyphens and two of the four would
 * refuse it.
 *
 * A shopper reads this number on screen, in emails and to customer service, so it must never spell a
 * word: the alphabet has no vowels (nor Y), and a digit follows the prefix, which would otherwise
 * start a word of its own ("PO" + "RN…"). 30 symbols, 17 + 1 places: 87 bits of the id's randomness,
 * and the column is unique, so a clash cannot go unseen.
 */
const ALPHABET = '0123456789BCDFGHJKLMNPQRSTVWXZ';
const BODY_LENGTH = 17;

export function outTradeNoFor(orderId: string): string {
  const hex = orderId.replaceAll('-', '');
  if (!/^[0-9a-f]{32}$/i.test(hex)) throw new Error(`not a UUID: ${orderId}`);
  // Drop the version and variant nibbles (fixed in a v4 UUID), keep the random ones.
  let random = BigInt(`0x${hex.slice(0, 12) + hex.slice(13, 16) + hex.slice(17)}`);
  const base = BigInt(ALPHABET.length);
  let body = '';
  for (let i = 0; i < BODY_LENGTH; i++) {
    body = ALPHABET[Number(random % base)]! + body;
    random /= base;
  }
  return `PO${Number(random % 10n)}${body}`;
}

/** Orders created before the vowel-free alphabet kept `PO` + 18 of [0-9A-Z]; this matches both. */
export const OUT_TRADE_NO_PATTERN = /^PO[0-9A-Z]{18}$/;

/** What outTradeNoFor makes now. */
export const NEW_OUT_TRADE_NO_PATTERN = /^PO[0-9][0-9BCDFGHJKLMNPQRSTVWXZ]{17}$/;
