/**
 * The gateway's own record of what one out_trade_no was charged and refunded: the 幕后 view shows it
 * beside our journal, as the proof that one charge was kept. The checkout asks through
 * `GatewayLedger` (CheckoutServices.gatewayLedger) and is given one only where a gateway's ledger can
 * be read: in local runs, the PSP sandbox's (`sandboxLedger` below). Against real gateways none is
 * wired, and each gateway's dashboard is the record.
 */

export interface LedgerSummary {
  /** `sandbox`: read from the PSP sandbox's ledger; `unavailable`: no ledger could be asked. */
  source: 'sandbox' | 'unavailable';
  charges: { gateway: string; amountMinor: number; currency: string; status: string; gatewayTradeNo: string | null }[];
  refunds: { gateway: string; amountMinor: number; currency: string; status: string; refundId: string }[];
  /** Succeeded charges minus succeeded refunds: what the customer has paid, in minor units. */
  keptMinor: number;
}

export interface GatewayLedger {
  /** Never throws: a ledger that cannot be read answers `unavailable`. */
  read(outTradeNo: string): Promise<LedgerSummary>;
}

export const UNAVAILABLE_LEDGER: LedgerSummary = Object.freeze({ source: 'unavailable', charges: [], refunds: [], keptMinor: 0 });

/** The PSP sandbox's ledger (GET {sandboxUrl}/ledger?outTradeNo=…), read within 3 s. */
export function sandboxLedger(sandboxUrl: string): GatewayLedger {
  return {
    async read(outTradeNo) {
      try {
        const response = await fetch(`${sandboxUrl}/ledger?outTradeNo=${encodeURIComponent(outTradeNo)}`, {
          signal: AbortSignal.timeout(3000),
        });
        if (!response.ok) return UNAVAILABLE_LEDGER;
        const ledger = (await response.json()) as { charges: LedgerSummary['charges']; refunds?: LedgerSummary['refunds'] };
        return summarise(ledger.charges, ledger.refunds ?? []);
      } catch {
        return UNAVAILABLE_LEDGER;
      }
    },
  };
}

function summarise(charges: LedgerSummary['charges'], refunds: LedgerSummary['refunds']): LedgerSummary {
  const kept = (items: { amountMinor: number; status: string }[]) =>
    items.filter((item) => item.status === 'succeeded').reduce((total, item) => total + item.amountMinor, 0);
  return {
    source: 'sandbox',
    charges: charges.map(({ gateway, amountMinor, currency, status, gatewayTradeNo }) => ({
      gateway,
      amountMinor,
      currency,
      status,
      gatewayTradeNo,
    })),
    refunds: refunds.map(({ gateway, amountMinor, currency, status, refundId }) => ({ gateway, amountMinor, currency, status, refundId })),
    keptMinor: kept(charges) - kept(refunds),
  };
}
