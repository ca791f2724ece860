/**
 * The shoppers of the failover drill: a few customers paying one order after another, each the page's
 * own retrying flow (soak/customer.ts) over both app instances, while the database fails over under
 * them. Every answer they get is recorded with its time, so the drill can say what a shopper saw
 * during each failover: the 503s and their reasons, and any status that should never appear.
 */
import type { GatewayId } from '@/server/payments/gateway';
import { runCustomer, type CustomerResult } from '@/soak/customer';
import { GATEWAYS, SKUS, type OrderPlan } from '@/soak/schedule';

export interface Answer {
  procedure: string;
  status: number;
  reason?: string;
  at: number;
}

export interface ShopperResult extends CustomerResult {
  plan: OrderPlan;
  startedAt: number;
}

export class Shoppers {
  readonly results: ShopperResult[] = [];
  readonly answers: Answer[] = [];
  #running: Promise<void>[] = [];
  #stopping = false;
  #next = 0;

  constructor(
    private readonly appUrls: string[],
    private readonly options: { concurrency: number; gateways?: readonly GatewayId[] },
  ) {}

  start(): void {
    for (let i = 0; i < this.options.concurrency; i++) this.#running.push(this.#loop());
  }

  /** Lets every shopper finish the order in hand, then returns. */
  async stop(): Promise<void> {
    this.#stopping = true;
    await Promise.all(this.#running);
  }

  /** Paid orders so far: a sign the app is serving payments. */
  paidSince(at: number): number {
    return this.results.filter((r) => r.startedAt >= at && (r.outcome === 'paid' || r.outcome === 'paid_after_decline')).length;
  }

  /** The first 201 to checkout.pay at or after `at`. */
  firstPaidAnswerAfter(at: number): number | undefined {
    return this.answers.find((a) => a.at >= at && a.procedure === 'checkout.pay' && a.status === 201)?.at;
  }

  async #loop(): Promise<void> {
    const gateways = this.options.gateways ?? GATEWAYS;
    while (!this.#stopping) {
      const index = this.#next++;
      const gateway = gateways[index % gateways.length]!;
      const plan: OrderPlan = {
        index,
        gateway,
        cart: [{ sku: SKUS[index % SKUS.length]!, quantity: 1 }],
        home: index % this.appUrls.length,
        buyer: 'ok',
        retryAfterDecline: false,
        retryGateway: gateway,
      };
      const startedAt = Date.now();
      const result = await runCustomer(plan, {
        appUrls: this.appUrls,
        requestTimeoutMs: 15_000,
        onAnswer: (answer) => this.answers.push(answer),
      }).catch((error: Error): CustomerResult => ({ outcome: 'error', reason: error.message, requests: 0, retries: 0, durationMs: 0 }));
      this.results.push({ ...result, plan, startedAt });
    }
  }
}
