import { expect, type Locator, type Page } from '@playwright/test';

/** What the page keeps in localStorage for an open order and its payment attempt. */
export interface StoredCheckout {
  order?: { orderId: string; outTradeNo: string; amountMinor: number; cart: string };
  attempt?: { key: string; orderId: string; gateway?: string; buyer?: string };
}

/** The 立即支付 page, by role and label as a customer sees it. */
export class CheckoutPage {
  readonly payButton: Locator;
  readonly status: Locator;
  /** The 支付结果 section: the status, and on success the 订单详情 and 再来一单. */
  readonly result: Locator;
  readonly outTradeNo: Locator;
  readonly orderStatus: Locator;
  readonly newOrderButton: Locator;
  readonly duplicateDialog: Locator;

  constructor(readonly page: Page) {
    this.payButton = page.getByRole('button', { name: '立即支付' });
    this.status = page.getByRole('status');
    this.result = page.getByRole('region', { name: '支付结果' });
    this.outTradeNo = page.getByTestId('out-trade-no');
    this.orderStatus = page.getByTestId('order-status');
    this.newOrderButton = page.getByRole('button', { name: '再来一单' });
    this.duplicateDialog = page.getByRole('dialog', { name: '可能是重复购买' });
  }

  async open() {
    await this.page.goto('/');
    await this.loaded();
  }

  /** The page (opened, or reloaded by the test) has rendered and its catalogue has loaded. */
  async loaded() {
    // A minute, not the usual 20 s: the first visit to a `next dev` server compiles the page, which on
    // a busy two-core machine (the drills' instances starting beside it) can take that long.
    await expect(this.page.getByRole('heading', { name: 'PayOnce 收银台' })).toBeVisible({ timeout: 60_000 });
    // The catalogue has loaded when a product's quantity can be set.
    await expect(this.page.getByRole('spinbutton').first()).toBeVisible();
  }

  async chooseGateway(label: string) {
    await this.page.getByRole('radio', { name: label }).check();
  }

  async chooseBuyer(label: '余额充足' | '余额不足' | '账户受限') {
    await this.page.getByRole('radio', { name: label }).check();
  }

  quantity(productName: string): Locator {
    return this.page.getByRole('spinbutton', { name: `${productName} 数量` });
  }

  async setQuantity(productName: string, quantity: number) {
    await this.quantity(productName).fill(String(quantity));
  }

  async pay() {
    await this.payButton.click();
  }

  /** The out_trade_no of the paid order shown in the result view. */
  async paidOutTradeNo(): Promise<string> {
    await expect(this.outTradeNo).toHaveText(/^PO[0-9A-Z]{18}$/);
    return (await this.outTradeNo.textContent())!.trim();
  }

  /** The open order and attempt the page has saved for a reload. */
  async stored(): Promise<StoredCheckout> {
    return this.page.evaluate(() => JSON.parse(localStorage.getItem('payonce.checkout.v1') ?? '{}') as StoredCheckout);
  }
}
