'use client';

import type { ReactNode } from 'react';
import type { Lang } from '@/client/i18n';
import type { OrderTimeline } from '@/server/checkout/timeline';
import { describe } from './behind-describe';
import { TEXT } from './behind-words';

type Props = {
  timeline: OrderTimeline;
  lang: Lang;
  /** How the times read: 幕后 to the millisecond (requests race), the console with the date (orders span days). */
  time: Intl.DateTimeFormat;
  /** The hash chain's column: 幕后 shows it, to prove the journal holds; the console leaves it out. */
  hashes: boolean;
  caption?: ReactNode;
} & ({ labelledBy: string; label?: never } | { label: string; labelledBy?: never });

/** One order's journal, each event in the words of the 幕后 view: shared by 幕后 and the operators' console. */
export function TimelineTable({ timeline, lang, time, hashes, caption, labelledBy, label }: Props) {
  const text = TEXT[lang];
  return (
    <table className="timeline" {...(labelledBy ? { 'aria-labelledby': labelledBy } : { 'aria-label': label })}>
      {caption && <caption>{caption}</caption>}
      <thead>
        <tr>
          <th scope="col">#</th>
          <th scope="col">{text.time}</th>
          <th scope="col">{text.event}</th>
          <th scope="col">{text.details}</th>
          {hashes && <th scope="col">{text.hash}</th>}
        </tr>
      </thead>
      <tbody>
        {timeline.events.map((event) => {
          const shown = describe(event, lang, timeline.order.currency);
          return (
            <tr key={event.seq} data-kind={event.kind} data-tone={shown.tone}>
              <td>{event.seq}</td>
              <td className="mono">{time.format(new Date(event.at))}</td>
              <td>{shown.title}</td>
              <td className="meta">{shown.details}</td>
              {hashes && <td className="mono meta">{event.hash}</td>}
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}
