/**
 * Times as the shop's customers read them: Beijing time (Asia/Shanghai, UTC+8 all year), whatever
 * the server's own time zone — containers usually run in UTC, and "20:15" in an email must mean
 * the hour the buyer paid at.
 */
const parts = new Intl.DateTimeFormat('en-US', {
  timeZone: 'Asia/Shanghai',
  year: 'numeric',
  month: 'numeric',
  day: 'numeric',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hourCycle: 'h23',
});

function beijingParts(at: Date): Record<'year' | 'month' | 'day' | 'hour' | 'minute' | 'second', string> {
  const found = Object.fromEntries(parts.formatToParts(at).map((p) => [p.type, p.value]));
  const pick = (type: string) => {
    const value = found[type];
    if (value === undefined) throw new Error(`no ${type} in the Beijing time of ${at.toISOString()}`);
    return value;
  };
  return { year: pick('year'), month: pick('month'), day: pick('day'), hour: pick('hour'), minute: pick('minute'), second: pick('second') };
}

/** `2026年12月3日 20:15 (北京时间)`: for the customer, in an email. */
export function formatBeijingLong(at: Date): string {
  const t = beijingParts(at);
  return `${t.year}年${t.month}月${t.day}日 ${t.hour}:${t.minute} (北京时间)`;
}

/** `2026-12-03 20:15:04 北京时间`: to the second, sortable, for lists such as the demo mailbox. */
export function formatBeijingTimestamp(at: Date): string {
  const t = beijingParts(at);
  return `${t.year}-${t.month.padStart(2, '0')}-${t.day.padStart(2, '0')} ${t.hour}:${t.minute}:${t.second} 北京时间`;
}
