/**
 * Giving back money that must not stay, exactly once.
 *
 * A refund row is written in the same transaction that records the excess charge (./settle), with its
 * refund id fixed there. The refund worker (this pg-boss job, run by ./queue.ts) then drives each row
 * to a final state:
 *
 *   pending ──send──▶ sent ──answer──▶ succeeded | processing | failed
 *                      ▲  │ lost answer, timeout, crash before the commit
 *                      └──┘ next run asks the gateway by refund id first; only a refund the gateway
 *                           says it never saw is sent again — with the same refund id
 *
 * The row is marked `sent` in the claim's own commit, before the call: a worker that dies between the
 * gateway's answer and its commit leaves `sent` behind, and the next run settles it by query. And every
 * gateway deduplicates refunds on the id we send, so even a repeated send cannot refund twice.
 */
import { and, eq, inArray, sql } from 'drizzle-orm';
import { refunds } from '@/db/schema';
import { journaledCall } from '@/server/checkout/journal';
import { markRefundFailed, markRefundSucceeded } from '@/server/checkout/refunds';
import type { CheckoutServices } from '@/server/checkout/services';
import type { GatewayId, RefundOutcome } from '@/server/payments/gateway';
import { inSpan } from '@/server/tracing/traces';

export interface RefundRunSummary {
  examined: number;
  succeeded: number;
  processing: number;
  failed: number;
  /** Transient failures and answers in doubt: tried again after a backoff. */
  retried: number;
}

export interface RefundWorkerOptions {
  limit?: number;
  /** How long a worker holds a claimed refund; it must outlast a refund call and a query. */
  leaseMs?: number;
  /** First retry delay; doubles per attempt up to maxBackoffMs. */
  backoffMs?: number;
  maxBackoffMs?: number;
}

/** A gateway call takes at most ~15 s (5 s timeout, SDK retries); a minute leaves a wide margin. */
export const DEFAULT_REFUND_LEASE_MS = 60_000;
/** 2 s, 4 s, 8 s … capped at 10 minutes: quick after a blip, patient through an outage. */
export const DEFAULT_REFUND_BACKOFF_MS = 2_000;
const DEFAULT_MAX_BACKOFF_MS = 10 * 60_000;

interface ClaimedRefund extends Record<string, unknown> {
  id: string;
  order_id: string;
  gateway: GatewayId;
  out_trade_no: string;
  gateway_trade_no: string;
  refund_id: string;
  amount_minor: number;
  currency: string;
  reason: string;
  /** A merchant refund's reason in the operator's words. */
  note: string | null;
  attempts: number;
  previous_status: 'pending' | 'sent' | 'processing';
  /** The whole charge being refunded from (WeChat Pay's amount.total): a merchant refund may be part of it. */
  charge_amount_minor: number;
}

type Verdict =
  | { kind: 'succeeded'; gatewayRefundId: string }
  | { kind: 'processing'; gatewayRefundId: string | null }
  | { kind: 'failed'; code: string; message: string }
  | { kind: 'retry'; status: 'pending' | 'sent' | 'processing'; error: string };

export async function processDueRefunds(services: CheckoutServices, options: RefundWorkerOptions = {}): Promise<RefundRunSummary> {
  const limit = options.limit ?? 20;
  const leaseMs = options.leaseMs ?? DEFAULT_REFUND_LEASE_MS;
  const backoffMs = options.backoffMs ?? DEFAULT_REFUND_BACKOFF_MS;
  const maxBackoffMs = options.maxBackoffMs ?? DEFAULT_MAX_BACKOFF_MS;
  const summary: RefundRunSummary = { examined: 0, succeeded: 0, processing: 0, failed: 0, retried: 0 };

  // Claim: lease, count the attempt and mark `sent` — committed before any call is made.
  const claimed = await services.db.execute<ClaimedRefund>(sql`
    with due as (
      select id, status as previous_status from refunds
       where status in ('pending', 'sent', 'processing')
         and next_attempt_at <= now()
         and (lease_until is null or lease_until < now())
       order by next_attempt_at
       limit ${limit}
       for update skip locked
    )
    update refunds r
       set lease_until = now() + (${leaseMs}::bigint * interval '1 millisecond'),
           attempts = r.attempts + 1,
           status = case when r.status = 'pending' then 'sent' else r.status end
      from due
     where r.id = due.id
    returning r.id, r.order_id, r.gateway, r.out_trade_no, r.gateway_trade_no, r.refund_id, r.amount_minor,
              r.currency, r.reason, r.note, r.attempts, due.previous_status,
              (select p.amount_minor from payments p where p.id = r.payment_id) as charge_amount_minor`);

  for (const refund of claimed) {
    summary.examined++;
    const spanAttributes = {
      'payonce.refund_id': refund.refund_id,
      'payonce.out_trade_no': refund.out_trade_no,
      'payonce.gateway': refund.gateway,
    };
    await inSpan('refunds.process', refund.order_id, spanAttributes, () =>
      processOne(services, refund, summary, { backoffMs, maxBackoffMs }),
    );
  }
  return summary;
}

/** One claimed refund: asked or sent at the gateway, its verdict recorded and counted. */
async function processOne(
  services: CheckoutServices,
  refund: ClaimedRefund,
  summary: RefundRunSummary,
  { backoffMs, maxBackoffMs }: { backoffMs: number; maxBackoffMs: number },
): Promise<void> {
  const verdict = await decide(services, refund);
  await services.faults?.hit('after_refund_call', { procedure: 'refunds.process', gateway: refund.gateway });
  const count = (outcome: string) => services.metrics?.refunds.inc({ gateway: refund.gateway, reason: refund.reason, outcome });
  switch (verdict.kind) {
    case 'succeeded':
      await services.db.transaction((tx) => markRefundSucceeded(tx, refund.refund_id, verdict.gatewayRefundId));
      summary.succeeded++;
      count('succeeded');
      break;
    case 'processing': {
      await services.db
        .update(refunds)
        .set({
          status: 'processing',
          gatewayRefundId: verdict.gatewayRefundId,
          leaseUntil: null,
          lastError: null,
          nextAttemptAt: sql`now() + (${backoffFor(refund.attempts, backoffMs, maxBackoffMs)}::bigint * interval '1 millisecond')`,
        })
        .where(and(eq(refunds.id, refund.id), inArray(refunds.status, ['sent', 'processing'])));
      summary.processing++;
      count('processing');
      break;
    }
    case 'failed':
      await services.db.transaction((tx) => markRefundFailed(tx, refund.refund_id, `${verdict.code}: ${verdict.message}`));
      summary.failed++;
      count('failed');
      break;
    case 'retry':
      await services.db
        .update(refunds)
        .set({
          status: verdict.status,
          leaseUntil: null,
          lastError: verdict.error.slice(0, 500),
          nextAttemptAt: sql`now() + (${backoffFor(refund.attempts, backoffMs, maxBackoffMs)}::bigint * interval '1 millisecond')`,
        })
        .where(and(eq(refunds.id, refund.id), inArray(refunds.status, ['sent', 'processing'])));
      summary.retried++;
      count('retried');
      break;
    default: {
      const unreachable: never = verdict;
      throw new Error(`unknown refund verdict ${JSON.stringify(unreachable)}`);
    }
  }
}

function backoffFor(attempts: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, Math.min(attempts - 1, 20)));
}

/** Talks to the gateway: sends a never-sent refund; settles a sent one by query first. */
async function decide(services: CheckoutServices, refund: ClaimedRefund): Promise<Verdict> {
  const gateway = services.gateways[refund.gateway];
  if (!gateway) return { kind: 'retry', status: refund.previous_status, error: `${refund.gateway} is not configured` };
  const request = {
    outTradeNo: refund.out_trade_no,
    gatewayTradeNo: refund.gateway_trade_no,
    refundId: refund.refund_id,
    amountMinor: refund.amount_minor,
    chargeAmountMinor: refund.charge_amount_minor,
    currency: refund.currency,
    reason: gatewayReason(refund),
    notifyUrl: new URL(`/api/webhooks/${refund.gateway}`, services.publicBaseUrl).toString(),
  };
  try {
    if (refund.previous_status !== 'pending') {
      // It may have gone through: ask by our refund id before anything else.
      const answer = await journaledCall(
        services.db,
        { orderId: refund.order_id, gateway: refund.gateway, operation: 'refund_query', request: { refundId: refund.refund_id } },
        () =>
          gateway.queryRefund({
            outTradeNo: refund.out_trade_no,
            gatewayTradeNo: refund.gateway_trade_no,
            refundId: refund.refund_id,
          }),
      );
      if (answer.kind === 'unavailable') {
        return { kind: 'retry', status: refund.previous_status, error: `query: ${answer.code}: ${answer.message}` };
      }
      const found = answer.refund;
      switch (found.kind) {
        case 'succeeded':
          return { kind: 'succeeded', gatewayRefundId: found.gatewayRefundId };
        case 'pending':
          return { kind: 'processing', gatewayRefundId: null };
        case 'failed':
          return { kind: 'failed', code: found.code, message: found.message };
        case 'not_found':
          break; // never reached the gateway: send it, with the same refund id
        default: {
          const unreachable: never = found;
          throw new Error(`unknown refund status ${JSON.stringify(unreachable)}`);
        }
      }
    }
    return verdictOf(
      await journaledCall(
        services.db,
        {
          orderId: refund.order_id,
          gateway: refund.gateway,
          operation: 'refund',
          request: { refundId: refund.refund_id, amountMinor: refund.amount_minor, currency: refund.currency, reason: refund.reason },
        },
        () => gateway.refund(request),
      ),
    );
  } catch (error) {
    // An adapter bug or a thrown transport error: in doubt, never a reason to send a second id.
    return { kind: 'retry', status: 'sent', error: error instanceof Error ? error.message : String(error) };
  }
}

/** What the gateway shows the buyer as the refund's reason, where it has a field for it. */
function gatewayReason(refund: ClaimedRefund): string {
  switch (refund.reason) {
    case 'duplicate_charge':
      return 'PayOnce: duplicate payment';
    case 'order_not_payable':
      return 'PayOnce: order closed before payment';
    default:
      return refund.note ? `PayOnce: ${refund.note}` : 'PayOnce: refund by the shop';
  }
}

function verdictOf(outcome: RefundOutcome): Verdict {
  switch (outcome.kind) {
    case 'succeeded':
      return { kind: 'succeeded', gatewayRefundId: outcome.gatewayRefundId };
    case 'pending':
      return { kind: 'processing', gatewayRefundId: outcome.gatewayRefundId };
    case 'failed':
      return { kind: 'failed', code: outcome.code, message: outcome.message };
    case 'retryable':
      // Certainly not processed this time — but an earlier try may have been: stay `sent`, so the
      // next run asks first.
      return { kind: 'retry', status: 'sent', error: `${outcome.code}: ${outcome.message}` };
    case 'indeterminate':
      return { kind: 'retry', status: 'sent', error: `${outcome.code}: ${outcome.message}` };
    default: {
      const unreachable: never = outcome;
      throw new Error(`unknown refund outcome ${JSON.stringify(unreachable)}`);
    }
  }
}
