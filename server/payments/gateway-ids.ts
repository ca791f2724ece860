/**
 * The gateways PayOnce speaks to, named once: their ids, the order the page offers them in, and how
 * the shopper knows them. The page and the server both import this file, so it imports nothing —
 * adding a gateway starts here, and every table keyed by GatewayId then fails to compile until it
 * covers the new one.
 */

/** In the order the checkout page offers them. */
export const GATEWAY_IDS = ['alipay', 'wechatpay', 'stripe', '2c2p'] as const;

export type GatewayId = (typeof GATEWAY_IDS)[number];

export function isGatewayId(value: unknown): value is GatewayId {
  return typeof value === 'string' && (GATEWAY_IDS as readonly string[]).includes(value);
}

/**
 * The gateway as the shopper knows it (支付宝, not `alipay`), in the page's two languages. Stripe and
 * 2C2P both take cards, so the card gateway carries its processor's name wherever the two could be
 * confused: emails, the 幕后 view, the fault switchboard.
 */
export const GATEWAY_NAMES: Readonly<Record<GatewayId, { readonly zh: string; readonly en: string }>> = {
  alipay: { zh: '支付宝', en: 'Alipay' },
  wechatpay: { zh: '微信支付', en: 'WeChat Pay' },
  stripe: { zh: '银行卡 (Stripe)', en: 'Card (Stripe)' },
  '2c2p': { zh: '2C2P', en: '2C2P' },
};
