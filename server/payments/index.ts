/**
 * The gateways this deployment is configured for, read from the environment. Pointing an adapter at
 * the real gateway instead of the sandbox is configuration only: real credentials and the gateway's
 * URL in the same variables. A gateway whose variables are absent is simply not offered.
 */
import { createAlipayGateway } from './alipay';
import type { GatewayId, PaymentGateway, TestBuyer } from './gateway';
import { createStripeGateway } from './stripe';
import { createTwoC2pGateway } from './twoc2p';
import { createWechatPayGateway } from './wechatpay';

export type * from './gateway';

type Env = Record<string, string | undefined>;

/** Only the sandbox has test buyers; against a real gateway the buyer pays on the gateway's own page. */
const NO_TEST_BUYERS: Record<TestBuyer, string> = { ok: '', insufficient_funds: '', account_restricted: '' };

function testBuyers(env: Env, name: string): Record<TestBuyer, string> {
  const json = env[name];
  if (!json) return NO_TEST_BUYERS;
  const parsed = JSON.parse(json) as Partial<Record<TestBuyer, string>>;
  if (parsed.ok === undefined || parsed.insufficient_funds === undefined || parsed.account_restricted === undefined) {
    throw new Error(`${name} must name ok, insufficient_funds and account_restricted`);
  }
  return { ok: parsed.ok, insufficient_funds: parsed.insufficient_funds, account_restricted: parsed.account_restricted };
}

/** The variables of one gateway, all present, or undefined when any is missing. */
function read<K extends string>(env: Env, names: Record<K, string>): Record<K, string> | undefined {
  const out = {} as Record<K, string>;
  for (const [field, variable] of Object.entries(names) as [K, string][]) {
    const value = env[variable];
    if (!value) return undefined;
    out[field] = value;
  }
  return out;
}

export function gatewaysFromEnv(env: Env = process.env): Partial<Record<GatewayId, PaymentGateway>> {
  const gateways: Partial<Record<GatewayId, PaymentGateway>> = {};
  // One knob for every adapter's per-request timeout (default 5 s each); it must stay well inside
  // the idempotency lease (IDEMPOTENCY_LEASE_MS), or a slow call could outlive its own lease.
  const timeout = Number(env.GATEWAY_TIMEOUT_MS);
  const timeoutMs = Number.isFinite(timeout) && timeout > 0 ? { timeoutMs: timeout } : {};

  const alipay = read(env, {
    appId: 'ALIPAY_APP_ID',
    appPrivateKey: 'ALIPAY_APP_PRIVATE_KEY',
    alipayPublicKey: 'ALIPAY_PUBLIC_KEY',
    gatewayUrl: 'ALIPAY_GATEWAY_URL',
  });
  if (alipay) {
    gateways.alipay = createAlipayGateway({ ...alipay, ...timeoutMs, testBuyerAuthCodes: testBuyers(env, 'ALIPAY_TEST_BUYERS') });
  }

  const wechatpay = read(env, {
    mchid: 'WECHATPAY_MCHID',
    appid: 'WECHATPAY_APPID',
    merchantSerialNo: 'WECHATPAY_MERCHANT_SERIAL_NO',
    merchantPrivateKey: 'WECHATPAY_MERCHANT_PRIVATE_KEY',
    apiV3Key: 'WECHATPAY_API_V3_KEY',
    platformPublicKey: 'WECHATPAY_PLATFORM_PUBLIC_KEY',
    platformSerialNo: 'WECHATPAY_PLATFORM_SERIAL_NO',
    baseUrl: 'WECHATPAY_BASE_URL',
  });
  if (wechatpay) {
    gateways.wechatpay = createWechatPayGateway({ ...wechatpay, ...timeoutMs, testBuyers: testBuyers(env, 'WECHATPAY_TEST_BUYERS') });
  }

  const stripe = read(env, {
    secretKey: 'STRIPE_SECRET_KEY',
    webhookSecret: 'STRIPE_WEBHOOK_SECRET',
    accountId: 'STRIPE_ACCOUNT_ID',
  });
  if (stripe) {
    // STRIPE_API_BASE points the official SDK elsewhere (the sandbox); unset, it talks to Stripe.
    const base = env.STRIPE_API_BASE ? new URL(env.STRIPE_API_BASE) : undefined;
    gateways.stripe = createStripeGateway({
      ...stripe,
      ...timeoutMs,
      ...(base
        ? { host: base.hostname, port: base.port || undefined, protocol: base.protocol === 'http:' ? 'http' : 'https' }
        : {}),
      testBuyers: testBuyers(env, 'STRIPE_TEST_BUYERS'),
    });
  }

  const twoC2p = read(env, {
    merchantId: 'TWOC2P_MERCHANT_ID',
    secretKey: 'TWOC2P_SECRET_KEY',
    baseUrl: 'TWOC2P_BASE_URL',
  });
  if (twoC2p) {
    gateways['2c2p'] = createTwoC2pGateway({ ...twoC2p, ...timeoutMs, testBuyers: testBuyers(env, 'TWOC2P_TEST_BUYERS') });
  }

  return gateways;
}
