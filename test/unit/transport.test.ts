import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { QueryOutcome } from '@/server/payments/gateway';
import { chargeOrRefundFailure, closeFailure, confirmPaidByQuery, exchangeHttp, queryFailure } from '@/server/payments/transport';

/** A real HTTP server on a free port, one behaviour per path. */
let server: Server;
let baseUrl: string;

const routes: Record<string, (req: IncomingMessage, res: ServerResponse) => void> = {
  '/answer': (_req, res) => {
    res.writeHead(201, { 'content-type': 'application/json', 'x-signature': 'abc' });
    res.end('{"ok":true}');
  },
  // Headers and half the body, then nothing: the gateway stalls mid-answer.
  '/stall-mid-body': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
    res.write('{"half":');
  },
  // The request arrived, then the connection dies without an answer.
  '/reset-after-request': (req) => {
    req.socket.destroy();
  },
};

before(async () => {
  server = createServer((req, res) => routes[req.url ?? '']?.(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const post = { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}', redirect: 'error' } as const;

describe('one exchange with a gateway over HTTP', () => {
  it('returns the whole answer: status, headers and body', async () => {
    const answer = await exchangeHttp(`${baseUrl}/answer`, post, 2000);
    assert.equal(answer.kind, 'received');
    assert.ok(answer.kind === 'received');
    assert.equal(answer.status, 201);
    assert.equal(answer.headers.get('x-signature'), 'abc');
    assert.equal(answer.text, '{"ok":true}');
  });

  it('a refused connection never reached the gateway: not_sent, safe to send again', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));

    const failure = await exchangeHttp(`http://127.0.0.1:${port}/`, post, 2000);
    assert.deepEqual(
      { kind: failure.kind, code: 'code' in failure ? failure.code : undefined },
      { kind: 'not_sent', code: 'ECONNREFUSED' },
    );
  });

  it('the timeout covers the body: a gateway that stalls mid-answer is in doubt (TIMEOUT)', { timeout: 5000 }, async () => {
    const started = Date.now();
    const failure = await exchangeHttp(`${baseUrl}/stall-mid-body`, post, 300);
    assert.deepEqual({ kind: failure.kind, code: 'code' in failure ? failure.code : undefined }, { kind: 'in_doubt', code: 'TIMEOUT' });
    assert.ok(Date.now() - started < 2000, 'gave up at the timeout, not when the server let go');
  });

  it('a connection dropped after the request was sent is in doubt, never retried as unsent', async () => {
    const failure = await exchangeHttp(`${baseUrl}/reset-after-request`, post, 2000);
    assert.equal(failure.kind, 'in_doubt');
    assert.ok('code' in failure && failure.code !== 'TIMEOUT', JSON.stringify(failure));
  });
});

describe('what a failed exchange means, and a paid trade confirmed by query', () => {
  const failure = (kind: 'not_sent' | 'in_doubt') => ({ kind, code: 'ECONNRESET', message: 'socket hang up' });

  it('a charge or refund never sent is retryable; one maybe processed is indeterminate', () => {
    assert.deepEqual(chargeOrRefundFailure(failure('not_sent'), 'refund'), {
      kind: 'retryable',
      code: 'ECONNRESET',
      message: 'refund: socket hang up',
    });
    assert.equal(chargeOrRefundFailure(failure('in_doubt')).kind, 'indeterminate');
  });

  it('a close is indeterminate and a query unavailable, sent or not', () => {
    for (const kind of ['not_sent', 'in_doubt'] as const) {
      assert.equal(closeFailure(failure(kind)).kind, 'indeterminate');
      assert.equal(queryFailure(failure(kind)).kind, 'unavailable');
    }
  });

  const paid = (amountMinor: number, currency: string): QueryOutcome => ({
    kind: 'answered',
    trade: { kind: 'succeeded', gatewayTradeNo: 'T1', amountMinor, currency },
  });

  it('believes "already paid" only for this amount in this currency', async () => {
    const expected = { amountMinor: 16800, currency: 'CNY' };
    assert.deepEqual(await confirmPaidByQuery(async () => paid(16800, 'CNY'), expected, 'PAID'), {
      kind: 'succeeded',
      gatewayTradeNo: 'T1',
      amountMinor: 16800,
      currency: 'CNY',
    });
    for (const other of [paid(16801, 'CNY'), paid(16800, 'JPY')]) {
      const outcome = await confirmPaidByQuery(async () => other, expected, 'PAID');
      assert.deepEqual([outcome.kind, outcome.kind === 'indeterminate' && outcome.code], ['indeterminate', 'PAID']);
    }
    const unknown = await confirmPaidByQuery(
      async () => ({ kind: 'unavailable', code: 'TIMEOUT', message: 'no answer' }),
      expected,
      'PAID',
    );
    assert.deepEqual(unknown, { kind: 'indeterminate', code: 'PAID', message: 'no answer' });
  });
});
