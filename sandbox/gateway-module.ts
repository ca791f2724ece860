/**
 * How one emulated gateway plugs into the sandbox server. Each gateway lives in its own module
 * (sandbox/alipay.ts, …) and owns its paths, its tables in `psp_sandbox`, its keys and its
 * notifications; the server only routes requests and runs the shared notification loop and ledger.
 */
import type http from 'node:http';
import { z } from 'zod';
import type { GatewayNotifier } from './notifier';
import type { Sql, Tx } from './store';

export interface SandboxRequest {
  method: string;
  url: URL;
  headers: http.IncomingHttpHeaders;
  /** The raw body as text (signatures are computed over the exact bytes). */
  body: string;
  /** The base URL the caller used to reach the sandbox, e.g. http://127.0.0.1:4010. */
  baseUrl: string;
}

export interface SandboxResponse {
  status: number;
  headers?: Record<string, string>;
  body: string;
}

export interface ModuleContext {
  sql: Sql;
  /** Pokes the notification loop so a new notification goes out at once. */
  wakeNotifier(): void;
  /** How long a notification receiver gets to answer. */
  deliveryTimeoutMs: number;
  /** SANDBOX_TIME_SCALE: multiplies every retry interval. */
  timeScale: number;
}

export interface SandboxGatewayInstance {
  /** Answers a request on this gateway's own paths; undefined when the path is not its own. */
  handle(request: SandboxRequest): Promise<SandboxResponse | undefined>;
  /** What GET /sandbox/credentials lists under this gateway's name (keys, ids, test buyers). */
  credentials(baseUrl: string): unknown;
  /** How this gateway builds, signs, schedules and recognises acknowledgements of notifications. */
  notifier: GatewayNotifier;
  /**
   * This gateway's own answer when it fails before processing `request` (the fail_before_charge
   * fault): the status, body and signature its real API sends for a system error, so a merchant's
   * client meets the same shape here as in production. Absent: a bare HTTP 500.
   */
  systemError?(request: SandboxRequest): SandboxResponse | Promise<SandboxResponse>;
  /**
   * This gateway's own refusal of a request over its rate limit (the rate_limit fault): nothing was
   * processed. Absent: a bare 429.
   */
  rateLimited?(request: SandboxRequest): SandboxResponse;
  /**
   * Which operation a request on this gateway's own paths is, when its path cannot tell (2C2P's
   * Payment Maintenance API carries refunds and queries alike in one encrypted body): what the fault
   * switchboard arms on. Absent or undefined: the path decides (sandbox/faults.ts).
   */
  operationOf?(request: SandboxRequest): 'charge' | 'close' | 'refund' | undefined;
}

export interface SandboxGatewayModule {
  /** The ledger's `gateway` value: 'alipay' | 'wechatpay' | 'stripe' | '2c2p'. */
  readonly gateway: string;
  /** Idempotent DDL for this gateway's own tables in `psp_sandbox`, run under the start-up lock. */
  readonly schemaSql: string;
  /** Runs at every start inside the start-up transaction, after the DDL: load or create keys. */
  setUp(tx: Tx, ctx: ModuleContext): Promise<SandboxGatewayInstance>;
}

export function json(status: number, value: unknown, headers: Record<string, string> = {}): SandboxResponse {
  return {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', ...headers },
    body: JSON.stringify(value),
  };
}

/**
 * POST /sandbox/{gateway}/buyer-pays — the buyer tool every gateway module serves: the buyer completes
 * that gateway's open trade now. `outTradeNo` is as long as the longest merchant order number any of
 * the four gateways accepts (Stripe metadata values are the loosest).
 */
export const buyerPaysBody = z.object({
  outTradeNo: z.string().min(1).max(500),
  buyer: z.enum(['ok', 'insufficient_funds', 'account_restricted']).default('ok'),
});
export type BuyerPaysInput = z.infer<typeof buyerPaysBody>;

/** Reads a buyer-pays request: its input, or the 405 / 400 `{code, message}` answer to send instead. */
export function readBuyerPays(request: Pick<SandboxRequest, 'method' | 'body'>): { input: BuyerPaysInput } | { answer: SandboxResponse } {
  if (request.method !== 'POST') return { answer: json(405, { code: 'METHOD_NOT_ALLOWED', message: 'use POST' }) };
  let body: unknown;
  try {
    body = JSON.parse(request.body);
  } catch {
    return { answer: json(400, { code: 'BAD_REQUEST', message: 'the body is not valid JSON' }) };
  }
  const parsed = buyerPaysBody.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const message = issue ? `${issue.path.join('.') || 'body'}: ${issue.message}` : 'invalid body';
    return { answer: json(400, { code: 'BAD_REQUEST', message }) };
  }
  return { input: parsed.data };
}
