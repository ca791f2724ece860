import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { issueSession, verifySession } from '../../server/session';

describe('session cookie', () => {
  it('round-trips a signed customer id and is httpOnly', () => {
    const { customerId, setCookie } = issueSession('secret', { secure: false });
    assert.match(setCookie, /HttpOnly/);
    assert.equal(verifySession('secret', setCookie.split(';')[0]!), customerId);
  });

  it('refuses a forged or re-signed id', () => {
    const { setCookie } = issueSession('secret', { secure: true });
    const cookie = setCookie.split(';')[0]!;
    assert.match(setCookie, /Secure/);
    assert.equal(verifySession('other-secret', cookie), undefined);
    const [name, value] = cookie.split('=');
    const forged = `${name}=00000000-0000-4000-8000-000000000000.${value!.split('.')[1]}`;
    assert.equal(verifySession('secret', forged), undefined);
    assert.equal(verifySession('secret', null), undefined);
  });
});
