/**
 * Reads a request body only as far as a limit. Framework-free (a standard Request in, bytes out), so
 * the fetch adapter (./fetch.ts), the app's tRPC endpoint and its webhook handlers share one rule.
 *
 * A declared Content-Length over the limit is refused before a single byte is read; a body without
 * one (chunked) is read until it passes the limit and no further, so a client streaming 50 MB costs
 * us 64 KB of memory, not 50 MB.
 */

/**
 * 64 KiB. The largest legitimate body is a createOrder with a few dozen lines (well under 4 KiB) or a
 * gateway notification (Stripe's event objects run to a few KiB); 64 KiB leaves room for both to grow
 * without letting one request hold megabytes of memory or CPU in JSON.parse.
 */
export const MAX_BODY_BYTES = 64 * 1024;

export type BoundedBody = { kind: 'read'; bytes: Uint8Array<ArrayBuffer> } | { kind: 'too_large' };

export async function readBodyWithin(request: Request, limitBytes: number = MAX_BODY_BYTES): Promise<BoundedBody> {
  const declared = request.headers.get('content-length');
  if (declared !== null && Number(declared) > limitBytes) return { kind: 'too_large' };
  if (!request.body) return { kind: 'read', bytes: new Uint8Array(0) };

  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limitBytes) {
      // Stop pulling: the rest of the body is never buffered. Cancelling lets the server discard or
      // close the connection after the 413 has gone out.
      void reader.cancel().catch(() => {});
      return { kind: 'too_large' };
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return { kind: 'read', bytes };
}
