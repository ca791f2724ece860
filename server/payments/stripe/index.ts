/**
 * The Stripe adapter's public face: the factory and its configuration. Everything else in this
 * folder is the adapter's own (./gateway holds the factory, ./classify what Stripe's answers mean).
 */
export { createStripeGateway } from './gateway';
export type { CardStepConfig, StripeGatewayConfig } from './config';
