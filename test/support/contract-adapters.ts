/**
 * Each gateway's adapter built from the PSP sandbox's credentials, as its adapter test builds it, and
 * optionally aimed at another address, with a shorter timeout or without an SDK's own retries: what
 * the gateway contract needs to put a misbehaving server (or nothing at all) where the gateway was.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createAlipayGateway, type AlipayGatewayConfig } from '@/server/payments/alipay';
import type { PaymentGateway, TestBuyer } from '@/server/payments/gateway';
import { createStripeGateway, type StripeGatewayConfig } from '@/server/payments/stripe';
import { createTwoC2pGateway, type TwoC2pGatewayConfig } from '@/server/payments/twoc2p';
import { createWechatPayGateway, type WechatPayGatewayConfig } from '@/server/payments/wechatpay';

/** GET /sandbox/credentials: each gateway's console, as the sandbox hands it out. */
export interface SandboxCredentials {
  alipay: { appId: string; appPrivateKey: string; alipayPublicKey: string; gateway: string; testBuyers: Record<TestBuyer, string> };
  wechatpay: Omit<WechatPayGatewayConfig, 'timeoutMs' | 'pollWindowMs'>;
  stripe: Omit<StripeGatewayConfig, 'timeoutMs' | 'maxNetworkRetries' | 'cardStep'>;
  '2c2p': Omit<TwoC2pGatewayConfig, 'timeoutMs'>;
}

export async function readSandboxCredentials(sandboxUrl: string): Promise<SandboxCredentials> {
  return (await (await fetch(`${sandboxUrl}/sandbox/credentials`)).json()) as SandboxCredentials;
}

/** How an adapter reaches its gateway when not exactly as configured. */
export interface Reach {
  /** http://host:port standing in for the gateway: the same paths, another server. */
  origin?: string;
  timeoutMs?: number;
  /** Without the SDK's own retries (stripe-node's maxNetworkRetries; the other clients have none to turn off). */
  noRetries?: boolean;
}

/** `url` with its origin replaced by `origin`, path kept. */
function at(url: string, origin: string | undefined): string {
  return origin ? `${origin}${new URL(url).pathname}` : url;
}

const timeout = (reach: Reach) => (reach.timeoutMs ? { timeoutMs: reach.timeoutMs } : {});

export function alipayAdapter(c: SandboxCredentials, reach: Reach = {}, config: Partial<AlipayGatewayConfig> = {}): PaymentGateway {
  const { appId, appPrivateKey, alipayPublicKey, gateway, testBuyers } = c.alipay;
  const gatewayUrl = at(gateway, reach.origin);
  return createAlipayGateway({
    appId,
    appPrivateKey,
    alipayPublicKey,
    gatewayUrl,
    testBuyerAuthCodes: testBuyers,
    ...timeout(reach),
    ...config,
  });
}

export function wechatpayAdapter(c: SandboxCredentials, reach: Reach = {}, config: Partial<WechatPayGatewayConfig> = {}): PaymentGateway {
  return createWechatPayGateway({ ...c.wechatpay, baseUrl: at(c.wechatpay.baseUrl, reach.origin), ...timeout(reach), ...config });
}

export function stripeAdapter(c: SandboxCredentials, reach: Reach = {}, config: Partial<StripeGatewayConfig> = {}): PaymentGateway {
  const address = reach.origin ? { host: new URL(reach.origin).hostname, port: Number(new URL(reach.origin).port) } : {};
  const retries = reach.noRetries ? { maxNetworkRetries: 0 } : {};
  return createStripeGateway({ ...c.stripe, ...address, ...timeout(reach), ...retries, ...config });
}

export function twoc2pAdapter(c: SandboxCredentials, reach: Reach = {}, config: Partial<TwoC2pGatewayConfig> = {}): PaymentGateway {
  const { baseUrl, maintenanceUrl } = c['2c2p'];
  return createTwoC2pGateway({
    ...c['2c2p'],
    baseUrl: at(baseUrl, reach.origin),
    maintenanceUrl: at(maintenanceUrl, reach.origin),
    ...timeout(reach),
    ...config,
  });
}

/** A fresh RSA key nobody registered with any gateway, as PEM. */
export function strangerKey(kind: 'private' | 'public'): string {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return kind === 'private'
    ? privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()
    : publicKey.export({ type: 'spki', format: 'pem' }).toString();
}
