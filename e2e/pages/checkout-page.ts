import { expect, type Locator, type Page } from '@playwright/test';

/** The 立即支付 page, by role and label as a customer sees it. */
export class CheckoutPage {
  readonly payButton: Locator;
  readonly status: Locator;
  readonly outTradeNo: Locator;
  readonly orderStatus: Locator;

  constructor(readonly page: Page) {
    this.payButton = page.getByRole('button', { name: '立即支付' });
    this.status = page.getByRole('status');
    this.outTradeNo = page.getByTestId('out-trade-no');
    this.orderStatus = page.getByTestId('order-status');
  }

  async open() {
    await this.page.goto('/');
    await expect(this.page.getByRole('heading', { name: 'PayOnce 收银台' })).toBeVisible();
    // The catalogue has loaded when a product's quantity can be set.
    await expect(this.page.getByRole('spinbutton').first()).toBeVisible();
  }

  async chooseGateway(label: string) {
    await this.page.getByRole('radio', { name: label }).check();
  }

  async chooseBuyer(label: '余额充足' | '余额不足' | '账户受限') {
    await this.page.getByRole('radio', { name: label }).check();
  }

  async setQuantity(productName: string, quantity: number) {
    await this.page.getByRole('spinbutton', { name: `${productName} 数量` }).fill(String(quantity));
  }

  async pay() {
    await this.payButton.click();
  }

  /** The out_trade_no of the paid order shown in the result view. */
  async paidOutTradeNo(): Promise<string> {
    await expect(this.outTradeNo).toHaveText(/^PO[0-9A-Z]{18}$/);
    return (await this.outTradeNo.textContent())!.trim();
  }
}
