import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { describe, it } from 'node:test';
import {
  assertSessionConfig,
  DEFAULT_SESSION_MAX_AGE_SECONDS,
  issueSession,
  parseCookies,
  SessionConfigError,
  sessionCookieValue,
  sessionMaxAgeSeconds,
  verifySession,
} from '@/server/http/session';

const http = { secure: false };
const DAY = 24 * 60 * 60;

describe('session cookie', () => {
  it('round-trips a signed customer id and is httpOnly', () => {
    const { customerId, setCookie } = issueSession('secret', http);
    assert.match(setCookie, /HttpOnly/);
    assert.equal(verifySession('secret', setCookie.split(';')[0]!, http), customerId);
  });

  it('refuses a forged or re-signed id', () => {
    const { setCookie } = issueSession('secret', { secure: true });
    const cookie = setCookie.split(';')[0]!;
    assert.match(setCookie, /Secure/);
    assert.equal(verifySession('other-secret', cookie, { secure: true }), undefined);
    const [name, value] = cookie.split('=');
    const [, issuedAt, signature] = value!.split('.');
    const forged = `${name}=00000000-0000-4000-8000-000000000000.${issuedAt}.${signature}`;
    assert.equal(verifySession('secret', forged, { secure: true }), undefined);
    assert.equal(verifySession('secret', null, { secure: true }), undefined);
  });

  it('carries its issue time under the signature: a re-dated cookie is refused', () => {
    const { customerId, setCookie } = issueSession('secret', http);
    const [id, issuedAt, signature] = setCookie.split(';')[0]!.split('=')[1]!.split('.');
    assert.equal(id, customerId);
    assert.equal(verifySession('secret', `payonce_session=${id}.${Number(issuedAt) + 1}.${signature}`, http), undefined);
  });

  it('expires after its maximum age, and its Max-Age says when', () => {
    const now = Date.UTC(2030, 0, 31);
    const { customerId, setCookie } = issueSession('secret', { secure: false, now });
    assert.match(setCookie, new RegExp(`Max-Age=${DEFAULT_SESSION_MAX_AGE_SECONDS}(;|$)`));
    const cookie = setCookie.split(';')[0]!;
    const at = (days: number) => ({ secure: false, now: now + days * DAY * 1000 });
    assert.equal(verifySession('secret', cookie, at(29.9)), customerId);
    assert.equal(verifySession('secret', cookie, at(30)), undefined);
    assert.equal(verifySession('secret', cookie, { ...at(2), maxAgeSeconds: DAY }), undefined);
    // Issued an hour "in the future" (a broken clock): refused rather than living for ever.
    assert.equal(verifySession('secret', cookie, at(-1 / 24)), undefined);
  });

  it('takes its maximum age from SESSION_MAX_AGE_SECONDS', () => {
    assert.equal(sessionMaxAgeSeconds({}), DEFAULT_SESSION_MAX_AGE_SECONDS);
    assert.equal(sessionMaxAgeSeconds({ SESSION_MAX_AGE_SECONDS: '3600' }), 3600);
    assert.throws(() => assertSessionConfig({ SESSION_MAX_AGE_SECONDS: '30d' }), SessionConfigError);
    assert.throws(() => assertSessionConfig({ SESSION_MAX_AGE_SECONDS: '0' }), /SESSION_MAX_AGE_SECONDS/);
  });

  it('refuses an old-format cookie (no issue time)', () => {
    const id = '00000000-0000-4000-8000-000000000001';
    const old = `${id}.${createHmac('sha256', 'secret').update(id).digest('base64url')}`;
    assert.equal(verifySession('secret', `payonce_session=${old}`, http), undefined);
  });

  it('prefers the valid session issued last, whatever the order', () => {
    const now = Date.now();
    const older = sessionCookieValue('secret', '00000000-0000-4000-8000-00000000000a', Math.floor(now / 1000) - 60);
    const newer = sessionCookieValue('secret', '00000000-0000-4000-8000-00000000000b', Math.floor(now / 1000));
    for (const header of [`payonce_session=${older}; payonce_session=${newer}`, `payonce_session=${newer}; payonce_session=${older}`]) {
      assert.equal(verifySession('secret', header, http), '00000000-0000-4000-8000-00000000000b');
    }
    assert.equal(
      verifySession('secret', `payonce_session=x.1.forged; payonce_session=${older}`, http),
      '00000000-0000-4000-8000-00000000000a',
    );
  });

  it('reads __Host-payonce_session over https and payonce_session over http, never the other', () => {
    const value = sessionCookieValue('secret', '00000000-0000-4000-8000-00000000000c', Math.floor(Date.now() / 1000));
    assert.equal(verifySession('secret', `__Host-payonce_session=${value}`, { secure: true }), '00000000-0000-4000-8000-00000000000c');
    assert.equal(verifySession('secret', `payonce_session=${value}`, { secure: true }), undefined);
    assert.equal(verifySession('secret', `__Host-payonce_session=${value}`, http), undefined);
    assert.match(issueSession('secret', { secure: true }).setCookie, /^__Host-payonce_session=[^;]+; Path=\/;.*; Secure$/);
    assert.doesNotMatch(issueSession('secret', { secure: true }).setCookie, /Domain/i);
  });

  it('ignores cookie values it cannot decode instead of throwing', () => {
    const cookies = parseCookies('other=%E0%A4%A; x=%; ok=a%20b');
    assert.equal(cookies.get('ok'), 'a b');
    assert.equal(cookies.has('other'), false);
    assert.equal(cookies.has('x'), false);
  });
});

describe('session configuration at start', () => {
  const secret = 'k'.repeat(32);

  it('requires SESSION_SECRET of at least 32 characters in production', () => {
    assert.throws(() => assertSessionConfig({ NODE_ENV: 'production' }), /SESSION_SECRET is not set.*openssl rand -base64 32/);
    assert.throws(() => assertSessionConfig({ NODE_ENV: 'production', SESSION_SECRET: 'short' }), /SESSION_SECRET is 5 characters/);
    assert.doesNotThrow(() => assertSessionConfig({ NODE_ENV: 'production', SESSION_SECRET: secret }));
  });

  it('lets development fall back to the secret kept under .data/', () => {
    assert.doesNotThrow(() => assertSessionConfig({ NODE_ENV: 'development' }));
    assert.doesNotThrow(() => assertSessionConfig({}));
  });
});
