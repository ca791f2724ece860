/**
 * How one emulated gateway plugs into the sandbox server. Each gateway lives in its own module
 * (sandbox/alipay.ts, …) and owns its paths, its tables in `psp_sandbox`, its keys and its
 * notifications; the server only routes requests and runs the shared notification loop and ledger.
 */
import type http from 'node:http';
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
