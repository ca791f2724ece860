'use client';

import { declineText } from '../../client/decline-reasons';
import { useLang } from '../../client/i18n';
import type { AwaitingBuyer } from '../../server/checkout/pay';

type Vars = Record<string, string | number>;

/** One sentence of the status: a catalogue message, or a gateway's decline in the shopper's words. */
export type StatusLine = { key: string; vars?: Vars } | { decline: { gateway: string; code?: string; message?: string } };

/** What an engineer needs to find the request again; shown only inside the 详情 disclosure. */
export interface TechnicalDetail {
  status?: number;
  reason?: string;
  message?: string;
  key?: string;
  gateway?: string;
  declineCode?: string;
}

/** Titles and lines are catalogue keys, so switching language re-renders what is on screen. */
export type Status =
  | { tone: 'idle' }
  | { tone: 'busy' | 'warn' | 'bad'; title: string; lines: StatusLine[]; tech?: TechnicalDetail }
  /** `returnToken`: the order is read by a return link's token, not the session (a buyer back from a gateway's page). */
  | { tone: 'ok'; title: string; lines: StatusLine[]; orderId: string; returnToken?: string; tech?: TechnicalDetail }
  /** The gateway's trade is open and waits for the buyer's own step; the page watches the order. */
  | { tone: 'wait'; title: string; lines: StatusLine[]; awaiting: AwaitingBuyer; tech?: TechnicalDetail };

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
