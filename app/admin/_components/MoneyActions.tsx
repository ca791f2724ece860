'use client';

import { useState, type FormEvent } from 'react';
import { useLang } from '@/client/i18n';
import { amountText, canMoveMoney, offerFor, parseAmount, type ActionOutcome, type MoneyAction } from '@/client/console/money-actions';
import { formatMoney } from '@/client/money';
import type { OperatorRole, OrderView } from '@/client/console/operator-api';
import type { ActionState } from './use-console';

type T = ReturnType<typeof useLang>['t'];

interface Props {
  order: OrderView;
  role: OperatorRole;
  state: ActionState;
  /** An accepted action has not yet settled in the order, which is being read again every 2 s. */
  watching: boolean;
  onAction: (action: MoneyAction) => void;
}

/**
 * Capture or release an authorised order, refund a paid one — for a refunder or an admin. A viewer
 * sees why there is nothing here for them. Every button is disabled while any action is in flight.
 */
export function MoneyActions({ order, role, state, watching, onAction }: Props) {
  const { t } = useLang();
  const offer = offerFor(order);
  const busy = state.running !== undefined;
  const money = (minor: number) => formatMoney(minor, order.currency);
  return (
    <section className="card money-actions" aria-labelledby="actions-heading">
      <h2 id="actions-heading">{t('actions.heading')}</h2>
      {!canMoveMoney(role) ? (
        <p className="viewer-note" data-testid="viewer-note">
          {t('actions.viewerNote', { role: t(`role.${role}`) })}
        </p>
      ) : offer.kind === 'capture_or_release' ? (
        <CaptureForm key={`${order.orderId}:${offer.heldMinor}`} order={order} held={offer.heldMinor} busy={busy} onAction={onAction} />
      ) : offer.kind === 'refund' ? (
        <RefundForm
          key={`${order.orderId}:${offer.refundableMinor}`}
          order={order}
          left={offer.refundableMinor}
          busy={busy}
          onAction={onAction}
        />
      ) : (
        <p className="meta">{t('actions.none')}</p>
      )}
      <ActionStatus state={state} watching={watching} money={money} />
    </section>
  );
}

function CaptureForm({ order, held, busy, onAction }: { order: OrderView; held: number; busy: boolean; onAction: Props['onAction'] }) {
  const { t } = useLang();
  const [amount, setAmount] = useState(() => amountText(held));
  const [invalid, setInvalid] = useState(false);
  const money = formatMoney(held, order.currency);
  const capture = (event: FormEvent) => {
    event.preventDefault();
    const amountMinor = parseAmount(amount);
    setInvalid(amountMinor === undefined);
    if (amountMinor !== undefined) onAction({ kind: 'capture', orderId: order.orderId, amountMinor });
  };
  return (
    <form className="action-form" onSubmit={capture}>
      <label className="field">
        <span>{t('capture.amount', { currency: order.currency })}</span>
        <input name="amount" inputMode="decimal" value={amount} onChange={(e) => setAmount(e.target.value)} aria-invalid={invalid} />
      </label>
      <p className="meta">{t('capture.hint', { held: money })}</p>
      {invalid && <p className="field-error">{t('invalid.amount')}</p>}
      <div className="action-row">
        <button type="submit" className="primary" disabled={busy}>
          {t('capture.submit')}
        </button>
        <button type="button" className="danger" disabled={busy} onClick={() => onAction({ kind: 'release', orderId: order.orderId })}>
          {t('release.submit')}
        </button>
      </div>
      <p className="meta">{t('release.hint', { held: money })}</p>
    </form>
  );
}

function RefundForm({ order, left, busy, onAction }: { order: OrderView; left: number; busy: boolean; onAction: Props['onAction'] }) {
  const { t } = useLang();
  const [amount, setAmount] = useState(() => amountText(left));
  const [reason, setReason] = useState('');
  const [invalid, setInvalid] = useState<'amount' | 'reason' | undefined>();
  const refund = (event: FormEvent) => {
    event.preventDefault();
    const amountMinor = parseAmount(amount);
    const said = reason.trim();
    const problem = amountMinor === undefined ? 'amount' : said.length < 1 || said.length > 200 ? 'reason' : undefined;
    setInvalid(problem);
    if (!problem && amountMinor !== undefined) onAction({ kind: 'refund', orderId: order.orderId, amountMinor, reason: said });
  };
  return (
    <form className="action-form" onSubmit={refund}>
      <label className="field">
        <span>{t('refund.amountLabel', { currency: order.currency })}</span>
        <input
          name="amount"
          inputMode="decimal"
          value={amount}
          onChange={(e) => setAmount(e.target.value)}
          aria-invalid={invalid === 'amount'}
        />
      </label>
      <p className="meta">{t('refund.hint', { left: formatMoney(left, order.currency) })}</p>
      <label className="field">
        <span>{t('refund.reasonLabel')}</span>
        <input
          name="reason"
          maxLength={200}
          placeholder={t('refund.reasonPlaceholder')}
          value={reason}
          onChange={(e) => setReason(e.target.value)}
          aria-invalid={invalid === 'reason'}
        />
      </label>
      {invalid && <p className="field-error">{t(`invalid.${invalid}`)}</p>}
      <div className="action-row">
        <button type="submit" className="primary" disabled={busy}>
          {t('refund.submit')}
        </button>
      </div>
    </form>
  );
}

/** What the last action came to, in words: in flight, retrying, accepted (and whether it settled), refused, unconfirmed. */
function ActionStatus({ state, watching, money }: { state: ActionState; watching: boolean; money: (minor: number) => string }) {
  const { t } = useLang();
  if (state.running) {
    return (
      <p className="status" data-tone="wait" role="status" data-testid="action-outcome">
        {state.retry ? t('busy.retrying', { n: state.retry }) : t('busy.sending')}
      </p>
    );
  }
  if (!state.outcome) return null;
  const { text, tone, tech } = outcomeWords(state.outcome, t, money);
  const accepted = tone === 'ok';
  const pending = accepted && watching;
  const late = accepted && !watching && state.watchUntil !== undefined && Date.now() >= state.watchUntil;
  return (
    <div className="status" data-tone={tone} role="status" data-testid="action-outcome">
      <strong>{text}</strong>
      {pending && <span>{t('outcome.watching')}</span>}
      {accepted && !pending && <span>{late ? t('outcome.stillPending') : t('outcome.settled')}</span>}
      {tech && <span className="meta">{tech}</span>}
    </div>
  );
}

function outcomeWords(outcome: ActionOutcome, t: T, money: (minor: number) => string): { text: string; tone: string; tech?: string } {
  switch (outcome.kind) {
    case 'decided': {
      const { answer } = outcome;
      const by = answer.decidedBy;
      if (answer.action === 'release') return { text: t('outcome.release', { held: money(answer.authorizedMinor), by }), tone: 'ok' };
      const amount = money(answer.amountMinor ?? answer.authorizedMinor);
      return { text: t('outcome.capture', { amount, held: money(answer.authorizedMinor), by }), tone: 'ok' };
    }
    case 'refund_accepted': {
      const { answer } = outcome;
      const vars = {
        amount: money(answer.amountMinor),
        refundId: answer.refundId,
        by: answer.requestedBy,
        left: money(answer.refundableMinor),
      };
      return { text: t('outcome.refund', vars), tone: 'ok' };
    }
    case 'refused': {
      const { status, reason, message } = outcome.refusal;
      const known = reason !== undefined && t(`refusal.${reason}`) !== `refusal.${reason}`;
      const text = known ? t(`refusal.${reason}`, { message }) : t('refusal.other', { message });
      return { text, tone: 'bad', tech: t('outcome.tech', { status, reason: reason ?? '' }) };
    }
    case 'unconfirmed':
      return { text: t('outcome.unconfirmed', { tries: outcome.tries }), tone: 'warn', tech: outcome.message };
    default: {
      const unknown: never = outcome;
      return { text: String(unknown), tone: 'bad' };
    }
  }
}
