/**
 * One call to 2C2P's Payment Maintenance API (refund and refund status) and what came back.
 *
 * The request is XML `<PaymentProcessRequest>`, encrypted as a compact JWE for 2C2P's public key
 * (RSA-OAEP, A256GCM), and that JWE string signed as a compact JWS with the merchant's private key
 * (PS256): 2C2P's documented sample decodes to exactly this nesting. It is POSTed as text/plain to
 * the maintenance URL (…/PaymentAction/2.0/action). An answer comes back the same way the other way
 * round: verified with 2C2P's public key, then decrypted with the merchant's private key. Only such an
 * answer is "sealed"; anything else (plain XML, HTML) is read as unauthenticated. What an answer means
 * is ./classify-refund's business. docs/gateways.md tells what 2C2P documents and what is [unverified].
 */
import type { KeyObject } from 'node:crypto';
import { CompactEncrypt, CompactSign, compactDecrypt, compactVerify, errors as joseErrors } from 'jose';
import { exchangeHttp, type TransportFailure } from '@/server/payments/transport';
import { parseXml, xmlDocument, type XmlAnswer } from './xml';

/** Where and how the adapter reaches the Payment Maintenance API, and as whom. */
export interface MaintenanceConnection {
  /** The whole URL, e.g. https://t.2c2p.com/PaymentAction/2.0/action. */
  maintenanceUrl: string;
  merchantId: string;
  /** Signs requests and decrypts answers; its public half is registered in 2C2P's merchant portal. */
  merchantPrivateKey: KeyObject;
  /** 2C2P's public key from the merchant portal: encrypts requests, verifies answers. */
  twoc2pPublicKey: KeyObject;
  timeoutMs: number;
}

/** What came back: a sealed (verified, decrypted) answer, an unauthenticated one, or none. */
export type MaintenanceExchange = { kind: 'sealed'; answer: XmlAnswer } | { kind: 'plain'; answer: XmlAnswer } | TransportFailure;

/** The version of 2C2P's documented refund and refund status samples. */
const VERSION = '3.8';

export async function sealRequest(
  connection: MaintenanceConnection,
  fields: readonly (readonly [string, string | undefined])[],
): Promise<string> {
  const xml = xmlDocument('PaymentProcessRequest', [['version', VERSION], ['merchantID', connection.merchantId], ...fields]);
  const jwe = await new CompactEncrypt(new TextEncoder().encode(xml))
    .setProtectedHeader({ alg: 'RSA-OAEP', enc: 'A256GCM' })
    .encrypt(connection.twoc2pPublicKey);
  return new CompactSign(new TextEncoder().encode(jwe))
    .setProtectedHeader({ alg: 'PS256', typ: 'JWT' })
    .sign(connection.merchantPrivateKey);
}

/** The XML inside a sealed answer; null when it does not verify or decrypt (it may be anyone's). */
export async function openAnswer(connection: MaintenanceConnection, text: string): Promise<string | null> {
  try {
    const { payload } = await compactVerify(text.trim(), connection.twoc2pPublicKey, { algorithms: ['PS256'] });
    const { plaintext } = await compactDecrypt(new TextDecoder().decode(payload), connection.merchantPrivateKey, {
      keyManagementAlgorithms: ['RSA-OAEP'],
      contentEncryptionAlgorithms: ['A256GCM'],
    });
    return new TextDecoder().decode(plaintext);
  } catch (err) {
    if (err instanceof joseErrors.JOSEError || err instanceof TypeError) return null;
    throw err;
  }
}

export async function postMaintenance(
  connection: MaintenanceConnection,
  fields: readonly (readonly [string, string | undefined])[],
): Promise<MaintenanceExchange> {
  const response = await exchangeHttp(
    connection.maintenanceUrl,
    {
      method: 'POST',
      headers: { 'content-type': 'text/plain', accept: 'text/plain' },
      body: await sealRequest(connection, fields),
      redirect: 'error',
    },
    connection.timeoutMs,
  );
  if (response.kind !== 'received') return response;
  return readMaintenanceAnswer(response.status, response.text, (text) => openAnswer(connection, text));
}

/**
 * One HTTP answer of the Maintenance API. 2C2P answers what it processed with HTTP 200; any other status
 * came from something in front of it before processing. A body that is XML was not sealed: it is read,
 * but as nobody's word. A JWS that does not verify and decrypt is never acted on.
 */
export async function readMaintenanceAnswer(
  status: number,
  text: string,
  open: (text: string) => Promise<string | null>,
): Promise<MaintenanceExchange> {
  if (status !== 200) return { kind: 'not_sent', code: `HTTP_${status}`, message: `HTTP ${status} from the maintenance API` };
  const trimmed = text.trim();
  if (trimmed.startsWith('<')) {
    const plain = parseXml(trimmed);
    return plain?.name === 'PaymentProcessResponse'
      ? { kind: 'plain', answer: plain }
      : { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: 'the maintenance API answered something that is not its XML' };
  }
  const xml = await open(trimmed);
  if (xml === null) {
    return {
      kind: 'in_doubt',
      code: 'INVALID_RESPONSE_SIGNATURE',
      message: 'maintenance answer did not verify with 2C2P’s key or decrypt with ours',
    };
  }
  const sealed = parseXml(xml);
  if (sealed?.name !== 'PaymentProcessResponse') {
    return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: 'the sealed maintenance answer is not a PaymentProcessResponse' };
  }
  return { kind: 'sealed', answer: sealed };
}
