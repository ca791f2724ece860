/**
 * The configuration a WeChat Pay adapter is built from: the merchant's identity, its keys, WeChat's
 * key for verifying answers and notifications, and where the API is.
 */
import type { TestBuyer } from '@/server/payments/gateway';

export interface WechatPayGatewayConfig {
  /** 商户号. */
  mchid: string;
  /** The AppID bound to the mchid (公众号 / 小程序 / 移动应用). */
  appid: string;
  /** Serial number of the merchant API certificate whose key signs our requests. */
  merchantSerialNo: string;
  /** apiclient_key.pem: PEM (PKCS#8 or PKCS#1) or bare base64 DER. */
  merchantPrivateKey: string;
  /** The APIv3 key (32 characters) that notification resources are encrypted with. */
  apiV3Key: string;
  /** WeChat Pay's public key (pub_key.pem, SPKI PEM or bare base64) verifying answers and notifications. */
  platformPublicKey: string;
  /** Its id as WeChat sends it in Wechatpay-Serial (PUB_KEY_ID_… or the platform certificate serial). */
  platformSerialNo: string;
  /** The API root, https://api.mch.weixin.qq.com or the sandbox's; /v3/… is appended. */
  baseUrl: string;
  /**
   * The `attach` each sandbox test buyer is selected by (`sandbox_buyer=…`). Against the real gateway
   * use empty strings: no attach is sent and the real buyer pays by scanning.
   */
  testBuyers: Record<TestBuyer, string>;
  /** Per-request timeout; default 5000 ms. */
  timeoutMs?: number;
  /** How long charge() keeps querying an order nobody has paid yet; default 2000 ms. */
  pollWindowMs?: number;
}
