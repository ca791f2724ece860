'use client';

/**
 * The console's orchestration: who is signed in, signing in and out, which view is open, the order
 * list and one order, a money action from click to settled, and 对账's mismatches and their
 * resolutions. Components render what these return.
 */
import { useQuery, useQueryClient, type QueryClient } from '@tanstack/react-query';
import { useCallback, useEffect, useReducer, useRef, useState } from 'react';
import { IntentKeys, settledIn, submitMoneyAction, type ActionOutcome, type MoneyAction } from '@/client/console/money-actions';
import type { OperatorApi, OperatorSession, OrderListing, OrderTimeline } from '@/client/console/operator-api';
import {
  inView,
  NOTHING_RESOLVING,
  resolvedElsewhere,
  resolving,
  submitResolution,
  type MismatchView,
} from '@/client/console/reconciliation';

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

// ── The views ────────────────────────────────────────────────────────────────────────────────────

/** The console's two views: the orders, and 对账's mismatches. */
export type ConsoleView = 'orders' | 'reconciliation';

/**
 * Which view is open, and what the order view holds across a visit to 对账: its filter, the order
 * picked and one book of keys for the whole sign-in — an unconfirmed capture asked again after
 * looking elsewhere is still the same intent, under the same key.
 */
export function useWorkspace() {
  const [view, setView] = useState<ConsoleView>('orders');
  const [filter, setFilter] = useState<StatusFilter>('all');
  const [selected, setSelected] = useState<string | undefined>();
  const [keys] = useState(() => new IntentKeys());
  /** From a mismatch to its order: the order view, with that order open. */
  const openOrder = useCallback((orderId: string) => {
    setSelected(orderId);
    setView('orders');
  }, []);
  return { view, setView, filter, setFilter, selected, setSelected, keys, openOrder };
}

// ── 对账 ─────────────────────────────────────────────────────────────────────────────────────────

/** How many mismatches the list reads: far more than a day leaves, well inside the server's 500. */
export const MISMATCH_LIST_LIMIT = 200;

/** The open mismatches (or every one, resolved too): what the 对账 view lists and its tab counts. */
export function useMismatches(api: OperatorApi, showResolved: boolean) {
  return useQuery({
    queryKey: ['mismatches', showResolved ? 'all' : 'open'],
    queryFn: () => api.query<MismatchView[]>('operator.mismatches', { open: !showResolved, limit: MISMATCH_LIST_LIMIT }),
  });
}

/**
 * The mismatch list and an admin's resolutions: each row resolved once at a time, the rows resolved
 * here kept in view, and — when someone else resolved a row first — that row fetched, so the console
 * shows who and how rather than a row that vanished.
 */
export function useReconciliation(api: OperatorApi, session: OperatorSession) {
  const queryClient = useQueryClient();
  const [showResolved, setShowResolved] = useState(false);
  const listed = useMismatches(api, showResolved);
  const [state, dispatch] = useReducer(resolving, NOTHING_RESOLVING);
  // Set before React re-renders: a double click finds the row already on its way.
  const inFlight = useRef(new Set<string>());

  const resolve = useCallback(
    async (id: string, resolution: string) => {
      if (inFlight.current.has(id)) return;
      inFlight.current.add(id);
      dispatch({ kind: 'sent', id });
      const outcome = await submitResolution(api, { id, resolution }, session.csrfToken);
      inFlight.current.delete(id);
      if (resolvedElsewhere(outcome)) {
        const everyRow = await api.query<MismatchView[]>('operator.mismatches', { open: false, limit: 500 }).catch(() => []);
        const row = everyRow.find((r) => r.id === id && r.resolvedAt !== null);
        if (row) dispatch({ kind: 'found_resolved', row });
      }
      dispatch({ kind: 'answered', id, outcome });
      if (outcome.kind === 'refused' && outcome.refusal.status === 401) await queryClient.invalidateQueries({ queryKey: SESSION_KEY });
      await queryClient.invalidateQueries({ queryKey: ['mismatches'] });
    },
    [api, queryClient, session.csrfToken],
  );

  const rows = listed.data ? inView(listed.data, state.resolvedHere) : undefined;
  return { listed, rows, showResolved, setShowResolved, state, resolve };
}
