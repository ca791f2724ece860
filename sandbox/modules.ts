/** The gateways the sandbox emulates, each on its own real paths on the sandbox's one port. */
import { alipayModule } from './alipay';
import type { SandboxGatewayModule } from './gateway-module';
import { stripeModule } from './stripe';
import { twoC2pModule } from './twoc2p';
import { wechatpayModule } from './wechatpay';

export const ALL_GATEWAY_MODULES: readonly SandboxGatewayModule[] = [alipayModule, wechatpayModule, stripeModule, twoC2pModule];
