/**
 * The gateways this deployment is configured for, read from the environment. Pointing an adapter at
 * the real gateway instead of the sandbox is configuration only: real credentials and the gateway's
 * URL in the same variables.
 */
import { createAlipayGateway } from './alipay';
import type { GatewayId, PaymentGateway, TestBuyer } from './gateway';

export type * from './gateway';

function readTestBuyers(json: string | undefined): Record<TestBuyer, string> | undefined {
  if (!json) return undefined;
  const parsed = JSON.parse(json) as Partial<Record<TestBuyer, string>>;
  if (!parsed.ok || !parsed.insufficient_funds || !parsed.account_restricted) {
    throw new Error('ALIPAY_TEST_BUYERS must name auth codes for ok, insufficient_funds and account_restricted');
  }
  return { ok: parsed.ok, insufficient_funds: parsed.insufficient_funds, account_restricted: parsed.account_restricted };
}

export function gatewaysFromEnv(env: NodeJS.ProcessEnv = process.env): Partial<Record<GatewayId, PaymentGateway>> {
  const gateways: Partial<Record<GatewayId, PaymentGateway>> = {};
  if (env.ALIPAY_APP_ID && env.ALIPAY_APP_PRIVATE_KEY && env.ALIPAY_PUBLIC_KEY && env.ALIPAY_GATEWAY_URL) {
    gateways.alipay = createAlipayGateway({
      appId: env.ALIPAY_APP_ID,
      appPrivateKey: env.ALIPAY_APP_PRIVATE_KEY,
      alipayPublicKey: env.ALIPAY_PUBLIC_KEY,
      gatewayUrl: env.ALIPAY_GATEWAY_URL,
      // Only the sandbox has test buyers; against the real gateway the buyer's own code is used.
      testBuyerAuthCodes: readTestBuyers(env.ALIPAY_TEST_BUYERS) ?? {
        ok: '',
        insufficient_funds: '',
        account_restricted: '',
      },
    });
  }
  return gateways;
}
