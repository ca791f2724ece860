/**
 * The PSP sandbox's developer console (GET /sandbox/credentials) as environment variables — what a
 * developer would copy from each gateway's console into the app's configuration. `npm run dev`, the
 * browser tests and the integration tests all configure the app through this, so the sandbox and a
 * real deployment differ only in the values.
 */
type Credentials = Record<string, Record<string, unknown> | undefined>;

const str = (value: unknown) => (typeof value === 'string' ? value : value === undefined ? undefined : String(value));

export function sandboxCredentialsToEnv(credentials: Credentials): Record<string, string> {
  const env: Record<string, string | undefined> = {};
  const alipay = credentials.alipay;
  if (alipay) {
    env.ALIPAY_APP_ID = str(alipay.appId);
    env.ALIPAY_APP_PRIVATE_KEY = str(alipay.appPrivateKey);
    env.ALIPAY_PUBLIC_KEY = str(alipay.alipayPublicKey);
    env.ALIPAY_GATEWAY_URL = str(alipay.gateway);
    env.ALIPAY_TEST_BUYERS = JSON.stringify(alipay.testBuyers);
    env.ALIPAY_FEE = str(alipay.feeContract);
  }
  const wechatpay = credentials.wechatpay;
  if (wechatpay) {
    env.WECHATPAY_MCHID = str(wechatpay.mchid);
    env.WECHATPAY_APPID = str(wechatpay.appid);
    env.WECHATPAY_MERCHANT_SERIAL_NO = str(wechatpay.merchantSerialNo);
    env.WECHATPAY_MERCHANT_PRIVATE_KEY = str(wechatpay.merchantPrivateKey);
    env.WECHATPAY_API_V3_KEY = str(wechatpay.apiV3Key);
    env.WECHATPAY_PLATFORM_PUBLIC_KEY = str(wechatpay.platformPublicKey);
    env.WECHATPAY_PLATFORM_SERIAL_NO = str(wechatpay.platformSerialNo);
    env.WECHATPAY_BASE_URL = str(wechatpay.baseUrl);
    env.WECHATPAY_TEST_BUYERS = JSON.stringify(wechatpay.testBuyers);
    env.WECHATPAY_FEE = str(wechatpay.feeContract);
  }
  const stripe = credentials.stripe;
  if (stripe) {
    env.STRIPE_SECRET_KEY = str(stripe.secretKey);
    env.STRIPE_WEBHOOK_SECRET = str(stripe.webhookSecret);
    env.STRIPE_ACCOUNT_ID = str(stripe.accountId);
    env.STRIPE_API_BASE = `${str(stripe.protocol) ?? 'http'}://${str(stripe.host)}:${str(stripe.port)}`;
    env.STRIPE_TEST_BUYERS = JSON.stringify(stripe.testBuyers);
    env.STRIPE_FEE = str(stripe.feeContract);
    env.STRIPE_PUBLISHABLE_KEY = str(stripe.publishableKey);
    env.STRIPE_JS_URL = str(stripe.jsUrl);
  }
  const twoC2p = credentials['2c2p'];
  if (twoC2p) {
    env.TWOC2P_MERCHANT_ID = str(twoC2p.merchantId);
    env.TWOC2P_SECRET_KEY = str(twoC2p.secretKey);
    env.TWOC2P_BASE_URL = str(twoC2p.baseUrl);
    env.TWOC2P_MAINTENANCE_URL = str(twoC2p.maintenanceUrl);
    const base = str(twoC2p.baseUrl);
    if (base) env.TWOC2P_SETTLEMENT_REPORT_URL = new URL('/sandbox/2c2p/settlement-report', base).toString();
    env.TWOC2P_MERCHANT_PRIVATE_KEY = str(twoC2p.merchantPrivateKey);
    env.TWOC2P_PUBLIC_KEY = str(twoC2p.twoc2pPublicKey);
    env.TWOC2P_TEST_BUYERS = JSON.stringify(twoC2p.testBuyers);
    env.TWOC2P_FEE = str(twoC2p.feeContract);
  }
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) if (value !== undefined) out[name] = value;
  return out;
}
