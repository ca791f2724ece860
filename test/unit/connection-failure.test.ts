import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { classifyConnectionFailure } from '@/server/payments/transport';

const withCode = (code: string, extra: object = {}) => Object.assign(new Error(code), { code }, extra);

describe('telling a request that never left from one the gateway may have processed', () => {
  it('a refused connection, an unknown host, a connect timeout: never sent', () => {
    for (const code of ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']) {
      assert.deepEqual(classifyConnectionFailure(withCode(code)), { neverSent: true, code });
    }
  });

  it('undici\'s "fetch failed" with the socket error one or two causes deep', () => {
    const fetchFailed = new TypeError('fetch failed', { cause: withCode('ECONNREFUSED') });
    assert.deepEqual(classifyConnectionFailure(fetchFailed), { neverSent: true, code: 'ECONNREFUSED' });
    const deeper = new Error('request failed', { cause: new Error('socket', { cause: withCode('UND_ERR_CONNECT_TIMEOUT') }) });
    assert.deepEqual(classifyConnectionFailure(deeper), { neverSent: true, code: 'UND_ERR_CONNECT_TIMEOUT' });
  });

  it('happy eyeballs: an AggregateError is never sent only when every address refused', () => {
    const allRefused = new AggregateError([withCode('ECONNREFUSED'), withCode('EHOSTUNREACH')], 'connect failed');
    assert.equal(classifyConnectionFailure(allRefused).neverSent, true);
    const oneReset = new AggregateError([withCode('ECONNREFUSED'), withCode('ECONNRESET')], 'connect failed');
    assert.equal(classifyConnectionFailure(oneReset).neverSent, false);
  });

  it('a reset, a timeout after connecting, or no code at all: may have been processed', () => {
    assert.deepEqual(classifyConnectionFailure(withCode('ECONNRESET')), { neverSent: false, code: 'ECONNRESET' });
    assert.deepEqual(classifyConnectionFailure(withCode('UND_ERR_SOCKET')), { neverSent: false, code: 'UND_ERR_SOCKET' });
    assert.deepEqual(classifyConnectionFailure(new Error('other side closed')), { neverSent: false, code: undefined });
    assert.deepEqual(classifyConnectionFailure(undefined), { neverSent: false, code: undefined });
  });
});
