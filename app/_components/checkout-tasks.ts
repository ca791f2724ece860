/**
 * The checkout page's work with the world — payForCart, the order, storage, timers — each run as the
 * state machine (client/checkout-state.ts) asks, its outcome reported back as an action.
 */
import { useEffect, useRef, type Dispatch as ReactDispatch } from 'react';
import { confirmOrder, orderTruth, payForCart, type OrderTruth } from '@/client/checkout-flow';
import { DEFAULT_REQUEST, type CheckoutAction, type CheckoutState, type Task } from '@/client/checkout-state';
import type { Status } from '@/client/checkout-status';
import { browserCheckoutStorage } from '@/client/checkout-storage';
import { DEFAULT_RETRY_POLICY, describeFailure } from '@/client/retry';
import type { CheckoutClient } from '@/client/trpc-client';

/** How long the page waits before asking again about a payment whose result is not known yet. */
const FOLLOW_UP_MS = 4000;

/** How often the page asks the order while the buyer takes their own step (scans, enters a card). */
const WATCH_ORDER_MS = 2000;

/** The open order and attempt, in this browser's localStorage. */
export const storage = browserCheckoutStorage(DEFAULT_REQUEST);

type Dispatch = ReactDispatch<CheckoutAction>;

/** Runs each payment task once, however often React runs the effect. */
export function usePayTask(client: CheckoutClient, task: Task | undefined, dispatch: Dispatch) {
  const started = useRef(0);
  const payTask = task?.kind === 'pay' ? task : undefined;
  useEffect(() => {
    if (!payTask || started.current >= payTask.id) return;
    started.current = payTask.id;
    const { id, choice } = payTask;
    void payForCart({
      client,
      storage,
      cart: choice.cart,
      gateway: choice.gateway,
      buyer: choice.buyer,
      buyerStep: choice.buyerStep,
      onProgress: (progress) => dispatch({ type: 'progress', taskId: id, progress }),
    }).then((result) => dispatch({ type: 'pay_result', taskId: id, result, at: Date.now() }));
  }, [client, payTask, dispatch]);
}

/** After an uncertain answer: wait, look at the stored attempt again, and ask the order when there is none. */
export function useFollowUp(client: CheckoutClient, task: Task | undefined, dispatch: Dispatch) {
  const waiting = task?.kind === 'follow_up' ? task : undefined;
  useEffect(() => {
    if (!waiting) return;
    const timer = window.setTimeout(() => dispatch({ type: 'follow_up_due', taskId: waiting.id, stored: storage.load() }), FOLLOW_UP_MS);
    return () => window.clearTimeout(timer);
  }, [waiting, dispatch]);

  const asking = task?.kind === 'ask_order' ? task : undefined;
  useEffect(() => {
    if (!asking) return;
    let live = true;
    void confirmOrder({ client, orderId: asking.orderId, policy: { ...DEFAULT_RETRY_POLICY, maxRetries: 0 } }).then((truth) => {
      if (!live) return;
      if (truth.kind === 'paid') storage.save({});
      dispatch({ type: 'order_answer', taskId: asking.id, truth, at: Date.now() });
    });
    return () => {
      live = false;
    };
  }, [client, asking, dispatch]);
}

/** While the buyer takes their own step, the order is asked until it is paid (or authorised) or closed. */
export function useWatch(client: CheckoutClient, status: Status, dispatch: Dispatch) {
  const orderId = status.tone === 'wait' ? status.awaiting.orderId : undefined;
  useEffect(() => {
    if (!orderId) return;
    let live = true;
    const timer = window.setInterval(async () => {
      let truth: OrderTruth;
      try {
        truth = orderTruth(await client.checkout.order.query({ orderId }));
      } catch {
        return; // ask again on the next tick
      }
      if (!live) return;
      const stored = storage.load();
      // A paid, authorised or closed order leaves no attempt to resume.
      if (truth.kind === 'paid' || truth.kind === 'closed') storage.save({});
      dispatch({ type: 'watched', orderId, truth, stored, at: Date.now() });
    }, WATCH_ORDER_MS);
    return () => {
      live = false;
      window.clearInterval(timer);
    };
  }, [client, orderId, dispatch]);
}

/** The order a return link names, read by its token: at once, then again after each unsettled answer. */
export function useReturning(client: CheckoutClient, returning: CheckoutState['returning'], dispatch: Dispatch) {
  useEffect(() => {
    if (!returning) return;
    let live = true;
    const timer = window.setTimeout(
      async () => {
        try {
          const view = await client.checkout.returnedOrder.query({ orderId: returning.orderId, token: returning.token });
          if (live) dispatch({ type: 'returned', view });
        } catch (error) {
          if (live) dispatch({ type: describeFailure(error).status === 404 ? 'returned_unknown' : 'returned_retry' });
        }
      },
      returning.round === 0 ? 0 : WATCH_ORDER_MS,
    );
    return () => {
      live = false;
      window.clearTimeout(timer);
    };
  }, [client, returning, dispatch]);
}
