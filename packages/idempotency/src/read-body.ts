/**
 * Reads a request body only as far as a limit (the fetch adapter, the tRPC endpoint and the webhooks
 * share it): a declared Content-Length over it is refused unread, a chunked body read no further.
 */

/** 64 KiB: the largest real body (an order, a Stripe event) is a few KiB; no request holds megabytes in JSON.parse. */
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
