/**
 * The PSP sandbox's HTTP server: a stand-in for the payment gateways that the app reaches only over
 * HTTP, exactly as it would reach the real ones (only the gateway URL differs).
 *
 *   GET  /health                  → { ok: true }
 *   GET  /sandbox/credentials     → the merchant's sandbox keys, like a developer console
 *   POST /gateway.do              → Alipay OpenAPI 2.0 gateway (see ./alipay)
 *   GET  /ledger[?outTradeNo=]    → every charge attempt and notification delivery (ground truth)
 *   POST /sandbox/alipay/notify   → test tool: send a trade's notification N times at once
 *
 * It shares no code with the app on purpose: a test that passes against it proves the app speaks the
 * gateway's protocol, not that two halves of the same code agree with each other.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { z } from 'zod';
import {
  alipayNotifier,
  alipayTestBuyerAuthCodes,
  gatewayParams,
  handleGateway,
  sendToolNotifications,
  ToolError,
  type AlipayContext,
} from './alipay';
import { startNotifier } from './notifier';
import { migrate, openSql, readLedger, type AlipayIdentity } from './store';

export interface SandboxOptions {
  /** 0 picks a free port. */
  port: number;
  host?: string;
  databaseUrl: string;
  /** Multiplies every notification retry interval; 1 is real time. */
  timeScale: number;
}

export interface RunningSandbox {
  url: string;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 1024 * 1024;
const DELIVERY_TIMEOUT_MS = 5000;

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

const notifyToolBody = z.object({
  outTradeNo: z.string().min(1).max(64),
  copies: z.number().int().min(1).max(100).default(1),
  overrides: z.record(z.string(), z.string()).default({}),
});

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new HttpError(413, 'BODY_TOO_LARGE', `request body exceeds ${MAX_BODY_BYTES} bytes`));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function send(res: http.ServerResponse, status: number, contentType: string, body: string): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function sendJson(res: http.ServerResponse, status: number, value: unknown): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(value));
}

function sendError(res: http.ServerResponse, status: number, code: string, message: string): void {
  sendJson(res, status, { error: { code, message } });
}

export async function startSandbox(options: SandboxOptions): Promise<RunningSandbox> {
  if (!Number.isFinite(options.timeScale) || options.timeScale <= 0) {
    throw new Error(`timeScale must be a positive number, got ${options.timeScale}`);
  }
  const host = options.host ?? '127.0.0.1';
  const sql = openSql(options.databaseUrl);
  let identity: AlipayIdentity;
  try {
    identity = await migrate(sql);
  } catch (err) {
    await sql.end({ timeout: 1 });
    throw err;
  }

  const notifier = startNotifier({
    sql,
    gateways: { alipay: alipayNotifier(identity.platformPrivateKeyPem) },
    timeScale: options.timeScale,
    deliveryTimeoutMs: DELIVERY_TIMEOUT_MS,
  });
  const alipay: AlipayContext = {
    sql,
    identity,
    wakeNotifier: () => notifier.wake(),
    deliveryTimeoutMs: DELIVERY_TIMEOUT_MS,
  };

  async function route(req: http.IncomingMessage, res: http.ServerResponse, baseUrl: string): Promise<void> {
    const url = new URL(req.url ?? '/', baseUrl);
    const method = req.method ?? 'GET';
    const path = url.pathname;

    if (path === '/health' && method === 'GET') {
      sendJson(res, 200, { ok: true });
      return;
    }
    if (path === '/sandbox/credentials' && method === 'GET') {
      sendJson(res, 200, {
        alipay: {
          appId: identity.appId,
          appPrivateKey: identity.appPrivateKeyPem,
          alipayPublicKey: identity.platformPublicKeyPem,
          gateway: `${baseUrl}/gateway.do`,
          testBuyers: alipayTestBuyerAuthCodes(),
        },
      });
      return;
    }
    if (path === '/gateway.do') {
      if (method !== 'POST' && method !== 'GET') throw new HttpError(405, 'METHOD_NOT_ALLOWED', 'use POST');
      const body = method === 'POST' ? await readBody(req) : '';
      const answer = await handleGateway(alipay, gatewayParams(url, body, req.headers['content-type']));
      send(res, answer.status, answer.contentType, answer.body);
      return;
    }
    if (path === '/ledger' && method === 'GET') {
      const outTradeNo = url.searchParams.get('outTradeNo');
      if (outTradeNo !== null && outTradeNo === '') throw new HttpError(400, 'BAD_QUERY', 'outTradeNo is empty');
      sendJson(res, 200, await readLedger(sql, outTradeNo));
      return;
    }
    if (path === '/sandbox/alipay/notify' && method === 'POST') {
      if (!(req.headers['content-type'] ?? '').toLowerCase().includes('application/json')) {
        throw new HttpError(415, 'UNSUPPORTED_MEDIA_TYPE', 'send application/json');
      }
      let json: unknown;
      try {
        json = JSON.parse(await readBody(req));
      } catch (err) {
        if (err instanceof HttpError) throw err;
        throw new HttpError(400, 'INVALID_JSON', 'the body is not valid JSON');
      }
      const parsed = notifyToolBody.safeParse(json);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        throw new HttpError(400, 'INVALID_REQUEST', issue ? `${issue.path.join('.') || 'body'}: ${issue.message}` : 'invalid');
      }
      const deliveries = await sendToolNotifications(alipay, parsed.data);
      sendJson(res, 200, {
        deliveries: deliveries.map((d) => ({
          status: d.httpStatus,
          body: d.responseBody,
          ...(d.error ? { error: d.error } : {}),
        })),
      });
      return;
    }
    const known = ['/health', '/sandbox/credentials', '/ledger', '/sandbox/alipay/notify'];
    if (known.includes(path)) throw new HttpError(405, 'METHOD_NOT_ALLOWED', `${method} is not allowed on ${path}`);
    throw new HttpError(404, 'NOT_FOUND', `no route for ${method} ${path}`);
  }

  let baseUrl = '';
  const server = http.createServer((req, res) => {
    // The URL the client used (Host header), so credentials point at an address the caller can reach.
    const requestBase = req.headers.host ? `http://${req.headers.host}` : baseUrl;
    route(req, res, requestBase).catch((err: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (err instanceof HttpError || err instanceof ToolError) {
        sendError(res, err.status, err.code, err.message);
        return;
      }
      console.error('[psp-sandbox] %s %s failed:', req.method, req.url, err);
      sendError(res, 500, 'INTERNAL', err instanceof Error ? err.message : 'internal error');
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => {
      server.off('error', reject);
      resolve();
    });
  }).catch(async (err: unknown) => {
    await notifier.stop();
    await sql.end({ timeout: 1 });
    throw err;
  });
  const address = server.address() as AddressInfo;
  const urlHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  baseUrl = `http://${urlHost}:${address.port}`;

  let closing: Promise<void> | undefined;
  return {
    url: baseUrl,
    close() {
      closing ??= (async () => {
        // Stop taking requests, let the ones in progress finish (they are short), then stop the
        // notifier (it waits for its deliveries to be recorded) and only then drop the pool.
        const serverClosed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        const forceTimer = setTimeout(() => server.closeAllConnections(), 2000);
        await serverClosed;
        clearTimeout(forceTimer);
        await notifier.stop();
        await sql.end({ timeout: 5 });
      })();
      return closing;
    },
  };
}
