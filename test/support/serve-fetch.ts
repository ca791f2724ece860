/**
 * Serves `(Request) => Response` handlers over real HTTP with node:http, so the tests exercise the
 * very functions the Next route handlers call, over a real socket, with real headers and cookies.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { stampPeerAddress } from '@/server/http/peer-address';

export type FetchHandler = (request: Request) => Promise<Response>;

export interface FetchServer {
  url: string;
  close(): Promise<void>;
}

export async function serveFetch(route: (pathname: string) => FetchHandler | undefined): Promise<FetchServer> {
  const server = http.createServer(async (req, res) => {
    try {
      const url = new URL(req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`);
      const handler = route(url.pathname);
      if (!handler) {
        res.writeHead(404).end('not found');
        return;
      }
      stampPeerAddress(req); // as instrumentation.ts does for Next's server
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (Array.isArray(value)) value.forEach((v) => headers.append(name, v));
        else if (value !== undefined) headers.set(name, value);
      }
      // The body streams from the socket as it does under Next, so a handler that stops reading
      // early (the body limit) is tested as it runs in production.
      const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
      const request = new Request(url, {
        method: req.method,
        headers,
        ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream<Uint8Array>, duplex: 'half' } : {}),
      } as RequestInit);
      const response = await handler(request);
      const outHeaders: Record<string, string | string[]> = {};
      response.headers.forEach((value, name) => {
        if (name === 'set-cookie') return;
        outHeaders[name] = value;
      });
      const cookies = response.headers.getSetCookie();
      if (cookies.length > 0) outHeaders['set-cookie'] = cookies;
      res.writeHead(response.status, outHeaders);
      res.end(Buffer.from(await response.arrayBuffer()));
    } catch (error) {
      res.writeHead(500).end(String(error));
    }
  });
  // Connections from the sandbox's notifier and from tests must not outlive a closing server.
  server.keepAliveTimeout = 1000;
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
