/**
 * The merchant reference sent to every gateway, derived from the order id once, when the order is
 * created, and stored with it.
 *
 * `PO` + 18 base-36 characters = 20 characters of [0-9A-Z]: the one format that Alipay (letters,
 * digits, underscore, ≤ 64), WeChat Pay (6–32) and 2C2P (alphanumeric, ≤ 20 for QR) all accept. The
 * seed's `ORDER-{uuid}` is 42 characters with hyphens and two of the four would refuse it. 18 base-36
 * digits carry 93 bits of the id's randomness, and the column is unique, so a clash cannot go unseen.
 */
const LENGTH = 18;

export function outTradeNoFor(orderId: string): string {
  const hex = orderId.replaceAll('-', '');
  if (!/^[0-9a-f]{32}$/i.test(hex)) throw new Error(`not a UUID: ${orderId}`);
  // Drop the version and variant nibbles (fixed in a v4 UUID), keep the random ones.
  const random = hex.slice(0, 12) + hex.slice(13, 16) + hex.slice(17);
  const digits = BigInt(`0x${random}`).toString(36).toUpperCase();
  return `PO${digits.slice(-LENGTH).padStart(LENGTH, '0')}`;
}

export const OUT_TRADE_NO_PATTERN = /^PO[0-9A-Z]{18}$/;
