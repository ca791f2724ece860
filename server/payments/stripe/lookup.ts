/**
 * Finding things at Stripe by PayOnce's own ids, which Stripe knows only as metadata: an order's
 * PaymentIntents (search, plus a strongly consistent list of the recent window search may not show
 * yet) and a refund by refundId (the PaymentIntent's refunds, page by page).
 */
import type Stripe from 'stripe';
import type { RefundQuery, RefundQueryOutcome } from '@/server/payments/gateway';
import { call } from './call';
import { classifyRefundStatus, findRefundIn } from './classify';
import { classifyRefundListFailure, type Called } from './failure';
import { outTradeNoQuery } from './requests';

/** Search can lag "up to an hour during outages": query() lists this window strongly consistently. */
const RECENT_WINDOW_SECONDS = 3600;
/** Clocks differ (ours, Stripe's): a list window that starts at a moment of ours starts this much earlier. */
const CLOCK_MARGIN_SECONDS = 120;
/** At most this many pages of 100 of that window; beyond it a "not found" cannot be trusted. */
export const MAX_RECENT_PAGES = 5;
/** Refunds of one PaymentIntent read by queryRefund, 100 a page; beyond it "not found" is not trusted. */
const MAX_REFUND_PAGES = 10;

/** Where the recent window starts: the last hour, or later when nothing of interest is older (less a margin). */
function windowStart(createdSince: Date | undefined): number {
  const hourAgo = Math.floor(Date.now() / 1000) - RECENT_WINDOW_SECONDS;
  return createdSince ? Math.max(hourAgo, Math.floor(createdSince.getTime() / 1000) - CLOCK_MARGIN_SECONDS) : hourAgo;
}

/**
 * Every PaymentIntent of one order: search, plus a strongly consistent list of the recent window
 * that search may not show yet. `complete` is false when that window was too busy to read whole.
 */
export async function findIntents(
  stripe: Stripe,
  outTradeNo: string,
  maxPages: number,
  options: Stripe.RequestOptions = {},
  /** Nothing of interest was created before this: the list window starts here (less a margin). */
  createdSince?: Date,
): Promise<Called<{ intents: Stripe.PaymentIntent[]; complete: boolean }>> {
  const searched = await call(() => stripe.paymentIntents.search({ query: outTradeNoQuery(outTradeNo), limit: 100 }, options));
  if (!searched.ok) return searched;
  const byId = new Map(searched.value.data.map((intent) => [intent.id, intent]));
  // More than one page of this order's PaymentIntents: what is not read cannot be ruled out.
  if (searched.value.has_more) return { ok: true, value: { intents: [...byId.values()], complete: false } };
  const since = windowStart(createdSince);
  let startingAfter: string | undefined;
  for (let page = 0; page < maxPages; page += 1) {
    const listed = await call(() =>
      stripe.paymentIntents.list(
        { created: { gte: since }, limit: 100, ...(startingAfter ? { starting_after: startingAfter } : {}) },
        options,
      ),
    );
    if (!listed.ok) return listed;
    // The list is fresher than the search index: its copy wins.
    for (const intent of listed.value.data) if (intent.metadata?.out_trade_no === outTradeNo) byId.set(intent.id, intent);
    startingAfter = listed.value.data.at(-1)?.id;
    if (!listed.value.has_more || !startingAfter) return { ok: true, value: { intents: [...byId.values()], complete: true } };
  }
  return { ok: true, value: { intents: [...byId.values()], complete: false } };
}

/** Finds a refund by PayOnce's refundId among the PaymentIntent's refunds (metadata.refund_id). */
export async function findRefund(stripe: Stripe, request: RefundQuery): Promise<RefundQueryOutcome> {
  let startingAfter: string | undefined;
  for (let page = 0; page < MAX_REFUND_PAGES; page += 1) {
    const listed = await call(() =>
      stripe.refunds.list({
        payment_intent: request.gatewayTradeNo,
        limit: 100,
        ...(startingAfter ? { starting_after: startingAfter } : {}),
      }),
    );
    if (!listed.ok) return classifyRefundListFailure(listed.failure);
    const best = findRefundIn(listed.value.data, request.refundId);
    if (best) return { kind: 'answered', refund: classifyRefundStatus(best) };
    startingAfter = listed.value.data.at(-1)?.id;
    if (!listed.value.has_more || !startingAfter) return { kind: 'answered', refund: { kind: 'not_found' } };
  }
  return {
    kind: 'unavailable',
    code: 'REFUND_LIST_INCOMPLETE',
    message: `more than ${MAX_REFUND_PAGES * 100} refunds of ${request.gatewayTradeNo}`,
  };
}
