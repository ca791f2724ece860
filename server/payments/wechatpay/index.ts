/**
 * The WeChat Pay adapter (API v3 Native payment): its factory and configuration. How it is built is
 * ./gateway; what WeChat's answers mean is ./classify.
 */
export { createWechatPayGateway } from './gateway';
export type { WechatPayGatewayConfig } from './config';
