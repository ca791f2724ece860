/**
 * The Alipay adapter (./gateway): its factory and configuration, as the rest of the app imports them
 * from `payments/alipay`.
 */
export { createAlipayGateway, type AlipayGatewayConfig } from './gateway';
