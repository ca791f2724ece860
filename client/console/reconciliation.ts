/**
 * 对账 in the console, without React: what each kind of mismatch is called and what to look into,
 * the list grouped by statement day (newest first), who may resolve a mismatch, a resolution as typed,
 * and one resolution sent to the server and what came of it.
 *
 * A resolution carries no Idempotency-Key: the server resolves a row once (`resolved_at is null` in
 * the update's where), so a second try after a lost answer is refused 409 MISMATCH_ALREADY_RESOLVED
 * and changes nothing — the list read again then shows who resolved it.
 */
import type { Lang } from '@/client/i18n';
import { formatMoney } from '@/client/money';
import { GATEWAY_IDS } from '@/server/payments/gateway-ids';
import { MISMATCH_KINDS, type BookEntry, type MismatchKind, type StatementLine } from '@/server/reconciliation/match';
import type { MismatchRow } from '@/server/reconciliation/mismatches';
import type { Answer, OperatorApi, OperatorRole, Refusal } from './operator-api';

/**
 * operator.mismatches' rows as they arrive over JSON (no transformer: times are ISO strings). `kind`
 * stays a string: a kind the server learned after this console was built still shows, in its own name.
 */
export type MismatchView = Omit<MismatchRow, 'ours' | 'theirs' | 'firstSeenAt' | 'resolvedAt'> & {
  ours: BookEntry | null;
  theirs: StatementLine | null;
  firstSeenAt: string;
  resolvedAt: string | null;
  /** ListedMismatch's: when a later run of the day no longer found it (absent on a row a resolution returned). */
  notSeenSince?: string | null;
};

// ── Words ────────────────────────────────────────────────────────────────────────────────────────

export interface KindWords {
  /** What the row says happened, in a few words. */
  label: string;
  /** Where a person starts looking. */
  check: string;
}

/** Keyed by MismatchKind, so a kind added to server/reconciliation/match.ts fails to compile here until it has words. */
export const MISMATCH_KIND_WORDS: Readonly<Record<Lang, Readonly<Record<MismatchKind, KindWords>>>> = {
  zh: {
    unknown_payment: {
      label: '渠道有收款、我方无记录',
      check: '查明这笔钱属于哪个订单；对不上任何订单的，原路退回付款人。',
    },
    missing_payment: {
      label: '我方已记账、对账单未见',
      check: '到渠道后台查这笔交易是否成功、记在哪一天（前一天的对账单已自动核对过）。',
    },
    amount_differs: {
      label: '金额或币种不一致',
      check: '以渠道后台的交易记录核对两边的金额和币种，查明差额从何而来。',
    },
    fee_differs: {
      label: '手续费与签约费率不符',
      check: '对照与渠道签订的费率核对这笔手续费；费率已调整的，更新配置中的费率（如 ALIPAY_FEE）。',
    },
    missing_refund: {
      label: '我方已退款、对账单未见',
      check: '到渠道后台确认这笔退款是否真的退给了买家。',
    },
    unknown_refund: {
      label: '对账单有退款、我方未发起',
      check: '查明是谁绕过本系统在渠道后台发起了这笔退款。',
    },
  },
  en: {
    unknown_payment: {
      label: 'Money at the gateway, no record of ours',
      check: 'Find the order this money belongs to; money that belongs to none goes back to its payer.',
    },
    missing_payment: {
      label: 'In our books, not on the statement',
      check: 'Look the trade up at the gateway: did it succeed, and on which day (the day before’s statement was checked already)?',
    },
    amount_differs: {
      label: 'Amount or currency differs',
      check: 'Compare both sides with the gateway’s record of the trade and find where the difference came from.',
    },
    fee_differs: {
      label: 'Fee not the contracted rate',
      check:
        'Check this fee against your contract with the gateway; if the rate changed, update its contract in the configuration (e.g. ALIPAY_FEE).',
    },
    missing_refund: {
      label: 'Refunded by us, not on the statement',
      check: 'Check at the gateway that the refund really reached the buyer.',
    },
    unknown_refund: {
      label: 'A refund on the statement we never made',
      check: 'Find out who refunded this at the gateway, outside PayOnce.',
    },
  },
};

/** The order the kinds are listed in within a day (match.ts lists them so): money we lack, money we claim, fees, then refunds. */
const KIND_ORDER: readonly MismatchKind[] = MISMATCH_KINDS;

export function isMismatchKind(kind: string): kind is MismatchKind {
  return (KIND_ORDER as readonly string[]).includes(kind);
}

/** A known kind's words; a kind this console does not know shows its own name and no advice. */
export function kindWords(kind: string, lang: Lang): KindWords {
  return isMismatchKind(kind) ? MISMATCH_KIND_WORDS[lang][kind] : { label: kind, check: '' };
}

/** Who resolved it, as the console names operators: `operator:alice` is alice; anyone else as recorded. */
export function resolverName(resolvedBy: string | null): string {
  if (!resolvedBy) return '—';
  return resolvedBy.startsWith('operator:') ? resolvedBy.slice('operator:'.length) : resolvedBy;
}

/** Whether the row's reference is a trade (a payment) or a refund: the two are looked up in different places. */
export function referenceKind(row: Pick<MismatchView, 'kind' | 'ours' | 'theirs'>): 'payment' | 'refund' {
  const kind = row.ours?.kind ?? row.theirs?.kind;
  if (kind) return kind;
  return row.kind.endsWith('_refund') ? 'refund' : 'payment';
}

// ── Amounts ──────────────────────────────────────────────────────────────────────────────────────

export interface Amount {
  amountMinor: number;
  currency: string;
}

export interface SideBySide {
  /** What our books say, with the fee the contract gives it (fee_differs); absent when we have no record (unknown_payment, unknown_refund). */
  ours?: Amount & { feeMinor?: number };
  /** What the statement says, with the gateway's fee (negative: given back); absent when it does not show ours. */
  theirs?: Amount & { feeMinor: number };
  /** Theirs less ours, when both are in one currency and differ. */
  differenceMinor?: number;
  /** The statement's fee less the contract's (fee_differs). */
  feeDifferenceMinor?: number;
}

export function amountsOf(row: Pick<MismatchView, 'ours' | 'theirs'>): SideBySide {
  const ours = row.ours
    ? {
        amountMinor: row.ours.amountMinor,
        currency: row.ours.currency,
        ...(row.ours.feeMinor !== undefined ? { feeMinor: row.ours.feeMinor } : {}),
      }
    : undefined;
  const theirs = row.theirs
    ? { amountMinor: row.theirs.amountMinor, currency: row.theirs.currency, feeMinor: row.theirs.feeMinor }
    : undefined;
  const sameCurrency = ours && theirs && ours.currency === theirs.currency;
  const differenceMinor = sameCurrency && ours.amountMinor !== theirs.amountMinor ? theirs.amountMinor - ours.amountMinor : undefined;
  const feeDifferenceMinor =
    sameCurrency && ours.feeMinor !== undefined && ours.feeMinor !== theirs.feeMinor ? theirs.feeMinor - ours.feeMinor : undefined;
  return {
    ...(ours ? { ours } : {}),
    ...(theirs ? { theirs } : {}),
    ...(differenceMinor !== undefined ? { differenceMinor } : {}),
    ...(feeDifferenceMinor !== undefined ? { feeDifferenceMinor } : {}),
  };
}

/** A difference with its sign, as finance writes it: +¥0.01 when the statement says more than we do. */
export function signedMoney(minor: number, currency: string): string {
  return `${minor < 0 ? '−' : '+'}${formatMoney(Math.abs(minor), currency)}`;
}

// ── The list ─────────────────────────────────────────────────────────────────────────────────────

export interface MismatchDay {
  /** The statement day, YYYY-MM-DD in each gateway's own time zone. */
  date: string;
  rows: MismatchView[];
  /** How many of the day's rows are still open. */
  open: number;
}

const gatewayRank = (gateway: string) => {
  const at = (GATEWAY_IDS as readonly string[]).indexOf(gateway);
  return at < 0 ? GATEWAY_IDS.length : at;
};
const kindRank = (kind: string) => (isMismatchKind(kind) ? KIND_ORDER.indexOf(kind) : KIND_ORDER.length);

/** Within a day: open before resolved, then by gateway as the shop offers them, kind, and order number. */
function byWorkToDo(a: MismatchView, b: MismatchView): number {
  return (
    Number(a.resolvedAt !== null) - Number(b.resolvedAt !== null) ||
    gatewayRank(a.gateway) - gatewayRank(b.gateway) ||
    kindRank(a.kind) - kindRank(b.kind) ||
    (a.outTradeNo ?? '').localeCompare(b.outTradeNo ?? '') ||
    a.reference.localeCompare(b.reference)
  );
}

/** The rows by statement day, the newest day first. */
export function groupByDay(rows: readonly MismatchView[]): MismatchDay[] {
  const days = new Map<string, MismatchView[]>();
  for (const row of rows) days.set(row.statementDate, [...(days.get(row.statementDate) ?? []), row]);
  return [...days.entries()]
    .sort(([a], [b]) => b.localeCompare(a))
    .map(([date, dayRows]) => ({ date, rows: dayRows.sort(byWorkToDo), open: dayRows.filter((row) => row.resolvedAt === null).length }));
}

/**
 * The rows to show: the server's, with those resolved in this console kept in view — an open-only
 * list no longer has them, and the operator should see their resolution land — and a resolved copy
 * preferred to an open one read before it (a resolution is final).
 */
export function inView(listed: readonly MismatchView[], resolvedHere: readonly MismatchView[]): MismatchView[] {
  const rows = new Map(listed.map((row) => [row.id, row]));
  for (const row of resolvedHere) {
    const read = rows.get(row.id);
    if (!read || read.resolvedAt === null) rows.set(row.id, row);
  }
  return [...rows.values()];
}

/** What the 对账 tab counts: the open rows, and "at least" when the list stopped at its limit. */
export function openCount(rows: readonly MismatchView[], limit: number): string | undefined {
  const open = rows.filter((row) => row.resolvedAt === null).length;
  if (open === 0) return undefined;
  return rows.length >= limit ? `${open}+` : String(open);
}

// ── Resolving ────────────────────────────────────────────────────────────────────────────────────

/** operator.resolveMismatch is the admin's (server/trpc/routers/operator.ts); everyone else only looks. */
export function canResolveMismatches(role: OperatorRole): boolean {
  return role === 'admin';
}

/** What a row offers this operator: a form, only the reading of it, or its resolution. */
export function rowOffer(row: Pick<MismatchView, 'resolvedAt'>, role: OperatorRole): 'resolve' | 'look_only' | 'resolved' {
  if (row.resolvedAt !== null) return 'resolved';
  return canResolveMismatches(role) ? 'resolve' : 'look_only';
}

/** The server's bounds on a resolution (trimmed, 1–500 characters). */
export const RESOLUTION_MAX_CHARS = 500;

export function resolutionProblem(text: string): 'empty' | 'too_long' | undefined {
  const said = text.trim();
  if (said.length === 0) return 'empty';
  return said.length > RESOLUTION_MAX_CHARS ? 'too_long' : undefined;
}

export type ResolveOutcome =
  | { kind: 'resolved'; row: MismatchView }
  | { kind: 'refused'; refusal: Refusal }
  /** No answer: it may have been recorded. The list is read again to see. */
  | { kind: 'lost'; message: string };

/** One resolution, sent once (see the top of this file for why no retry and no key). Never throws. */
export async function submitResolution(
  api: OperatorApi,
  input: { id: string; resolution: string },
  csrfToken: string,
): Promise<ResolveOutcome> {
  const answer: Answer<MismatchView> = await api.mutate<MismatchView>(
    'operator.resolveMismatch',
    { id: input.id, resolution: input.resolution.trim() },
    { 'X-CSRF-Token': csrfToken },
  );
  switch (answer.kind) {
    case 'ok':
      return { kind: 'resolved', row: answer.data };
    case 'refused': {
      const { kind: _kind, ...refusal } = answer;
      return { kind: 'refused', refusal };
    }
    case 'lost':
      return { kind: 'lost', message: answer.message };
    default: {
      const unknown: never = answer;
      throw new Error(`unknown answer ${JSON.stringify(unknown)}`);
    }
  }
}

/** Someone resolved the row first: the console fetches the resolved rows to show who and how. */
export function resolvedElsewhere(outcome: ResolveOutcome): boolean {
  return outcome.kind === 'refused' && outcome.refusal.reason === 'MISMATCH_ALREADY_RESOLVED';
}

/** What the view remembers of the resolutions made in it: rows resolved here, rows on their way, each row's last outcome. */
export interface ResolvingState {
  resolvedHere: MismatchView[];
  sending: string[];
  outcomes: Record<string, ResolveOutcome>;
}

export type ResolvingEvent =
  | { kind: 'sent'; id: string }
  | { kind: 'answered'; id: string; outcome: ResolveOutcome }
  /** The row as resolved by someone else, found after a 409. */
  | { kind: 'found_resolved'; row: MismatchView };

export const NOTHING_RESOLVING: ResolvingState = { resolvedHere: [], sending: [], outcomes: {} };

export function resolving(state: ResolvingState, event: ResolvingEvent): ResolvingState {
  switch (event.kind) {
    case 'sent': {
      const { [event.id]: _previous, ...outcomes } = state.outcomes;
      return { ...state, sending: [...state.sending, event.id], outcomes };
    }
    case 'answered': {
      const resolvedHere = event.outcome.kind === 'resolved' ? keep(state.resolvedHere, event.outcome.row) : state.resolvedHere;
      const sending = state.sending.filter((id) => id !== event.id);
      return { resolvedHere, sending, outcomes: { ...state.outcomes, [event.id]: event.outcome } };
    }
    case 'found_resolved':
      return { ...state, resolvedHere: keep(state.resolvedHere, event.row) };
    default: {
      const unknown: never = event;
      throw new Error(`unknown event ${JSON.stringify(unknown)}`);
    }
  }
}

const keep = (rows: readonly MismatchView[], row: MismatchView) => [...rows.filter((r) => r.id !== row.id), row];
