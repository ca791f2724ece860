/**
 * Local servers that stand where a gateway should be, for the gateway contract: an address where
 * nothing listens, a server that only counts what reaches it, and one in front of the PSP sandbox
 * that answers an HTTP error status in the gateway's place.
 */
import type http from 'node:http';
import { operationOf } from '@/sandbox/faults';
import { startServer } from './harness';

/** An origin where nothing listens: a server started and closed again. */
export async function refusedOrigin(): Promise<string> {
  const server = await startServer(() => {});
  await server.close();
  return server.url;
}

/** Answers every request with a 500, counting them: what an adapter sent, if anything. */
export async function countingServer(): Promise<{ url: string; requests: () => number; close(): Promise<void> }> {
  let requests = 0;
  const server = await startServer((req, res) => {
    requests += 1;
    req.resume();
    req.on('end', () => res.writeHead(500).end());
  });
  return { ...server, requests: () => requests };
}

/** An HTTP error status answered in the gateway's place. */
export interface HttpErrorAnswer {
  /** Which requests get it: `every` one, or only the one that charges (the sandbox's own fault points). */
  on: 'every' | 'charge';
  status: number;
  headers: Record<string, string>;
  body: string;
}

const HOP_BY_HOP = ['host', 'connection', 'content-length', 'transfer-encoding', 'content-encoding', 'keep-alive'];

/** A server in front of the sandbox answering `answer` instead of it; other requests pass through. */
export async function answeringInstead(sandboxUrl: string, answer: HttpErrorAnswer): Promise<{ url: string; close(): Promise<void> }> {
  return startServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', sandboxUrl);
      const charges =
        operationOf({ method: req.method ?? 'GET', url, headers: req.headers, body, baseUrl: sandboxUrl })?.operation === 'charge';
      if (answer.on === 'every' || charges) {
        res.writeHead(answer.status, answer.headers).end(answer.body);
        return;
      }
      void passThrough(req, body, url, res);
    });
  });
}

async function passThrough(req: http.IncomingMessage, body: string, url: URL, res: http.ServerResponse): Promise<void> {
  const headers = Object.entries(req.headers).filter(([name]) => !HOP_BY_HOP.includes(name)) as [string, string][];
  const method = req.method ?? 'GET';
  const upstream = await fetch(url, { method, headers, ...(method === 'GET' || method === 'HEAD' ? {} : { body }) });
  const answerHeaders: Record<string, string> = {};
  upstream.headers.forEach((value, name) => {
    if (!HOP_BY_HOP.includes(name)) answerHeaders[name] = value;
  });
  res.writeHead(upstream.status, answerHeaders).end(await upstream.text());
}
