'use client';

import { useQuery } from '@tanstack/react-query';
import { useEffect, useReducer, useRef, type Dispatch as ReactDispatch, type RefObject } from 'react';
import { formView, INITIAL_STATE, reduce, type CheckoutAction, type Payer } from '@/client/checkout-state';
import { isFrozen, type Status } from '@/client/checkout-status';
import { loadLastPaid, saveLastPaid, type LastPaid } from '@/client/checkout-storage';
import type { CheckoutClient } from '@/client/trpc-client';
import type { BuyerStep } from '@/server/payments/gateway';
import type { GatewayId } from '@/server/payments/gateway-ids';
import { storage, useFollowUp, usePayTask, useReturning, useWatch } from './checkout-tasks';

type Dispatch = ReactDispatch<CheckoutAction>;

export type Product = Awaited<ReturnType<CheckoutClient['checkout']['products']['query']>>[number];
export type GatewayInfo = Awaited<ReturnType<CheckoutClient['checkout']['gateways']['query']>>[number];

/**
 * The checkout page's orchestration: the state machine (client/checkout-state.ts) and everything it
 * asks of the world — storage, the server, timers, the screen. Components render what it returns.
 */
export function useCheckout(client: CheckoutClient) {
  const products = useQuery({ queryKey: ['products'], queryFn: () => client.checkout.products.query() });
  const gateways = useQuery({ queryKey: ['gateways'], queryFn: () => client.checkout.gateways.query() });
  const [state, dispatch] = useReducer(reduce, INITIAL_STATE);
  const offer = gateways.data?.find((g) => g.id === state.form.gateway);
  const view = formView(state.form, offer);
  const resultRef = useRef<HTMLElement>(null);

  useLoad(dispatch);
  usePayTask(client, state.task, dispatch);
  useFollowUp(client, state.task, dispatch);
  useWatch(client, state.status, dispatch);
  useReturning(client, state.returning, dispatch);
  useLastPaid(state.lastPaid);
  useResultInView(resultRef, state.status);

  const actions = {
    setQuantity: (sku: string, value: string) => dispatch({ type: 'quantity', sku, value }),
    chooseGateway: (gateway: GatewayId) => dispatch({ type: 'gateway', gateway }),
    choosePayer: (payer: Payer) => dispatch({ type: 'payer', payer }),
    chooseStep: (step: BuyerStep) => dispatch({ type: 'step', step }),
    pay: () =>
      dispatch({ type: 'pay', choice: view.choice, at: Date.now(), lastPaid: loadLastPaid(), openOrderCart: storage.load().order?.cart }),
    continueDuplicate: () => dispatch({ type: 'duplicate_continue' }),
    cancelDuplicate: () => dispatch({ type: 'duplicate_cancel' }),
    /** The buyer gives up this step (wrong app, no card at hand): the order stays open for another way. */
    switchMethod: () => {
      storage.save({ ...storage.load(), attempt: undefined });
      dispatch({ type: 'switch_method' });
    },
    newOrder: () => {
      // The return link has done its work: a reload now is a fresh checkout, not that order again.
      if (window.location.search) window.history.replaceState(null, '', '/');
      dispatch({ type: 'new_order' });
      void products.refetch();
    },
  };
  // Rendered on the server, 立即支付 does nothing until React has hydrated the page (a first dev load
  // compiles for seconds): disabled until then, so a click is never silently lost.
  const interactive = state.loaded;
  return { state, view, offer, products, gateways, resultRef, interactive, frozen: isFrozen(state.status), actions };
}

export type CheckoutView = ReturnType<typeof useCheckout>;

/** On load: the stored attempt, or the order a return link (`?returned=…&t=…`) names. */
function useLoad(dispatch: Dispatch) {
  useEffect(() => {
    const params = new URLSearchParams(window.location.search);
    const orderId = params.get('returned');
    const token = params.get('t');
    dispatch({ type: 'loaded', stored: storage.load(), returned: orderId && token ? { orderId, token } : undefined });
  }, [dispatch]);
}

function useLastPaid(lastPaid: LastPaid | undefined) {
  useEffect(() => {
    if (lastPaid) saveLastPaid(lastPaid);
  }, [lastPaid]);
}

/**
 * The result is what the shopper waits for: on a phone it is below the fold, so it is brought into
 * view and given focus (screen readers read it from there).
 */
function useResultInView(resultRef: RefObject<HTMLElement | null>, status: Status) {
  useEffect(() => {
    const section = resultRef.current;
    if (!section) return;
    if (status.tone === 'busy') section.scrollIntoView({ block: 'nearest' });
    // The buyer's own step (a QR code, a card form, the link to a hosted page) is what they act on
    // next: it starts below the fold on most screens.
    if (status.tone === 'ok' || status.tone === 'bad' || status.tone === 'warn' || status.tone === 'wait') {
      section.scrollIntoView({ block: 'start' });
      section.focus({ preventScroll: true });
    }
  }, [resultRef, status]);
}
