/** Amounts are integer minor units (fen); the page shows them with their currency's sign. */
export function formatMoney(minor: number, currency: string): string {
  const sign = currency === 'CNY' ? '¥' : `${currency} `;
  return `${sign}${Math.floor(minor / 100)}.${String(minor % 100).padStart(2, '0')}`;
}
