/**
 * GET /sandbox/scan — the sandbox's phone camera: a scanned payment code opens its gateway's buyer
 * page, as the WeChat and Alipay apps do; anything else is refused.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/sandbox/scan.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';

const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL');

let sandbox: RunningSandbox;
before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [] });
});
after(async () => {
  await sandbox?.close();
});

const scan = (code?: string) =>
  fetch(`${sandbox.url}/sandbox/scan${code === undefined ? '' : `?code=${encodeURIComponent(code)}`}`, { redirect: 'manual' });

describe('the sandbox phone scans a code', () => {
  it("opens WeChat Pay's payment sheet for a Native code_url (weixin://wxpay/bizpayurl?pr=…)", async () => {
    const code = 'weixin://wxpay/bizpayurl?pr=AbC123xyz';
    const response = await scan(code);
    assert.equal(response.status, 302);
    assert.equal(response.headers.get('location'), `/sandbox/wechatpay/scan?code_url=${encodeURIComponent(code)}`);
  });

  it('opens a URL of this sandbox (an Alipay qr_code opens in the app as a page)', async () => {
    const response = await scan(`${sandbox.url}/sandbox/alipay/qr/tok_1?x=1`);
    assert.equal(response.status, 302);
    assert.equal(response.headers.get('location'), '/sandbox/alipay/qr/tok_1?x=1');
  });

  it('refuses a code that is not a payment code of this sandbox, and never redirects off it', async () => {
    for (const code of ['https://evil.example/sandbox/alipay/qr/x', `${sandbox.url}/ledger`, 'hello', 'weixin://dl/scan']) {
      const response = await scan(code);
      assert.equal(response.status, 400, code);
      assert.equal(response.headers.get('location'), null);
      assert.match(await response.text(), /不是沙箱的付款码/);
    }
  });

  it('without a code shows a form to paste one', async () => {
    const response = await scan();
    assert.equal(response.status, 200);
    assert.match(await response.text(), /<form method="get" action="\/sandbox\/scan">/);
  });
});
