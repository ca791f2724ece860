/**
 * What the Stripe adapter is configured with (StripeGatewayConfig), and what each of its operations
 * is handed: the SDK client (./call), that configuration and the buyer steps it offers.
 */
import type Stripe from 'stripe';
import type { BuyerStep, TestBuyer } from '@/server/payments/gateway';

export interface StripeGatewayConfig {
  /** sk_live_… / sk_test_… (or a restricted key allowed to create, read and search PaymentIntents). */
  secretKey: string;
  /** The webhook endpoint's signing secret, whsec_…. */
  webhookSecret: string;
  /** The account webhook events must belong to (acct_…): PaymentGateway.merchantId. */
  accountId: string;
  /** The API's address; defaults to Stripe's own (api.stripe.com:443, https). */
  host?: string;
  port?: number | string;
  protocol?: 'http' | 'https';
  /** The PaymentMethod each sandbox test buyer pays with (pm_card_visa, …). */
  testBuyers: Record<TestBuyer, string>;
  /** The page's card step (Stripe.js with the publishable key); absent, only test buyers can pay. */
  cardStep?: CardStepConfig;
  /**
   * `manual`: a PaymentIntent only holds the money when the buyer pays (requires_capture) and the
   * merchant captures it later — at shipment — or releases it. Default `automatic`: paid at once.
   */
  captureMethod?: 'automatic' | 'manual';
  /** Per try; the SDK tries 1 + maxNetworkRetries times. Default 5000 ms. */
  timeoutMs?: number;
  /** Default 2, the SDK's own (MAX_TRIES_PER_GATEWAY_CALL counts on it). */
  maxNetworkRetries?: number;
}

/** What the page needs to collect the buyer's card: Stripe.js and the account's publishable key. */
export interface CardStepConfig {
  publishableKey: string;
  scriptUrl: string;
}

/** One configured adapter, as each of its operations sees it. */
export interface StripeContext {
  stripe: Stripe;
  config: StripeGatewayConfig;
  /** The card step needs the page's Stripe.js and the publishable key; without them only test buyers pay. */
  buyerSteps: readonly BuyerStep[];
}
