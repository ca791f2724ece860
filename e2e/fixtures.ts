/**
 * Fixtures for the browser tests: the checkout page object and the PSP sandbox's ledger, the ground
 * truth of what was charged.
 */
import { test as base, expect } from '@playwright/test';
import { CheckoutPage } from './pages/checkout-page';

export interface Ledger {
  charges: { gateway: string; outTradeNo: string; amountMinor: number; status: string; gatewayTradeNo: string | null }[];
  notifications: { gateway: string; outTradeNo: string; attempt: number; acknowledged: boolean }[];
}

export class SandboxLedger {
  constructor(private readonly baseUrl: string) {}

  async read(outTradeNo: string): Promise<Ledger> {
    const response = await fetch(`${this.baseUrl}/ledger?outTradeNo=${encodeURIComponent(outTradeNo)}`);
    expect(response.ok).toBe(true);
    return (await response.json()) as Ledger;
  }

  async succeededCharges(outTradeNo: string): Promise<number> {
    return (await this.read(outTradeNo)).charges.filter((c) => c.status === 'succeeded').length;
  }
}

export const test = base.extend<{ checkout: CheckoutPage; ledger: SandboxLedger }>({
  checkout: async ({ page }, use) => {
    await use(new CheckoutPage(page));
  },
  // eslint-disable-next-line no-empty-pattern
  ledger: async ({}, use) => {
    await use(new SandboxLedger(process.env.PSP_SANDBOX_URL ?? 'http://127.0.0.1:4110'));
  },
});

export { expect };

/** DRILL_MATRIX=full: every drill and walk on every gateway, pair and screen, instead of each once. */
export const FULL_MATRIX = process.env.DRILL_MATRIX === 'full';
