/**
 * The checkout page's state machine (client/checkout-state.ts), one branch per test: resuming a
 * stored attempt on load, the one payment at a time, the duplicate-purchase question, the paid, the
 * declined and the uncertain answer, the follow-up and the watch of an order awaiting the buyer —
 * and the one conversion of an older stored shape (client/checkout-storage.ts). No browser, no server.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { OrderView } from '@/server/checkout/orders';
import type { AwaitingBuyer, DeclinedPayment } from '@/server/checkout/pay';
import type { PaidOrder } from '@/server/checkout/settle';
import { cartSignature, type CurrentCheckout, type PayResult, type StoredAttempt, type StoredOrder } from '@/client/checkout-flow';
import { INITIAL_STATE, reduce, type CheckoutAction, type CheckoutState, type Choice } from '@/client/checkout-state';
import { browserCheckoutStorage, migrateStoredCheckout, STORAGE_KEY } from '@/client/checkout-storage';
import type { CallFailure } from '@/client/retry';

const CART = [{ sku: 'TEA-LONGJING', quantity: 2 }];
const ORDER: StoredOrder = {
  orderId: 'order-1',
  outTradeNo: 'PO-1',
  amountMinor: 9600,
  currency: 'CNY',
  status: 'awaiting_payment',
  cart: cartSignature(CART),
};
const ATTEMPT: StoredAttempt = { key: 'key-1', orderId: 'order-1', gateway: 'wechatpay', buyer: 'insufficient_funds', lines: CART };
const CHOICE: Choice = { cart: CART, gateway: 'alipay', buyer: 'ok' };
const PAID: PaidOrder = {
  orderId: 'order-1',
  status: 'paid',
  payment: { gateway: 'wechatpay', outTradeNo: 'PO-1', amountMinor: 9600, currency: 'CNY', gatewayTradeNo: 'T-1' },
};
const DECLINED: DeclinedPayment = {
  reason: 'PAYMENT_DECLINED',
  message: 'balance too low',
  orderId: 'order-1',
  gateway: 'wechatpay',
  declineCode: 'NOTENOUGH',
};
const NETWORK: CallFailure = {
  status: undefined,
  reason: undefined,
  message: 'fetch failed',
  retryAfterMs: undefined,
  retryable: true,
  details: undefined,
};
const AWAITING: AwaitingBuyer = {
  orderId: 'order-1',
  status: 'awaiting_buyer',
  gateway: 'wechatpay',
  outTradeNo: 'PO-1',
  amountMinor: 9600,
  currency: 'CNY',
  action: { kind: 'qr', qrCode: 'weixin://wxpay/bizpayurl?pr=1' },
};
const NOW = 1_800_000_000_000;

const apply = (state: CheckoutState, ...actions: CheckoutAction[]) => actions.reduce(reduce, state);
const loaded = (stored: CurrentCheckout = {}) => apply(INITIAL_STATE, { type: 'loaded', stored });
const pay = (state: CheckoutState, extra: Partial<Extract<CheckoutAction, { type: 'pay' }>> = {}) =>
  apply(state, { type: 'pay', choice: CHOICE, at: NOW, ...extra });
/** The page after 立即支付, with the payment task under way. */
const paying = () => pay(loaded());
const taskId = (state: CheckoutState) => state.task?.id ?? -1;
const answered = (state: CheckoutState, result: PayResult) => apply(state, { type: 'pay_result', taskId: taskId(state), result, at: NOW });
const statusKeys = (state: CheckoutState) =>
  state.status.tone === 'idle' ? [] : state.status.lines.map((line) => ('key' in line ? line.key : `decline:${line.decline.code}`));

describe('checkout page state machine', () => {
  it('resume: the attempt stored open is shown as it was sent and paid again, once', () => {
    const state = loaded({ order: ORDER, attempt: ATTEMPT });
    assert.deepEqual(state.form, { quantities: { 'TEA-LONGJING': 2 }, gateway: 'wechatpay', payer: 'insufficient_funds', step: undefined });
    assert.deepEqual(state.task, {
      kind: 'pay',
      id: 1,
      choice: { cart: CART, gateway: 'wechatpay', buyer: 'insufficient_funds', buyerStep: undefined },
      resuming: true,
    });
    assert.equal(state.status.tone === 'busy' && state.status.title, 'status.resuming');
    assert.equal(state.loaded, true);
    assert.equal(
      apply(state, { type: 'loaded', stored: { order: ORDER, attempt: ATTEMPT } }),
      state,
      'read once, however often React runs the effect',
    );
    assert.equal(loaded({ order: ORDER }).task, undefined, 'no attempt, nothing to resume');
  });

  it('resume: back from a gateway’s page with no attempt stored here, the return link’s order is read until it settles', () => {
    const state = apply(INITIAL_STATE, { type: 'loaded', stored: {}, returned: { orderId: 'order-1', token: 'tok' } });
    assert.deepEqual(state.returning, { orderId: 'order-1', token: 'tok', round: 0 });
    assert.equal(state.task, undefined, 'nothing is paid again');
    const view = {
      orderId: 'order-1',
      status: 'paying',
      paymentAttempts: 1,
      items: [{ sku: 'MUG-CELADON', quantity: 1 }],
      payments: [],
    } as unknown as OrderView;
    const unsettled = apply(state, { type: 'returned', view });
    assert.equal(unsettled.returning?.round, 1);
    assert.deepEqual(unsettled.form.quantities, { 'MUG-CELADON': 1 });
    const paidView = {
      ...view,
      status: 'paid',
      payments: [{ status: 'succeeded', role: 'payment', gateway: '2c2p', amountMinor: 9600, currency: 'CNY', gatewayTradeNo: 'T' }],
    };
    const paid = apply(unsettled, { type: 'returned', view: paidView as unknown as OrderView });
    assert.deepEqual(paid.status, {
      tone: 'ok',
      title: 'status.paid',
      lines: [{ key: 'status.paidDetail' }],
      orderId: 'order-1',
      returnToken: 'tok',
    });
    assert.equal(paid.returning, undefined);
    assert.equal(paid.form.gateway, '2c2p');
    assert.deepEqual(statusKeys(apply(state, { type: 'returned_unknown' })), ['status.returnedUnknown']);
  });

  it('pay: one payment at a time — a second click while the first runs sends nothing', () => {
    const first = paying();
    assert.equal(first.task?.kind, 'pay');
    assert.deepEqual(first.task?.kind === 'pay' && first.task.choice, CHOICE);
    assert.equal(pay(first), first);
    assert.equal(pay(first, { choice: { ...CHOICE, gateway: 'stripe' } }), first);
    assert.equal(apply(first, { type: 'duplicate_continue' }), first);
  });

  it('duplicate guard: the same cart paid minutes ago is asked about first; 取消 sends nothing, 继续支付 pays', () => {
    const lastPaid = { cart: cartSignature(CART), paidAt: NOW - 3.5 * 60_000, orderId: 'order-0' };
    const asked = pay(loaded(), { lastPaid });
    assert.deepEqual(asked.duplicate, { minutes: 3, choice: CHOICE });
    assert.equal(asked.task, undefined);
    const cancelled = apply(asked, { type: 'duplicate_cancel' });
    assert.equal(cancelled.duplicate, undefined);
    assert.equal(cancelled.task, undefined);
    const continued = apply(asked, { type: 'duplicate_continue' });
    assert.equal(continued.duplicate, undefined);
    assert.deepEqual(continued.task?.kind === 'pay' && continued.task.choice, CHOICE);
    // Not asked: an order already open for this cart, a payment long ago, another cart.
    assert.equal(pay(loaded(), { lastPaid, openOrderCart: cartSignature(CART) }).task?.kind, 'pay');
    assert.equal(pay(loaded(), { lastPaid: { ...lastPaid, paidAt: NOW - 11 * 60_000 } }).task?.kind, 'pay');
    assert.equal(pay(loaded(), { lastPaid: { ...lastPaid, cart: '[["MUG-CELADON",1]]' } }).task?.kind, 'pay');
  });

  it('paid: shown on the gateway that took the money, and the cart remembered for the duplicate question', () => {
    const state = answered(paying(), { kind: 'paid', order: ORDER, paid: PAID, key: 'key-1' });
    assert.deepEqual(state.status, { tone: 'ok', title: 'status.paid', lines: [{ key: 'status.paidDetail' }], orderId: 'order-1' });
    assert.equal(state.form.gateway, 'wechatpay');
    assert.deepEqual(state.lastPaid, { cart: cartSignature(CART), paidAt: NOW, orderId: 'order-1' });
    assert.equal(state.task, undefined);
  });

  it('decline: the gateway’s reason, that nothing was charged, and to try again — from the answer or from the order', () => {
    const state = answered(paying(), { kind: 'declined', order: ORDER, declined: DECLINED, message: DECLINED.message, key: 'key-1' });
    assert.equal(state.status.tone, 'bad');
    assert.deepEqual(statusKeys(state), ['decline:NOTENOUGH', 'status.notCharged', 'status.tryAgain']);
    assert.deepEqual(state.status.tone === 'bad' && state.status.tech, {
      status: 402,
      reason: 'PAYMENT_DECLINED',
      message: 'balance too low',
      key: 'key-1',
      gateway: 'wechatpay',
      declineCode: 'NOTENOUGH',
    });
    const failure = { ...NETWORK, status: 422, reason: 'IDEMPOTENCY_KEY_REUSED', retryable: false };
    const byOrder = answered(paying(), {
      kind: 'failed',
      failure,
      message: 'mismatch',
      key: 'key-1',
      orderState: 'declined',
      declined: DECLINED,
    });
    assert.deepEqual(statusKeys(byOrder), ['decline:NOTENOUGH', 'status.notCharged', 'status.tryAgain']);
    assert.equal(state.task, undefined, 'another click may pay');
    assert.equal(pay(state).task?.kind, 'pay');
  });

  it('uncertain answer: 结果暂未确认, and a follow-up is owed', () => {
    const state = answered(paying(), { kind: 'gave_up', failure: NETWORK, message: 'not confirmed', key: 'key-1' });
    assert.equal(state.status.tone === 'warn' && state.status.title, 'status.pending');
    assert.deepEqual(statusKeys(state), ['status.pendingDetail']);
    assert.deepEqual(state.task, { kind: 'follow_up', id: 2, choice: CHOICE });
    assert.equal(pay(state), state, 'the unconfirmed payment is not paid again by a click');
  });

  it('follow-up: resumes the stored attempt; without one asks the order, again while it is paying', () => {
    const waiting = answered(paying(), { kind: 'gave_up', failure: NETWORK, message: 'not confirmed', key: 'key-1' });
    const due = (stored: CurrentCheckout) => apply(waiting, { type: 'follow_up_due', taskId: taskId(waiting), stored });
    const resumed = due({ order: ORDER, attempt: ATTEMPT });
    assert.equal(resumed.task?.kind === 'pay' && resumed.task.resuming, true);
    assert.equal(resumed.task?.kind === 'pay' && resumed.task.choice.gateway, 'wechatpay', 'as the attempt was sent');
    assert.equal(
      apply(waiting, { type: 'follow_up_due', taskId: 99, stored: { order: ORDER, attempt: ATTEMPT } }),
      waiting,
      'a stale timer',
    );
    const asking = due({ order: ORDER });
    assert.deepEqual(asking.task, { kind: 'ask_order', id: 3, choice: CHOICE, orderId: 'order-1' });
    const answer = (truth: Extract<CheckoutAction, { type: 'order_answer' }>['truth']) =>
      apply(asking, { type: 'order_answer', taskId: taskId(asking), truth, at: NOW });
    assert.equal(answer({ kind: 'paying' }).task?.kind, 'follow_up');
    assert.equal(answer({ kind: 'paid', paid: PAID }).status.tone, 'ok');
    assert.deepEqual(statusKeys(answer({ kind: 'not_charged' })), ['status.mismatchNotCharged']);
    assert.deepEqual(statusKeys(answer({ kind: 'closed', status: 'expired', charged: false })), [
      'status.orderClosed',
      'status.closedNotCharged',
    ]);
    assert.equal(due({}).task, undefined, 'nothing stored: nothing to follow');
  });

  it('watch: an order awaiting the buyer is shown paid or closed as soon as the order says so', () => {
    const waiting = answered(paying(), { kind: 'awaiting_buyer', order: ORDER, awaiting: AWAITING, key: 'key-1' });
    assert.equal(waiting.status.tone, 'wait');
    assert.equal(waiting.form.gateway, 'wechatpay');
    const watched = (truth: Extract<CheckoutAction, { type: 'watched' }>['truth'], orderId = 'order-1') =>
      apply(waiting, { type: 'watched', orderId, truth, stored: { order: ORDER, attempt: ATTEMPT }, at: NOW });
    assert.equal(watched({ kind: 'not_charged' }), waiting, 'still waiting for the buyer');
    assert.equal(watched({ kind: 'paid', paid: PAID }, 'order-2'), waiting, 'another order');
    const paid = watched({ kind: 'paid', paid: PAID });
    assert.equal(paid.status.tone === 'ok' && paid.status.orderId, 'order-1');
    assert.deepEqual(paid.lastPaid, { cart: cartSignature(CART), paidAt: NOW, orderId: 'order-1' });
    assert.deepEqual(statusKeys(watched({ kind: 'closed', status: 'expired', charged: true })), [
      'status.orderClosed',
      'status.closedRefunded',
    ]);
    assert.equal(apply(waiting, { type: 'switch_method' }).status.tone, 'idle');
  });

  it('progress: a retry says what it waits on and its number, never an HTTP status', () => {
    const state = paying();
    const failure = { ...NETWORK, status: 409, reason: 'ORDER_PAYMENT_IN_PROGRESS' };
    const retrying = apply(state, { type: 'progress', taskId: taskId(state), progress: { phase: 'retrying', retry: 2, failure } });
    assert.deepEqual(retrying.status.tone === 'busy' && retrying.status.lines, [
      { key: 'status.retryOtherTab', vars: { n: 2 } },
      { key: 'status.keepOpen' },
    ]);
    assert.equal(apply(state, { type: 'progress', taskId: 99, progress: { phase: 'confirming', round: 1 } }), state, 'another task');
  });
});

describe('stored checkout migration', () => {
  it('an attempt stored by its key alone keeps its key, with the default request and the order’s cart', () => {
    const stored = { order: ORDER, attempt: { key: 'key-0', orderId: 'order-1' } };
    assert.deepEqual(migrateStoredCheckout(stored, { gateway: 'alipay', buyer: 'ok' }), {
      order: ORDER,
      attempt: { key: 'key-0', orderId: 'order-1', gateway: 'alipay', buyer: 'ok', lines: CART },
    });
    assert.deepEqual(migrateStoredCheckout(stored, { gateway: 'stripe', buyerStep: 'card' }).attempt, {
      key: 'key-0',
      orderId: 'order-1',
      gateway: 'stripe',
      buyerStep: 'card',
      lines: CART,
    });
    assert.equal(migrateStoredCheckout({ order: ORDER, attempt: ATTEMPT }, { gateway: 'alipay' }).attempt, ATTEMPT, 'current: as it is');
    assert.deepEqual(migrateStoredCheckout({ attempt: { key: 'key-0', orderId: 'order-1' } }, { gateway: 'alipay' }), {
      attempt: undefined,
    });
    assert.deepEqual(migrateStoredCheckout({}, { gateway: 'alipay' }), { attempt: undefined });
  });

  it('the page converts what it finds once and writes it back; unreadable state is none', () => {
    const items = new Map<string, string>([[STORAGE_KEY, JSON.stringify({ order: ORDER, attempt: { key: 'key-0', orderId: 'order-1' } })]]);
    let writes = 0;
    const localStorage = {
      getItem: (key: string) => items.get(key) ?? null,
      setItem: (key: string, value: string) => {
        writes++;
        items.set(key, value);
      },
    };
    const global = globalThis as { window?: unknown };
    global.window = { localStorage };
    try {
      const storage = browserCheckoutStorage({ gateway: 'alipay', buyer: 'ok' });
      const first = storage.load();
      assert.deepEqual(first.attempt, { key: 'key-0', orderId: 'order-1', gateway: 'alipay', buyer: 'ok', lines: CART });
      assert.deepEqual(JSON.parse(items.get(STORAGE_KEY)!), first);
      assert.deepEqual(storage.load(), first);
      assert.equal(writes, 1, 'converted once');
      items.set(STORAGE_KEY, '{not json');
      assert.deepEqual(storage.load(), {});
    } finally {
      delete global.window;
    }
  });
});
