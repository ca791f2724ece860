/**
 * Small helpers the gateway suites share: polling for an asynchronous effect, a throwaway HTTP
 * receiver, and the sandbox's ledger.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** Polls `probe` until it returns something other than undefined, or fails after `timeoutMs`. */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 8000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** A throwaway HTTP server; `handler` decides how to misbehave. */
export async function startServer(handler: http.RequestListener): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** GET /ledger of a sandbox, for one out_trade_no. */
export async function readLedger<L>(sandboxUrl: string, outTradeNo: string): Promise<L> {
  const res = await fetch(`${sandboxUrl}/ledger?outTradeNo=${encodeURIComponent(outTradeNo)}`);
  assert.equal(res.status, 200);
  return (await res.json()) as L;
}
