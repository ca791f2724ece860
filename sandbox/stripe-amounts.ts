/**
 * Stripe's minimum charge amounts (https://docs.stripe.com/currencies#minimum-and-maximum-charge-amounts)
 * and how its refusal reads. A PaymentIntent whose amount is below its currency's minimum is refused
 * with 400 amount_too_small, param amount, "Amount must be at least $0.50 usd".
 *
 * Stripe's table lists the minimum in each settlement currency; a charge in a currency that is not
 * in the table is held to the account's settlement currency's minimum after conversion. The
 * sandbox's account has no settlement currency and no exchange rates, so such a currency — CNY
 * among them — has no minimum here beyond 1 minor unit [unverified: what Stripe answers for it
 * depends on the account's country].
 */

/** In minor units: the documented table, as far as it could be confirmed (see the comment above). */
const MINIMUM_MINOR: Readonly<Record<string, number>> = {
  usd: 50,
  aed: 200,
  aud: 50,
  bgn: 100,
  brl: 50,
  cad: 50,
  chf: 50,
  czk: 1500,
  dkk: 250,
  eur: 50,
  gbp: 30,
  hkd: 400,
  huf: 17500,
  inr: 50,
  jpy: 50,
  mxn: 1000,
  myr: 200,
  nok: 300,
  nzd: 50,
  pln: 200,
  ron: 200,
  sek: 300,
  sgd: 50,
  thb: 1000,
};

/** Whole units already (Stripe's zero-decimal currencies among those above). */
const ZERO_DECIMAL = new Set(['jpy']);

/** How the refusal writes the minimum. Only the dollar form is confirmed; the other symbols are [unverified]. */
const SYMBOL: Readonly<Record<string, string>> = {
  usd: '$',
  aud: '$',
  cad: '$',
  nzd: '$',
  sgd: '$',
  hkd: '$',
  mxn: '$',
  eur: '€',
  gbp: '£',
  jpy: '¥',
  thb: '฿',
  inr: '₹',
};

/** The smallest amount Stripe charges in `currency` (lowercase), or undefined when the sandbox applies none. */
export function minimumCharge(currency: string): number | undefined {
  return MINIMUM_MINOR[currency];
}

/** Stripe's words for an amount below the minimum: "Amount must be at least $0.50 usd". */
export function amountTooSmallMessage(currency: string, minimum: number): string {
  const units = ZERO_DECIMAL.has(currency) ? String(minimum) : (minimum / 100).toFixed(2);
  const symbol = SYMBOL[currency];
  return symbol ? `Amount must be at least ${symbol}${units} ${currency}` : `Amount must be at least ${units} ${currency}`;
}
