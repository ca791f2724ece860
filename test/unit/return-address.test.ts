/**
 * Where a gateway's page sends the buyer back to (server/checkout/return-address.ts): the origin they
 * paid from when this deployment answers there, never an address a request's headers alone choose in
 * production; and a return link's token that only this deployment can make for that order.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buyerOrigin, returnAddress, returnLandingPath, returnToken, verifyReturnToken } from '@/server/checkout/return-address';

const ORDER = '2eb04333-ee78-473f-83bf-f2aaf70593bb';
const headers = (origin: string | undefined, host: string) => new Headers({ ...(origin ? { origin } : {}), host });

describe('buyerOrigin', () => {
  const local = { publicBaseUrl: 'http://127.0.0.1:3000' };
  it('on a local run, follows the origin the page was opened on: localhost, 127.0.0.1, a LAN name', () => {
    assert.equal(buyerOrigin(headers('http://localhost:3000', 'localhost:3000'), local), 'http://localhost:3000');
    assert.equal(buyerOrigin(headers('http://127.0.0.1:3000', '127.0.0.1:3000'), local), 'http://127.0.0.1:3000');
    assert.equal(buyerOrigin(headers('http://devbox.lan:3000', 'devbox.lan:3000'), local), 'http://devbox.lan:3000');
  });
  it('on a local run, an Origin that names another host than the request reached is not followed', () => {
    assert.equal(buyerOrigin(headers('https://evil.example', 'localhost:3000'), local), 'http://127.0.0.1:3000');
  });
  it('without an Origin header (curl, an old client), the public base URL', () => {
    assert.equal(buyerOrigin(headers(undefined, 'localhost:3000'), local), 'http://127.0.0.1:3000');
    assert.equal(buyerOrigin(headers('null', 'localhost:3000'), local), 'http://127.0.0.1:3000');
  });
  it('in production, only the public base URL and PUBLIC_ORIGINS, whatever the headers say', () => {
    const production = { publicBaseUrl: 'https://pay.example.com', extraOrigins: ['https://www.pay.example.com'] };
    assert.equal(buyerOrigin(headers('https://pay.example.com', 'pay.example.com'), production), 'https://pay.example.com');
    assert.equal(buyerOrigin(headers('https://www.pay.example.com', 'www.pay.example.com'), production), 'https://www.pay.example.com');
    assert.equal(buyerOrigin(headers('https://evil.example', 'evil.example'), production), 'https://pay.example.com');
  });
});

describe('return links', () => {
  it('carry the order and a token only the secret makes, on the buyer’s origin', () => {
    const url = new URL(returnAddress('secret-one', 'http://localhost:3000').urlFor(ORDER));
    assert.equal(url.origin, 'http://localhost:3000');
    assert.equal(url.pathname, '/api/return');
    assert.equal(url.searchParams.get('orderId'), ORDER);
    const token = url.searchParams.get('t')!;
    assert.equal(verifyReturnToken('secret-one', ORDER, token), true);
    assert.equal(verifyReturnToken('secret-two', ORDER, token), false);
    assert.equal(verifyReturnToken('secret-one', '00000000-0000-4000-8000-000000000000', token), false);
    assert.equal(verifyReturnToken('secret-one', ORDER, token.slice(1)), false);
  });
  it('land on the checkout with what could be ours, and on a bare checkout otherwise', () => {
    const token = returnToken('s', ORDER);
    assert.equal(returnLandingPath(ORDER, token), `/?returned=${ORDER}&t=${token}`);
    assert.equal(returnLandingPath(ORDER, null), '/');
    assert.equal(returnLandingPath('//evil.example', token), '/');
    assert.equal(returnLandingPath(ORDER, '<script>'), '/');
  });
});
