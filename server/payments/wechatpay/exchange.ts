/**
 * One call to the API v3: the signed request, sent once under the timeout, and its answer believed
 * only when WeChat's signature over it verifies. What the answer means is ./classify.
 */
import { DEFAULT_GATEWAY_TIMEOUT_MS, exchangeHttp, stringField, type TransportFailure } from '@/server/payments/transport';
import type { WechatPayGatewayConfig } from './config';
import { authorization, checkPlatformSignature, loadKeys, type Keys } from './signing';
import { parseJson, type Json } from './wire';

const USER_AGENT = 'PayOnce/0.1 (+node-fetch; WeChat Pay API v3)';

/** What every call needs: the merchant, its keys, where the API is and how long to wait for it. */
export interface Client {
  config: WechatPayGatewayConfig;
  keys: Keys;
  baseUrl: string;
  timeoutMs: number;
}

export function createClient(config: WechatPayGatewayConfig): Client {
  return {
    config,
    keys: loadKeys(config),
    baseUrl: config.baseUrl.replace(/\/+$/, ''),
    timeoutMs: config.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS,
  };
}

/** 401, 429 or 5xx, signed or not: WeChat (or something before it) refused to process it. */
export type Refused = { kind: 'refused'; status: number; code: string; message: string };

/** What came back from one request: a provably WeChat answer, or why there is none. */
export type Exchange = { kind: 'answered'; status: number; body: Json | null } | Refused | TransportFailure;

/**
 * An exchange without an answer, in the terms of the shared failure helpers (../transport). A
 * refusal counts as never sent: WeChat did not process it ("请用相同参数重新调用"), and should a 5xx
 * hide a processed request, the same out_trade_no / out_refund_no sent again is deduplicated by WeChat.
 */
export function unanswered(exchange: Refused | TransportFailure): TransportFailure {
  return exchange.kind === 'refused' ? { kind: 'not_sent', code: exchange.code, message: exchange.message } : exchange;
}

export async function call(client: Client, method: 'GET' | 'POST', path: string, payload?: Json): Promise<Exchange> {
  const { config, keys } = client;
  const url = new URL(`${client.baseUrl}${path}`);
  const body = payload === undefined ? '' : JSON.stringify(payload);
  const headers = {
    authorization: authorization(
      { mchid: config.mchid, merchantSerialNo: config.merchantSerialNo, merchantPrivateKey: keys.merchantPrivateKey },
      method,
      url,
      body,
    ),
    accept: 'application/json',
    'user-agent': USER_AGENT,
    // Names the key we verify answers with. While a merchant switches from platform certificate to
    // WeChat Pay public key, WeChat signs an answer with the public key only when the request names
    // its PUB_KEY_ID_… here ("不指定则默认平台证书"); a certificate serial keeps the certificate.
    // Either way, the answer is signed by the key we hold.
    'wechatpay-serial': config.platformSerialNo,
    ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
  };
  const request = { method, headers, ...(payload === undefined ? {} : { body }), redirect: 'manual' as const };
  const response = await exchangeHttp(url, request, client.timeoutMs);
  if (response.kind !== 'received') return response;
  const { status, text } = response;
  const parsed = parseJson(text);
  if (status === 401 || status === 429 || status >= 500) {
    const code = stringField(parsed ?? null, 'code') ?? `HTTP_${status}`;
    return { kind: 'refused', status, code, message: stringField(parsed ?? null, 'message') ?? `HTTP ${status}` };
  }
  const problem = checkPlatformSignature(response.headers, text, config.platformSerialNo, keys.platformPublicKey, Date.now());
  if (problem) return { kind: 'in_doubt', code: 'INVALID_RESPONSE_SIGNATURE', message: `HTTP ${status}: ${problem}` };
  if (parsed === undefined) return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: `HTTP ${status}: body is not a JSON object` };
  return { kind: 'answered', status, body: parsed };
}

/**
 * A signed GET whose answer WeChat Pay does not sign (the bill file behind a tradebill
 * download_url): the text as sent, checked by the caller against the hash the signed answer gave.
 */
export async function download(
  client: Client,
  path: string,
): Promise<{ kind: 'received'; status: number; text: string } | TransportFailure> {
  const { config, keys } = client;
  const url = new URL(`${client.baseUrl}${path}`);
  const headers = {
    authorization: authorization(
      { mchid: config.mchid, merchantSerialNo: config.merchantSerialNo, merchantPrivateKey: keys.merchantPrivateKey },
      'GET',
      url,
      '',
    ),
    'user-agent': USER_AGENT,
  };
  const response = await exchangeHttp(url, { method: 'GET', headers, redirect: 'manual' }, client.timeoutMs);
  return response.kind === 'received' ? { kind: 'received', status: response.status, text: response.text } : response;
}
