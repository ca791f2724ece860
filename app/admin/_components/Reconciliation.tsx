'use client';

import { useState, type FormEvent } from 'react';
import { useLang } from '@/client/i18n';
import { formatMoney } from '@/client/money';
import type { OperatorApi, OperatorSession } from '@/client/console/operator-api';
import {
  amountsOf,
  canResolveMismatches,
  groupByDay,
  kindWords,
  referenceKind,
  RESOLUTION_MAX_CHARS,
  resolutionProblem,
  resolverName,
  rowOffer,
  signedMoney,
  type MismatchDay,
  type MismatchView,
  type ResolveOutcome,
} from '@/client/console/reconciliation';
import { beijingTime, gatewayName } from './format';
import { useReconciliation } from './use-console';

type T = ReturnType<typeof useLang>['t'];

interface RowActions {
  role: OperatorSession['role'];
  sending: readonly string[];
  outcomes: Readonly<Record<string, ResolveOutcome>>;
  onResolve: (id: string, resolution: string) => void;
  onOpenOrder: (orderId: string) => void;
}

/**
 * 对账: what the daily reconciliation could not match, newest statement day first — for an admin with
 * a 处理 form on each open row, for everyone else to read.
 */
export function ReconciliationView({
  api,
  session,
  onOpenOrder,
}: {
  api: OperatorApi;
  session: OperatorSession;
  onOpenOrder: RowActions['onOpenOrder'];
}) {
  const { t } = useLang();
  const { listed, rows, showResolved, setShowResolved, state, resolve } = useReconciliation(api, session);
  const days = rows ? groupByDay(rows) : [];
  const actions: RowActions = {
    role: session.role,
    sending: state.sending,
    outcomes: state.outcomes,
    onResolve: (id, resolution) => void resolve(id, resolution),
    onOpenOrder,
  };
  return (
    <section className="card reconciliation" aria-labelledby="recon-heading" data-fetching={listed.isFetching}>
      <h2 id="recon-heading">{t('recon.heading')}</h2>
      <p className="meta">{t('recon.intro')}</p>
      <label className="toggle">
        <input type="checkbox" checked={showResolved} onChange={(e) => setShowResolved(e.target.checked)} />
        <span>{t('recon.showResolved')}</span>
      </label>
      {!canResolveMismatches(session.role) && (
        <p className="viewer-note" data-testid="recon-admin-only">
          {t('recon.adminOnly', { role: t(`role.${session.role}`) })}
        </p>
      )}
      {listed.isPending && <p className="meta">{t('recon.loading')}</p>}
      {listed.isError && <p role="alert">{t('recon.failed', { message: listed.error.message })}</p>}
      {rows && days.length === 0 && <p className="meta">{showResolved ? t('recon.emptyAll') : t('recon.empty')}</p>}
      {days.map((day) => (
        <DayTable key={day.date} day={day} actions={actions} />
      ))}
    </section>
  );
}

function DayTable({ day, actions }: { day: MismatchDay; actions: RowActions }) {
  const { t } = useLang();
  const headingId = `recon-day-${day.date}`;
  return (
    <section className="recon-day" aria-labelledby={headingId}>
      <h3 id={headingId}>
        {t('recon.day', { date: day.date })} <span className="meta">{t('recon.dayCount', { open: day.open, total: day.rows.length })}</span>
      </h3>
      <table className="mismatches" aria-labelledby={headingId}>
        <thead>
          <tr>
            <th scope="col">{t('recon.gateway')}</th>
            <th scope="col">{t('recon.kind')}</th>
            <th scope="col">{t('recon.outTradeNo')}</th>
            <th scope="col">{t('recon.ours')}</th>
            <th scope="col">{t('recon.theirs')}</th>
            <th scope="col">{t('recon.resolution')}</th>
          </tr>
        </thead>
        <tbody>
          {day.rows.map((row) => (
            <MismatchRowView key={row.id} row={row} actions={actions} />
          ))}
        </tbody>
      </table>
    </section>
  );
}

function MismatchRowView({ row, actions }: { row: MismatchView; actions: RowActions }) {
  const { t, lang } = useLang();
  const words = kindWords(row.kind, lang);
  const orderId = row.orderId;
  return (
    <tr data-testid="mismatch-row" data-kind={row.kind} data-open={row.resolvedAt === null}>
      <td className="nowrap" data-label={t('recon.gateway')}>
        {gatewayName(row.gateway, lang)}
      </td>
      <td data-label={t('recon.kind')}>
        <strong>{words.label}</strong>
        {words.check && <span className="meta block">{words.check}</span>}
        {row.notSeenSince && row.resolvedAt === null && (
          <span className="note block" data-testid="mismatch-not-seen">
            {t('recon.notSeenSince', { at: beijingTime.format(new Date(row.notSeenSince)) })}
          </span>
        )}
      </td>
      <td data-label={t('recon.outTradeNo')}>
        {row.outTradeNo && orderId ? (
          <button type="button" className="link mono" title={t('recon.openOrder')} onClick={() => actions.onOpenOrder(orderId)}>
            {row.outTradeNo}
          </button>
        ) : (
          <span className="mono">{row.outTradeNo ?? '—'}</span>
        )}
        {!orderId && <span className="meta block">{t('recon.noOrder')}</span>}
        <span className="meta block mono">{t(`recon.reference.${referenceKind(row)}`, { reference: row.reference })}</span>
      </td>
      <Amounts row={row} t={t} />
      <td className="recon-resolution" data-label={t('recon.resolution')}>
        <Resolution row={row} actions={actions} />
      </td>
    </tr>
  );
}

/** Ours and theirs side by side, each line's fee under its amount and the differences when there are some. */
function Amounts({ row, t }: { row: MismatchView; t: T }) {
  const { ours, theirs, differenceMinor, feeDifferenceMinor } = amountsOf(row);
  return (
    <>
      <td className="num" data-testid="mismatch-ours" data-label={t('recon.ours')}>
        {ours ? formatMoney(ours.amountMinor, ours.currency) : <span className="meta">{t('recon.notInBooks')}</span>}
        {ours?.feeMinor !== undefined && (
          <span className="meta block">{feeWords(ours.feeMinor, ours.currency, 'recon.contractFee', t)}</span>
        )}
      </td>
      <td className="num" data-testid="mismatch-theirs" data-label={t('recon.theirs')}>
        {theirs ? formatMoney(theirs.amountMinor, theirs.currency) : <span className="meta">{t('recon.notOnStatement')}</span>}
        {theirs && theirs.feeMinor !== 0 && (
          <span className="meta block">{feeWords(theirs.feeMinor, theirs.currency, 'recon.fee', t)}</span>
        )}
        {differenceMinor !== undefined && theirs && (
          <span className="difference block">{t('recon.difference', { difference: signedMoney(differenceMinor, theirs.currency) })}</span>
        )}
        {feeDifferenceMinor !== undefined && theirs && (
          <span className="difference block">
            {t('recon.feeDifference', { difference: signedMoney(feeDifferenceMinor, theirs.currency) })}
          </span>
        )}
      </td>
    </>
  );
}

/** A fee as finance reads it: taken (a payment's), or given back (a refund's share, negative in the data). */
function feeWords(feeMinor: number, currency: string, taken: 'recon.fee' | 'recon.contractFee', t: T): string {
  const fee = formatMoney(Math.abs(feeMinor), currency);
  return feeMinor < 0 ? t('recon.feeReturned', { fee }) : t(taken, { fee });
}

/** A resolved row says who, when and what; an open one offers an admin the form, anyone else a note. */
function Resolution({ row, actions }: { row: MismatchView; actions: RowActions }) {
  const { t } = useLang();
  const offer = rowOffer(row, actions.role);
  const outcome = actions.outcomes[row.id];
  return (
    <>
      {offer === 'resolved' && (
        <div data-testid="mismatch-resolved">
          <p className="resolved-by">
            {t('recon.resolvedBy', {
              by: resolverName(row.resolvedBy),
              at: row.resolvedAt ? beijingTime.format(new Date(row.resolvedAt)) : '—',
            })}
          </p>
          <p className="resolution-text">{row.resolution}</p>
        </div>
      )}
      {offer === 'look_only' && <span className="meta">{t('recon.awaitingAdmin')}</span>}
      {offer === 'resolve' && <ResolveForm row={row} sending={actions.sending.includes(row.id)} onResolve={actions.onResolve} />}
      {outcome && outcome.kind !== 'resolved' && <OutcomeNote outcome={outcome} t={t} />}
    </>
  );
}

function ResolveForm({ row, sending, onResolve }: { row: MismatchView; sending: boolean; onResolve: RowActions['onResolve'] }) {
  const { t } = useLang();
  const [text, setText] = useState('');
  const [problem, setProblem] = useState<'empty' | 'too_long' | undefined>();
  const submit = (event: FormEvent) => {
    event.preventDefault();
    const found = resolutionProblem(text);
    setProblem(found);
    if (!found && !sending) onResolve(row.id, text);
  };
  return (
    <form className="resolve-form" onSubmit={submit}>
      <label className="field">
        <span>{t('recon.resolutionLabel')}</span>
        <textarea
          name="resolution"
          rows={2}
          maxLength={RESOLUTION_MAX_CHARS}
          placeholder={t('recon.resolutionPlaceholder')}
          value={text}
          onChange={(e) => setText(e.target.value)}
          aria-invalid={problem !== undefined}
        />
      </label>
      {problem && <p className="field-error">{t(`recon.invalid.${problem}`)}</p>}
      <button type="submit" className="primary" disabled={sending}>
        {sending ? t('recon.resolving') : t('recon.resolve')}
      </button>
    </form>
  );
}

/** A resolution that was not recorded, in words: the view's own for its refusals, the console's for the rest. */
function OutcomeNote({ outcome, t }: { outcome: Exclude<ResolveOutcome, { kind: 'resolved' }>; t: T }) {
  if (outcome.kind === 'lost') {
    return (
      <p className="status" data-tone="warn" role="status" data-testid="resolve-outcome">
        {t('recon.lost')}
        <span className="meta"> {outcome.message}</span>
      </p>
    );
  }
  const { status, reason, message } = outcome.refusal;
  const known = (key: string) => t(key) !== key;
  const key =
    [`recon.refusal.${reason}`, `refusal.${reason}`].find((candidate) => reason !== undefined && known(candidate)) ?? 'refusal.other';
  return (
    <p className="status" data-tone="bad" role="alert" data-testid="resolve-outcome">
      <strong>{t(key, { message })}</strong>
      <span className="meta"> {t('outcome.tech', { status, reason: reason ?? '' })}</span>
    </p>
  );
}
