/**
 * Strong customer authentication on the page: a card that asks for 3-D Secure opens the issuer's
 * challenge over the checkout (the sandbox's Stripe.js, as Stripe.js does). The buyer completes it,
 * fails it or closes it, pays again, leaves a challenge open in one tab and pays in another — and the
 * gateway's ledger shows one charge for the order every time.
 */
import type { FrameLocator, Page } from '@playwright/test';
import { expect, test } from './fixtures';
import { CheckoutPage } from './pages/checkout-page';

const AUTHENTICATION_CARD = '4000002760003184';

async function startCardStep(checkout: CheckoutPage) {
  await checkout.open();
  await checkout.chooseGateway('银行卡');
  await checkout.page.getByRole('radio', { name: '我自己付款' }).check();
  await checkout.pay();
  await expect(checkout.status).toContainText('等待付款');
}

/** Types a card into Stripe.js's card Element and presses the page's own pay button. */
async function payWithCard(page: Page, number: string) {
  const card = page.frameLocator('iframe').first();
  await card.getByLabel(/卡号|Card number/).fill(number);
  await card.getByLabel(/有效期|MM/).fill('12 / 30');
  await card.getByLabel(/CVC/).fill('123');
  await page.getByRole('button', { name: /确认付款/ }).click();
}

/** The issuer's challenge, open over the page. */
function challenge(page: Page): { dialog: ReturnType<Page['getByRole']>; frame: FrameLocator } {
  const dialog = page.getByRole('dialog', { name: /3D Secure 验证/ });
  return { dialog, frame: dialog.frameLocator('iframe') };
}

async function answerChallenge(page: Page, button: RegExp) {
  const { dialog, frame } = challenge(page);
  await expect(dialog).toBeVisible();
  await frame.getByRole('button', { name: button }).click();
  await expect(dialog).toBeHidden();
}

test('stripe 3-D Secure: the buyer fails the challenge, authenticates again, and is charged once', async ({ checkout, ledger, page }) => {
  await startCardStep(checkout);
  await payWithCard(page, AUTHENTICATION_CARD);
  await answerChallenge(page, /验证失败/);
  const alert = checkout.result.getByRole('alert');
  await expect(alert).toContainText('身份验证没有完成');
  await expect(alert).toContainText('未扣款');
  await expect(checkout.status).toContainText('等待付款');

  await page.getByRole('button', { name: /确认付款/ }).click();
  await answerChallenge(page, /完成验证/);
  await expect(checkout.status).toContainText('支付成功', { timeout: 30_000 });
  const outTradeNo = await checkout.paidOutTradeNo();
  expect(await ledger.succeededCharges(outTradeNo)).toBe(1);
});

test('stripe 3-D Secure: the buyer closes the challenge, pays again, and is charged once', async ({ checkout, ledger, page }) => {
  await startCardStep(checkout);
  await payWithCard(page, AUTHENTICATION_CARD);
  const { dialog } = challenge(page);
  await expect(dialog).toBeVisible();
  await dialog.getByRole('button', { name: /关闭验证窗口/ }).click();
  await expect(dialog).toBeHidden();
  await expect(checkout.result.getByRole('alert')).toContainText('身份验证没有完成');

  await page.getByRole('button', { name: /确认付款/ }).click();
  await answerChallenge(page, /完成验证/);
  await expect(checkout.status).toContainText('支付成功', { timeout: 30_000 });
  expect(await ledger.succeededCharges(await checkout.paidOutTradeNo())).toBe(1);
});

test('stripe 3-D Secure: a card declined after authenticating is shown as a decline and charges nothing', async ({
  checkout,
  ledger,
  page,
}) => {
  await startCardStep(checkout);
  await payWithCard(page, '4000008260003178');
  await answerChallenge(page, /完成验证/);
  await expect(checkout.result.getByRole('alert')).toContainText('余额不足');
  await expect(checkout.status).toContainText('等待付款');
  const { order } = await checkout.stored();
  expect(await ledger.succeededCharges(order!.outTradeNo)).toBe(0);
});

test('stripe 3-D Secure in two tabs: both open a challenge, both complete it, one charge', async ({ checkout, ledger, page, context }) => {
  await startCardStep(checkout);
  // The second tab resumes the same attempt (the page stores it): the same PaymentIntent.
  const second = new CheckoutPage(await context.newPage());
  await second.open();
  await expect(second.status).toContainText('等待付款');

  await payWithCard(page, AUTHENTICATION_CARD);
  await expect(challenge(page).dialog).toBeVisible();
  await payWithCard(second.page, AUTHENTICATION_CARD);
  await expect(challenge(second.page).dialog).toBeVisible();

  // The newer challenge pays; the first tab's window, completed after, is over and charges nothing.
  await answerChallenge(second.page, /完成验证/);
  await expect(second.status).toContainText('支付成功', { timeout: 30_000 });
  const { frame } = challenge(page);
  await frame.getByRole('button', { name: /完成验证/ }).click();
  await expect(challenge(page).dialog).toBeHidden();
  await expect(checkout.status).toContainText('支付成功', { timeout: 30_000 });

  const outTradeNo = await second.paidOutTradeNo();
  expect(await checkout.paidOutTradeNo()).toBe(outTradeNo);
  expect(await ledger.succeededCharges(outTradeNo)).toBe(1);
});

test('stripe 3-D Secure: a challenge left open while the buyer pays with Alipay in another tab charges nothing when completed', async ({
  checkout,
  ledger,
  page,
  context,
}) => {
  await startCardStep(checkout);
  await payWithCard(page, AUTHENTICATION_CARD);
  await expect(challenge(page).dialog).toBeVisible();

  // Another tab pays the same order with Alipay: an attempt of its own (a new key).
  const second = new CheckoutPage(await context.newPage());
  await second.page.addInitScript(() => {
    const state = JSON.parse(localStorage.getItem('payonce.checkout.v1') ?? '{}');
    delete state.attempt;
    localStorage.setItem('payonce.checkout.v1', JSON.stringify(state));
  });
  await second.open();
  await second.chooseGateway('支付宝');
  await second.pay();
  await expect(second.status).toContainText('支付成功', { timeout: 30_000 });
  const outTradeNo = await second.paidOutTradeNo();

  // The late buyer completes the challenge still open in the first tab: the PaymentIntent was closed.
  await challenge(page)
    .frame.getByRole('button', { name: /完成验证/ })
    .click();
  await expect(challenge(page).dialog).toBeHidden();
  await expect(checkout.status).toContainText('支付成功', { timeout: 30_000 });

  const charges = (await ledger.read(outTradeNo)).charges.filter((c) => c.status === 'succeeded');
  expect(charges.map((c) => c.gateway)).toEqual(['alipay']);
});

test('stripe 3-D Secure: the buyer reloads the page during the challenge, pays again, and is charged once', async ({
  checkout,
  ledger,
  page,
}) => {
  await startCardStep(checkout);
  await payWithCard(page, AUTHENTICATION_CARD);
  await expect(challenge(page).dialog).toBeVisible();
  // The challenge is abandoned with the page: the PaymentIntent waits in requires_action.
  await page.reload();
  await checkout.loaded();
  await expect(checkout.status).toContainText('等待付款');
  await expect(challenge(page).dialog).toBeHidden();

  await payWithCard(page, AUTHENTICATION_CARD);
  await answerChallenge(page, /完成验证/);
  await expect(checkout.status).toContainText('支付成功', { timeout: 30_000 });
  expect(await ledger.succeededCharges(await checkout.paidOutTradeNo())).toBe(1);
});
