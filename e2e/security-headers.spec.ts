/**
 * The pages' security headers: a Content-Security-Policy with a per-request nonce that the page
 * itself passes (no violation while a payment runs through), no framing, a referrer policy.
 */
import { expect, test } from './fixtures';

test('the checkout page sends its security headers and runs without a single CSP violation', async ({ checkout, page }) => {
  const violations: string[] = [];
  page.on('console', (message) => {
    if (/Content Security Policy|Refused to/i.test(message.text())) violations.push(message.text());
  });

  await test.step('1. the headers of the page', async () => {
    const response = await page.goto('/');
    const headers = response!.headers();
    const policy = headers['content-security-policy'] ?? '';
    expect(policy).toMatch(/script-src 'self' 'nonce-[A-Za-z0-9+/=]+' 'strict-dynamic'/);
    expect(policy).toContain("frame-ancestors 'none'");
    expect(policy).toContain("object-src 'none'");
    expect(headers['x-frame-options']).toBe('DENY');
    expect(headers['referrer-policy']).toBe('strict-origin-when-cross-origin');
    expect(headers['x-content-type-options']).toBe('nosniff');
    // A fresh nonce each time.
    const again = (await page.request.get('/')).headers()['content-security-policy'];
    expect(again).not.toBe(policy);
  });

  await test.step('2. a payment through to 支付成功 and the 幕后 view, with no CSP violation', async () => {
    await checkout.open();
    await checkout.pay();
    await expect(checkout.status).toContainText('支付成功');
    await page.getByRole('link', { name: '幕后' }).click();
    await expect(page.getByTestId('ledger-badge')).toHaveText('1 笔扣款');
    expect(violations).toEqual([]);
  });

  await test.step('3. a script injected into the HTML (as an XSS would) does not run', async () => {
    await page.route('/', async (route) => {
      const original = await route.fetch();
      const body = (await original.text()).replace('<head>', '<head><script>window.__injected = true</script>');
      await route.fulfill({ response: original, body });
    });
    await page.goto('/');
    await expect(page.getByRole('heading', { name: 'PayOnce 收银台' })).toBeVisible();
    expect(await page.evaluate(() => (window as unknown as { __injected?: boolean }).__injected)).toBeUndefined();
    expect(violations.some((v) => /inline script/i.test(v))).toBe(true);
    await page.unroute('/');
  });

  await test.step('4. the API answers carry nosniff too', async () => {
    const api = await page.request.get('/api/trpc/checkout.products');
    expect(api.headers()['x-content-type-options']).toBe('nosniff');
  });
});
