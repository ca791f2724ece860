'use client';

import { useEffect, useRef } from 'react';
import { useLang } from '@/client/i18n';

/**
 * "You paid for these same items N minutes ago — buy again?" Asked before a second order for the
 * same cart, because a shopper who pays twice in a row more often meant to pay once. A modal
 * <dialog>: focus moves into it, Escape cancels, and cancelling sends nothing to the server.
 */
export function DuplicatePurchaseDialog({
  minutes,
  onContinue,
  onCancel,
}: {
  minutes: number;
  onContinue: () => void;
  onCancel: () => void;
}) {
  const { t } = useLang();
  const ref = useRef<HTMLDialogElement>(null);

  useEffect(() => {
    const dialog = ref.current;
    if (dialog && !dialog.open) dialog.showModal();
    return () => dialog?.close();
  }, []);

  return (
    <dialog
      ref={ref}
      className="dialog"
      aria-labelledby="duplicate-title"
      aria-describedby="duplicate-body"
      onCancel={(event) => {
        event.preventDefault();
        onCancel();
      }}
    >
      <h2 id="duplicate-title">{t('dup.title')}</h2>
      <p id="duplicate-body">{minutes < 1 ? t('dup.bodyJustNow') : t('dup.body', { minutes })}</p>
      <div className="dialog-actions">
        <button type="button" className="secondary" onClick={onCancel} autoFocus>
          {t('dup.cancel')}
        </button>
        <button type="button" className="primary" onClick={onContinue}>
          {t('dup.continue')}
        </button>
      </div>
    </dialog>
  );
}
