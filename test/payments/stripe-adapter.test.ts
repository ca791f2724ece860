/**
 * The Stripe adapter against the PSP sandbox over HTTP (real PostgreSQL behind it), plus a few
 * misbehaving local HTTP servers for the transport failures a healthy sandbox never produces.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/payments/stripe-adapter.test.ts
 */
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import Stripe from 'stripe';
import { createStripeGateway, type StripeGatewayConfig } from '@/server/payments/stripe';
import type { ChargeRequest, NotificationVerdict, PaymentGateway, RefundRequest } from '@/server/payments/gateway';
import { startSandbox, type RunningSandbox } from '@/sandbox/server';
import { createStripeModule, stripeModule } from '@/sandbox/stripe';
import { waitFor, startServer, readLedger } from '@/test/support/harness';

const DATABASE_URL = process.env.DATABASE_URL;
if (!DATABASE_URL) {
  throw new Error('DATABASE_URL is not set: these tests need a real PostgreSQL (e.g. postgres://postgres@127.0.0.1:5432/sandbox_dev)');
}
const databaseUrl: string = DATABASE_URL;

interface Credentials {
  secretKey: string;
  webhookSecret: string;
  accountId: string;
  host: string;
  port: number;
  protocol: 'http';
  testBuyers: { ok: string; insufficient_funds: string; account_restricted: string };
}

interface Ledger {
  charges: { outTradeNo: string; amountMinor: number; status: string; gatewayTradeNo: string | null }[];
  notifications: { outTradeNo: string; attempt: number; acknowledged: boolean }[];
  refunds: { outTradeNo: string; amountMinor: number; status: string; refundId: string; gatewayRefundId: string; gatewayTradeNo: string }[];
}

let sandbox: RunningSandbox;
let creds: Credentials;
let gateway: PaymentGateway;

function config(overrides: Partial<StripeGatewayConfig> = {}): StripeGatewayConfig {
  return { ...creds, ...overrides };
}

/** A gateway pointed at a local server, by URL. */
function gatewayAt(url: string, overrides: Partial<StripeGatewayConfig> = {}): PaymentGateway {
  const { hostname, port } = new URL(url);
  return createStripeGateway(config({ host: hostname, port: Number(port), ...overrides }));
}

function newOutTradeNo(): string {
  return `PO${randomBytes(9).toString('hex').toUpperCase()}`;
}

function chargeRequest(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    outTradeNo,
    amountMinor: 1230,
    currency: 'CNY',
    subject: 'PayOnce 订单 测试',
    attempt: 1,
    // A sandbox test buyer: the charge answers at once. The buyer's own card step is tested on its own.
    buyer: 'ok',
    notifyUrl: 'http://127.0.0.1:9/unused', // discard port: deliveries fail fast, nothing listens
    ...overrides,
  };
}

function ledger(outTradeNo: string): Promise<Ledger> {
  return readLedger<Ledger>(sandbox.url, outTradeNo);
}

/** Answers every request with one status and a Stripe error body. */
function answering(status: number, error: Record<string, string>, headers: Record<string, string> = {}): http.RequestListener {
  return (req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify({ error }));
    });
  };
}

before(async () => {
  sandbox = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [stripeModule] });
  creds = ((await (await fetch(`${sandbox.url}/sandbox/credentials`)).json()) as { stripe: Credentials }).stripe;
  gateway = createStripeGateway(config());
});

after(async () => {
  await sandbox.close();
});

describe('charge', () => {
  it('succeeds with the ok buyer', async () => {
    const outTradeNo = newOutTradeNo();
    const outcome = await gateway.charge(chargeRequest(outTradeNo, { amountMinor: 1999 }));
    assert.ok(outcome.kind === 'succeeded', JSON.stringify(outcome));
    assert.match(outcome.gatewayTradeNo, /^pi_/);
    assert.equal(outcome.amountMinor, 1999);
    assert.equal(outcome.currency, 'CNY');
    const { charges } = await ledger(outTradeNo);
    assert.deepEqual(
      charges.map((c) => [c.status, c.amountMinor, c.gatewayTradeNo]),
      [['succeeded', 1999, outcome.gatewayTradeNo]],
    );
  });

  it('declines both test buyers, then a new attempt with the ok buyer pays the same order once', async () => {
    const outTradeNo = newOutTradeNo();
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' })), {
      kind: 'declined',
      code: 'insufficient_funds',
      message: 'Your card has insufficient funds.',
    });
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { buyer: 'account_restricted', attempt: 2 })), {
      kind: 'declined',
      code: 'lost_card',
      message: 'Your card was declined.',
    });
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'pending' } });
    const ok = await gateway.charge(chargeRequest(outTradeNo, { buyer: 'ok', attempt: 3 }));
    assert.equal(ok.kind, 'succeeded');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'declined', 'succeeded'],
    );
  });

  it('replays a retry of the same attempt — the decline too — without charging again', async () => {
    const outTradeNo = newOutTradeNo();
    const declined = await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' })), declined);
    const paid = await gateway.charge(chargeRequest(outTradeNo, { attempt: 2 }));
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { attempt: 2 })), paid);
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'succeeded'],
    );
  });

  it('reports an order that is already paid as succeeded when a new attempt is started, charging nothing', async () => {
    const outTradeNo = newOutTradeNo();
    const paid = await gateway.charge(chargeRequest(outTradeNo));
    assert.ok(paid.kind === 'succeeded');
    assert.deepEqual(await gateway.charge(chargeRequest(outTradeNo, { attempt: 2 })), paid);
    const other = await gateway.charge(chargeRequest(outTradeNo, { attempt: 3, amountMinor: 1231 }));
    assert.ok(other.kind === 'indeterminate');
    assert.equal(other.code, 'AMOUNT_MISMATCH');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['succeeded'],
    );
  });

  it('finds a payment search does not show yet: no second charge on a lagging index', async () => {
    const lagging = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [createStripeModule({ searchLagMs: 60_000 })] });
    try {
      const g = gatewayAt(lagging.url);
      const outTradeNo = newOutTradeNo();
      const paid = await g.charge(chargeRequest(outTradeNo));
      assert.ok(paid.kind === 'succeeded');
      assert.deepEqual(await g.charge(chargeRequest(outTradeNo, { attempt: 2 })), paid);
      assert.deepEqual(await g.query(outTradeNo), {
        kind: 'answered',
        trade: { kind: 'succeeded', gatewayTradeNo: paid.gatewayTradeNo, amountMinor: 1230, currency: 'CNY' },
      });
      assert.equal((await ledger(outTradeNo)).charges.length, 1);
    } finally {
      await lagging.close();
    }
  });

  it('settles a retry of the same attempt with other parameters (idempotency_error) by querying', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    const changed = await gateway.charge(chargeRequest(outTradeNo, { buyer: 'ok' })); // same attempt, other card
    assert.ok(changed.kind === 'indeterminate', JSON.stringify(changed));
    assert.equal(changed.code, 'idempotency_error');
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined'],
    );
  });

  it('sends a currency Stripe does not know, which Stripe refuses for good (declined)', async () => {
    const unknownCurrency = await gateway.charge(chargeRequest(newOutTradeNo(), { currency: 'XYZ' }));
    assert.ok(unknownCurrency.kind === 'declined'); // Stripe's own invalid_request_error: terminal
  });
});

describe('charge transport failures', () => {
  it('is indeterminate when the key stays in use (409 after the SDK’s retries)', async () => {
    let posts = 0;
    const server = await startServer((req, res) => {
      if (req.method === 'POST') posts += 1;
      answering(409, { type: 'invalid_request_error', code: 'idempotency_key_in_use', message: 'in use' })(req, res);
    });
    try {
      const outcome = await gatewayAt(server.url, { maxNetworkRetries: 1 }).charge(chargeRequest(newOutTradeNo()));
      assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
      assert.equal(outcome.code, 'idempotency_key_in_use');
      assert.equal(posts, 2);
    } finally {
      await server.close();
    }
  });

  it('is indeterminate when a refused retry follows a try that reached Stripe', async () => {
    // The first POST gets a 500 (maybe executed); the server is then gone, so the SDK's retry is
    // refused. The SDK's error only tells of the refusal — the adapter remembers the first try.
    const server: { url: string; close(): Promise<void> } = await startServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.method !== 'POST') {
          res.writeHead(503, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { type: 'api_error', message: 'search unavailable' } }));
          return;
        }
        res.writeHead(500, { 'content-type': 'application/json', connection: 'close' });
        res.end(JSON.stringify({ error: { type: 'api_error', message: 'An unknown error occurred' } }), () => void server?.close());
      });
    });
    const outcome = await gatewayAt(server.url, { maxNetworkRetries: 1 }).charge(chargeRequest(newOutTradeNo()));
    assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
    assert.equal(outcome.code, 'ECONNREFUSED_AFTER_EARLIER_TRY');
  });
});

describe('notifications', () => {
  /** The merchant's webhook: verifies with the adapter, answers from a per-trade script. */
  const verdicts = new Map<string, NotificationVerdict[]>();
  const scripts = new Map<string, number[]>();
  let receiver: { url: string; close(): Promise<void> };
  let lastVerdict: NotificationVerdict | undefined;
  /** An account of its own whose registered endpoint is the receiver, and the adapter configured for it. */
  let notified: PaymentGateway;
  let merchant: { accountId: string; webhookSecret: string; secretKey: string };

  before(async () => {
    receiver = await startServer((req, res) => {
      let rawBody = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (rawBody += chunk));
      req.on('end', () => {
        // One endpoint for every trade: deliveries are told apart by the order the event is about.
        const key = String(
          (JSON.parse(rawBody) as { data?: { object?: { metadata?: Record<string, string> } } }).data?.object?.metadata?.out_trade_no,
        );
        const headers = new Headers();
        for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(name, value);
        void notified.verifyNotification({ headers, rawBody }).then((verdict) => {
          lastVerdict = verdict;
          verdicts.set(key, [...(verdicts.get(key) ?? []), verdict]);
          const script = scripts.get(key) ?? [];
          const scripted = script.length > 1 ? script.shift() : script[0];
          const reply = gateway.notificationReply(verdict.kind !== 'rejected' && scripted !== 500);
          res.writeHead(reply.status, reply.headers);
          res.end(reply.body);
        });
      });
    });
  });
  before(async () => {
    const account = (await (await fetch(`${sandbox.url}/sandbox/stripe/accounts`, { method: 'POST' })).json()) as {
      accountId: string;
      secretKey: string;
    };
    const { hostname, port } = new URL(sandbox.url);
    const endpoint = await new Stripe(account.secretKey, { host: hostname, port, protocol: 'http' }).webhookEndpoints.create({
      url: `${receiver.url}/stripe`,
      enabled_events: ['payment_intent.succeeded', 'payment_intent.payment_failed', 'refund.created', 'charge.refunded'],
    });
    merchant = { accountId: account.accountId, webhookSecret: endpoint.secret ?? '', secretKey: account.secretKey };
    notified = createStripeGateway({ ...config(), ...merchant });
  });
  after(async () => {
    await receiver.close();
  });

  /** The tool's deliveries are answered before it answers: the last verdict is the last copy's. */
  const tool = async (outTradeNo: string, overrides: Record<string, string>) => {
    const res = await fetch(`${sandbox.url}/sandbox/stripe/notify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outTradeNo, overrides }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    return lastVerdict as NotificationVerdict;
  };

  it('verifies the sandbox’s event and is retried until it acknowledges', async () => {
    const outTradeNo = newOutTradeNo();
    scripts.set(outTradeNo, [500, 500, 200]);
    const paid = await notified.charge(chargeRequest(outTradeNo, { amountMinor: 5000 }));
    assert.ok(paid.kind === 'succeeded');

    const { notifications } = await waitFor('the acknowledgement', async () => {
      const l = await ledger(outTradeNo);
      return l.notifications.some((n) => n.acknowledged) ? l : undefined;
    });
    assert.deepEqual(
      notifications.map((n) => [n.attempt, n.acknowledged]),
      [
        [1, false],
        [2, false],
        [3, true],
      ],
    );
    const received = verdicts.get(outTradeNo) ?? [];
    assert.equal(received.length, 3);
    const [first] = received;
    assert.ok(first?.kind === 'verified');
    assert.match(first.notification.eventId, /^evt_/);
    for (const verdict of received) {
      assert.deepEqual(verdict, {
        kind: 'verified',
        notification: {
          gateway: 'stripe',
          eventId: first.notification.eventId, // one event, retried: dedupe on its id
          merchantId: merchant.accountId,
          outTradeNo,
          status: 'succeeded',
          gatewayTradeNo: paid.gatewayTradeNo,
          amountMinor: 5000,
          currency: 'CNY',
        },
      });
    }
  });

  it('verifies payment_intent.payment_failed as a notification that settles nothing', async () => {
    const outTradeNo = newOutTradeNo();
    await notified.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    const [verdict] = await waitFor('the delivery', async () => verdicts.get(outTradeNo));
    assert.ok(verdict?.kind === 'verified');
    assert.equal(verdict.notification.status, 'other');
    assert.equal(verdict.notification.outTradeNo, outTradeNo);
  });

  it('acts on the API’s copy of a validly signed event whose body lies, and rejects every forgery', async () => {
    const outTradeNo = newOutTradeNo();
    const paid = await notified.charge(chargeRequest(outTradeNo));
    assert.ok(paid.kind === 'succeeded');
    await waitFor('the scheduled delivery', async () => ((verdicts.get(outTradeNo) ?? []).length >= 1 ? true : undefined));
    const [delivered] = verdicts.get(outTradeNo) ?? [];
    assert.ok(delivered?.kind === 'verified');

    // Signed with the endpoint's secret (a leaked one, say), lying about amount, order, type and
    // status: the adapter re-fetches the event by its id and acts on what the API says.
    const victim = newOutTradeNo();
    const lies = { amount: '1', out_trade_no: victim, type: 'payment_intent.processing', status: 'processing' };
    assert.deepEqual(await tool(outTradeNo, lies), delivered);
    assert.deepEqual(await tool(outTradeNo, { amount: '12.30' }), delivered);
    // An id the API does not know is acknowledged and acts on nothing.
    const unknown = await tool(outTradeNo, { event_id: 'evt_1NotAnEventOfStripes0000' });
    assert.deepEqual(unknown, {
      kind: 'verified',
      notification: {
        gateway: 'stripe',
        eventId: 'evt_1NotAnEventOfStripes0000',
        merchantId: merchant.accountId,
        outTradeNo: '',
        status: 'other',
        gatewayTradeNo: '',
        amountMinor: 0,
        currency: '',
      },
    });

    assert.deepEqual(await tool(outTradeNo, { signature: 'ab'.repeat(32) }), {
      kind: 'rejected',
      reason:
        'invalid signature: No signatures found matching the expected signature for payload. Are you passing the raw request body you received from Stripe? ',
    });
    const stale = await tool(outTradeNo, { timestamp: String(Math.floor(Date.now() / 1000) - 301) });
    assert.deepEqual(stale, { kind: 'rejected', reason: 'invalid signature: Timestamp outside the tolerance zone' });
    // Correctly signed, but dated ten minutes ahead: refused like a stale one.
    const ahead = String(Math.floor(Date.now() / 1000) + 600);
    const future = await tool(outTradeNo, { timestamp: ahead });
    assert.deepEqual(future, { kind: 'rejected', reason: `signature timestamp ${ahead} is more than 300 s in the future` });
    // Within the window either way is fine (clocks differ by seconds, not minutes).
    assert.equal((await tool(outTradeNo, { timestamp: String(Math.floor(Date.now() / 1000) + 60) })).kind, 'verified');
    assert.equal((await tool(outTradeNo, { signature: '' })).kind, 'rejected');

    // Signed with another secret, or not signed at all.
    const body = JSON.stringify({
      id: 'evt_forged',
      object: 'event',
      type: 'payment_intent.succeeded',
      data: { object: { object: 'payment_intent' } },
    });
    const t = Math.floor(Date.now() / 1000);
    const otherSecret = createHmac('sha256', 'whsec_not_the_right_one').update(`${t}.${body}`).digest('hex');
    const forged = await notified.verifyNotification({
      headers: new Headers({ 'stripe-signature': `t=${t},v1=${otherSecret}` }),
      rawBody: body,
    });
    assert.equal(forged.kind, 'rejected');
    assert.deepEqual(await notified.verifyNotification({ headers: new Headers(), rawBody: body }), {
      kind: 'rejected',
      reason: 'missing Stripe-Signature header',
    });
  });

  it('acknowledges events that are not about one of our orders, so Stripe stops sending them', async () => {
    const body = JSON.stringify({
      id: 'evt_other',
      object: 'event',
      type: 'charge.refunded',
      data: { object: { id: 'ch_1', object: 'charge' } },
    });
    const t = Math.floor(Date.now() / 1000);
    const v1 = createHmac('sha256', merchant.webhookSecret).update(`${t}.${body}`).digest('hex');
    const verdict = await notified.verifyNotification({ headers: new Headers({ 'stripe-signature': `t=${t},v1=${v1}` }), rawBody: body });
    assert.ok(verdict.kind === 'verified');
    assert.equal(verdict.notification.status, 'other');
    assert.equal(verdict.notification.merchantId, merchant.accountId);
  });

  it('verifies refund.created as a refund notification with PayOnce’s refundId; charge.refunded settles nothing', async () => {
    const outTradeNo = newOutTradeNo();
    const paid = await notified.charge(chargeRequest(outTradeNo));
    assert.ok(paid.kind === 'succeeded');
    const refundId = `RF${randomBytes(8).toString('hex').toUpperCase()}`;
    const refunded = await notified.refund({
      outTradeNo,
      gatewayTradeNo: paid.gatewayTradeNo,
      refundId,
      amountMinor: 1230,
      chargeAmountMinor: 1230,
      currency: 'CNY',
      reason: 'order expired',
    });
    assert.ok(refunded.kind === 'succeeded');
    const received = await waitFor('three events', async () => {
      const list = verdicts.get(outTradeNo) ?? [];
      return list.length >= 3 ? list : undefined;
    });
    const refundVerdicts = received.filter((v) => v.kind === 'refund');
    assert.equal(refundVerdicts.length, 1);
    const [verdict] = refundVerdicts;
    assert.ok(verdict?.kind === 'refund');
    assert.match(verdict.notification.eventId, /^evt_/);
    assert.deepEqual(
      { ...verdict.notification, eventId: '' },
      {
        gateway: 'stripe',
        eventId: '',
        merchantId: merchant.accountId,
        outTradeNo,
        refundId,
        gatewayRefundId: refunded.gatewayRefundId,
        status: 'succeeded',
        amountMinor: 1230,
        currency: 'CNY',
      },
    );
    // payment_intent.succeeded and charge.refunded: payment notifications; only the first settles.
    assert.deepEqual(
      received.filter((v) => v.kind === 'verified').map((v) => v.kind === 'verified' && v.notification.status),
      ['succeeded', 'other'],
    );
    await waitFor('every delivery acknowledged', async () => {
      const l = await ledger(outTradeNo);
      return l.notifications.filter((n) => n.acknowledged).length >= 3 ? true : undefined;
    });
  });

  it('does not acknowledge an event it could not re-fetch, so Stripe delivers it again', async () => {
    const outTradeNo = newOutTradeNo();
    assert.ok((await notified.charge(chargeRequest(outTradeNo))).kind === 'succeeded');
    const [delivered] = await waitFor('the scheduled delivery', async () => verdicts.get(outTradeNo));
    assert.ok(delivered?.kind === 'verified');
    await fetch(`${sandbox.url}/sandbox/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ gateway: 'stripe', action: 'rate_limit', times: 10 }),
    });
    try {
      const unread = await tool(outTradeNo, {});
      assert.deepEqual(unread, {
        kind: 'unavailable',
        reason: `event ${delivered.notification.eventId} could not be re-fetched from Stripe (rate_limit): deliver again`,
      });
    } finally {
      await fetch(`${sandbox.url}/sandbox/faults`, { method: 'DELETE' });
    }
    assert.deepEqual(await tool(outTradeNo, {}), delivered);
  });

  it('reports a refund made elsewhere (no refund_id) as other, and rejects a forged refund event', async () => {
    // Refunded from the Dashboard, say: no refund_id of ours. Its event, as the API has it.
    const { hostname, port } = new URL(sandbox.url);
    const dashboard = new Stripe(merchant.secretKey, { host: hostname, port, protocol: 'http' });
    const outTradeNo = newOutTradeNo();
    const paid = await notified.charge(chargeRequest(outTradeNo));
    assert.ok(paid.kind === 'succeeded');
    const refund = await dashboard.refunds.create({ payment_intent: paid.gatewayTradeNo, amount: 100 });
    const [event] = (await dashboard.events.list({ type: 'refund.created', limit: 1 })).data;
    assert.equal((event?.data.object as Stripe.Refund).id, refund.id);
    // The body delivered may say anything: only its id is read before the re-fetch.
    const body = JSON.stringify({
      id: event?.id,
      object: 'event',
      type: 'refund.updated',
      data: {
        object: { id: 're_1', object: 'refund', amount: 1, currency: 'usd', status: 'succeeded', metadata: { refund_id: 'RF_LIE' } },
      },
    });
    const t = Math.floor(Date.now() / 1000);
    const sign = (secret: string) => `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
    const verdict = await notified.verifyNotification({
      headers: new Headers({ 'stripe-signature': sign(merchant.webhookSecret) }),
      rawBody: body,
    });
    assert.ok(verdict.kind === 'refund', JSON.stringify(verdict));
    assert.equal(verdict.notification.status, 'other');
    assert.equal(verdict.notification.refundId, '');
    assert.equal(verdict.notification.gatewayRefundId, refund.id);
    const forged = await notified.verifyNotification({ headers: new Headers({ 'stripe-signature': sign('whsec_wrong') }), rawBody: body });
    assert.equal(forged.kind, 'rejected');
  });
});

// ---------------------------------------------------------------------------------------------
// Close, refund, queryRefund

/** A raw v1 call with the secret key, for what the adapter never does itself. */
async function api<T>(method: 'GET' | 'POST', path: string, body = ''): Promise<{ status: number; body: T }> {
  const res = await fetch(`${sandbox.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${creds.secretKey}`, 'content-type': 'application/x-www-form-urlencoded' },
    ...(method === 'POST' ? { body } : {}),
  });
  return { status: res.status, body: (await res.json()) as T };
}

/** The order's PaymentIntents with their statuses, oldest first (the list is strongly consistent). */
async function intentsOf(outTradeNo: string): Promise<{ id: string; status: string }[]> {
  const { body } = await api<{ data: { id: string; status: string; metadata: Record<string, string> }[] }>(
    'GET',
    '/v1/payment_intents?limit=100',
  );
  return body.data
    .filter((p) => p.metadata.out_trade_no === outTradeNo)
    .map(({ id, status }) => ({ id, status }))
    .reverse();
}

async function buyerPays(outTradeNo: string, buyer = 'ok'): Promise<{ status: number; body: { code?: string; status?: string } }> {
  const res = await fetch(`${sandbox.url}/sandbox/stripe/buyer-pays`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ outTradeNo, buyer }),
  });
  return { status: res.status, body: (await res.json()) as { code?: string; status?: string } };
}

async function armFault(operation: 'close' | 'refund', action: string, times = 1): Promise<void> {
  const res = await fetch(`${sandbox.url}/sandbox/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ gateway: 'stripe', operation, action, times }),
  });
  assert.equal(res.status, 201);
}

async function clearFaults(): Promise<void> {
  await fetch(`${sandbox.url}/sandbox/faults`, { method: 'DELETE' });
}

function newRefundId(): string {
  return `RF${randomBytes(8).toString('hex').toUpperCase()}`;
}

function refundRequest(outTradeNo: string, gatewayTradeNo: string, overrides: Partial<RefundRequest> = {}): RefundRequest {
  return {
    outTradeNo,
    gatewayTradeNo,
    refundId: newRefundId(),
    amountMinor: 1230,
    chargeAmountMinor: 1230,
    currency: 'CNY',
    reason: 'PayOnce: duplicate payment of the order',
    ...overrides,
  };
}

const closeRequest = (outTradeNo: string) => ({ outTradeNo, amountMinor: 1230, currency: 'CNY' });

describe('close', () => {
  it('answers closed for an order that never had a PaymentIntent (each attempt is its own: oneTradePerOrder is false)', async () => {
    assert.equal(gateway.oneTradePerOrder, false);
    assert.deepEqual(await gateway.close(closeRequest(newOutTradeNo())), { kind: 'closed' });
  });

  it('closes a declined attempt so the buyer can no longer pay it, and is idempotent', async () => {
    const outTradeNo = newOutTradeNo();
    // 1. Two declined attempts: both PaymentIntents stay payable, as on Stripe.
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'account_restricted', attempt: 2 }));
    assert.deepEqual(
      (await intentsOf(outTradeNo)).map((p) => p.status),
      ['requires_payment_method', 'requires_payment_method'],
    );
    // 2. Closed: every one of them canceled.
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), { kind: 'closed' });
    assert.deepEqual(
      (await intentsOf(outTradeNo)).map((p) => p.status),
      ['canceled', 'canceled'],
    );
    // 3. The buyer comes back to pay: refused.
    const late = await buyerPays(outTradeNo);
    assert.equal(late.status, 409);
    assert.equal(late.body.code, 'TRADE_NOT_PAYABLE');
    // 4. Closing again changes nothing.
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), { kind: 'closed' });
    assert.deepEqual(await gateway.query(outTradeNo), { kind: 'answered', trade: { kind: 'closed' } });
    assert.deepEqual(
      (await ledger(outTradeNo)).charges.map((c) => c.status),
      ['declined', 'declined'],
    );
  });

  it('answers already_paid with the charge when the buyer paid first, and cancels the rest', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    // The buyer completes the declined attempt later (another card on Stripe's page).
    assert.equal((await buyerPays(outTradeNo)).body.status, 'succeeded');
    const [paid] = await intentsOf(outTradeNo);
    assert.ok(paid);
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), {
      kind: 'already_paid',
      charges: [{ gatewayTradeNo: paid.id, amountMinor: 1230, currency: 'CNY' }],
    });
    assert.deepEqual(await intentsOf(outTradeNo), [{ id: paid.id, status: 'succeeded' }]); // never canceled
  });

  it('reports every succeeded PaymentIntent of an order charged twice, oldest first', async () => {
    const outTradeNo = newOutTradeNo();
    const first = await gateway.charge(chargeRequest(outTradeNo));
    assert.ok(first.kind === 'succeeded');
    // A second PaymentIntent for the same order, made behind the adapter's back: Stripe charges it.
    const second = await api<{ id: string; status: string }>(
      'POST',
      '/v1/payment_intents',
      `amount=1230&currency=cny&confirm=true&payment_method=pm_card_visa&allowed_payment_method_types[0]=card&metadata[out_trade_no]=${outTradeNo}`,
    );
    assert.equal(second.body.status, 'succeeded');
    const third = await gateway.charge(chargeRequest(newOutTradeNo(), { buyer: 'insufficient_funds' })); // another order: untouched
    assert.equal(third.kind, 'declined');
    const closed = await gateway.close(closeRequest(outTradeNo));
    assert.ok(closed.kind === 'already_paid', JSON.stringify(closed));
    // Both were created within one second (Stripe's `created` resolution), so their order is a tie.
    assert.deepEqual(
      [...closed.charges].sort((a, b) => a.gatewayTradeNo.localeCompare(b.gatewayTradeNo)),
      [
        { gatewayTradeNo: first.gatewayTradeNo, amountMinor: 1230, currency: 'CNY' },
        { gatewayTradeNo: second.body.id, amountMinor: 1230, currency: 'CNY' },
      ].sort((a, b) => a.gatewayTradeNo.localeCompare(b.gatewayTradeNo)),
    );
  });

  it('is indeterminate when the cancel fails with a 5xx, and closes nothing until a later close', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    await armFault('close', 'fail_before_charge');
    try {
      const outcome = await gatewayAt(sandbox.url, { maxNetworkRetries: 0 }).close(closeRequest(outTradeNo));
      assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
      assert.equal(outcome.code, 'HTTP_500');
    } finally {
      await clearFaults();
    }
    assert.deepEqual(
      (await intentsOf(outTradeNo)).map((p) => p.status),
      ['requires_payment_method'],
    );
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), { kind: 'closed' });
    assert.deepEqual(
      (await intentsOf(outTradeNo)).map((p) => p.status),
      ['canceled'],
    );
  });

  it('is indeterminate when the cancel’s answer is lost, and the next close finds it closed', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    // Twice: stripe-node retries a closed connection once even with retries off (same key: a replay).
    await armFault('close', 'drop_after_charge', 2);
    try {
      const outcome = await gatewayAt(sandbox.url, { maxNetworkRetries: 0 }).close(closeRequest(outTradeNo));
      assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
    } finally {
      await clearFaults();
    }
    assert.deepEqual(
      (await intentsOf(outTradeNo)).map((p) => p.status),
      ['canceled'],
    );
    assert.deepEqual(await gateway.close(closeRequest(outTradeNo)), { kind: 'closed' });
  });

  it('is indeterminate while a payment is processing (it cannot be canceled and may still succeed)', async () => {
    const outTradeNo = newOutTradeNo();
    await gateway.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
    const [intent] = await intentsOf(outTradeNo);
    assert.ok(intent);
    const db = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    try {
      await db`UPDATE psp_sandbox.stripe_payment_intents
                  SET status = 'processing', object = jsonb_set(object, '{status}', '"processing"') WHERE id = ${intent.id}`;
      const outcome = await gateway.close(closeRequest(outTradeNo));
      assert.ok(outcome.kind === 'indeterminate', JSON.stringify(outcome));
      assert.equal(outcome.code, 'PAYMENT_PROCESSING');
    } finally {
      await db.end();
    }
  });

  it('finds and cancels a PaymentIntent search does not show yet', async () => {
    const lagging = await startSandbox({ port: 0, databaseUrl, timeScale: 0.001, modules: [createStripeModule({ searchLagMs: 60_000 })] });
    try {
      const g = gatewayAt(lagging.url);
      const outTradeNo = newOutTradeNo();
      await g.charge(chargeRequest(outTradeNo, { buyer: 'insufficient_funds' }));
      assert.deepEqual(await g.close(closeRequest(outTradeNo)), { kind: 'closed' });
      assert.deepEqual(
        (await intentsOf(outTradeNo)).map((p) => p.status),
        ['canceled'],
      );
    } finally {
      await lagging.close();
    }
  });
});

describe('refund and queryRefund', () => {
  async function paidOrder(): Promise<{ outTradeNo: string; gatewayTradeNo: string }> {
    const outTradeNo = newOutTradeNo();
    const paid = await gateway.charge(chargeRequest(outTradeNo));
    assert.ok(paid.kind === 'succeeded');
    return { outTradeNo, gatewayTradeNo: paid.gatewayTradeNo };
  }

  it('refunds once per refundId, however often it is sent', async () => {
    const { outTradeNo, gatewayTradeNo } = await paidOrder();
    // Part of the charge, so that a second refund would have money left to take.
    const request = refundRequest(outTradeNo, gatewayTradeNo, { amountMinor: 500 });
    const first = await gateway.refund(request);
    assert.ok(first.kind === 'succeeded', JSON.stringify(first));
    assert.match(first.gatewayRefundId, /^re_/);
    assert.equal(first.amountMinor, 500);
    assert.deepEqual(await gateway.refund(request), first);
    assert.deepEqual(
      (await ledger(outTradeNo)).refunds.map((r) => [r.refundId, r.gatewayRefundId, r.gatewayTradeNo, r.amountMinor, r.status]),
      [[request.refundId, first.gatewayRefundId, gatewayTradeNo, 500, 'succeeded']],
    );
    assert.deepEqual(await gateway.queryRefund({ outTradeNo, gatewayTradeNo, refundId: request.refundId }), {
      kind: 'answered',
      refund: { kind: 'succeeded', gatewayRefundId: first.gatewayRefundId, amountMinor: 500 },
    });
    // Even once Stripe has forgotten the key (24 h), the repeat is recognised, not refused.
    const db = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    try {
      await db`UPDATE psp_sandbox.stripe_idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = ${`payonce-refund-${request.refundId}`}`;
    } finally {
      await db.end();
    }
    assert.deepEqual(await gateway.refund(request), first);
    assert.equal((await ledger(outTradeNo)).refunds.length, 1);
  });

  it('turns concurrent refunds of one refundId into one refund (the Idempotency-Key, not the look-up, decides)', async () => {
    const { outTradeNo, gatewayTradeNo } = await paidOrder();
    const request = refundRequest(outTradeNo, gatewayTradeNo, { amountMinor: 500 });
    const outcomes = await Promise.all(Array.from({ length: 10 }, () => gateway.refund(request)));
    assert.deepEqual(
      outcomes.filter((o) => o.kind !== 'succeeded'),
      [],
    );
    assert.equal(new Set(outcomes.map((o) => (o.kind === 'succeeded' ? o.gatewayRefundId : o.kind))).size, 1);
    assert.deepEqual(
      (await ledger(outTradeNo)).refunds.map((r) => [r.refundId, r.amountMinor]),
      [[request.refundId, 500]],
    );
  });

  it('recovers a lost answer by itself with the SDK’s retries under the same key', async () => {
    const { outTradeNo, gatewayTradeNo } = await paidOrder();
    const request = refundRequest(outTradeNo, gatewayTradeNo);
    await armFault('refund', 'drop_after_charge');
    try {
      assert.equal((await gateway.refund(request)).kind, 'succeeded');
    } finally {
      await clearFaults();
    }
    assert.equal((await ledger(outTradeNo)).refunds.length, 1);
  });
});
