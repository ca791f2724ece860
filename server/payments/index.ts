/**
 * The gateways this deployment is configured for, read from the environment. Pointing an adapter at
 * the real gateway instead of the sandbox is configuration only: real credentials and the gateway's
 * URL in the same variables (.env.example). A gateway whose variables are absent is simply not offered.
 */
import { envFrom, type RawEnv } from '@/server/config/env';
import { createAlipayGateway } from './alipay';
import type { FeeContract } from '@/server/config/fee-contract';
import type { GatewayId, PaymentGateway, TestBuyer } from './gateway';
import { createStripeGateway } from './stripe';
import { createTwoC2pGateway } from './twoc2p';
import { createWechatPayGateway } from './wechatpay';

export type * from './gateway';

/** Only the sandbox has test buyers; against a real gateway the buyer pays on the gateway's own page. */
const NO_TEST_BUYERS: Record<TestBuyer, string> = { ok: '', insufficient_funds: '', account_restricted: '' };

/**
 * The gateways configured in `env` (a script's or a test's own variables), or in this process's
 * environment. Every value is validated by server/config/env.ts: a gateway is here when all its credentials
 * are set, and half a gateway's credentials stop the start rather than switch it off silently.
 */
export function gatewaysFromEnv(env?: RawEnv): Partial<Record<GatewayId, PaymentGateway>> {
  const config = envFrom(env);
  const gateways: Partial<Record<GatewayId, PaymentGateway>> = {};
  // One knob for every adapter's per-request timeout; server/config/env.ts keeps it inside the idempotency
  // lease (IDEMPOTENCY_LEASE_MS), so a slow call cannot outlive its own lease.
  const timeoutMs = config.GATEWAY_TIMEOUT_MS;

  if (config.ALIPAY_APP_ID && config.ALIPAY_APP_PRIVATE_KEY && config.ALIPAY_PUBLIC_KEY && config.ALIPAY_GATEWAY_URL) {
    gateways.alipay = createAlipayGateway({
      appId: config.ALIPAY_APP_ID,
      appPrivateKey: config.ALIPAY_APP_PRIVATE_KEY,
      alipayPublicKey: config.ALIPAY_PUBLIC_KEY,
      gatewayUrl: config.ALIPAY_GATEWAY_URL,
      timeoutMs,
      testBuyerAuthCodes: config.ALIPAY_TEST_BUYERS ?? NO_TEST_BUYERS,
    });
  }

  if (
    config.WECHATPAY_MCHID &&
    config.WECHATPAY_APPID &&
    config.WECHATPAY_MERCHANT_SERIAL_NO &&
    config.WECHATPAY_MERCHANT_PRIVATE_KEY &&
    config.WECHATPAY_API_V3_KEY &&
    config.WECHATPAY_PLATFORM_PUBLIC_KEY &&
    config.WECHATPAY_PLATFORM_SERIAL_NO &&
    config.WECHATPAY_BASE_URL
  ) {
    gateways.wechatpay = createWechatPayGateway({
      mchid: config.WECHATPAY_MCHID,
      appid: config.WECHATPAY_APPID,
      merchantSerialNo: config.WECHATPAY_MERCHANT_SERIAL_NO,
      merchantPrivateKey: config.WECHATPAY_MERCHANT_PRIVATE_KEY,
      apiV3Key: config.WECHATPAY_API_V3_KEY,
      platformPublicKey: config.WECHATPAY_PLATFORM_PUBLIC_KEY,
      platformSerialNo: config.WECHATPAY_PLATFORM_SERIAL_NO,
      baseUrl: config.WECHATPAY_BASE_URL,
      timeoutMs,
      testBuyers: config.WECHATPAY_TEST_BUYERS ?? NO_TEST_BUYERS,
    });
  }

  if (config.STRIPE_SECRET_KEY && config.STRIPE_WEBHOOK_SECRET && config.STRIPE_ACCOUNT_ID) {
    // STRIPE_API_BASE points the official SDK elsewhere (the sandbox); unset, it talks to Stripe.
    const base = config.STRIPE_API_BASE ? new URL(config.STRIPE_API_BASE) : undefined;
    gateways.stripe = createStripeGateway({
      secretKey: config.STRIPE_SECRET_KEY,
      webhookSecret: config.STRIPE_WEBHOOK_SECRET,
      accountId: config.STRIPE_ACCOUNT_ID,
      timeoutMs,
      ...(base ? { host: base.hostname, port: base.port || undefined, protocol: base.protocol === 'http:' ? 'http' : 'https' } : {}),
      testBuyers: config.STRIPE_TEST_BUYERS ?? NO_TEST_BUYERS,
      captureMethod: config.STRIPE_CAPTURE_METHOD,
      ...(config.STRIPE_PUBLISHABLE_KEY
        ? { cardStep: { publishableKey: config.STRIPE_PUBLISHABLE_KEY, scriptUrl: config.STRIPE_JS_URL ?? 'https://js.stripe.com/v3/' } }
        : {}),
    });
  }

  if (
    config.TWOC2P_MERCHANT_ID &&
    config.TWOC2P_SECRET_KEY &&
    config.TWOC2P_BASE_URL &&
    config.TWOC2P_MAINTENANCE_URL &&
    config.TWOC2P_MERCHANT_PRIVATE_KEY &&
    config.TWOC2P_PUBLIC_KEY
  ) {
    gateways['2c2p'] = createTwoC2pGateway({
      merchantId: config.TWOC2P_MERCHANT_ID,
      secretKey: config.TWOC2P_SECRET_KEY,
      baseUrl: config.TWOC2P_BASE_URL,
      maintenanceUrl: config.TWOC2P_MAINTENANCE_URL,
      ...(config.TWOC2P_SETTLEMENT_REPORT_URL ? { settlementReportUrl: config.TWOC2P_SETTLEMENT_REPORT_URL } : {}),
      merchantPrivateKey: config.TWOC2P_MERCHANT_PRIVATE_KEY,
      twoc2pPublicKey: config.TWOC2P_PUBLIC_KEY,
      timeoutMs,
      testBuyers: config.TWOC2P_TEST_BUYERS ?? NO_TEST_BUYERS,
    });
  }

  return gateways;
}

/** The merchant's fee contract with each gateway that has one configured (ALIPAY_FEE, …): what 对账 checks fees against. */
export function feeContractsFromEnv(env?: RawEnv): Partial<Record<GatewayId, FeeContract>> {
  const config = envFrom(env);
  const contracts: Partial<Record<GatewayId, FeeContract | undefined>> = {
    alipay: config.ALIPAY_FEE,
    wechatpay: config.WECHATPAY_FEE,
    stripe: config.STRIPE_FEE,
    '2c2p': config.TWOC2P_FEE,
  };
  return Object.fromEntries(Object.entries(contracts).filter(([, contract]) => contract !== undefined));
}
