'use client';

/**
 * The console's orchestration: who is signed in, signing in and out, the order list and one order,
 * and a money action from click to settled. Components render what these return.
 */
import { useQuery, useQueryClient, type QueryClient } from '@tanstack/react-query';
import { useCallback, useEffect, useRef, useState } from 'react';
import { settledIn, submitMoneyAction, type ActionOutcome, type IntentKeys, type MoneyAction } from '@/client/console/money-actions';
import type { OperatorApi, OperatorSession, OrderListing, OrderTimeline } from '@/client/console/operator-api';

export const SESSION_KEY = ['operator-session'] as const;

/** The order list's filter: one order status, or all of them. */
export type StatusFilter = 'all' | 'awaiting_payment' | 'authorized' | 'paid' | 'expired' | 'voided';

/** How often the list is read again: an operator watching it sees new orders without reloading. */
const LIST_REFRESH_MS = 5000;
/** While a decision is on its way to the gateway, the order is read this often … */
const WATCH_EVERY_MS = 2000;
/** … for this long: a capture or refund normally settles within seconds (the worker polls every few). */
const WATCH_FOR_MS = 20_000;

export function useOperatorSession(api: OperatorApi) {
  return useQuery<OperatorSession | null>({ queryKey: SESSION_KEY, queryFn: () => api.session(), staleTime: Infinity });
}

/** Whoever signed out, what the last operator read is dropped with them. */
function forgetOperator(queryClient: QueryClient): void {
  queryClient.removeQueries({ predicate: (query) => query.queryKey[0] !== SESSION_KEY[0] });
  queryClient.setQueryData(SESSION_KEY, null);
}

export type SignInMessage =
  { kind: 'refused' } | { kind: 'rate_limited'; minutes: number } | { kind: 'lost' } | { kind: 'failed'; status: number; message: string };

export function useSignIn(api: OperatorApi) {
  const queryClient = useQueryClient();
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState<SignInMessage | undefined>();
  const signIn = useCallback(
    async (username: string, password: string) => {
      setBusy(true);
      setMessage(undefined);
      const answer = await api.signIn({ username, password });
      setBusy(false);
      if (answer.kind === 'ok') {
        await queryClient.invalidateQueries({ queryKey: SESSION_KEY });
      } else if (answer.kind === 'lost') {
        setMessage({ kind: 'lost' });
      } else if (answer.status === 401) {
        setMessage({ kind: 'refused' });
      } else if (answer.status === 429) {
        setMessage({ kind: 'rate_limited', minutes: Math.max(1, Math.ceil((answer.retryAfterSeconds ?? 60) / 60)) });
      } else {
        setMessage({ kind: 'failed', status: answer.status, message: answer.message });
      }
    },
    [api, queryClient],
  );
  return { busy, message, signIn };
}

export function useSignOut(api: OperatorApi) {
  const queryClient = useQueryClient();
  return useCallback(async () => {
    await api.signOut();
    forgetOperator(queryClient);
  }, [api, queryClient]);
}

export function useOrders(api: OperatorApi, filter: StatusFilter) {
  return useQuery({
    queryKey: ['orders', filter],
    queryFn: () => api.query<OrderListing[]>('operator.orders', filter === 'all' ? {} : { status: filter }),
    refetchInterval: LIST_REFRESH_MS,
  });
}

/** The state of the order's money action: what is in flight, and the last answer with how long to watch it. */
export interface ActionState {
  running?: MoneyAction['kind'];
  /** The retry under way (1, 2, …) while no answer has come. */
  retry?: number;
  outcome?: ActionOutcome;
  watchUntil?: number;
}

const accepted = (outcome: ActionOutcome | undefined) => outcome?.kind === 'decided' || outcome?.kind === 'refund_accepted';

/** Whether the order is still being watched for an accepted action to settle. */
export function watching(state: ActionState, timeline: OrderTimeline | undefined): boolean {
  if (!accepted(state.outcome) || !state.outcome || state.watchUntil === undefined) return false;
  return Date.now() < state.watchUntil && !(timeline && settledIn(timeline.order, state.outcome));
}

/**
 * One order and its money action. The order is read every 2 s while an accepted action has not
 * settled in it, for up to 20 s; the list is refreshed after every answer.
 */
export function useOrderDetail(api: OperatorApi, session: OperatorSession, keys: IntentKeys, orderId: string) {
  const queryClient = useQueryClient();
  const [state, setState] = useState<ActionState>({});
  // Set before React re-renders: a second click of a double click finds the action already running.
  const inFlight = useRef(false);
  const detail = useQuery({
    queryKey: ['order', orderId],
    queryFn: () => api.query<OrderTimeline>('operator.order', { orderId }),
    refetchInterval: (query) => (watching(state, query.state.data) ? WATCH_EVERY_MS : false),
  });
  // The list shows each order's status too: when this one settles (paid, voided), so does its row.
  const status = detail.data?.order.status;
  useEffect(() => {
    if (status) void queryClient.invalidateQueries({ queryKey: ['orders'] });
  }, [queryClient, status]);

  const run = useCallback(
    async (action: MoneyAction) => {
      if (inFlight.current) return;
      inFlight.current = true;
      setState({ running: action.kind });
      const outcome = await submitMoneyAction(api, action, {
        keys,
        csrfToken: session.csrfToken,
        onRetry: (retry) => setState({ running: action.kind, retry }),
      });
      inFlight.current = false;
      setState({ outcome, ...(accepted(outcome) ? { watchUntil: Date.now() + WATCH_FOR_MS } : {}) });
      if (outcome.kind === 'refused' && outcome.refusal.status === 401) await queryClient.invalidateQueries({ queryKey: SESSION_KEY });
      await Promise.all([
        queryClient.invalidateQueries({ queryKey: ['order', orderId] }),
        queryClient.invalidateQueries({ queryKey: ['orders'] }),
      ]);
    },
    [api, keys, orderId, queryClient, session.csrfToken],
  );

  return { detail, state, run };
}
