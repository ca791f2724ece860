/**
 * The sandbox's Stripe test cards: the documented test PaymentMethods (`pm_card_visa`, …) and the
 * card numbers behind them (https://docs.stripe.com/testing), with the outcome each one produces.
 *
 * The 3-D Secure cards ask for authentication before they are charged: a confirm leaves the
 * PaymentIntent in `requires_action`, and the buyer completes, fails or abandons the challenge
 * (stripe-authentication.ts). Some are declined after a successful authentication, as Stripe's are.
 */

export interface CardDecline {
  /** error.code: `card_declined` for most declines, the specific code for the others. */
  code: string;
  /** error.decline_code: the issuer's reason. */
  declineCode: string;
  message: string;
}

export interface TestCard {
  number: string;
  brand: 'visa' | 'mastercard' | 'amex';
  funding: 'credit' | 'debit';
  country: string;
  /** null: the charge succeeds (after authentication, for a card that asks for it). */
  decline: CardDecline | null;
  /** 'required': 3-D Secure on every payment (Stripe's "authentication required" test cards). */
  authentication?: 'required';
}

const DECLINED = 'Your card was declined.';

const CARDS: readonly TestCard[] = [
  { number: '4242424242424242', brand: 'visa', funding: 'credit', country: 'US', decline: null },
  { number: '4000056655665556', brand: 'visa', funding: 'debit', country: 'US', decline: null },
  { number: '5555555555554444', brand: 'mastercard', funding: 'credit', country: 'US', decline: null },
  { number: '378282246310005', brand: 'amex', funding: 'credit', country: 'US', decline: null },
  {
    number: '4000000000000002',
    brand: 'visa',
    funding: 'credit',
    country: 'US',
    decline: { code: 'card_declined', declineCode: 'generic_decline', message: DECLINED },
  },
  {
    number: '4000000000009995',
    brand: 'visa',
    funding: 'credit',
    country: 'US',
    decline: { code: 'card_declined', declineCode: 'insufficient_funds', message: 'Your card has insufficient funds.' },
  },
  {
    number: '4000000000009987',
    brand: 'visa',
    funding: 'credit',
    country: 'US',
    decline: { code: 'card_declined', declineCode: 'lost_card', message: DECLINED },
  },
  {
    number: '4000000000009979',
    brand: 'visa',
    funding: 'credit',
    country: 'US',
    decline: { code: 'card_declined', declineCode: 'stolen_card', message: DECLINED },
  },
  {
    number: '4100000000000019',
    brand: 'visa',
    funding: 'credit',
    country: 'US',
    decline: { code: 'card_declined', declineCode: 'fraudulent', message: DECLINED },
  },
  {
    number: '4000000000000069',
    brand: 'visa',
    funding: 'credit',
    country: 'US',
    decline: { code: 'expired_card', declineCode: 'expired_card', message: 'Your card has expired.' },
  },
  {
    number: '4000000000000127',
    brand: 'visa',
    funding: 'credit',
    country: 'US',
    decline: { code: 'incorrect_cvc', declineCode: 'incorrect_cvc', message: "Your card's security code is incorrect." },
  },
  {
    number: '4000000000000119',
    brand: 'visa',
    funding: 'credit',
    country: 'US',
    decline: {
      code: 'processing_error',
      declineCode: 'processing_error',
      message: 'An error occurred while processing your card. Try again in a little bit.',
    },
  },
  // 3-D Secure (https://docs.stripe.com/testing#regulatory-cards): authentication on every payment.
  { number: '4000002760003184', brand: 'visa', funding: 'credit', country: 'DE', decline: null, authentication: 'required' },
  { number: '4000002500003155', brand: 'visa', funding: 'credit', country: 'IE', decline: null, authentication: 'required' },
  { number: '4000000000003220', brand: 'visa', funding: 'credit', country: 'US', decline: null, authentication: 'required' },
  { number: '4000000000003063', brand: 'visa', funding: 'credit', country: 'US', decline: null, authentication: 'required' },
  {
    number: '4000008400001629',
    brand: 'visa',
    funding: 'credit',
    country: 'US',
    decline: { code: 'card_declined', declineCode: 'generic_decline', message: DECLINED },
    authentication: 'required',
  },
  {
    number: '4000008260003178',
    brand: 'visa',
    funding: 'credit',
    country: 'GB',
    decline: { code: 'card_declined', declineCode: 'insufficient_funds', message: 'Your card has insufficient funds.' },
    authentication: 'required',
  },
];

/** Stripe's documented test PaymentMethod ids, each standing for one test card. */
const PAYMENT_METHOD_ALIASES: Readonly<Record<string, string>> = {
  pm_card_visa: '4242424242424242',
  pm_card_visa_debit: '4000056655665556',
  pm_card_mastercard: '5555555555554444',
  pm_card_amex: '378282246310005',
  pm_card_chargeDeclined: '4000000000000002',
  pm_card_chargeDeclinedInsufficientFunds: '4000000000009995',
  pm_card_chargeDeclinedLostCard: '4000000000009987',
  pm_card_chargeDeclinedStolenCard: '4000000000009979',
  pm_card_chargeDeclinedFraudulent: '4100000000000019',
  pm_card_chargeDeclinedExpiredCard: '4000000000000069',
  pm_card_chargeDeclinedIncorrectCvc: '4000000000000127',
  pm_card_chargeDeclinedProcessingError: '4000000000000119',
  pm_card_authenticationRequired: '4000002760003184',
  // For a one-off payment 3155 asks like 3184; it differs only for cards saved for later, which the
  // sandbox does not emulate.
  pm_card_authenticationRequiredOnSetup: '4000002500003155',
  pm_card_threeDSecure2Required: '4000000000003220',
  pm_card_threeDSecureRequired: '4000000000003063',
  pm_card_threeDSecureRequiredChargeDeclined: '4000008400001629',
  pm_card_authenticationRequiredChargeDeclinedInsufficientFunds: '4000008260003178',
};

const BY_NUMBER = new Map(CARDS.map((card) => [card.number, card]));

export function cardByNumber(number: string): TestCard | undefined {
  return BY_NUMBER.get(number.replace(/[\s-]/g, ''));
}

export function cardByPaymentMethodId(id: string): TestCard | undefined {
  const number = Object.hasOwn(PAYMENT_METHOD_ALIASES, id) ? PAYMENT_METHOD_ALIASES[id] : undefined;
  return number === undefined ? undefined : BY_NUMBER.get(number);
}

/** What the adapter sends for each of PayOnce's test buyers. */
export function stripeTestBuyers(): { ok: string; insufficient_funds: string; account_restricted: string } {
  return {
    ok: 'pm_card_visa',
    insufficient_funds: 'pm_card_chargeDeclinedInsufficientFunds',
    // Stripe documents no "restricted account" card. The nearest documented decline is a card its issuer
    // has blocked: 4000000000009987, decline_code lost_card (shown to the shopper as a plain decline,
    // as Stripe advises for lost and stolen cards).
    account_restricted: 'pm_card_chargeDeclinedLostCard',
  };
}
