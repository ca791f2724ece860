/**
 * A shopper through the API behind a load balancer of the drills' app instances: a session of its
 * own, and every call retried as the page retries it — the same Idempotency-Key, after Retry-After,
 * on the next instance when one refuses (503) or is gone (connection refused while it restarts).
 * Every answer is kept, so a drill can say which statuses a shopper saw.
 */
import { randomUUID } from 'node:crypto';
import { request as playwrightRequest, type APIRequestContext } from '@playwright/test';

export interface Answer {
  status: number;
  json: unknown;
  /** Every status this call met, retries included (0: the instance was gone). */
  statuses: number[];
}

/** How long one call may keep retrying: longer than an instance's restart. */
const RETRY_FOR_MS = 60_000;

export class Shopper {
  /** Every status seen, in order; 0 is a connection refused or reset (an instance gone). */
  readonly seen: number[] = [];

  private constructor(
    private readonly http: APIRequestContext,
    private readonly instances: readonly string[],
  ) {}

  static async start(instances: readonly string[]): Promise<Shopper> {
    return new Shopper(await playwrightRequest.newContext(), instances);
  }

  async dispose(): Promise<void> {
    await this.http.dispose();
  }

  /** A query or mutation, retried until an answer that is not a refusal to retry. */
  async call(procedure: string, input: unknown, options: { key?: string; first?: number } = {}): Promise<Answer> {
    const deadline = Date.now() + RETRY_FOR_MS;
    const statuses: number[] = [];
    for (let attempt = options.first ?? 0; ; attempt++) {
      const base = this.instances[attempt % this.instances.length]!;
      const answer = await this.send(base, procedure, input, options.key);
      statuses.push(answer.status);
      this.seen.push(answer.status);
      const again = answer.status === 0 || answer.status === 503 || answer.status === 409;
      if (!again || Date.now() > deadline) return { ...answer, statuses };
      await new Promise((resolve) => setTimeout(resolve, answer.status === 0 ? 250 : 1000));
    }
  }

  private async send(base: string, procedure: string, input: unknown, key: string | undefined): Promise<Omit<Answer, 'statuses'>> {
    try {
      const response = key
        ? await this.http.post(`${base}/api/trpc/${procedure}`, { data: input, headers: { 'idempotency-key': key }, timeout: 30_000 })
        : await this.http.get(`${base}/api/trpc/${procedure}`, { timeout: 30_000 });
      return { status: response.status(), json: await response.json().catch(() => undefined) };
    } catch (error) {
      if (/ECONNREFUSED|ECONNRESET|socket hang up/.test(String(error))) return { status: 0, json: undefined };
      throw error;
    }
  }

  /** One order of one tea, paid at `gateway` by the sandbox's paying test buyer; `first`: the instance asked first. */
  async buy(gateway: string, first = 0): Promise<{ outTradeNo: string; created: Answer; paid: Answer }> {
    await this.call('checkout.products', undefined, { first }); // the session, as the page gets it
    const created = await this.call(
      'checkout.createOrder',
      { items: [{ sku: 'TEA-LONGJING', quantity: 1 }] },
      { key: randomUUID(), first },
    );
    const order = (created.json as { result?: { data?: { orderId: string; outTradeNo: string } } }).result?.data;
    if (!order) throw new Error(`createOrder answered ${created.status}: ${JSON.stringify(created.json)}`);
    const paid = await this.call('checkout.pay', { orderId: order.orderId, gateway, buyer: 'ok' }, { key: randomUUID(), first });
    return { outTradeNo: order.outTradeNo, created, paid };
  }
}
