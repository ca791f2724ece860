/**
 * The 2C2P adapter: its factory and configuration. Everything else in this folder is the adapter's
 * own (no 2C2P wire type leaves it).
 */
export { createTwoC2pGateway, type TwoC2pGatewayConfig } from './gateway';
