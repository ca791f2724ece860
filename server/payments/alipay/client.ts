/**
 * The adapter's one alipay-sdk client: a signed call whose answer's signature is verified (exec), the
 * signed URL of the cashier page (pageExecute), a notification's signature (checkNotifySignV2), and
 * what an SDK failure means for the money. No SDK type leaves this file.
 */
import { AlipayRequestError, AlipaySdk } from 'alipay-sdk';
import { connectionFailure, DEFAULT_GATEWAY_TIMEOUT_MS, type TransportFailure } from '@/server/payments/transport';
import type { Fields, NotificationForm } from './classify';
import { canonicalKeys, type AlipayKeyTexts } from './keys';

/** The OpenAPI methods the adapter calls (alipay.trade.page.pay is a page: see pagePayUrl). */
export type AlipayMethod =
  | 'alipay.trade.pay'
  | 'alipay.trade.precreate'
  | 'alipay.trade.query'
  | 'alipay.trade.close'
  | 'alipay.trade.cancel'
  | 'alipay.trade.refund'
  | 'alipay.trade.fastpay.refund.query'
  | 'alipay.data.dataservice.bill.downloadurl.query';

/** What came back from one call: a signed answer, or why there is none. */
export type Exchange = { kind: 'answered'; response: Fields } | TransportFailure;

export interface AlipayClientSettings extends AlipayKeyTexts {
  appId: string;
  gatewayUrl: string;
  timeoutMs?: number;
}

export interface AlipayClient {
  call(method: AlipayMethod, params: { bizContent: Fields; notifyUrl?: string }): Promise<Exchange>;
  /** The signed GET URL of alipay.trade.page.pay; throws what the SDK throws. */
  pagePayUrl(params: { bizContent: Fields; notifyUrl: string; returnUrl: string }): string;
  /** Whether the form's RSA2 signature is Alipay's (over the raw values, not URI-decoded). */
  notificationSigned(fields: NotificationForm): boolean;
}

/** Throws when a key is not an RSA key (see ./keys). */
export function createAlipayClient(settings: AlipayClientSettings): AlipayClient {
  const keys = canonicalKeys(settings);
  const sdk = new AlipaySdk({
    appId: settings.appId,
    privateKey: keys.privateKeyPem,
    keyType: 'PKCS8',
    alipayPublicKey: keys.publicKeyPem,
    gateway: settings.gatewayUrl,
    signType: 'RSA2',
    timeout: settings.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS,
    // Keep Alipay's own snake_case names: they are what the documentation and the sandbox use.
    camelcase: false,
  });
  return {
    call: (method, params) => call(sdk, method, params),
    pagePayUrl: (params) => sdk.pageExecute('alipay.trade.page.pay', 'GET', params),
    notificationSigned(fields) {
      try {
        // checkNotifySignV2 verifies the raw form values; checkNotifySign (V1) URI-decodes them
        // first and throws on a literal `%`.
        return sdk.checkNotifySignV2(fields);
      } catch {
        return false;
      }
    },
  };
}

async function call(sdk: AlipaySdk, method: AlipayMethod, params: { bizContent: Fields; notifyUrl?: string }): Promise<Exchange> {
  try {
    const response: unknown = await sdk.exec(method, params, { validateSign: true });
    if (typeof response !== 'object' || response === null) {
      return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: 'empty response' };
    }
    return { kind: 'answered', response: response as Fields };
  } catch (err) {
    return sdkFailure(err);
  }
}

/**
 * What a throw from exec() means. The SDK returns business errors as values and throws
 * AlipayRequestError for transport problems, non-200 statuses, unparsable bodies and bad response
 * signatures, with no structured kind: it is read by its `cause` and, for the rest, by its message
 * (pinned by the adapter tests, so an SDK upgrade that rewords it fails loudly).
 */
export function sdkFailure(err: unknown): TransportFailure {
  if (!(err instanceof AlipayRequestError)) {
    // Not a transport error the SDK recognised: it could have happened after sending.
    return { kind: 'in_doubt', code: 'SDK_ERROR', message: err instanceof Error ? err.message : String(err) };
  }
  const cause: unknown = err.cause;
  if (cause !== undefined) {
    // A transport error; its cause is urllib's/undici's error. Timeouts, resets, "other side
    // closed": the gateway may have processed the request.
    return connectionFailure(cause, err.message, (cause as Error).name);
  }
  // "HTTP 请求错误, status: 502": Alipay answers every request it processed with HTTP 200, so any
  // other status came from in front of it (a proxy, an overloaded gateway) before processing.
  const status = /status: (\d{3})/.exec(err.message)?.[1];
  if (status) return { kind: 'not_sent', code: `HTTP_${status}`, message: err.message };
  // "验签失败…": the answer is not provably Alipay's, so its content cannot be trusted either way.
  if (err.message.startsWith('验签失败')) {
    return { kind: 'in_doubt', code: 'INVALID_RESPONSE_SIGNATURE', message: 'response signature did not verify' };
  }
  // "Response 格式错误…" and anything else: a reply arrived but cannot be read.
  return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: err.message };
}
