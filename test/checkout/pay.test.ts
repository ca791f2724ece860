/**
 * checkout.pay (server/checkout/pay.ts), one test per recovery point and branch: what the request does
 * from a new key (`started`) and from a key taken over at `attempt_started`, and how each answer of
 * the gateway is recorded. Real PostgreSQL — the phases' transactions and the order's lock are what is
 * under test — and the guard's own engine; the gateway is a scripted PaymentGateway, the seam pay
 * talks to, so that each branch is reached on purpose and every call to it is counted. What the four
 * real adapters answer is proved in test/integration/gateway-contract.test.ts; whole failures across
 * the stack in test/integration/failure-matrix.test.ts.
 *
 *   DATABASE_URL=postgres://… node --import tsx --test test/checkout/pay.test.ts
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import { DEFAULT_IDEMPOTENCY_OPTIONS, executeIdempotent, type IdempotentResult } from '@payonce/idempotency';
import { openDatabase, type DatabaseHandle } from '@/db/client';
import { runMigrations } from '@/db/migrate';
import { CheckoutError } from '@/server/checkout/refusals';
import { createOrder } from '@/server/checkout/orders';
import { payOrder, type PayInput } from '@/server/checkout/pay';
import { createCheckoutIdempotencyStore, customerScope, type CheckoutServices } from '@/server/checkout/services';
import type { ChargeOutcome, ChargeRequest, CloseOutcome, GatewayId, PaymentGateway } from '@/server/payments/gateway';
import { requireDatabaseUrl } from '@/test/support/stack';

/** A gateway whose answers the test scripts, one per call, and which counts what it was asked. */
class ScriptedGateway implements PaymentGateway {
  readonly merchantId = 'scripted';
  readonly buyerSteps = ['qr'] as const;
  readonly hasTestBuyers = true;
  charges: ChargeRequest[] = [];
  closes: string[] = [];
  chargeAnswers: ChargeOutcome[] = [];
  closeAnswer: CloseOutcome = { kind: 'closed' };
  /** Runs inside the charge call, before it answers: what happens elsewhere meanwhile. */
  duringCharge: (() => Promise<void>) | undefined;

  constructor(
    readonly id: GatewayId,
    readonly oneTradePerOrder: boolean,
  ) {}

  async charge(request: ChargeRequest): Promise<ChargeOutcome> {
    this.charges.push(request);
    const during = this.duringCharge;
    this.duringCharge = undefined;
    await during?.();
    const answer = this.chargeAnswers.shift();
    if (answer) return answer;
    return { kind: 'succeeded', gatewayTradeNo: `T-${request.outTradeNo}`, amountMinor: request.amountMinor, currency: request.currency };
  }
  async close(request: { outTradeNo: string }): Promise<CloseOutcome> {
    this.closes.push(request.outTradeNo);
    return this.closeAnswer;
  }
  query = async () => ({ kind: 'answered', trade: { kind: 'not_found' } }) as const;
  refund = async () => ({ kind: 'retryable', code: 'SCRIPTED', message: 'not scripted' }) as const;
  queryRefund = async () => ({ kind: 'answered', refund: { kind: 'not_found' } }) as const;
  verifyNotification = async () => ({ kind: 'rejected', reason: 'not scripted' }) as const;
  notificationReply = () => ({ status: 200, headers: {}, body: '' });
}

let handle: DatabaseHandle;
let services: CheckoutServices;
let alipay: ScriptedGateway;
let stripe: ScriptedGateway;

before(async () => {
  const databaseUrl = requireDatabaseUrl();
  await runMigrations(databaseUrl);
  handle = openDatabase(databaseUrl, { max: 5 });
  services = {
    db: handle.db,
    idempotencyStore: createCheckoutIdempotencyStore(handle.sql),
    idempotencyOptions: DEFAULT_IDEMPOTENCY_OPTIONS,
    gateways: {},
    publicBaseUrl: 'http://127.0.0.1:1',
  };
});
after(async () => {
  await handle?.sql.end({ timeout: 5 });
});
beforeEach(() => {
  // Alipay's shape (one trade per order, reopened by a new attempt) and Stripe's (one PaymentIntent per attempt).
  alipay = new ScriptedGateway('alipay', true);
  stripe = new ScriptedGateway('stripe', false);
  services.gateways = { alipay, stripe };
});

const returnTo = { urlFor: (orderId: string) => `http://127.0.0.1:1/api/return?orderId=${orderId}` };

/** A customer with one fresh order of one tea (¥168.00). */
async function newOrder() {
  const customerId = randomUUID();
  const created = await executeIdempotent(
    services.idempotencyStore,
    { scope: customerScope(customerId), key: randomUUID(), path: 'checkout.createOrder', input: {} },
    { onePhase: createOrder(customerId, [{ sku: 'TEA-LONGJING', quantity: 1 }]) },
  );
  const order = created.body as { orderId: string; outTradeNo: string };
  return { customerId, orderId: order.orderId, outTradeNo: order.outTradeNo };
}

type Order = Awaited<ReturnType<typeof newOrder>>;

/** checkout.pay under the guard, as the tRPC procedure runs it: a CheckoutError is the HTTP refusal. */
async function pay(order: Order, key: string, input: Partial<PayInput> = {}): Promise<IdempotentResult | CheckoutError> {
  const payInput: PayInput = { orderId: order.orderId, gateway: 'alipay', buyer: 'ok', ...input };
  try {
    return await executeIdempotent(
      services.idempotencyStore,
      { scope: customerScope(order.customerId), key, path: 'checkout.pay', input: payInput },
      payOrder(services, order.customerId, payInput, returnTo),
    );
  } catch (error) {
    if (error instanceof CheckoutError) return error;
    throw error;
  }
}

function answered(result: IdempotentResult | CheckoutError): IdempotentResult {
  assert.ok(!(result instanceof CheckoutError), `expected an answer, got ${result instanceof CheckoutError ? result.reason : ''}`);
  return result;
}
function refused(result: IdempotentResult | CheckoutError, status: number, reason: string): CheckoutError {
  assert.ok(result instanceof CheckoutError, `expected ${status} ${reason}, got ${JSON.stringify(result)}`);
  assert.deepEqual([result.httpStatus, result.reason], [status, reason]);
  return result;
}

async function recoveryPointOf(key: string): Promise<string | undefined> {
  const [row] = await handle.sql<{ recovery_point: string }[]>`select recovery_point from idempotency_keys where key = ${key}`;
  return row?.recovery_point;
}
async function completedAt(key: string): Promise<Date | null | undefined> {
  const [row] = await handle.sql<{ completed_at: Date | null }[]>`select completed_at from idempotency_keys where key = ${key}`;
  return row?.completed_at;
}
async function orderRow(orderId: string) {
  const [row] = await handle.sql<{ status: string; payment_attempt: number; attempt_key_id: string | null }[]>`
    select status, payment_attempt, attempt_key_id from orders where id = ${orderId}`;
  return row!;
}
async function journalKinds(orderId: string): Promise<string[]> {
  const rows = await handle.sql<{ kind: string }[]>`select kind from payment_events where order_id = ${orderId} order by id`;
  return rows.map((row) => row.kind);
}
async function paymentStatuses(orderId: string): Promise<string[]> {
  const rows = await handle.sql<{ status: string }[]>`select status from payments where order_id = ${orderId} order by created_at`;
  return rows.map((row) => row.status);
}
async function openTrades(orderId: string): Promise<string[]> {
  const rows = await handle.sql<{ gateway: string }[]>`
    select gateway from order_trades where order_id = ${orderId} and status = 'open' order by gateway`;
  return rows.map((row) => row.gateway);
}

async function paymentRoles(orderId: string): Promise<[string, string][]> {
  const rows = await handle.sql<{ role: string; gateway_trade_no: string }[]>`
    select role, gateway_trade_no from payments where order_id = ${orderId} order by created_at`;
  return rows.map((row) => [row.role, row.gateway_trade_no]);
}

/** What a notification does when the buyer paid elsewhere: the order paid by a charge of its own. */
async function paidMeanwhile(order: Order, gatewayTradeNo: string): Promise<void> {
  await handle.sql.begin(async (sql) => {
    await sql`update orders set status = 'paid', attempt_key_id = null where id = ${order.orderId}`;
    await sql`insert into payments (order_id, gateway, out_trade_no, attempt, amount_minor, currency, status, gateway_trade_no, source)
              values (${order.orderId}, 'alipay', ${order.outTradeNo}, 1, 16800, 'CNY', 'succeeded', ${gatewayTradeNo}, 'notification')`;
  });
}

/** Leaves the order at `attempt_started` under `key`: the gateway could not tell whether it charged. */
async function attemptStartedAt(order: Order, key: string, gateway: ScriptedGateway = alipay) {
  gateway.chargeAnswers.push({ kind: 'indeterminate', code: 'TIMEOUT', message: 'no answer' });
  refused(await pay(order, key, { gateway: gateway.id }), 503, 'PAYMENT_OUTCOME_UNKNOWN');
  assert.equal(await recoveryPointOf(key), 'attempt_started');
  gateway.charges = [];
}

describe('checkout.pay from a new key (recovery point `started`)', () => {
  it('starts the attempt, charges once by the order out_trade_no and answers 201 with the payment', async () => {
    const order = await newOrder();
    const key = randomUUID();
    const result = answered(await pay(order, key));
    assert.equal(result.status, 201);
    assert.equal((result.body as { payment: { gatewayTradeNo: string } }).payment.gatewayTradeNo, `T-${order.outTradeNo}`);
    assert.equal(alipay.charges.length, 1);
    assert.deepEqual([alipay.charges[0]!.outTradeNo, alipay.charges[0]!.attempt], [order.outTradeNo, 1]);
    assert.equal((await orderRow(order.orderId)).status, 'paid');
    assert.ok(await completedAt(key), 'the key holds its answer');
    assert.deepEqual(await journalKinds(order.orderId), [
      'order.created',
      'attempt.started',
      'gateway.call',
      'gateway.answer',
      'payment.succeeded',
      'email.queued',
    ]);
  });

  it('answers a paid order with its payment and calls no gateway', async () => {
    const order = await newOrder();
    answered(await pay(order, randomUUID()));
    alipay.charges = [];
    const again = answered(await pay(order, randomUUID(), { gateway: 'stripe' }));
    assert.equal(again.status, 201);
    assert.equal((again.body as { payment: { gateway: string } }).payment.gateway, 'alipay');
    assert.equal(alipay.charges.length + stripe.charges.length, 0);
  });

  it('refuses a second key while another key owns the attempt (409, nothing charged)', async () => {
    const order = await newOrder();
    await attemptStartedAt(order, randomUUID());
    refused(await pay(order, randomUUID()), 409, 'ORDER_PAYMENT_IN_PROGRESS');
    assert.equal(alipay.charges.length, 0);
  });

  it('refuses an expired order (409 ORDER_NOT_PAYABLE, nothing charged)', async () => {
    const order = await newOrder();
    await handle.sql`update orders set status = 'expired' where id = ${order.orderId}`;
    refused(await pay(order, randomUUID()), 409, 'ORDER_NOT_PAYABLE');
    assert.equal(alipay.charges.length, 0);
  });

  it("declines at once, with no gateway call, where the order's trade at this gateway was closed", async () => {
    const order = await newOrder();
    await handle.sql`
      insert into order_trades (order_id, gateway, status, opened_attempt) values (${order.orderId}, 'alipay', 'closed', 1)`;
    const result = answered(await pay(order, randomUUID()));
    assert.equal(result.status, 402);
    assert.equal((result.body as { declineCode: string }).declineCode, 'TRADE_CLOSED');
    assert.equal(alipay.charges.length, 0);
    assert.equal((await orderRow(order.orderId)).status, 'awaiting_payment');
  });

  it("closes the order's other open trade first, then starts the attempt", async () => {
    const order = await newOrder();
    stripe.chargeAnswers.push({ kind: 'declined', code: 'card_declined', message: 'declined' });
    assert.equal(answered(await pay(order, randomUUID(), { gateway: 'stripe' })).status, 402);
    assert.deepEqual(await openTrades(order.orderId), ['stripe'], 'a declined trade stays open');
    const result = answered(await pay(order, randomUUID()));
    assert.equal(result.status, 201);
    assert.deepEqual(stripe.closes, [order.outTradeNo]);
    assert.deepEqual(await openTrades(order.orderId), [], 'the paid order holds no open trade');
  });

  it('keeps its own trade open on a new attempt at the same one-trade gateway', async () => {
    const order = await newOrder();
    alipay.chargeAnswers.push({ kind: 'declined', code: 'ACQ.BUYER_BALANCE_NOT_ENOUGH', message: '余额不足' });
    assert.equal(answered(await pay(order, randomUUID())).status, 402);
    assert.equal(answered(await pay(order, randomUUID())).status, 201);
    assert.deepEqual(alipay.closes, [], 'the same trade is reopened, not closed');
    assert.deepEqual(
      alipay.charges.map((charge) => charge.attempt),
      [1, 2],
    );
  });

  it('refuses to start while a close of another trade is in doubt (409, retry after 5 s, nothing charged)', async () => {
    const order = await newOrder();
    stripe.chargeAnswers.push({ kind: 'declined', code: 'card_declined', message: 'declined' });
    answered(await pay(order, randomUUID(), { gateway: 'stripe' }));
    stripe.closeAnswer = { kind: 'indeterminate', code: 'TIMEOUT', message: 'no answer' };
    const refusal = refused(await pay(order, randomUUID()), 409, 'ORDER_PAYMENT_IN_PROGRESS');
    assert.equal(refusal.retryAfterSeconds, 5);
    assert.equal(alipay.charges.length, 0);
    assert.equal((await orderRow(order.orderId)).status, 'awaiting_payment');
  });
});

describe('checkout.pay from a key taken over at `attempt_started`', () => {
  it('resumes the same attempt: the charge again under the same out_trade_no and attempt, no second attempt', async () => {
    const order = await newOrder();
    const key = randomUUID();
    await attemptStartedAt(order, key);
    const result = answered(await pay(order, key));
    assert.equal(result.status, 201);
    assert.deepEqual(
      alipay.charges.map((charge) => [charge.outTradeNo, charge.attempt]),
      [[order.outTradeNo, 1]],
    );
    assert.equal((await journalKinds(order.orderId)).filter((kind) => kind === 'attempt.started').length, 1);
  });

  it('answers with the payment when the order was paid meanwhile, and calls no gateway', async () => {
    const order = await newOrder();
    const key = randomUUID();
    await attemptStartedAt(order, key);
    // A notification settled the order while no request worked on it.
    await paidMeanwhile(order, `N-${order.outTradeNo}`);
    const result = answered(await pay(order, key));
    assert.equal(result.status, 201);
    assert.equal((result.body as { payment: { gatewayTradeNo: string } }).payment.gatewayTradeNo, `N-${order.outTradeNo}`);
    assert.equal(alipay.charges.length, 0);
  });

  it('starts a new attempt when its attempt was closed meanwhile', async () => {
    const order = await newOrder();
    const key = randomUUID();
    await attemptStartedAt(order, key, stripe);
    // The reconciler found no charge at the gateway and gave the order back.
    await handle.sql`update orders set status = 'awaiting_payment', attempt_key_id = null where id = ${order.orderId}`;
    const result = answered(await pay(order, key, { gateway: 'stripe' }));
    assert.equal(result.status, 201);
    assert.deepEqual(
      stripe.charges.map((charge) => charge.attempt),
      [2],
    );
  });

  it('refuses when another key owns the order now (409, nothing charged)', async () => {
    const order = await newOrder();
    const key = randomUUID();
    await attemptStartedAt(order, key);
    // The attempt was given back and another tab's key started one of its own.
    await handle.sql`update orders set attempt_key_id = ${randomUUID()} where id = ${order.orderId}`;
    refused(await pay(order, key), 409, 'ORDER_PAYMENT_IN_PROGRESS');
    assert.equal(alipay.charges.length, 0);
  });
});

describe("checkout.pay records the gateway's answer", () => {
  it('declined: 402 stored for the key, a declined payment, the order payable again', async () => {
    const order = await newOrder();
    const key = randomUUID();
    alipay.chargeAnswers.push({ kind: 'declined', code: 'ACQ.BUYER_BALANCE_NOT_ENOUGH', message: '余额不足' });
    const result = answered(await pay(order, key));
    assert.equal(result.status, 402);
    assert.deepEqual(result.body, {
      reason: 'PAYMENT_DECLINED',
      message: '支付被拒绝：余额不足',
      orderId: order.orderId,
      gateway: 'alipay',
      declineCode: 'ACQ.BUYER_BALANCE_NOT_ENOUGH',
    });
    assert.deepEqual(await paymentStatuses(order.orderId), ['declined']);
    assert.equal((await orderRow(order.orderId)).status, 'awaiting_payment');
    const replay = answered(await pay(order, key));
    assert.deepEqual([replay.status, replay.replayed], [402, true]);
    assert.equal(alipay.charges.length, 1);
  });

  it('awaiting the buyer: 202 with the buyer step, the trade left open', async () => {
    const order = await newOrder();
    alipay.chargeAnswers.push({ kind: 'awaiting_buyer', action: { kind: 'qr', qrCode: 'https://qr.example/1' } });
    const result = answered(await pay(order, randomUUID(), { buyer: undefined, buyerStep: 'qr' }));
    assert.equal(result.status, 202);
    assert.deepEqual((result.body as { action: unknown }).action, { kind: 'qr', qrCode: 'https://qr.example/1' });
    assert.equal((await orderRow(order.orderId)).status, 'awaiting_payment', 'the attempt is over; the trade waits');
    assert.deepEqual(await openTrades(order.orderId), ['alipay']);
    assert.deepEqual(await paymentStatuses(order.orderId), []);
  });

  it('a decline or a buyer step that comes after the order was paid meanwhile answers with the payment', async () => {
    for (const answer of [
      { kind: 'declined', code: 'X', message: 'x' },
      { kind: 'awaiting_buyer', action: { kind: 'qr', qrCode: 'q' } },
    ] satisfies ChargeOutcome[]) {
      const order = await newOrder();
      alipay.chargeAnswers.push(answer);
      alipay.duringCharge = () => paidMeanwhile(order, `Q-${order.outTradeNo}`);
      const result = answered(await pay(order, randomUUID()));
      assert.equal(result.status, 201, answer.kind);
      assert.equal((result.body as { payment: { gatewayTradeNo: string } }).payment.gatewayTradeNo, `Q-${order.outTradeNo}`);
      assert.deepEqual(await paymentStatuses(order.orderId), ['succeeded'], `${answer.kind}: nothing else recorded`);
    }
  });

  it('retryable: 503 GATEWAY_UNAVAILABLE, retry after 1 s; the key keeps its attempt for the retry', async () => {
    const order = await newOrder();
    const key = randomUUID();
    alipay.chargeAnswers.push({ kind: 'retryable', code: 'ECONNREFUSED', message: 'refused' });
    const refusal = refused(await pay(order, key), 503, 'GATEWAY_UNAVAILABLE');
    assert.equal(refusal.retryAfterSeconds, 1);
    assert.equal(await recoveryPointOf(key), 'attempt_started');
    assert.equal(answered(await pay(order, key)).status, 201);
    assert.equal(alipay.charges.length, 2);
    assert.deepEqual(await paymentStatuses(order.orderId), ['succeeded']);
  });

  it('indeterminate: 503 PAYMENT_OUTCOME_UNKNOWN; nothing recorded until the gateway tells', async () => {
    const order = await newOrder();
    const key = randomUUID();
    await attemptStartedAt(order, key);
    assert.deepEqual(await paymentStatuses(order.orderId), []);
    assert.equal((await orderRow(order.orderId)).status, 'paying');
  });

  it('succeeded after another charge paid the order: 201 with that payment, and this charge kept for refund', async () => {
    const order = await newOrder();
    alipay.duringCharge = () => paidMeanwhile(order, `O-${order.outTradeNo}`);
    const result = answered(await pay(order, randomUUID()));
    assert.equal(result.status, 201);
    assert.equal((result.body as { payment: { gatewayTradeNo: string } }).payment.gatewayTradeNo, `O-${order.outTradeNo}`);
    assert.deepEqual(await paymentRoles(order.orderId), [
      ['payment', `O-${order.outTradeNo}`],
      ['excess', `T-${order.outTradeNo}`],
    ]);
  });

  it('succeeded after the order expired meanwhile: 409 ORDER_NOT_PAYABLE, and the charge kept for refund', async () => {
    const order = await newOrder();
    alipay.duringCharge = async () => {
      await handle.sql`update orders set status = 'expired', attempt_key_id = null where id = ${order.orderId}`;
    };
    const key = randomUUID();
    refused(await pay(order, key), 409, 'ORDER_NOT_PAYABLE');
    assert.deepEqual(await paymentRoles(order.orderId), [['excess', `T-${order.outTradeNo}`]], 'the money is on the books');
    const [refund] = await handle.sql<{ amount_minor: number }[]>`select amount_minor from refunds where order_id = ${order.orderId}`;
    assert.equal(refund?.amount_minor, 16800, 'and its refund is queued');
    refused(await pay(order, key), 409, 'ORDER_NOT_PAYABLE');
    assert.equal(alipay.charges.length, 1, 'the retry charges nothing');
  });
});
