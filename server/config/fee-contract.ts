/**
 * The fee a merchant agreed with a gateway, as configured (ALIPAY_FEE, WECHATPAY_FEE, STRIPE_FEE,
 * TWOC2P_FEE; the PSP sandbox publishes its own as `feeContract` in GET /sandbox/credentials): one
 * line of `;`-separated pairs —
 *
 *   rate=0.6%            of the payment's amount (required)
 *   fixed=30             minor units per payment (default 0)
 *   vat=7%               tax on the fee, added to it (2C2P's VAT on its MDR; default 0)
 *   wht=3%               withholding tax on the fee, credited back (2C2P's WHT; default 0)
 *   refund=pro_rata      a refund gives back its share of the fee; `kept` (the default): it does not
 *
 * What it comes to on a statement line is server/reconciliation/fees.ts's. This file only reads it,
 * so that a typo stops the start (server/config/env.ts) rather than a reconciliation at night.
 */
export interface FeeContract {
  /** Of the amount, in parts per million (6000 = 0.6 %): integers, so no rate is off by a float. */
  ratePpm: number;
  fixedMinor: number;
  vatPpm: number;
  whtPpm: number;
  onRefund: 'pro_rata' | 'kept';
}

const PERCENT = /^(\d{1,3})(?:\.(\d{1,4}))?%$/;

/** "0.6%" → 6000 parts per million; undefined for anything else (up to four decimals, at most 100 %). */
function percentToPpm(text: string): number | undefined {
  const match = PERCENT.exec(text);
  if (!match) return undefined;
  const ppm = Number(match[1]) * 10_000 + Number((match[2] ?? '').padEnd(4, '0'));
  return ppm <= 1_000_000 ? ppm : undefined;
}

/** A contract line parsed; a string naming what is wrong with it otherwise. */
export function parseFeeContract(text: string): FeeContract | string {
  const contract: FeeContract = { ratePpm: -1, fixedMinor: 0, vatPpm: 0, whtPpm: 0, onRefund: 'kept' };
  const seen = new Set<string>();
  for (const pair of text.trim().split(';')) {
    const [key = '', value = '', ...extra] = pair.trim().split('=');
    if (extra.length > 0 || value === '') return `"${pair.trim()}" is not key=value`;
    if (seen.has(key)) return `${key} is given twice`;
    seen.add(key);
    const problem = setTerm(contract, key, value);
    if (problem) return problem;
  }
  return contract.ratePpm < 0 ? 'rate=…% is required' : contract;
}

function setTerm(contract: FeeContract, key: string, value: string): string | undefined {
  if (key === 'rate' || key === 'vat' || key === 'wht') {
    const ppm = percentToPpm(value);
    if (ppm === undefined) return `${key}: a percentage such as 0.6%, got ${value}`;
    contract[key === 'rate' ? 'ratePpm' : key === 'vat' ? 'vatPpm' : 'whtPpm'] = ppm;
    return undefined;
  }
  if (key === 'fixed') {
    if (!/^\d{1,9}$/.test(value)) return `fixed: a whole number of minor units, got ${value}`;
    contract.fixedMinor = Number(value);
    return undefined;
  }
  if (key === 'refund') {
    if (value !== 'pro_rata' && value !== 'kept') return `refund: pro_rata or kept, got ${value}`;
    contract.onRefund = value;
    return undefined;
  }
  return `unknown term ${key} (rate, fixed, vat, wht, refund)`;
}
