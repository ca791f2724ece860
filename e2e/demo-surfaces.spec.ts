import { expect, test } from './fixtures';

/**
 * The app as users get it has none of the demo's surfaces (server/demo/mode.ts): no shared mailbox, no
 * open metrics, no fault switch. Each answers 404, as if it did not exist.
 */
test('the demo mailbox, metrics and fault injection do not exist outside demo mode', async ({ page, request }) => {
  await test.step('1. /mail is a 404 page, not a list of every customer’s emails', async () => {
    const response = await page.goto('/mail');
    expect(response?.status()).toBe(404);
    await expect(page.getByRole('heading', { name: /邮件/ })).toHaveCount(0);
    await expect(page.getByRole('heading', { name: /404/ })).toBeVisible();
  });

  await test.step('2. /api/metrics is a 404, with or without a bearer token', async () => {
    expect((await request.get('/api/metrics')).status()).toBe(404);
    const guessed = await request.get('/api/metrics', { headers: { authorization: 'Bearer guessed' } });
    expect(guessed.status()).toBe(404);
    expect(await guessed.text()).not.toContain('payonce_');
  });

  await test.step('3. /api/faults is a 404: nothing can be armed', async () => {
    expect((await request.get('/api/faults')).status()).toBe(404);
    const arm = await request.post('/api/faults', { data: { point: 'after_claim', action: { kind: 'crash' } } });
    expect(arm.status()).toBe(404);
  });
});
