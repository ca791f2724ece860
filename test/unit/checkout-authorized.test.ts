/**
 * Authorise, then capture, as the checkout page sees it (client/checkout-flow.ts orderTruth,
 * client/checkout-state.ts): a 201 that holds the money is as finished for the shopper as one that
 * took it — 已授权, the attempt over, 再来一单, the duplicate-purchase question — whether it comes
 * from the pay call, a reload, the return link or the watch of their own card step; an order whose
 * hold was released is closed, cancelled and not charged. And the 幕后 timeline names every event the
 * hold writes. No browser, no server.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AuthorizedOrder } from '@/server/checkout/authorizations';
import type { OrderView } from '@/server/checkout/orders';
import type { AwaitingBuyer } from '@/server/checkout/pay';
import type { TimelineEvent } from '@/server/checkout/timeline';
import { describe as describeEvent } from '@/app/_components/behind-describe';
import {
  cartSignature,
  orderTruth,
  type CurrentCheckout,
  type PayResult,
  type StoredAttempt,
  type StoredOrder,
} from '@/client/checkout-flow';
import { INITIAL_STATE, reduce, type CheckoutAction, type CheckoutState, type Choice } from '@/client/checkout-state';

const CART = [{ sku: 'TEA-LONGJING', quantity: 2 }];
const ORDER: StoredOrder = {
  orderId: 'order-1',
  outTradeNo: 'PO-1',
  amountMinor: 16800,
  currency: 'CNY',
  status: 'awaiting_payment',
  cart: cartSignature(CART),
};
const ATTEMPT: StoredAttempt = { key: 'key-1', orderId: 'order-1', gateway: 'stripe', buyer: 'ok', lines: CART };
const CHOICE: Choice = { cart: CART, gateway: 'alipay', buyer: 'ok' };
const AUTHORIZED: AuthorizedOrder = {
  orderId: 'order-1',
  status: 'authorized',
  payment: { gateway: 'stripe', outTradeNo: 'PO-1', amountMinor: 16800, currency: 'CNY', gatewayTradeNo: 'pi_1' },
};
const CARD_STEP: AwaitingBuyer = {
  orderId: 'order-1',
  status: 'awaiting_buyer',
  gateway: 'stripe',
  outTradeNo: 'PO-1',
  amountMinor: 16800,
  currency: 'CNY',
  action: { kind: 'card', scriptUrl: 'https://js.stripe.com/v3', publishableKey: 'pk_test', clientSecret: 'pi_1_secret' },
};
const NOW = 1_800_000_000_000;

/** The order as checkout.order answers it, with the fields the page reads. */
function view(status: OrderView['status'], payments: Partial<OrderView['payments'][number]>[] = []): OrderView {
  return {
    orderId: 'order-1',
    outTradeNo: 'PO-1',
    status,
    amountMinor: 16800,
    currency: 'CNY',
    paymentAttempts: 1,
    createdAt: '2027-01-15T08:00:00.000Z',
    paidAt: null,
    authorizedAt: status === 'awaiting_payment' ? null : '2027-01-15T08:01:00.000Z',
    items: [{ sku: 'TEA-LONGJING', name: '龙井', nameEn: 'Longjing tea', quantity: 2, unitPriceMinor: 8400 }],
    payments: payments.map((p) => ({
      gateway: 'stripe',
      attempt: 1,
      status: 'authorized',
      amountMinor: 16800,
      currency: 'CNY',
      gatewayTradeNo: 'pi_1',
      declineCode: null,
      declineMessage: null,
      source: 'notification',
      role: 'payment',
      authorizedMinor: 16800,
      createdAt: '2027-01-15T08:01:00.000Z',
      ...p,
    })),
    refunds: [],
    trades: [],
  };
}
const HELD = view('authorized', [{}]);
const RELEASED = view('voided', [{ status: 'voided' }]);

const apply = (state: CheckoutState, ...actions: CheckoutAction[]) => actions.reduce(reduce, state);
const loaded = (stored: CurrentCheckout = {}) => apply(INITIAL_STATE, { type: 'loaded', stored });
const paying = () => apply(loaded(), { type: 'pay', choice: CHOICE, at: NOW });
const taskId = (state: CheckoutState) => state.task?.id ?? -1;
const answered = (state: CheckoutState, result: PayResult) => apply(state, { type: 'pay_result', taskId: taskId(state), result, at: NOW });
const statusKeys = (state: CheckoutState) =>
  state.status.tone === 'idle' ? [] : state.status.lines.map((line) => ('key' in line ? line.key : `decline:${line.decline.code}`));

/** 已授权, with what is held, for order-1. */
const AUTHORIZED_STATUS = {
  tone: 'ok',
  title: 'status.authorized',
  lines: [{ key: 'status.authorizedDetail', vars: { amount: '¥168.00' } }],
  orderId: 'order-1',
};

describe('authorise, then capture: what the order says', () => {
  it('an authorised order holding its payment is a finished payment, as the pay call answers it', () => {
    assert.deepEqual(orderTruth(HELD), { kind: 'paid', paid: AUTHORIZED });
  });

  it('an authorised order whose hold is not readable yet is asked again, never guessed', () => {
    assert.deepEqual(orderTruth(view('authorized', [{ status: 'declined' }])), { kind: 'paying' });
    assert.deepEqual(orderTruth(view('authorized', [{ role: 'excess' }])), { kind: 'paying' }, 'an excess hold does not pay the order');
  });

  it('a voided order is closed; charged only when a payment on it succeeded', () => {
    assert.deepEqual(orderTruth(RELEASED), { kind: 'closed', status: 'voided', charged: false });
    const withExcess = view('voided', [{ status: 'voided' }, { status: 'succeeded', role: 'excess', gatewayTradeNo: 'pi_2' }]);
    assert.deepEqual(orderTruth(withExcess), { kind: 'closed', status: 'voided', charged: true });
  });
});

describe('authorise, then capture: the checkout page', () => {
  it('1. a 201 authorised answer is 已授权 with what is held, on the gateway that holds it', () => {
    const state = answered(paying(), { kind: 'paid', order: ORDER, paid: AUTHORIZED, key: 'key-1' });
    assert.deepEqual(state.status, AUTHORIZED_STATUS);
    assert.equal(state.form.gateway, 'stripe');
    assert.equal(state.task, undefined);
  });

  it('2. after 已授权 the cart is locked, 再来一单 starts over, and the same cart is asked about first', () => {
    const held = answered(paying(), { kind: 'paid', order: ORDER, paid: AUTHORIZED, key: 'key-1' });
    assert.deepEqual(held.lastPaid, { cart: cartSignature(CART), paidAt: NOW, orderId: 'order-1' });
    assert.equal(apply(held, { type: 'pay', choice: CHOICE, at: NOW }), held, 'nothing is paid again from 已授权');
    const again = apply(held, { type: 'new_order' });
    assert.equal(again.status.tone, 'idle');
    const asked = apply(again, { type: 'pay', choice: CHOICE, at: NOW + 60_000, lastPaid: held.lastPaid });
    assert.deepEqual(asked.duplicate, { minutes: 1, choice: CHOICE });
    assert.equal(asked.task, undefined);
  });

  it('3. a reload resumes the stored attempt, and its replayed 201 is 已授权', () => {
    const resumed = loaded({ order: ORDER, attempt: ATTEMPT });
    assert.equal(resumed.task?.kind === 'pay' && resumed.task.resuming, true);
    const state = answered(resumed, { kind: 'paid', order: ORDER, paid: AUTHORIZED, key: 'key-1' });
    assert.deepEqual(state.status, AUTHORIZED_STATUS);
    assert.deepEqual(state.lastPaid, { cart: cartSignature(CART), paidAt: NOW, orderId: 'order-1' });
  });

  it('4. the buyer’s own card step, watched, settles as 已授权 once the order holds the money', () => {
    const waiting = answered(paying(), { kind: 'awaiting_buyer', order: ORDER, awaiting: CARD_STEP, key: 'key-1' });
    assert.equal(waiting.status.tone, 'wait');
    const watched = (order: OrderView) =>
      apply(waiting, {
        type: 'watched',
        orderId: 'order-1',
        truth: orderTruth(order),
        stored: { order: ORDER, attempt: ATTEMPT },
        at: NOW,
      });
    assert.equal(watched(view('paying')), waiting, 'still confirming the card');
    const held = watched(HELD);
    assert.deepEqual(held.status, AUTHORIZED_STATUS);
    assert.deepEqual(held.lastPaid, { cart: cartSignature(CART), paidAt: NOW, orderId: 'order-1' });
  });

  it('5. back from a gateway’s page, the return link’s authorised order is 已授权, read by its token', () => {
    const returning = apply(INITIAL_STATE, { type: 'loaded', stored: {}, returned: { orderId: 'order-1', token: 'tok' } });
    const state = apply(returning, { type: 'returned', view: HELD });
    assert.deepEqual(state.status, { ...AUTHORIZED_STATUS, returnToken: 'tok' });
    assert.equal(state.returning, undefined);
    assert.equal(state.form.gateway, 'stripe');
  });

  it('6. a follow-up that asks the order finds it authorised: 已授权', () => {
    const unsure = answered(paying(), {
      kind: 'gave_up',
      failure: {
        status: undefined,
        reason: undefined,
        message: 'fetch failed',
        retryAfterMs: undefined,
        retryable: true,
        details: undefined,
      },
      message: 'not confirmed',
      key: 'key-1',
    });
    const asking = apply(unsure, { type: 'follow_up_due', taskId: taskId(unsure), stored: { order: ORDER } });
    const state = apply(asking, { type: 'order_answer', taskId: taskId(asking), truth: orderTruth(HELD), at: NOW });
    assert.deepEqual(state.status, AUTHORIZED_STATUS);
  });

  it('7. a voided order is closed as cancelled with its hold released, not charged — however the page reads it', () => {
    const voided = ['status.voidedDetail', 'status.closedNotCharged'];
    const returning = apply(INITIAL_STATE, { type: 'loaded', stored: {}, returned: { orderId: 'order-1', token: 'tok' } });
    const returned = apply(returning, { type: 'returned', view: RELEASED });
    assert.deepEqual(returned.status, {
      tone: 'bad',
      title: 'status.voided',
      lines: [{ key: 'status.voidedDetail' }, { key: 'status.closedNotCharged' }],
    });

    const waiting = answered(paying(), { kind: 'awaiting_buyer', order: ORDER, awaiting: CARD_STEP, key: 'key-1' });
    const watched = apply(waiting, { type: 'watched', orderId: 'order-1', truth: orderTruth(RELEASED), stored: {}, at: NOW });
    assert.equal(watched.status.tone === 'bad' && watched.status.title, 'status.voided');
    assert.deepEqual(statusKeys(watched), voided);

    const unsure = answered(paying(), {
      kind: 'gave_up',
      failure: {
        status: undefined,
        reason: undefined,
        message: 'fetch failed',
        retryAfterMs: undefined,
        retryable: true,
        details: undefined,
      },
      message: 'not confirmed',
      key: 'key-1',
    });
    const asking = apply(unsure, { type: 'follow_up_due', taskId: taskId(unsure), stored: { order: ORDER } });
    const asked = apply(asking, { type: 'order_answer', taskId: taskId(asking), truth: orderTruth(RELEASED), at: NOW });
    assert.equal(asked.status.tone === 'bad' && asked.status.title, 'status.voided');
    assert.deepEqual(statusKeys(asked), voided);
    assert.equal(asked.lastPaid, undefined, 'a released hold is no purchase to ask about');
  });
});

describe('authorise, then capture: the 幕后 timeline', () => {
  const event = (kind: string, data: Record<string, unknown>): TimelineEvent => ({
    seq: 1,
    at: '2027-01-15T08:01:00.000Z',
    kind,
    data,
    hash: '0',
  });
  const hold = { gateway: 'stripe', gatewayTradeNo: 'pi_1', amountMinor: 16800, currency: 'CNY', via: 'notification' };
  const events = [
    event('payment.authorized', { ...hold, attempt: 1 }),
    event('payment.excess_authorization', { ...hold, gatewayTradeNo: 'pi_2', orderStatus: 'authorized', captureId: 'cap_2' }),
    event('payment.captured', { ...hold, amountMinor: 10000, authorizedMinor: 16800 }),
    event('payment.authorization_voided', {
      gateway: 'stripe',
      gatewayTradeNo: 'pi_1',
      amountMinor: 16800,
      how: 'lapsed',
      role: 'payment',
    }),
    event('authorization.capture_decided', { captureId: 'cap_1', amountMinor: 10000, authorizedMinor: 16800, by: 'ops' }),
    event('authorization.release_decided', { captureId: 'cap_1', amountMinor: null, authorizedMinor: 16800, by: 'ops' }),
    event('order.voided', { restocked: true, how: 'released' }),
  ];

  it('names every event of a hold in both languages, in the tone of what it means', () => {
    const tones = events.map((e) => describeEvent(e, 'zh', 'CNY').tone);
    assert.deepEqual(tones, ['ok', 'warn', 'ok', undefined, undefined, undefined, undefined]);
    for (const lang of ['zh', 'en'] as const) {
      for (const e of events) {
        const shown = describeEvent(e, lang, 'CNY');
        assert.notEqual(shown.title, e.kind, `${e.kind} in ${lang} has a describer`);
        assert.doesNotMatch(`${shown.title} ${shown.details}`, /undefined|NaN/, `${e.kind} in ${lang}`);
      }
    }
  });

  it('shows a partial capture beside what was held, and a hold that lapsed as lapsed', () => {
    assert.match(describeEvent(events[2]!, 'zh', 'CNY').details, /¥100\.00（授权 ¥168\.00）/);
    assert.match(describeEvent(events[2]!, 'en', 'CNY').details, /¥100\.00 of ¥168\.00 held/);
    assert.equal(describeEvent(events[3]!, 'zh', 'CNY').title, '授权在网关过期失效，未扣款');
    assert.equal(describeEvent(events[3]!, 'en', 'CNY').title, 'Hold lapsed at the gateway: nothing charged');
  });
});
