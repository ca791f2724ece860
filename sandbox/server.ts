/**
 * The PSP sandbox's HTTP server: a stand-in for the payment gateways that the app reaches only over
 * HTTP, exactly as it would reach the real ones (only the gateway URL differs).
 *
 *   GET  /health                  → { ok: true }
 *   GET  /sandbox/credentials     → each gateway's merchant keys, like a developer console
 *   GET  /ledger[?outTradeNo=]    → every charge attempt and notification delivery (ground truth)
 *   GET  /  and /sandbox/ledger   → the same for people: where things are, the ledger as a table
 *   /sandbox/statements/discrepancies → what the gateways' daily statements get wrong on purpose (statements.ts)
 *   everything else               → the gateway modules (sandbox/modules.ts), each on its real paths:
 *                                   Alipay POST /gateway.do and POST /sandbox/alipay/notify (test tool)
 *
 * It shares no code with the app on purpose: a test that passes against it proves the app speaks the
 * gateway's protocol, not that two halves of the same code agree with each other.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ModuleContext, SandboxGatewayInstance, SandboxGatewayModule, SandboxRequest } from './gateway-module';
import { operationOf, SandboxFaults, sandboxFaultSpec } from './faults';
import { indexPage, ledgerPage } from './ledger-page';
import { ALL_GATEWAY_MODULES } from './modules';
import { startNotifier, type GatewayNotifier, type Notifier } from './notifier';
import { migrate, openSql, readLedger } from './store';
import { DISCREPANCIES_PATH, discrepanciesTool, responseBody } from './statements';

export interface SandboxOptions {
  /** 0 picks a free port. */
  port: number;
  host?: string;
  databaseUrl: string;
  /** Multiplies every notification retry interval; 1 is real time. */
  timeScale: number;
  /** The gateways to emulate; all of them by default. */
  modules?: readonly SandboxGatewayModule[];
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

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

function phonePage(status: number, message: string): { status: number; headers: Record<string, string>; body: string } {
  const body = `<!doctype html><html lang="zh-CN"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>沙箱手机 · 扫一扫</title><style>body{font-family:system-ui,sans-serif;max-width:420px;margin:24px auto;padding:0 16px}
input,button{font-size:16px;padding:10px;width:100%;box-sizing:border-box;margin-top:8px}</style></head><body>
<h1>沙箱手机 · 扫一扫 (sandbox phone)</h1>${message ? `<p role="alert">${escapeHtml(message)}</p>` : ''}
<form method="get" action="/sandbox/scan"><label for="code">二维码内容 (QR code text)</label>
<input id="code" name="code" required placeholder="weixin://wxpay/bizpayurl?pr=… / http://…/sandbox/alipay/qr/…">
<button type="submit">扫码 (scan)</button></form></body></html>`;
  return { status, headers: { 'content-type': 'text/html; charset=utf-8' }, body };
}

/**
 * The sandbox's own control plane and test tools (/sandbox/faults, /sandbox/{gateway}/buyer-pays,
 * …) change what the next payment does or move money, so a page on another site must not be able to
 * drive them through a visitor's browser (a `<form enctype="text/plain">` needs no CORS preflight).
 * Browsers say where a request came from: `Sec-Fetch-Site` other than same-origin or none, or an
 * `Origin` naming another host, is refused. The sandbox's own pages (the phone, the cashier, the hosted
 * page) post to their own origin; tools (curl, the tests) send neither header.
 */
function refuseCrossSite(req: http.IncomingMessage): void {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    throw new HttpError(
      403,
      'CROSS_SITE_REFUSED',
      `the sandbox's control requests are accepted from its own pages only (sec-fetch-site: ${site})`,
    );
  }
  const origin = req.headers.origin;
  if (origin === undefined) return;
  let host: string | undefined;
  try {
    host = new URL(origin).host;
  } catch {
    host = undefined;
  }
  if (host !== req.headers.host) {
    throw new HttpError(
      403,
      'CROSS_SITE_REFUSED',
      `the sandbox's control requests are accepted from its own pages only (origin: ${origin})`,
    );
  }
}

/**
 * GET /sandbox/scan?code=… — the sandbox's phone camera: what a payment app does with a scanned QR
 * code. WeChat Pay's code_url (weixin://wxpay/bizpayurl?pr=…) opens WeChat's payment sheet
 * (/sandbox/wechatpay/scan); Alipay's qr_code is a URL the app opens (here, the sandbox's own page).
 * Anything else is not a payment code of this sandbox.
 */
function scan(code: string | null, baseUrl: string) {
  if (!code) return phonePage(200, '');
  if (code.startsWith('weixin://wxpay/bizpayurl')) {
    return { status: 302, headers: { location: `/sandbox/wechatpay/scan?code_url=${encodeURIComponent(code)}` }, body: '' };
  }
  let target: URL | undefined;
  try {
    target = new URL(code);
  } catch {
    target = undefined;
  }
  if (target && target.host === new URL(baseUrl).host && target.pathname.startsWith('/sandbox/')) {
    return { status: 302, headers: { location: `${target.pathname}${target.search}` }, body: '' };
  }
  return phonePage(400, '这不是沙箱的付款码 (not a payment code of this sandbox)。');
}

export async function startSandbox(options: SandboxOptions): Promise<RunningSandbox> {
  if (!Number.isFinite(options.timeScale) || options.timeScale <= 0) {
    throw new Error(`timeScale must be a positive number, got ${options.timeScale}`);
  }
  const host = options.host ?? '127.0.0.1';
  const modules = options.modules ?? ALL_GATEWAY_MODULES;
  const sql = openSql(options.databaseUrl);
  let notifier: Notifier | undefined;
  const moduleContext: ModuleContext = {
    sql,
    // Late-bound: the notification loop starts once every module has loaded its keys.
    wakeNotifier: () => notifier?.wake(),
    deliveryTimeoutMs: DELIVERY_TIMEOUT_MS,
    timeScale: options.timeScale,
  };
  let gateways: { gateway: string; instance: SandboxGatewayInstance }[];
  try {
    gateways = await migrate(sql, async (tx) => {
      const loaded: { gateway: string; instance: SandboxGatewayInstance }[] = [];
      for (const module of modules) {
        if (module.schemaSql) await tx.unsafe(module.schemaSql).simple();
        loaded.push({ gateway: module.gateway, instance: await module.setUp(tx, moduleContext) });
      }
      return loaded;
    });
  } catch (err) {
    await sql.end({ timeout: 1 });
    throw err;
  }

  const notifiers: Record<string, GatewayNotifier> = {};
  for (const { gateway, instance } of gateways) notifiers[gateway] = instance.notifier;
  const faults = new SandboxFaults();
  notifier = startNotifier({
    sql,
    gateways: notifiers,
    timeScale: options.timeScale,
    deliveryTimeoutMs: DELIVERY_TIMEOUT_MS,
    extraCopies: (gateway, outTradeNo, firstDelivery) => faults.takeNotificationCopies(gateway, outTradeNo, firstDelivery),
    loseDelivery: (gateway, outTradeNo) => faults.takeLostNotification(gateway, outTradeNo),
  });
  const activeNotifier = notifier;

  /** The gateway and operation of a request: a module's own reading first, then the paths (faults.ts). */
  function operationOfRequest(request: SandboxRequest): ReturnType<typeof operationOf> {
    if (request.method === 'POST') {
      for (const { gateway, instance } of gateways) {
        const operation = instance.operationOf?.(request);
        if (operation) return { gateway, operation };
      }
    }
    return operationOf(request);
  }

  async function route(req: http.IncomingMessage, res: http.ServerResponse, baseUrl: string): Promise<void> {
    const url = new URL(req.url ?? '/', baseUrl);
    const method = req.method ?? 'GET';
    const path = url.pathname;

    if (path === '/health' && method === 'GET') {
      sendJson(res, 200, { ok: true });
      return;
    }
    if (path === '/sandbox/credentials' && method === 'GET') {
      const credentials: Record<string, unknown> = {};
      for (const { gateway, instance } of gateways) credentials[gateway] = instance.credentials(baseUrl);
      sendJson(res, 200, credentials);
      return;
    }
    if (path === '/ledger' && method === 'GET') {
      const outTradeNo = url.searchParams.get('outTradeNo');
      if (outTradeNo !== null && outTradeNo === '') throw new HttpError(400, 'BAD_QUERY', 'outTradeNo is empty');
      sendJson(res, 200, await readLedger(sql, outTradeNo));
      return;
    }
    if (path === '/' && method === 'GET') return send(res, 200, 'text/html; charset=utf-8', indexPage());
    if (path === '/sandbox/ledger' && method === 'GET') {
      const outTradeNo = url.searchParams.get('outTradeNo') || null;
      return send(res, 200, 'text/html; charset=utf-8', ledgerPage(await readLedger(sql, outTradeNo), outTradeNo));
    }
    if (path === '/sandbox/scan' && method === 'GET') {
      const answer = scan(url.searchParams.get('code'), baseUrl);
      res.writeHead(answer.status, { ...answer.headers, 'content-length': String(Buffer.byteLength(answer.body)) });
      res.end(answer.body);
      return;
    }
    if (path.startsWith('/sandbox/') && method !== 'GET' && method !== 'HEAD') refuseCrossSite(req);
    const body = method === 'GET' || method === 'HEAD' ? '' : await readBody(req);
    if (path === '/sandbox/faults') {
      if (method === 'GET') return sendJson(res, 200, { faults: faults.list() });
      if (method === 'DELETE') {
        faults.clear();
        res.writeHead(204).end();
        return;
      }
      if (method !== 'POST') throw new HttpError(405, 'METHOD_NOT_ALLOWED', 'use GET, POST or DELETE');
      // A form cannot declare JSON without a CORS preflight, so this also stops a text/plain form post.
      if ((req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase() !== 'application/json') {
        throw new HttpError(415, 'UNSUPPORTED_MEDIA_TYPE', 'send the fault as JSON with content-type: application/json');
      }
      let parsed;
      try {
        parsed = sandboxFaultSpec.safeParse(JSON.parse(body));
      } catch {
        throw new HttpError(400, 'INVALID_JSON', 'the body is not valid JSON');
      }
      if (!parsed.success) throw new HttpError(400, 'INVALID_FAULT', parsed.error.issues.map((i) => i.message).join('; '));
      return sendJson(res, 201, { fault: faults.arm(parsed.data) });
    }
    if (path === DISCREPANCIES_PATH) {
      const answer = await discrepanciesTool(sql, { method, url, headers: req.headers, body });
      res.writeHead(answer.status, { ...answer.headers, 'content-length': String(Buffer.byteLength(answer.body)) });
      res.end(answer.body);
      return;
    }
    const request = { method, url, headers: req.headers, body, baseUrl };
    const limited = faults.takeRateLimit(request);
    if (limited) {
      const own = gateways.find((g) => g.gateway === limited)?.instance.rateLimited;
      const answer = own ? own(request) : { status: 429, headers: { 'content-type': 'application/json' }, body: '{"code":"RATE_LIMITED"}' };
      res.writeHead(answer.status, { ...answer.headers, 'content-length': String(Buffer.byteLength(answer.body)) });
      res.end(answer.body);
      return;
    }
    const operation = operationOfRequest(request);
    const fault = faults.take(request, () => operation);
    if (fault?.action === 'fail_before_charge') {
      const gateway = operation?.gateway;
      const own = gateways.find((g) => g.gateway === gateway)?.instance.systemError;
      if (!own) return sendJson(res, 500, { code: 'SYSTEM_ERROR', message: 'sandbox fault: failed before charging' });
      const answer = await own(request);
      res.writeHead(answer.status, { ...answer.headers, 'content-length': String(Buffer.byteLength(answer.body)) });
      res.end(answer.body);
      return;
    }
    if (fault?.action === 'timeout_before_charge') {
      await new Promise((resolve) => setTimeout(resolve, fault.delayMs ?? 30_000));
      req.socket.destroy(); // never processed, never answered
      return;
    }
    if (fault?.action === 'slow') await new Promise((resolve) => setTimeout(resolve, fault.delayMs ?? 3000));
    for (const { instance } of gateways) {
      const answer = await instance.handle(request);
      if (!answer) continue;
      if (fault?.action === 'drop_after_charge') {
        req.socket.destroy(); // charged, and the caller never hears of it
        return;
      }
      if (fault?.action === 'timeout_after_charge') {
        await new Promise((resolve) => setTimeout(resolve, fault.delayMs ?? 30_000));
        req.socket.destroy();
        return;
      }
      // A statement file may be bytes (Alipay's zip, WeChat's gzip): statements.ts responseBody.
      const payload = responseBody(answer);
      const headers = { ...answer.headers, 'content-length': String(Buffer.byteLength(payload)) };
      res.writeHead(answer.status, headers);
      res.end(payload);
      return;
    }
    const known = ['/', '/health', '/sandbox/credentials', '/ledger', '/sandbox/ledger', '/sandbox/faults'];
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
      if (err instanceof HttpError) {
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
    await activeNotifier.stop();
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
        await activeNotifier.stop();
        await sql.end({ timeout: 5 });
      })();
      return closing;
    },
  };
}
