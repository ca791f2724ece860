'use client';

import type { Status, TechnicalDetail } from '@/client/checkout-status';
import { declineText } from '@/client/decline-reasons';
import { useLang } from '@/client/i18n';

export function PaymentStatus({ status }: { status: Status }) {
  const { t, lang } = useLang();
  if (status.tone === 'idle') return <div className="status" role="status" hidden />;
  return (
    <>
      <div className="status" role="status" data-tone={status.tone === 'busy' ? undefined : status.tone}>
        <strong>{t(status.title)}</strong>
        {status.lines.map((line, index) => (
          <span key={index}>
            {'decline' in line ? declineText(lang, line.decline.gateway, line.decline.code, line.decline.message) : t(line.key, line.vars)}
          </span>
        ))}
      </div>
      {status.tech && <TechnicalDetails tech={status.tech} />}
    </>
  );
}

function TechnicalDetails({ tech }: { tech: TechnicalDetail }) {
  const { t } = useLang();
  const rows: [string, string | undefined][] = [
    ['tech.status', tech.status === undefined ? t('tech.network') : String(tech.status)],
    ['tech.reason', tech.reason],
    ['tech.gateway', tech.gateway],
    ['tech.declineCode', tech.declineCode],
    ['tech.message', tech.message],
    ['tech.key', tech.key],
  ];
  return (
    <details className="tech">
      <summary>{t('tech.summary')}</summary>
      <p>{t('tech.caption')}</p>
      <dl className="summary">
        {rows
          .filter(([, value]) => value)
          .map(([label, value]) => (
            <div key={label} className="tech-row">
              <dt>{t(label)}</dt>
              <dd>{value}</dd>
            </div>
          ))}
      </dl>
    </details>
  );
}
