/**
 * One POST to 2C2P and what came back: a JWT verified with the merchant's secret, a plain JSON
 * answer, or the transport failure in their place (not sent, or in doubt). What an answer means is
 * ./classify's business.
 */
import { exchangeHttp, type TransportFailure } from '@/server/payments/transport';
import { signClaims, verifyJwt, type Claims } from './jwt';

/** Where and how the adapter reaches 2C2P. */
export interface Connection {
  /** The API base including the version, without a trailing slash. */
  baseUrl: string;
  /** The merchant's secret key as jose takes it. */
  key: Uint8Array;
  timeoutMs: number;
}

/** What came back from one POST: a verified JWT, a plain JSON answer, or why there is none. */
export type Exchange = { kind: 'signed'; claims: Claims } | { kind: 'plain'; body: Claims } | TransportFailure;

/** The same before the JWT is verified: its payload, still a claim of nobody's. */
export type Envelope = { kind: 'jwt'; token: string } | { kind: 'plain'; body: Claims } | TransportFailure;

export async function post(connection: Connection, api: string, body: string): Promise<Exchange> {
  const response = await exchangeHttp(
    `${connection.baseUrl}/${api}`,
    { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json' }, body, redirect: 'error' },
    connection.timeoutMs,
  );
  if (response.kind !== 'received') return response;
  const envelope = readEnvelope(api, response.status, response.text);
  if (envelope.kind !== 'jwt') return envelope;
  const claims = await verifyJwt(connection.key, envelope.token);
  return claims ? { kind: 'signed', claims } : unverifiedAnswer(api);
}

/** A request in PGW v4.3's JWT envelope, `{"payload":"<JWT>"}`. */
export async function postJwt(connection: Connection, api: string, claims: Claims): Promise<Exchange> {
  return post(connection, api, JSON.stringify({ payload: await signClaims(connection.key, claims) }));
}

/**
 * One HTTP answer from 2C2P, before its signature is checked. 2C2P answers every request it processed
 * with HTTP 200 (errors included, as respCode); any other status came from something in front of it
 * (a proxy, an overload, a wrong path) before processing.
 */
export function readEnvelope(api: string, status: number, text: string): Envelope {
  if (status !== 200) return { kind: 'not_sent', code: `HTTP_${status}`, message: `HTTP ${status} from ${api}` };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: `${api} answered non-JSON` };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { kind: 'in_doubt', code: 'MALFORMED_RESPONSE', message: `${api} answered a non-object` };
  }
  const payload = (parsed as Claims).payload;
  if (payload === undefined) return { kind: 'plain', body: parsed as Claims };
  if (typeof payload !== 'string') return unverifiedAnswer(api);
  return { kind: 'jwt', token: payload };
}

/** A JWT answer that did not verify: it may be anyone's, so it is never acted on. */
function unverifiedAnswer(api: string): TransportFailure {
  return { kind: 'in_doubt', code: 'INVALID_RESPONSE_SIGNATURE', message: `${api} answer did not verify with the merchant secret` };
}
