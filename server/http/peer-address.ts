/**
 * The address of the socket a request arrived on, for the per-address limits.
 *
 * A Route Handler sees headers only, and `next start` fills X-Forwarded-For with the socket's address
 * only when the client sent none, so that header is the client's to choose. This stamps the socket's
 * own address into a header of ours on every request, overwriting whatever a client sent under that
 * name, before Next reads the request: a value no client can choose. Behind a proxy every request
 * comes from the proxy's address, so deployments behind one set TRUST_PROXY and the limits count the
 * forwarded address instead (./rate-limit.ts clientAddress).
 */
import type http from 'node:http';
import { onEveryRequest } from './every-request';

export const PEER_ADDRESS_HEADER = 'x-payonce-peer-address';

/** Overwrites the header with the socket's address (empty when the socket has none). */
export function stampPeerAddress(req: http.IncomingMessage): void {
  req.headers[PEER_ADDRESS_HEADER] = req.socket?.remoteAddress ?? '';
}

/** Stamps every request of every HTTP server in this process, Next's included (./every-request.ts). */
export function installPeerAddressStamp(): void {
  onEveryRequest('peer-address', (request) => stampPeerAddress(request));
}
