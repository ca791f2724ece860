import { expect, test } from './fixtures';

test.describe('立即支付 with Alipay', () => {
  test('pays through to 支付成功 and the gateway charged exactly once', async ({ checkout, ledger, page }) => {
    await test.step('1. open the checkout and pick Alipay with a buyer who can pay', async () => {
      await checkout.open();
      await checkout.setQuantity('龙泉青瓷马克杯', 2);
      await checkout.chooseGateway('支付宝');
      await checkout.chooseBuyer('余额充足');
    });

    await test.step('2. click 立即支付 and see 支付成功', async () => {
      await checkout.pay();
      await expect(checkout.status).toContainText('支付成功');
      await expect(checkout.orderStatus).toHaveText('已支付');
      await expect(page.getByTestId('gateway-trade-no')).not.toBeEmpty();
    });

    await test.step('3. the ledger shows one successful charge for the order', async () => {
      const outTradeNo = (await checkout.outTradeNo.textContent())!.trim();
      expect(outTradeNo).toMatch(/^PO[0-9A-Z]{18}$/);
      expect(await ledger.succeededCharges(outTradeNo)).toBe(1);
      const charge = (await ledger.read(outTradeNo)).charges[0]!;
      expect(charge.amountMinor).toBe(2 * 6800 + 16800);
    });
  });

  test('shows 支付失败 for a declined buyer, then succeeds with another buyer on the same order', async ({ checkout, ledger }) => {
    await checkout.open();
    await checkout.chooseBuyer('余额不足');
    await checkout.pay();
    await expect(checkout.status).toContainText('支付失败');
    await expect(checkout.status).toContainText('余额不足');

    await checkout.chooseBuyer('余额充足');
    await checkout.pay();
    await expect(checkout.status).toContainText('支付成功');
    const outTradeNo = (await checkout.outTradeNo.textContent())!.trim();
    const entries = await ledger.read(outTradeNo);
    expect(entries.charges.map((c) => c.status).sort()).toEqual(['declined', 'succeeded']);
  });
});

for (const [gateway, label] of [
  ['wechatpay', '微信支付'],
  ['stripe', '银行卡'],
  ['2c2p', '2C2P'],
] as const) {
  test(`立即支付 with ${label} through to 支付成功, charged once`, async ({ checkout, ledger }) => {
    await checkout.open();
    await checkout.chooseGateway(label);
    await checkout.chooseBuyer('余额充足');
    await checkout.pay();
    await expect(checkout.status).toContainText('支付成功');
    await expect(checkout.orderStatus).toHaveText('已支付');
    const outTradeNo = (await checkout.outTradeNo.textContent())!.trim();
    const charges = (await ledger.read(outTradeNo)).charges;
    expect(charges.filter((c) => c.status === 'succeeded')).toHaveLength(1);
    expect(charges[0]!.gateway).toBe(gateway);
  });
}

test('the fault-injection endpoint does not exist unless CHECKOUT_FAULTS=1 or demo mode', async ({ request }) => {
  expect((await request.get('/api/faults')).status()).toBe(404);
  const arm = await request.post('/api/faults', { data: { point: 'after_claim', action: { kind: 'crash' } } });
  expect(arm.status()).toBe(404);
});
