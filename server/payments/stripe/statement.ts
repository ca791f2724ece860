/**
 * Stripe's statement for one day (UTC): its balance transactions, read through stripe-node with
 * their sources expanded — a `charge` transaction's Charge names the PaymentIntent (our gateway trade
 * number) and carries the PaymentIntent's metadata (out_trade_no); a `refund` transaction's Refund
 * carries our refund id in metadata. Amounts and fees are the transaction's own (a refund's amount is
 * negative there, positive here). Other types (payouts, adjustments) are not payments of an order.
 */
import type Stripe from 'stripe';
import type { StatementLine, StatementOutcome } from '@/server/payments/gateway';
import type { StripeContext } from './config';
import { classifyError } from './failure';

const DAY_SECONDS = 24 * 60 * 60;

export async function statement(ctx: StripeContext, date: string): Promise<StatementOutcome> {
  const start = Date.parse(`${date}T00:00:00Z`) / 1000;
  const lines: StatementLine[] = [];
  try {
    const list = ctx.stripe.balanceTransactions.list({
      created: { gte: start, lt: start + DAY_SECONDS },
      limit: 100,
      expand: ['data.source'],
    });
    for await (const transaction of list) {
      const line = lineOf(transaction);
      if (line) lines.push(line);
    }
  } catch (error) {
    const failure = classifyError(error, false);
    return { kind: 'unavailable', code: failure.code, message: failure.message };
  }
  return { kind: 'lines', lines };
}

function lineOf(transaction: Stripe.BalanceTransaction): StatementLine | undefined {
  const source = transaction.source;
  if (!source || typeof source === 'string') return undefined;
  const currency = transaction.currency.toUpperCase();
  if (transaction.type === 'charge' && source.object === 'charge') {
    const charge = source as Stripe.Charge;
    const intent = typeof charge.payment_intent === 'string' ? charge.payment_intent : (charge.payment_intent?.id ?? charge.id);
    return {
      kind: 'payment',
      outTradeNo: charge.metadata?.out_trade_no ?? '',
      gatewayTradeNo: intent,
      amountMinor: transaction.amount,
      feeMinor: transaction.fee,
      currency,
    };
  }
  if (transaction.type === 'refund' && source.object === 'refund') {
    const refund = source as Stripe.Refund;
    const intent = typeof refund.payment_intent === 'string' ? refund.payment_intent : (refund.payment_intent?.id ?? '');
    return {
      kind: 'refund',
      outTradeNo: refund.metadata?.out_trade_no ?? '',
      gatewayTradeNo: intent,
      ...(refund.metadata?.refund_id ? { refundId: refund.metadata.refund_id } : {}),
      gatewayRefundId: refund.id,
      amountMinor: -transaction.amount,
      feeMinor: transaction.fee,
      currency,
    };
  }
  return undefined;
}
