/**
 * The soak's invariant checker catches every kind of violation it reports: each test seeds one
 * broken state (and a ledger as the sandbox would report it) after a fresh baseline, and checks that
 * exactly that violation is reported; a clean state reports none.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import postgres from 'postgres';
import { runMigrations } from '@/db/migrate';
import { checkInvariants, takeBaseline, type Baseline, type Ledger, type LedgerCharge, type LedgerRefund } from '@/soak/invariants';
import { buildSchedule, scheduleDigest } from '@/soak/schedule';
import { requireDatabaseUrl } from '@/test/support/stack';

let sql: postgres.Sql;
before(async () => {
  const url = requireDatabaseUrl();
  await runMigrations(url);
  sql = postgres(url, { max: 4, onnotice: () => {}, connection: { application_name: 'payonce-soak-test' } });
});
after(async () => {
  await sql?.end({ timeout: 5 });
});

const SKU = 'MUG-CELADON';
const PRICE = 6800;
const LEASE_MS = 150;

interface SeedOptions {
  status?: 'awaiting_payment' | 'paying' | 'paid' | 'expired';
  quantity?: number;
  /** How much stock to take for the order (default: its quantity, as the app does). */
  stockTaken?: number;
  /** Write the succeeded payment row (default: when paid). */
  payment?: boolean;
  /** Delivered confirmation emails (default: 1 when paid). */
  emails?: number;
  /** The pay key: completed (default), or left with a lease held for this long. */
  keyLeaseHeldMs?: number;
  /** Completed checkout.createOrder keys whose answer is this order (default 1, as the app leaves it). */
  creationKeys?: number;
}

/** One order as the app would leave it, with the ledger charge the sandbox would hold for it. */
async function seedOrder(options: SeedOptions = {}): Promise<{ orderId: string; outTradeNo: string; charge: LedgerCharge }> {
  const status = options.status ?? 'paid';
  const quantity = options.quantity ?? 1;
  const paid = status === 'paid';
  const customerId = randomUUID();
  const orderId = randomUUID();
  const outTradeNo = `SOAKT${orderId.replace(/-/g, '').slice(0, 15).toUpperCase()}`;
  const gatewayTradeNo = `T${randomUUID().replace(/-/g, '').slice(0, 20)}`;
  const amount = PRICE * quantity;
  await sql.begin(async (tx) => {
    await tx`insert into customers (id) values (${customerId})`;
    await tx`update products set stock = stock - ${options.stockTaken ?? quantity} where sku = ${SKU}`;
    await tx`
      insert into orders (id, customer_id, out_trade_no, amount_minor, currency, status, payment_attempt, paid_at)
      values (${orderId}, ${customerId}, ${outTradeNo}, ${amount}, 'CNY', ${status}, 1, ${paid ? new Date() : null})`;
    await tx`
      insert into order_items (order_id, sku, name, quantity, unit_price_minor)
      values (${orderId}, ${SKU}, '龙泉青瓷马克杯', ${quantity}, ${PRICE})`;
    if (options.payment ?? paid) {
      await tx`
        insert into payments (order_id, gateway, out_trade_no, attempt, amount_minor, currency, status, gateway_trade_no, source)
        values (${orderId}, 'alipay', ${outTradeNo}, 1, ${amount}, 'CNY', 'succeeded', ${gatewayTradeNo}, 'response')`;
      await tx`select append_payment_event(${`order:${orderId}`}, ${orderId}::uuid, 'payment.succeeded', ${tx.json({ gateway: 'alipay', gatewayTradeNo })})`;
    }
    const emails = options.emails ?? (paid ? 1 : 0);
    for (let i = 0; i < emails; i++) {
      const [row] = await tx<{ id: string }[]>`
        insert into outbox (topic, dedupe_key, payload, delivered_at, attempts)
        values ('email.order_paid', ${`order-paid-email:${orderId}${i === 0 ? '' : `:${i}`}`},
                ${tx.json({ orderId, customerId, outTradeNo, amountMinor: amount, currency: 'CNY', gateway: 'alipay' })},
                now(), 1)
        returning id`;
      await tx`
        insert into mail_sink (outbox_id, recipient, subject, body)
        values (${row!.id}, 'soak@payonce.test', ${`支付成功：订单 ${outTradeNo}`}, 'test')`;
    }
    const scope = `customer:${customerId}`;
    for (let i = 0; i < (options.creationKeys ?? 1); i++) {
      await tx`
        insert into idempotency_keys (scope, key, request_path, request_hash, response_status, response_body,
                                      recovery_point, completed_at)
        values (${scope}, ${randomUUID()}, 'checkout.createOrder', 'hash', 201, ${tx.json({ orderId, outTradeNo })},
                'started', now())`;
    }
    if (options.keyLeaseHeldMs === undefined) {
      await tx`
        insert into idempotency_keys (scope, key, request_path, request_hash, response_status, response_body,
                                      locked_at, recovery_point, completed_at)
        values (${scope}, ${randomUUID()}, 'checkout.pay', 'hash', 201, '{}'::jsonb, now(), 'attempt_started', now())`;
    } else {
      await tx`
        insert into idempotency_keys (scope, key, request_path, request_hash, locked_at, lease_expires_at,
                                      lease_token, recovery_point)
        values (${scope}, ${randomUUID()}, 'checkout.pay', 'hash', now(),
                now() + ${options.keyLeaseHeldMs}::bigint * interval '1 millisecond', ${randomUUID()}, 'attempt_started')`;
    }
  });
  const charge: LedgerCharge = {
    gateway: 'alipay',
    outTradeNo,
    amountMinor: amount,
    currency: 'CNY',
    status: 'succeeded',
    gatewayTradeNo,
    createdAt: new Date().toISOString(),
  };
  return { orderId, outTradeNo, charge };
}

const ledgerOf = (...charges: LedgerCharge[]): Ledger => ({ charges, notifications: [], refunds: [] });

/** The ledger's refund of `charge`, as the sandbox reports it. */
const refundOf = (charge: LedgerCharge, refundId: string, status = 'succeeded'): LedgerRefund => ({
  gateway: charge.gateway,
  outTradeNo: charge.outTradeNo,
  amountMinor: charge.amountMinor,
  currency: charge.currency,
  status,
  refundId,
  gatewayRefundId: `gw-${refundId}`,
  gatewayTradeNo: charge.gatewayTradeNo!,
  createdAt: new Date().toISOString(),
});

/** A second charge recorded as excess, with its refund row (and refund email once it succeeded). */
async function seedExcess(orderId: string, charge: LedgerCharge, refundId: string, status = 'succeeded') {
  await sql.begin(async (tx) => {
    const [payment] = await tx<{ id: string }[]>`
      insert into payments (order_id, gateway, out_trade_no, attempt, amount_minor, currency, status, gateway_trade_no, source, role)
      values (${orderId}, ${charge.gateway}, ${charge.outTradeNo}, 2, ${charge.amountMinor}, 'CNY', 'succeeded',
              ${charge.gatewayTradeNo}, 'notification', 'excess')
      returning id`;
    await tx`select append_payment_event(${`order:${orderId}`}, ${orderId}::uuid, 'payment.excess', ${tx.json({ gateway: charge.gateway })})`;
    await tx`
      insert into refunds (order_id, payment_id, gateway, out_trade_no, gateway_trade_no, refund_id, amount_minor, currency,
                           reason, status, settled_at)
      values (${orderId}, ${payment!.id}, ${charge.gateway}, ${charge.outTradeNo}, ${charge.gatewayTradeNo}, ${refundId},
              ${charge.amountMinor}, 'CNY', 'duplicate_charge', ${status}, ${status === 'succeeded' ? new Date() : null})`;
    if (status === 'succeeded') {
      const [row] = await tx<{ id: string }[]>`
        insert into outbox (topic, dedupe_key, payload, delivered_at, attempts)
        values ('email.refund', ${`refund-email:${refundId}`}, ${tx.json({ orderId, refundId })}, now(), 1)
        returning id`;
      await tx`insert into mail_sink (outbox_id, recipient, subject, body) values (${row!.id}, 'soak@payonce.test', '退款通知', 'test')`;
    }
  });
}

async function check(baseline: Baseline, ledger: Ledger) {
  return checkInvariants({ sql, ledger, baseline, leaseMs: LEASE_MS });
}

const kinds = (report: Awaited<ReturnType<typeof check>>) => report.violations.map((v) => v.kind).sort();

describe('soak invariant checker', () => {
  it('reports nothing for a clean state: paid, declined-then-open and expired orders', async () => {
    const baseline = await takeBaseline(sql);
    const paid = await seedOrder({ quantity: 2 });
    await seedOrder({ status: 'awaiting_payment' }); // stock held, never charged
    await seedOrder({ status: 'expired', stockTaken: 0 }); // expired: its stock came back
    const declined: LedgerCharge = { ...paid.charge, status: 'declined', gatewayTradeNo: null };
    const report = await check(baseline, ledgerOf(declined, paid.charge));
    assert.deepEqual(report.violations, []);
    assert.equal(report.stats.orders, 3);
    assert.equal(report.stats.ledgerCharges.succeeded, 1);
    assert.equal(report.stats.emailsSent, 1);
  });

  it('ignores what was there before the baseline', async () => {
    await seedOrder({ emails: 2 }); // broken, but older than the run
    const baseline = await takeBaseline(sql);
    const report = await check(baseline, ledgerOf());
    assert.deepEqual(report.violations, []);
  });

  it('a double charge: two succeeded charges for one out_trade_no, the second kept', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder();
    const second: LedgerCharge = { ...order.charge, gateway: 'wechatpay', gatewayTradeNo: 'WX4200000001' };
    const report = await check(baseline, ledgerOf(order.charge, second));
    assert.deepEqual(kinds(report), ['charged_not_paid', 'money_kept']);
    assert.equal(report.violations.find((v) => v.kind === 'money_kept')!.subject, order.outTradeNo);
  });

  it('a second charge recorded as excess and refunded once is clean', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder();
    const second: LedgerCharge = { ...order.charge, gateway: 'wechatpay', gatewayTradeNo: `WX${randomUUID().slice(0, 8)}` };
    const refundId = `R${randomUUID().replace(/-/g, '').slice(0, 18).toUpperCase()}`;
    await seedExcess(order.orderId, second, refundId);
    const ledger = { ...ledgerOf(order.charge, second), refunds: [refundOf(second, refundId)] };
    const report = await check(baseline, ledger);
    assert.deepEqual(report.violations, []);
    assert.equal(report.stats.refunds.excessCharges, 1);
    assert.equal(report.stats.ordersChargedTwice, 1);
  });

  it('a refund larger than its charge, and a charge refunded twice', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder();
    const second: LedgerCharge = { ...order.charge, gateway: 'stripe', gatewayTradeNo: `pi_${randomUUID().slice(0, 8)}` };
    const refundId = `R${randomUUID().replace(/-/g, '').slice(0, 18).toUpperCase()}`;
    await seedExcess(order.orderId, second, refundId);
    const ledger = { ...ledgerOf(order.charge, second), refunds: [refundOf(second, refundId), refundOf(second, `${refundId}X`)] };
    const report = await check(baseline, ledger);
    assert.deepEqual(kinds(report), ['money_kept', 'refund_exceeds_charge', 'refund_twice']);
  });

  it('a refund not final after settling', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder();
    const second: LedgerCharge = { ...order.charge, gateway: 'wechatpay', gatewayTradeNo: `WX${randomUUID().slice(0, 8)}` };
    const refundId = `R${randomUUID().replace(/-/g, '').slice(0, 18).toUpperCase()}`;
    await seedExcess(order.orderId, second, refundId, 'processing');
    const ledger = { ...ledgerOf(order.charge, second), refunds: [refundOf(second, refundId, 'pending')] };
    const report = await check(baseline, ledger);
    assert.deepEqual(kinds(report), ['money_kept', 'unsettled']);
  });

  it('a charge without a paid order', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder({ status: 'awaiting_payment' });
    const report = await check(baseline, ledgerOf(order.charge));
    assert.deepEqual(kinds(report), ['charged_not_paid', 'money_kept']);
    assert.equal(report.violations[0]!.subject, order.outTradeNo);
  });

  it('a charge whose payment was recorded but whose order never became paid', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder({ status: 'awaiting_payment', payment: true });
    const report = await check(baseline, ledgerOf(order.charge));
    assert.deepEqual(kinds(report), ['charged_not_paid', 'money_kept']);
    assert.match(report.violations[0]!.detail, /awaiting_payment/);
  });

  it('a charge for an out_trade_no no order has', async () => {
    const baseline = await takeBaseline(sql);
    const charge: LedgerCharge = {
      gateway: '2c2p',
      outTradeNo: 'NOSUCHORDER1',
      amountMinor: 100,
      currency: 'CNY',
      status: 'succeeded',
      gatewayTradeNo: 'X1',
      createdAt: new Date(Date.now() + 1000).toISOString(),
    };
    const report = await check(baseline, ledgerOf(charge));
    assert.deepEqual(kinds(report), ['charged_not_paid', 'money_kept']);
  });

  it('a paid order whose payment the ledger does not back', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder();
    const other: LedgerCharge = { ...order.charge, gatewayTradeNo: 'SOMEOTHERTRADE' };
    const report = await check(baseline, ledgerOf(other));
    assert.deepEqual(kinds(report), ['charged_not_paid', 'paid_without_charge']);
  });

  it('a broken stock count: stock taken twice for one order', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder({ quantity: 1, stockTaken: 2 });
    const report = await check(baseline, ledgerOf(order.charge));
    assert.deepEqual(kinds(report), ['stock_not_conserved']);
    assert.equal(report.violations[0]!.subject, SKU);
  });

  it('a broken stock count: an expired order that never gave its stock back', async () => {
    const baseline = await takeBaseline(sql);
    await seedOrder({ status: 'expired' }); // took 1, status says it was returned, it was not
    const report = await check(baseline, ledgerOf());
    assert.deepEqual(kinds(report), ['stock_not_conserved']);
  });

  it('a second email for one paid order', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder({ emails: 2 });
    const report = await check(baseline, ledgerOf(order.charge));
    assert.deepEqual(kinds(report), ['emails_per_paid_order']);
    assert.match(report.violations[0]!.detail, /2 emails/);
  });

  it('no email for a paid order', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder({ emails: 0 });
    const report = await check(baseline, ledgerOf(order.charge));
    assert.deepEqual(kinds(report), ['emails_per_paid_order']);
  });

  it('a payment the journal does not tell of', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder();
    await sql`
      insert into payments (order_id, gateway, out_trade_no, attempt, amount_minor, currency, status, gateway_trade_no, source, role)
      select order_id, 'wechatpay', out_trade_no, 2, amount_minor, currency, 'succeeded', 'WX-UNJOURNALED', 'notification', 'excess'
        from payments where order_id = ${order.orderId}`;
    const report = await check(baseline, ledgerOf(order.charge));
    assert.ok(kinds(report).includes('journal_disagrees'), JSON.stringify(report.violations));
    assert.equal(report.violations.find((v) => v.kind === 'journal_disagrees')!.subject, order.outTradeNo);
  });

  it('a journal row edited after it was written', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder();
    await sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`;
      await tx`update payment_events set data = '{"gateway":"stripe"}' where order_id = ${order.orderId}`;
    });
    const report = await check(baseline, ledgerOf(order.charge));
    assert.deepEqual(kinds(report), ['journal_broken']);
    assert.match(report.violations[0]!.detail, /hash_mismatch at seq 1/);
  });

  it('an order no order-creation key answered with (the work ran twice for one key), or two keys did', async () => {
    const baseline = await takeBaseline(sql);
    const orphan = await seedOrder({ creationKeys: 0 });
    const shared = await seedOrder({ creationKeys: 2 });
    const report = await check(baseline, ledgerOf(orphan.charge, shared.charge));
    assert.deepEqual(kinds(report), ['orders_per_key', 'orders_per_key']);
    assert.deepEqual(report.violations.map((v) => v.subject).sort(), [orphan.outTradeNo, shared.outTradeNo].sort());
  });

  it('a key left in flight: its lease stays held by one owner past a lease length', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder({ keyLeaseHeldMs: 60 * 60 * 1000 });
    const report = await check(baseline, ledgerOf(order.charge));
    assert.deepEqual(kinds(report), ['key_in_flight']);
  });

  it('a lease that runs out within a lease length is not a key left in flight', async () => {
    const baseline = await takeBaseline(sql);
    const order = await seedOrder({ keyLeaseHeldMs: LEASE_MS / 2 });
    const report = await check(baseline, ledgerOf(order.charge));
    assert.deepEqual(report.violations, []);
    assert.equal(report.stats.keys.staleLease, 1);
  });

  it('an order still paying after settling', async () => {
    const baseline = await takeBaseline(sql);
    await seedOrder({ status: 'paying' });
    const report = await check(baseline, ledgerOf());
    assert.deepEqual(kinds(report), ['unsettled']);
  });
});

describe('soak schedule', () => {
  const options = { orders: 500, faultRate: 0.3, seed: 'replay-me', instances: 2 };
  it('the same seed gives the same schedule; another seed another', () => {
    assert.deepEqual(buildSchedule(options), buildSchedule(options));
    assert.equal(scheduleDigest(buildSchedule(options)), scheduleDigest(buildSchedule({ ...options })));
    assert.notEqual(scheduleDigest(buildSchedule(options)), scheduleDigest(buildSchedule({ ...options, seed: 'another' })));
  });

  it('a shorter run replays the start of a longer one', () => {
    assert.deepEqual(buildSchedule({ ...options, orders: 50 }), buildSchedule(options).slice(0, 50));
  });

  it('fires faults at about the asked rate', () => {
    const plans = buildSchedule({ ...options, orders: 5000 });
    const rate = plans.filter((p) => p.fault).length / plans.length;
    assert.ok(Math.abs(rate - 0.3) < 0.03, `fault rate ${rate}`);
    assert.equal(buildSchedule({ ...options, faultRate: 0 }).filter((p) => p.fault).length, 0);
  });
});
