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
import http from 'node:http';

export const PEER_ADDRESS_HEADER = 'x-payonce-peer-address';

/** Overwrites the header with the socket's address (empty when the socket has none). */
export function stampPeerAddress(req: http.IncomingMessage): void {
  req.headers[PEER_ADDRESS_HEADER] = req.socket?.remoteAddress ?? '';
}

/**
 * Stamps every request of every HTTP server in this process, the one Next created included: Next
 * offers no hook that sees the socket, and its server exists before instrumentation runs, so the
 * stamp goes where each server's 'request' event is emitted. Installed once per process.
 *
 * LIBRARY BEHAVIOUR RELIED ON: Next's server is a node:http Server that emits 'request' with the
 * IncomingMessage whose `headers` become the Route Handler's Request headers
 * (test/hostile/rate-limits.test.ts, "a forged peer-address header is overwritten", over `next start`
 * in e2e/security-headers.spec.ts).
 */
export function installPeerAddressStamp(): void {
  const marker = globalThis as { __payoncePeerAddressStamp?: boolean };
  if (marker.__payoncePeerAddressStamp) return;
  marker.__payoncePeerAddressStamp = true;
  const emit = http.Server.prototype.emit;
  http.Server.prototype.emit = function emitWithPeerAddress(this: http.Server, event: string | symbol, ...args: unknown[]) {
    if (event === 'request' && args[0] instanceof http.IncomingMessage) stampPeerAddress(args[0]);
    return Reflect.apply(emit, this, [event, ...args]) as boolean;
  } as typeof emit;
}
