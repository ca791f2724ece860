'use client';

import { useEffect, useState } from 'react';
import { useLang } from '@/client/i18n';

/** Where the shopper's "got it" survives a reload; a new version of the panel asks again. */
const DISMISSED_KEY = 'payonce.firstRun.dismissed.v1';

/**
 * What a newcomer needs on their first visit to a local run: what this demo proves, how to pay as a
 * real buyer, where the 幕后 view and the gateway's ledger are, and how to break a payment on purpose.
 * Shown only beside the PSP sandbox (`sandboxUrl`): a real deployment's shoppers never see it.
 */
export function FirstRunPanel({ sandboxUrl, demo }: { sandboxUrl: string | null; demo: boolean }) {
  const { t } = useLang();
  // Closed until the browser says otherwise: the server cannot know, and a panel that flashes open
  // and shut on every visit after the first would be worse than one that appears a moment late.
  const [open, setOpen] = useState(false);
  useEffect(() => {
    setOpen(window.localStorage.getItem(DISMISSED_KEY) !== '1');
  }, []);
  if (!open || !sandboxUrl) return null;
  const ledgerUrl = new URL('/sandbox/ledger', sandboxUrl).toString();
  return (
    <section className="card first-run" aria-labelledby="first-run-heading">
      <h2 id="first-run-heading">{t('firstRun.heading')}</h2>
      <p>{t('firstRun.proves')}</p>
      <ol>
        <li>{t('firstRun.testBuyer')}</li>
        <li>{t('firstRun.selfPay')}</li>
        <li>
          {t('firstRun.behind')}{' '}
          <a href={ledgerUrl} target="_blank" rel="noreferrer">
            {t('firstRun.ledger')}
          </a>
          {t('firstRun.ledgerAfter')}
        </li>
        <li>{demo ? t('firstRun.demoOn') : t('firstRun.demoOff')}</li>
      </ol>
      <p className="meta">{t('firstRun.docs')}</p>
      <button
        type="button"
        className="secondary"
        onClick={() => {
          window.localStorage.setItem(DISMISSED_KEY, '1');
          setOpen(false);
        }}
      >
        {t('firstRun.dismiss')}
      </button>
    </section>
  );
}
