/**
 * One contract, every gateway: the same cases run against each adapter, its sandbox module and the
 * app's webhook, through real HTTP and real PostgreSQL. A gateway joins by adding a fixture below.
 * Cases 11 on hold the adapter to the wire: the sandbox's faults, or a local server where the gateway
 * should be (test/support/contract-servers.ts), and the gateway's own answers as fixture data.
 */
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { reconcilePayments } from '@/server/jobs/reconciler';
import type { ChargeRequest, GatewayId, NotificationReply, PaymentGateway, RefundRequest } from '@/server/payments/gateway';
import {
  alipayAdapter,
  readSandboxCredentials,
  strangerKey,
  stripeAdapter,
  twoc2pAdapter,
  wechatpayAdapter,
  type Reach,
  type SandboxCredentials,
} from '@/test/support/contract-adapters';
import { answeringInstead, countingServer, refusedOrigin, type HttpErrorAnswer } from '@/test/support/contract-servers';
import { serveFetch, type FetchServer } from '@/test/support/serve-fetch';
import { eventually, startTestStack, type Ledger, type TestStack } from '@/test/support/stack';

interface CapturedDelivery {
  headers: Record<string, string>;
  body: string;
}

/** What an outcome must be: its kind, and its code and message where the fixture names them. */
interface Expected {
  kind: string;
  code?: string;
  message?: string;
}
/** An outcome whose kind the case itself states: only the gateway's own code and message. */
type Codes = Omit<Expected, 'kind'>;

/** What differs per gateway: its own idempotency rule, checked at the wire, and its answers, as data. */
interface GatewayFixture {
  id: GatewayId;
  /** Tool overrides that aim a genuine, re-signed notification at another order with a wrong amount. */
  lie: (victimOutTradeNo: string) => Record<string, string>;
  /**
   * What such a lie meets: refused by the checkout's amount check (an exception for a person), or —
   * where the adapter re-fetches the event from the gateway's API before acting (Stripe) — never
   * believed: the API's own copy is what is acted on.
   */
  lieMeets: 'amount_check' | 'api_copy';
  ownIdempotencyRule: { name: string; check: (ctx: { stack: TestStack; gateway: PaymentGateway }) => Promise<void> };
  /** The adapter built from the sandbox's credentials as its adapter test builds it; `reach` aims it elsewhere. */
  adapter: (credentials: SandboxCredentials, reach?: Reach) => PaymentGateway;
  /** One wrong credential at a time, each refused (retryable) with the gateway's own code. */
  wrongCredentials: (credentials: SandboxCredentials) => { name: string; adapter: PaymentGateway; refusal: Codes }[];
  /** A charge (indeterminate) whose answer timed out, or whose connection dropped, after it was sent. */
  inDoubt: { timedOut: Codes; dropped: Codes };
  /** HTTP error statuses answered in the gateway's place, and what the charge is then. */
  httpErrors: (HttpErrorAnswer & { expect: Expected })[];
  /** Requests the adapter refuses without a call, beyond those every adapter refuses. */
  unsendable: { charges: Partial<ChargeRequest>[]; refunds: Partial<RefundRequest>[] };
  /** A trade number the gateway never issued. */
  unknownTradeNo: string;
  /** How an accepted refund is first answered: at once, or `pending` (WeChat Pay's PROCESSING). */
  acceptedRefund: 'succeeded' | 'pending';
  /** Refunds that fail for good (failed), by why. */
  refundFailures: { moreThanCharged: Codes; moreThanLeft: Codes; unpaid: Codes; unknown: Codes };
  /** A refund (indeterminate) whose answer is lost. */
  refundLost: Codes;
  /** A refund met by the gateway's own system error before it ran (the sandbox's fail_before_charge). */
  refundSystemError: Expected;
  /** Its answers to a notification: the acknowledgement, and the refusal it delivers again. */
  replies: { ack: NotificationReply; nack: NotificationReply };
}

const HTML_ERROR = { headers: { 'content-type': 'text/html' }, body: '<html>unavailable</html>' };
/** A Stripe error body, with the header that keeps stripe-node from retrying it by itself. */
const stripeError = (error: Record<string, string>) => ({
  headers: { 'content-type': 'application/json', 'stripe-should-retry': 'false' },
  body: JSON.stringify({ error }),
});
const TEXT = { 'content-type': 'text/plain; charset=utf-8' };
const JSON_TYPE = { 'content-type': 'application/json' };

const FIXTURES: GatewayFixture[] = [
  {
    id: 'alipay',
    lie: (victim) => ({ out_trade_no: victim, total_amount: '0.01' }),
    lieMeets: 'amount_check',
    ownIdempotencyRule: {
      name: 'the same out_trade_no with another amount is refused with ACQ.CONTEXT_INCONSISTENT',
      check: async ({ stack, gateway }) => {
        const outTradeNo = `PO${randomUUID().replaceAll('-', '').slice(0, 18).toUpperCase()}`;
        const base = { outTradeNo, currency: 'CNY', subject: 'rule', attempt: 1, notifyUrl: 'http://127.0.0.1:9/x' };
        const declined = await gateway.charge({ ...base, amountMinor: 100, buyer: 'insufficient_funds' });
        assert.equal(declined.kind, 'declined');
        const changed = await gateway.charge({ ...base, amountMinor: 200, buyer: 'ok' });
        assert.deepEqual(changed.kind === 'declined' ? changed.code : changed.kind, 'ACQ.CONTEXT_INCONSISTENT');
        assert.equal((await stack.succeededCharges(outTradeNo)).length, 0);
      },
    },
    adapter: alipayAdapter,
    wrongCredentials: (c) => [
      {
        name: 'another private key',
        adapter: alipayAdapter(c, {}, { appPrivateKey: strangerKey('private') }),
        refusal: { code: 'isv.invalid-signature' },
      },
      { name: 'another app id', adapter: alipayAdapter(c, {}, { appId: '2021000000000000' }), refusal: { code: 'isv.invalid-app-id' } },
    ],
    inDoubt: { timedOut: {}, dropped: {} },
    httpErrors: [{ on: 'every', status: 502, ...HTML_ERROR, expect: { kind: 'retryable', code: 'HTTP_502' } }],
    unsendable: { charges: [{ currency: 'USD' }], refunds: [{ currency: 'USD' }] },
    unknownTradeNo: '',
    acceptedRefund: 'succeeded',
    refundFailures: {
      moreThanCharged: { code: 'ACQ.REASON_TRADE_REFUND_FEE_ERR' },
      moreThanLeft: { code: 'ACQ.REASON_TRADE_REFUND_FEE_ERR' },
      unpaid: { code: 'ACQ.TRADE_STATUS_ERROR' },
      unknown: { code: 'ACQ.TRADE_NOT_EXIST' },
    },
    refundLost: {},
    // Alipay's signed 20000 isp.unknow-error cannot say whether the refund ran.
    refundSystemError: { kind: 'indeterminate', code: 'isp.unknow-error' },
    replies: { ack: { status: 200, headers: TEXT, body: 'success' }, nack: { status: 503, headers: TEXT, body: 'retry' } },
  },
  {
    id: 'wechatpay',
    lie: (victim) => ({ out_trade_no: victim, 'amount.total': '1' }),
    lieMeets: 'amount_check',
    ownIdempotencyRule: {
      name: 'the same out_trade_no with another amount is refused with 403 OUT_TRADE_NO_USED',
      check: async ({ stack, gateway }) => {
        const outTradeNo = `PO${randomUUID().replaceAll('-', '').slice(0, 18).toUpperCase()}`;
        const base = { outTradeNo, currency: 'CNY', subject: 'rule', attempt: 1, notifyUrl: 'http://127.0.0.1:9/x' };
        const declined = await gateway.charge({ ...base, amountMinor: 100, buyer: 'insufficient_funds' });
        assert.equal(declined.kind, 'declined');
        const changed = await gateway.charge({ ...base, amountMinor: 200, buyer: 'ok' });
        assert.deepEqual(changed.kind === 'declined' ? changed.code : changed.kind, 'OUT_TRADE_NO_USED');
        assert.equal((await stack.succeededCharges(outTradeNo)).length, 0);
      },
    },
    adapter: wechatpayAdapter,
    wrongCredentials: (c) => [
      {
        name: 'another private key',
        adapter: wechatpayAdapter(c, {}, { merchantPrivateKey: strangerKey('private') }),
        refusal: { code: 'SIGN_ERROR' },
      },
      { name: 'another serial', adapter: wechatpayAdapter(c, {}, { merchantSerialNo: 'F'.repeat(40) }), refusal: { code: 'SIGN_ERROR' } },
      { name: 'another mchid', adapter: wechatpayAdapter(c, {}, { mchid: '1900000000' }), refusal: { code: 'SIGN_ERROR' } },
      {
        name: 'another appid',
        adapter: wechatpayAdapter(c, {}, { appid: 'wx0000000000000000' }),
        refusal: { code: 'APPID_MCHID_NOT_MATCH' },
      },
    ],
    inDoubt: { timedOut: { code: 'TIMEOUT' }, dropped: {} },
    httpErrors: [{ on: 'every', status: 502, ...HTML_ERROR, expect: { kind: 'retryable', code: 'HTTP_502', message: 'HTTP 502' } }],
    unsendable: { charges: [{ currency: 'cny' }], refunds: [{ amountMinor: 1231, chargeAmountMinor: 1230 }] },
    unknownTradeNo: '4200000000202401010000000000',
    acceptedRefund: 'pending',
    refundFailures: {
      moreThanCharged: { code: 'INVALID_AMOUNT' }, // refused before sending
      moreThanLeft: { code: 'INVALID_REQUEST', message: '申请退款金额超过订单可退金额' },
      unpaid: { code: 'RESOURCE_NOT_EXISTS' },
      unknown: { code: 'RESOURCE_NOT_EXISTS' },
    },
    refundLost: {},
    // WeChat Pay's signed 500 SYSTEM_ERROR: not processed; the same out_refund_no may be sent again.
    refundSystemError: { kind: 'retryable', code: 'SYSTEM_ERROR' },
    replies: {
      ack: { status: 200, headers: {}, body: '' },
      nack: {
        status: 500,
        headers: { 'content-type': 'application/json; charset=utf-8' },
        body: '{"code":"FAIL","message":"处理失败，请稍后重试"}',
      },
    },
  },
  {
    id: 'stripe',
    lie: (victim) => ({ out_trade_no: victim, amount: '1' }),
    lieMeets: 'api_copy',
    ownIdempotencyRule: {
      name: 'one Idempotency-Key with other parameters is 400 idempotency_error; mid-execution it is 409; replays say so',
      check: async ({ stack }) => {
        const { stripe: c } = (await (await fetch(`${stack.sandboxUrl}/sandbox/credentials`)).json()) as {
          stripe: { secretKey: string };
        };
        const post = (body: string, key: string) =>
          fetch(`${stack.sandboxUrl}/v1/payment_intents`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${c.secretKey}`,
              'content-type': 'application/x-www-form-urlencoded',
              'idempotency-key': key,
            },
            body,
          });
        const key = `contract-${randomUUID()}`;
        const body = (amount: number) =>
          `amount=${amount}&currency=cny&confirm=true&payment_method=pm_card_visa&allowed_payment_method_types[0]=card&metadata[out_trade_no]=PO${randomUUID().slice(0, 8).toUpperCase()}`;
        const first = body(1000);
        const created = await post(first, key);
        assert.equal(created.status, 200);
        const replay = await post(first, key);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), await created.text());
        const mismatch = await post(body(2000), key);
        assert.equal(mismatch.status, 400);
        assert.equal(((await mismatch.json()) as { error: { type: string } }).error.type, 'idempotency_error');

        // Mid-execution: hold the key's execution lock, as a first request still running would.
        const busyKey = `contract-${randomUUID()}`;
        const scope = createHash('sha256').update(c.secretKey).digest('hex');
        const holder = await stack.sql.reserve();
        try {
          await holder`select pg_advisory_lock(hashtextextended(${`stripe-idem:${scope}:${busyKey}`}, 0))`;
          const busy = await post(body(1000), busyKey);
          assert.equal(busy.status, 409);
          assert.equal(((await busy.json()) as { error: { code: string } }).error.code, 'idempotency_key_in_use');
        } finally {
          await holder`select pg_advisory_unlock_all()`;
          holder.release();
        }
      },
    },
    adapter: stripeAdapter,
    wrongCredentials: (c) => [
      {
        name: 'another secret key',
        adapter: stripeAdapter(c, {}, { secretKey: 'sk_live_wrong' }),
        refusal: { code: 'authentication_error' },
      },
    ],
    inDoubt: { timedOut: { code: 'ETIMEDOUT' }, dropped: { code: 'ECONNRESET' } },
    httpErrors: [
      {
        on: 'every',
        status: 429,
        ...stripeError({ type: 'invalid_request_error', code: 'rate_limit', message: 'Too many requests' }),
        expect: { kind: 'retryable', code: 'rate_limit' },
      },
      {
        on: 'every',
        status: 503,
        ...stripeError({ type: 'api_error', message: 'Service unavailable' }),
        expect: { kind: 'retryable', code: 'HTTP_503' },
      },
      // Stripe may have executed it.
      {
        on: 'every',
        status: 500,
        ...stripeError({ type: 'api_error', message: 'An unknown error occurred' }),
        expect: { kind: 'indeterminate', code: 'HTTP_500' },
      },
    ],
    unsendable: {
      charges: [{ currency: 'yuan' }, { amountMinor: 100_000_000 }, { attempt: 0 }],
      refunds: [{ refundId: 'x'.repeat(33) }, { gatewayTradeNo: 'ch_1' }],
    },
    unknownTradeNo: 'pi_doesnotexist',
    acceptedRefund: 'succeeded',
    refundFailures: {
      moreThanCharged: { code: 'amount_too_large' },
      moreThanLeft: { code: 'amount_too_large' },
      unpaid: { code: 'invalid_request_error' },
      unknown: { code: 'resource_missing' },
    },
    refundLost: { code: 'ECONNRESET' },
    // Stripe's 500 api_error: it may have executed it.
    refundSystemError: { kind: 'indeterminate', code: 'HTTP_500' },
    replies: {
      ack: { status: 200, headers: JSON_TYPE, body: '{"received":true}' },
      nack: { status: 503, headers: JSON_TYPE, body: '{"received":false}' },
    },
  },
  {
    id: '2c2p',
    lie: (victim) => ({ invoiceNo: victim, amount: '0.01' }),
    lieMeets: 'amount_check',
    ownIdempotencyRule: {
      name: 'the same invoiceNo with another amount is refused with 9015 (existing invoice number)',
      check: async ({ stack, gateway }) => {
        const outTradeNo = `PO${randomUUID().replaceAll('-', '').slice(0, 18).toUpperCase()}`;
        const base = { outTradeNo, currency: 'CNY', subject: 'rule', attempt: 1, notifyUrl: 'http://127.0.0.1:9/x' };
        const declined = await gateway.charge({ ...base, amountMinor: 100, buyer: 'insufficient_funds' });
        assert.equal(declined.kind, 'declined');
        // A new attempt (a new idempotencyID) for the same invoice with another amount.
        const changed = await gateway.charge({ ...base, attempt: 2, amountMinor: 200, buyer: 'ok' });
        assert.deepEqual(changed.kind === 'declined' ? changed.code : changed.kind, '9015');
        assert.equal((await stack.succeededCharges(outTradeNo)).length, 0);
      },
    },
    adapter: twoc2pAdapter,
    wrongCredentials: (c) => [
      {
        name: 'another secret',
        adapter: twoc2pAdapter(c, {}, { secretKey: 'F'.repeat(64) }),
        refusal: { code: '9042', message: 'Hash value mismatch' },
      },
      { name: 'another merchant', adapter: twoc2pAdapter(c, {}, { merchantId: '764000000000000' }), refusal: { code: '9007' } },
    ],
    inDoubt: { timedOut: { code: 'TIMEOUT' }, dropped: {} },
    // Before Do Payment (paymentToken) and at it.
    httpErrors: [
      { on: 'every', status: 502, ...HTML_ERROR, expect: { kind: 'retryable', code: 'HTTP_502' } },
      { on: 'charge', status: 503, ...HTML_ERROR, expect: { kind: 'retryable', code: 'HTTP_503' } },
      { on: 'charge', status: 429, ...HTML_ERROR, expect: { kind: 'retryable', code: 'HTTP_429' } },
    ],
    unsendable: { charges: [{ currency: 'cny' }, { amountMinor: 100_000_000_000_000 }], refunds: [] },
    unknownTradeNo: 'x',
    acceptedRefund: 'succeeded',
    refundFailures: {
      moreThanCharged: { code: '40' },
      moreThanLeft: { code: '40', message: 'Refund amount is more than transaction amount.' },
      unpaid: { code: '12' },
      unknown: { code: '16' },
    },
    refundLost: {},
    // The Payment Maintenance API's 99 "Unable to complete the request" cannot say whether the refund ran.
    refundSystemError: { kind: 'indeterminate', code: '99' },
    replies: { ack: { status: 200, headers: TEXT, body: '' }, nack: { status: 500, headers: TEXT, body: 'retry' } },
  },
];

let stack: TestStack;
let credentials: SandboxCredentials;
/** Stands in for the app's webhook URL: records every delivery, forwards it unless told not to. */
let relay: FetchServer;
const captured = new Map<string, CapturedDelivery[]>();
let forwarding = true;

before(async () => {
  stack = await startTestStack();
  credentials = await readSandboxCredentials(stack.sandboxUrl);
  relay = await serveFetch((pathname) => {
    const gateway = pathname.split('/').pop()!;
    return async (request) => {
      const body = await request.text();
      const headers: Record<string, string> = {};
      request.headers.forEach((value, name) => {
        if (!['host', 'content-length', 'connection'].includes(name)) headers[name] = value;
      });
      const list = captured.get(gateway) ?? [];
      list.push({ headers, body });
      captured.set(gateway, list);
      if (!forwarding) return new Response('relay closed', { status: 503 });
      const answer = await fetch(`${stack.appUrl}/api/webhooks/${gateway}`, { method: 'POST', headers, body });
      return new Response(await answer.text(), { status: answer.status, headers: answer.headers });
    };
  });
  // Stripe sends to the account's registered endpoint, not to a URL of the charge: the app's
  // endpoint is pointed at the relay (its signing secret stays the app's).
  await stack.stripe.client.webhookEndpoints.update(stack.stripe.webhookEndpointId, { url: `${relay.url}/relay/stripe` });
});
after(async () => {
  await relay?.close();
  await stack?.close();
});

async function count(sqlText: 'payments' | 'emails', orderId: string): Promise<number> {
  const rows =
    sqlText === 'payments'
      ? await stack.sql<{ n: number }[]>`select count(*)::int as n from payments where order_id = ${orderId} and status = 'succeeded'`
      : await stack.sql<
          { n: number }[]
        >`select count(*)::int as n from outbox where topic = 'email.order_paid' and payload->>'orderId' = ${orderId}`;
  return rows[0]!.n;
}
async function status(orderId: string) {
  return (await stack.sql<{ status: string }[]>`select status from orders where id = ${orderId}`)[0]!.status;
}

/** An order charged at the gateway with the notification aimed at the relay (forwarding off). */
async function chargedOrder(gatewayId: GatewayId) {
  const order = await stack.customer().createOrder();
  await stack.sql`
    update orders set status = 'paying', payment_attempt = 1, attempt_gateway = ${gatewayId},
                      attempt_started_at = now() - interval '1 minute'
     where id = ${order.orderId}`;
  forwarding = false;
  const outcome = await stack.services.gateways[gatewayId]!.charge({
    outTradeNo: order.outTradeNo,
    amountMinor: order.amountMinor,
    currency: order.currency,
    subject: `PayOnce 订单 ${order.outTradeNo}`,
    attempt: 1,
    buyer: 'ok',
    notifyUrl: `${relay.url}/relay/${gatewayId}`,
  });
  assert.equal(outcome.kind, 'succeeded', JSON.stringify(outcome));
  return order;
}

async function tool(gatewayId: GatewayId, body: unknown) {
  const response = await fetch(`${stack.sandboxUrl}/sandbox/${gatewayId}/notify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 200, await response.clone().text());
  return ((await response.json()) as { deliveries: { status: number | null; body: string | null }[] }).deliveries;
}

// ---------------------------------------------------------------------------------------------
// The wire: the adapter's own trades, straight at the gateway, without an order behind them.

function newOutTradeNo(): string {
  return `PO${randomUUID().replaceAll('-', '').slice(0, 18).toUpperCase()}`;
}

/** A charge the `ok` test buyer pays at once, unless `overrides` says otherwise. */
function chargeOf(outTradeNo: string, overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  const request = { outTradeNo, amountMinor: 1230, currency: 'CNY', subject: 'PayOnce 订单 合约', attempt: 1 };
  return { ...request, buyer: 'ok', notifyUrl: 'http://127.0.0.1:9/unused', ...overrides };
}

function refundOf(trade: { outTradeNo: string; gatewayTradeNo: string }, overrides: Partial<RefundRequest> = {}): RefundRequest {
  const refundId = `RF${randomUUID().replaceAll('-', '').slice(0, 16).toUpperCase()}`;
  return { ...trade, refundId, amountMinor: 1230, chargeAmountMinor: 1230, currency: 'CNY', reason: 'PayOnce 合约退款', ...overrides };
}

const closeOf = (outTradeNo: string) => ({ outTradeNo, amountMinor: 1230, currency: 'CNY' });

/** Asserts an outcome's kind, and its code and message where `expected` names them. */
function assertOutcome(actual: object, expected: Expected, what = '') {
  const fields = actual as Record<string, unknown>;
  const seen = Object.fromEntries(Object.keys(expected).map((key) => [key, fields[key]]));
  assert.deepEqual(seen, expected, `${what}: ${JSON.stringify(actual)}`);
}

async function paidTrade(gateway: PaymentGateway, amountMinor = 1230) {
  const outTradeNo = newOutTradeNo();
  const paid = await gateway.charge(chargeOf(outTradeNo, { amountMinor }));
  assert.ok(paid.kind === 'succeeded', JSON.stringify(paid));
  return { outTradeNo, gatewayTradeNo: paid.gatewayTradeNo };
}

/**
 * Runs `call` with a sandbox fault armed on this gateway's `operation`, cleared again afterwards.
 * Armed twice: an HTTP client that silently re-sends (urllib, stripe-node) meets it again.
 */
async function underFault<T>(gatewayId: GatewayId, fault: { operation: string; action: string; delayMs?: number }, call: () => Promise<T>) {
  await stack.sandboxFault({ gateway: gatewayId, ...fault, times: 2 });
  try {
    return await call();
  } finally {
    await fetch(`${stack.sandboxUrl}/sandbox/faults`, { method: 'DELETE' });
  }
}

/** The ledger's refunds of one trade, with the gateway's refund id. */
async function refundsOf(outTradeNo: string) {
  const { refunds } = await stack.ledger(outTradeNo);
  return refunds as (Ledger['refunds'][number] & { gatewayRefundId: string })[];
}

/** A charge left in doubt was made once: the query finds it, and a retry of the attempt reports it, charging nothing more. */
async function assertFoundOnce(gateway: PaymentGateway, outTradeNo: string) {
  assert.equal((await stack.ledger(outTradeNo)).charges[0]?.status, 'succeeded', 'the gateway did charge');
  const found = await gateway.query(outTradeNo);
  assert.ok(found.kind === 'answered' && found.trade.kind === 'succeeded', JSON.stringify(found));
  assert.deepEqual(await gateway.charge(chargeOf(outTradeNo)), found.trade);
  assert.equal((await stack.succeededCharges(outTradeNo)).length, 1);
  assert.equal((await stack.ledger(outTradeNo)).charges.length, 1);
}

for (const fixture of FIXTURES) {
  describe(`gateway contract: ${fixture.id}`, () => {
    const gateway = () => stack.services.gateways[fixture.id]!;
    /** The same adapter built afresh, optionally aimed elsewhere (cases 11 on). */
    const adapter = (reach?: Reach) => fixture.adapter(credentials, reach);

    it('1. pays: 201, one charge in the ledger, and a retry replays the same body', async () => {
      forwarding = true;
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      const first = await customer.pay(order.orderId, { gateway: fixture.id, key });
      assert.equal(first.status, 201, first.text);
      assert.equal(first.json.result.data.payment.gateway, fixture.id);
      const replay = await customer.pay(order.orderId, { gateway: fixture.id, key });
      assert.equal(replay.headers.get('idempotency-replayed'), 'true');
      assert.equal(replay.text, first.text);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    it('2. stores a decline as 402 and replays it; another buyer then pays the same order once', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      const key = randomUUID();
      const declined = await customer.pay(order.orderId, { gateway: fixture.id, key, buyer: 'insufficient_funds' });
      assert.equal(declined.status, 402, declined.text);
      assert.equal(declined.json.error.data.reason, 'PAYMENT_DECLINED');
      const replay = await customer.pay(order.orderId, { gateway: fixture.id, key, buyer: 'insufficient_funds' });
      assert.equal(replay.status, 402);
      assert.equal(replay.text, declined.text);
      const paid = await customer.pay(order.orderId, { gateway: fixture.id, buyer: 'ok' });
      assert.equal(paid.status, 201, paid.text);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    it('3. the same out_trade_no charged twice is one charge: the second answer is the first payment', async () => {
      const outTradeNo = `PO${randomUUID().replaceAll('-', '').slice(0, 18).toUpperCase()}`;
      const request = {
        outTradeNo,
        amountMinor: 6800,
        currency: 'CNY',
        subject: 'twice',
        attempt: 1,
        buyer: 'ok' as const,
        notifyUrl: 'http://127.0.0.1:9/x',
      };
      const first = await gateway().charge(request);
      const second = await gateway().charge(request);
      assert.equal(first.kind, 'succeeded', JSON.stringify(first));
      assert.deepEqual(second, first);
      assert.equal((await stack.succeededCharges(outTradeNo)).length, 1);
    });

    it(`4. keeps the gateway's own idempotency rule: ${fixture.ownIdempotencyRule.name}`, async () => {
      await fixture.ownIdempotencyRule.check({ stack, gateway: gateway() });
    });

    it('5. settles from 25 concurrent duplicate notifications once: one paid transition, one email', async () => {
      const order = await chargedOrder(fixture.id);
      forwarding = true;
      const deliveries = await tool(fixture.id, { outTradeNo: order.outTradeNo, copies: 25 });
      assert.equal(deliveries.length, 25);
      await eventually(async () => ((await status(order.orderId)) === 'paid' ? true : undefined), 10_000, 'paid');
      assert.equal(await count('payments', order.orderId), 1);
      assert.equal(await count('emails', order.orderId), 1);
    });

    it('6. rejects a forged notification with a 4xx and records nothing', async () => {
      const order = await chargedOrder(fixture.id);
      await tool(fixture.id, { outTradeNo: order.outTradeNo });
      const webhookKeys = async () =>
        (await stack.sql<{ n: number }[]>`select count(*)::int as n from idempotency_keys where scope = ${`webhook:${fixture.id}`}`)[0]!.n;
      const keysBefore = await webhookKeys();
      const genuine = captured.get(fixture.id)!.at(-1)!;
      // Change one digit of the signed body: the signature no longer matches.
      const forgedBody = genuine.body.replace(/[0-8]/, (d) => String(Number(d) + 1));
      assert.notEqual(forgedBody, genuine.body);
      const response = await fetch(`${stack.appUrl}/api/webhooks/${fixture.id}`, {
        method: 'POST',
        headers: genuine.headers,
        body: forgedBody,
      });
      assert.ok(response.status >= 400 && response.status < 500, `status ${response.status}`);
      assert.equal(await status(order.orderId), 'paying');
      assert.equal(await webhookKeys(), keysBefore, 'no dedupe key was written for the forgery');

      // The genuine one, replayed as captured, is accepted: the forgery failed only on its signature.
      const real = await fetch(`${stack.appUrl}/api/webhooks/${fixture.id}`, {
        method: 'POST',
        headers: genuine.headers,
        body: genuine.body,
      });
      assert.ok(real.status >= 200 && real.status < 300, `status ${real.status}`);
      assert.equal(await status(order.orderId), 'paid');
    });

    it('7. a validly signed notification that lies about order and amount settles nothing on the victim’s order', async () => {
      const paidOrder = await chargedOrder(fixture.id);
      const victim = await stack.customer().createOrder();
      forwarding = true;
      const [delivery] = await tool(fixture.id, {
        outTradeNo: paidOrder.outTradeNo,
        overrides: fixture.lie(victim.outTradeNo),
      });
      assert.equal(await status(victim.orderId), 'awaiting_payment');
      assert.equal(await count('payments', victim.orderId), 0);
      if (fixture.lieMeets === 'api_copy') {
        // Re-fetched by its id: the paid order's own success, already settled, so acknowledged.
        assert.ok(delivery!.status !== null && delivery!.status >= 200 && delivery!.status < 300, `status ${delivery!.status}`);
        assert.equal(await count('payments', paidOrder.orderId), 1);
        const none = await stack.sql`select 1 from payment_exceptions where order_id = ${victim.orderId}`;
        assert.equal(none.length, 0);
        return;
      }
      // Refused by the amount check: not acknowledged (the gateway retries), never dropped without trace.
      assert.ok(delivery!.status !== null && delivery!.status >= 400 && delivery!.status < 500, `status ${delivery!.status}`);
      // Not acknowledged (the gateway keeps it and retries), and never dropped without trace.
      const exceptions = await stack.sql<{ kind: string; occurrences: number }[]>`
        select kind, occurrences from payment_exceptions where order_id = ${victim.orderId}`;
      assert.deepEqual(
        exceptions.map((e) => e.kind),
        ['amount_mismatch'],
      );
    });

    it('8. the reconciler settles an order whose response was never recorded', async () => {
      const order = await chargedOrder(fixture.id);
      await reconcilePayments(stack.services, { minAgeMs: 0 });
      assert.equal(await status(order.orderId), 'paid');
      assert.equal(await count('payments', order.orderId), 1);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 1);
    });

    it('9. close: after a decline the trade is closed, twice is still closed, and the buyer can no longer pay it', async () => {
      const customer = stack.customer();
      const order = await customer.createOrder();
      assert.equal((await customer.pay(order.orderId, { gateway: fixture.id, buyer: 'insufficient_funds' })).status, 402);
      const request = { outTradeNo: order.outTradeNo, amountMinor: order.amountMinor, currency: order.currency };
      assert.deepEqual(await gateway().close(request), { kind: 'closed' });
      assert.deepEqual(await gateway().close(request), { kind: 'closed' });
      const late = await fetch(`${stack.sandboxUrl}/sandbox/${fixture.id}/buyer-pays`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ outTradeNo: order.outTradeNo, buyer: 'ok' }),
      });
      assert.equal(late.status, 409);
      assert.equal((await stack.succeededCharges(order.outTradeNo)).length, 0);
    });

    it('10. close of a paid trade reports the payment; a refund by one refund id twice refunds once; money kept = 0', async () => {
      const order = await chargedOrder(fixture.id);
      const request = { outTradeNo: order.outTradeNo, amountMinor: order.amountMinor, currency: order.currency };
      const closed = await gateway().close(request);
      assert.equal(closed.kind, 'already_paid', JSON.stringify(closed));
      const charge = closed.kind === 'already_paid' ? closed.charges[0]! : undefined;
      assert.equal(charge?.amountMinor, order.amountMinor);
      const refund = {
        outTradeNo: order.outTradeNo,
        gatewayTradeNo: charge!.gatewayTradeNo,
        refundId: `R${order.outTradeNo.slice(2)}1`,
        amountMinor: order.amountMinor,
        chargeAmountMinor: order.amountMinor,
        currency: order.currency,
        reason: 'contract',
      };
      const first = await gateway().refund(refund);
      assert.ok(first.kind === 'succeeded' || first.kind === 'pending', JSON.stringify(first));
      const again = await gateway().refund(refund);
      assert.ok(again.kind === 'succeeded' || again.kind === 'pending', JSON.stringify(again));
      const found = await eventually(
        async () => {
          const answer = await gateway().queryRefund(refund);
          return answer.kind === 'answered' && answer.refund.kind === 'succeeded' ? answer.refund : undefined;
        },
        10_000,
        'the refund to succeed',
      );
      assert.equal(found.amountMinor, order.amountMinor);
      const ledger = (await stack.ledger(order.outTradeNo)) as Awaited<ReturnType<TestStack['ledger']>> & {
        refunds: { status: string; amountMinor: number }[];
      };
      assert.equal(ledger.refunds.length, 1, 'one refund at the gateway');
      const kept =
        ledger.charges.filter((c) => c.status === 'succeeded').reduce((sum, c) => sum + c.amountMinor, 0) -
        ledger.refunds.filter((r) => r.status === 'succeeded').reduce((sum, r) => sum + r.amountMinor, 0);
      assert.equal(kept, 0);
      const unknown = await gateway().queryRefund({ ...refund, refundId: `R${order.outTradeNo.slice(2)}9` });
      assert.deepEqual(unknown, { kind: 'answered', refund: { kind: 'not_found' } });
    });

    it('11. where nothing listens (ECONNREFUSED): charge and refund are retryable, close indeterminate, query and queryRefund unavailable; nothing charged or refunded', async () => {
      const origin = await refusedOrigin();
      const outTradeNo = newOutTradeNo();
      // The charge with the SDK's own retries, if it has any; refused every time is still retryable.
      assertOutcome(await adapter({ origin }).charge(chargeOf(outTradeNo)), { kind: 'retryable', code: 'ECONNREFUSED' }, 'charge');
      const unreachable = adapter({ origin, noRetries: true });
      const trade = await paidTrade(gateway());
      const refund = refundOf(trade);
      assertOutcome(await unreachable.refund(refund), { kind: 'retryable', code: 'ECONNREFUSED' }, 'refund');
      assertOutcome(await unreachable.close(closeOf(outTradeNo)), { kind: 'indeterminate', code: 'ECONNREFUSED' }, 'close');
      assertOutcome(await unreachable.query(outTradeNo), { kind: 'unavailable', code: 'ECONNREFUSED' }, 'query');
      assertOutcome(await unreachable.queryRefund(refund), { kind: 'unavailable', code: 'ECONNREFUSED' }, 'queryRefund');
      assert.deepEqual((await stack.ledger(outTradeNo)).charges, []);
      assert.deepEqual(await refundsOf(trade.outTradeNo), []);
    });

    it('12. a charge whose answer times out after it was sent is indeterminate; the query finds the one charge and a retry reports it', async () => {
      const outTradeNo = newOutTradeNo();
      const fault = { operation: 'charge', action: 'timeout_after_charge', delayMs: 2000 };
      const outcome = await underFault(fixture.id, fault, () => adapter({ timeoutMs: 300, noRetries: true }).charge(chargeOf(outTradeNo)));
      assertOutcome(outcome, { kind: 'indeterminate', ...fixture.inDoubt.timedOut });
      await assertFoundOnce(gateway(), outTradeNo);
    });

    it('13. a charge whose connection drops after it was sent is indeterminate; the query finds the one charge and a retry reports it', async () => {
      const outTradeNo = newOutTradeNo();
      const fault = { operation: 'charge', action: 'drop_after_charge' };
      const outcome = await underFault(fixture.id, fault, () => adapter({ noRetries: true }).charge(chargeOf(outTradeNo)));
      assertOutcome(outcome, { kind: 'indeterminate', ...fixture.inDoubt.dropped });
      await assertFoundOnce(gateway(), outTradeNo);
    });

    it(`14. an HTTP error in the gateway's place (${fixture.httpErrors.map((e) => `${e.status} → ${e.expect.kind}`).join(', ')}) charges nothing`, async () => {
      for (const answer of fixture.httpErrors) {
        const server = await answeringInstead(stack.sandboxUrl, answer);
        try {
          const outTradeNo = newOutTradeNo();
          assertOutcome(await adapter({ origin: server.url }).charge(chargeOf(outTradeNo)), answer.expect, `${answer.on} ${answer.status}`);
          assert.deepEqual((await stack.ledger(outTradeNo)).charges, []);
        } finally {
          await server.close();
        }
      }
    });

    it('15. a charge signed with a wrong credential is refused: retryable, with the gateway’s code, nothing charged', async () => {
      const outTradeNo = newOutTradeNo();
      for (const wrong of fixture.wrongCredentials(credentials)) {
        assertOutcome(await wrong.adapter.charge(chargeOf(outTradeNo)), { kind: 'retryable', ...wrong.refusal }, wrong.name);
      }
      assert.deepEqual((await stack.ledger(outTradeNo)).charges, []);
    });

    it('16. query maps the trade: not found, pending after a decline, succeeded with the charge, closed once closed', async () => {
      const outTradeNo = newOutTradeNo();
      const answered = (trade: object) => ({ kind: 'answered', trade });
      assert.deepEqual(await gateway().query(outTradeNo), answered({ kind: 'not_found' }));
      assert.equal((await gateway().charge(chargeOf(outTradeNo, { buyer: 'insufficient_funds' }))).kind, 'declined');
      assert.deepEqual(await gateway().query(outTradeNo), answered({ kind: 'pending' }));
      const paid = await gateway().charge(chargeOf(outTradeNo, { attempt: 2 }));
      assert.ok(paid.kind === 'succeeded', JSON.stringify(paid));
      const { gatewayTradeNo } = paid;
      assert.deepEqual(
        await gateway().query(outTradeNo),
        answered({ kind: 'succeeded', gatewayTradeNo, amountMinor: 1230, currency: 'CNY' }),
      );

      const closing = newOutTradeNo();
      assert.equal((await gateway().charge(chargeOf(closing, { buyer: 'account_restricted' }))).kind, 'declined');
      assert.deepEqual(await gateway().close(closeOf(closing)), { kind: 'closed' });
      assert.deepEqual(await gateway().query(closing), answered({ kind: 'closed' }));
    });

    it('17. 50 concurrent charges of one attempt are one charge, and every answer is that payment', async () => {
      const outTradeNo = newOutTradeNo();
      const outcomes = await Promise.all(Array.from({ length: 50 }, () => gateway().charge(chargeOf(outTradeNo, { amountMinor: 4200 }))));
      assert.deepEqual(
        outcomes.filter((o) => o.kind !== 'succeeded'),
        [],
      );
      assert.equal(new Set(outcomes.map((o) => (o.kind === 'succeeded' ? o.gatewayTradeNo : o.kind))).size, 1);
      assert.deepEqual(
        (await stack.ledger(outTradeNo)).charges.map((c) => [c.status, c.amountMinor]),
        [['succeeded', 4200]],
      );
    });

    it('18. refuses what cannot be right without a call: such a charge is declined, such a refund failed, nothing sent', async () => {
      const counter = await countingServer();
      try {
        const g = adapter({ origin: counter.url });
        for (const overrides of [{ amountMinor: 0 }, { amountMinor: 12.5 }, ...fixture.unsendable.charges]) {
          assert.equal((await g.charge(chargeOf(newOutTradeNo(), overrides))).kind, 'declined', JSON.stringify(overrides));
        }
        const trade = { outTradeNo: newOutTradeNo(), gatewayTradeNo: fixture.unknownTradeNo };
        for (const overrides of [{ amountMinor: 0 }, { refundId: 'has-hyphen' }, ...fixture.unsendable.refunds]) {
          assert.equal((await g.refund(refundOf(trade, overrides))).kind, 'failed', JSON.stringify(overrides));
        }
        assert.equal(counter.requests(), 0, 'nothing was sent');
      } finally {
        await counter.close();
      }
    });

    it('19. a refund that cannot succeed fails for good and refunds nothing: more than charged, more than left, an unpaid or unknown trade', async () => {
      const { refundFailures } = fixture;
      const trade = await paidTrade(gateway(), 1000);
      const refund = (amountMinor: number) => gateway().refund(refundOf(trade, { amountMinor, chargeAmountMinor: 1000 }));
      assertOutcome(await refund(1001), { kind: 'failed', ...refundFailures.moreThanCharged }, 'more than charged');
      assert.equal((await refund(700)).kind, fixture.acceptedRefund);
      assertOutcome(await refund(301), { kind: 'failed', ...refundFailures.moreThanLeft }, 'more than left');
      assert.deepEqual(
        (await refundsOf(trade.outTradeNo)).map((r) => r.amountMinor),
        [700],
      );

      const open = newOutTradeNo();
      assert.equal((await gateway().charge(chargeOf(open, { buyer: 'insufficient_funds' }))).kind, 'declined');
      const declined = { outTradeNo: open, gatewayTradeNo: (await stack.ledger(open)).charges[0]?.gatewayTradeNo ?? '' };
      assertOutcome(await gateway().refund(refundOf(declined)), { kind: 'failed', ...refundFailures.unpaid }, 'unpaid');
      const unknown = { outTradeNo: newOutTradeNo(), gatewayTradeNo: fixture.unknownTradeNo };
      assertOutcome(await gateway().refund(refundOf(unknown)), { kind: 'failed', ...refundFailures.unknown }, 'unknown');
      assert.deepEqual(await refundsOf(open), []);
    });

    it('20. a refund whose answer is lost is indeterminate; queryRefund finds it, and the same refundId refunds nothing more', async () => {
      const trade = await paidTrade(gateway());
      const request = refundOf(trade);
      assert.deepEqual(await gateway().queryRefund(request), { kind: 'answered', refund: { kind: 'not_found' } });
      const fault = { operation: 'refund', action: 'drop_after_charge' };
      const lost = await underFault(fixture.id, fault, () => adapter({ noRetries: true }).refund(request));
      assertOutcome(lost, { kind: 'indeterminate', ...fixture.refundLost });
      const found = await eventually(
        async () => {
          const answer = await gateway().queryRefund(request);
          return answer.kind === 'answered' && answer.refund.kind === 'succeeded' ? answer.refund : undefined;
        },
        10_000,
        'the refund to succeed',
      );
      assert.equal(found.amountMinor, 1230);
      assert.deepEqual(await gateway().refund(request), found);
      assert.deepEqual(
        (await refundsOf(trade.outTradeNo)).map((r) => [r.refundId, r.amountMinor, r.status, r.gatewayRefundId]),
        [[request.refundId, 1230, 'succeeded', found.gatewayRefundId]],
      );
    });

    it(`21. a refund met by the gateway's own system error is ${fixture.refundSystemError.kind} and refunds nothing; queryRefund says not_found and the same refundId then refunds once`, async () => {
      const trade = await paidTrade(gateway());
      const request = refundOf(trade);
      const fault = { operation: 'refund', action: 'fail_before_charge' };
      assertOutcome(await underFault(fixture.id, fault, () => adapter({ noRetries: true }).refund(request)), fixture.refundSystemError);
      assert.deepEqual(await refundsOf(trade.outTradeNo), []);
      assert.deepEqual(await gateway().queryRefund(request), { kind: 'answered', refund: { kind: 'not_found' } });
      assert.equal((await gateway().refund(request)).kind, fixture.acceptedRefund);
      assert.equal((await refundsOf(trade.outTradeNo)).length, 1);
    });

    it('22. answers a notification exactly as the gateway expects: its acknowledgement, and a refusal it delivers again', () => {
      const replies = { ack: gateway().notificationReply(true), nack: gateway().notificationReply(false) };
      assert.deepEqual(replies, fixture.replies);
      // The webhook route turns a reply into a standard Response: each must be constructible.
      for (const reply of Object.values(replies)) assert.equal(new Response(reply.body, reply).status, reply.status);
    });
  });
}
