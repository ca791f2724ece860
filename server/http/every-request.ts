/**
 * Sees every request of every HTTP server in this process, Next's included, before the server's own
 * 'request' listeners: Next offers no hook that sees the socket or the response, and its server
 * exists before instrumentation runs, so the hook goes where each server emits 'request'. The
 * prototype is patched once per process; each listener is added once, by name.
 *
 * LIBRARY BEHAVIOUR RELIED ON: Next's server is a node:http Server that emits 'request' with the
 * IncomingMessage whose `headers` become the Route Handler's Request headers, and the ServerResponse
 * that writes its answer (test/hostile/rate-limits.test.ts, "a forged peer-address header is
 * overwritten", over `next start` in e2e/security-headers.spec.ts; the eviction drills for ./drain.ts).
 */
import http from 'node:http';

export type RequestListener = (request: http.IncomingMessage, response: http.ServerResponse) => void;

const globalForHook = globalThis as unknown as { __payonceRequestListeners?: Map<string, RequestListener> };

export function onEveryRequest(name: string, listener: RequestListener): void {
  if (!globalForHook.__payonceRequestListeners) {
    const listeners = new Map<string, RequestListener>();
    globalForHook.__payonceRequestListeners = listeners;
    const emit = http.Server.prototype.emit;
    http.Server.prototype.emit = function emitSeen(this: http.Server, event: string | symbol, ...args: unknown[]) {
      if (event === 'request' && args[0] instanceof http.IncomingMessage && args[1] instanceof http.ServerResponse) {
        for (const seen of listeners.values()) seen(args[0], args[1]);
      }
      return Reflect.apply(emit, this, [event, ...args]) as boolean;
    } as typeof emit;
  }
  if (!globalForHook.__payonceRequestListeners.has(name)) globalForHook.__payonceRequestListeners.set(name, listener);
}
