/**
 * Carrying out what was decided about an authorisation — capture it (all or part) or release it —
 * exactly once at the gateway.
 *
 * The decision's row (authorization_actions) is written in the transaction that decides it
 * (server/checkout/authorizations.ts), with its capture id fixed there. This worker (a pg-boss job,
 * run by ./queue.ts) drives each to a final state:
 *
 *   pending ──send──▶ sent ──answer──▶ succeeded | failed
 *                      ▲  │ lost answer, timeout, crash before the commit
 *                      └──┘ the next run sends it again with the same capture id
 *
 * Unlike a refund, no query is needed before sending again: a capture and a release are idempotent at
 * the gateway by the PaymentIntent's own state (a second capture is refused with the PaymentIntent
 * captured, a second cancel with it canceled — both read as the first one's answer), and the capture
 * id makes Stripe replay a capture that went through. Whatever answers is settled through the same
 * functions as the gateway's notification and the reconciler, under the order's lock, once.
 */
import { and, eq, inArray, sql } from 'drizzle-orm';
import type { Transaction } from '@/db/client';
import { authorizationActions } from '@/db/schema';
import { settleVoidedAuthorization } from '@/server/checkout/authorizations';
import { journal, journaledCall } from '@/server/checkout/journal';
import { settleSucceededCharge } from '@/server/checkout/settle';
import type { CheckoutServices } from '@/server/checkout/services';
import type { CaptureOutcome, GatewayId, ReleaseOutcome } from '@/server/payments/gateway';
import { assertNever } from '@/server/payments/transport';
import { inSpan } from '@/server/tracing/traces';

export interface AuthorizationRunSummary {
  examined: number;
  captured: number;
  released: number;
  failed: number;
  /** Transient failures and answers in doubt: sent again after a backoff. */
  retried: number;
}

export interface AuthorizationWorkerOptions {
  limit?: number;
  /** How long a worker holds a claimed decision; it must outlast one capture call's every try. */
  leaseMs?: number;
  /** First retry delay; doubles per attempt up to maxBackoffMs. */
  backoffMs?: number;
  maxBackoffMs?: number;
}

/** One capture call takes at most ~15 s (5 s timeout, SDK retries); a minute leaves a wide margin. */
export const DEFAULT_AUTHORIZATION_LEASE_MS = 60_000;
/** 2 s, 4 s, 8 s … capped at 10 minutes, as refunds: quick after a blip, patient through an outage. */
export const DEFAULT_AUTHORIZATION_BACKOFF_MS = 2_000;
const DEFAULT_MAX_BACKOFF_MS = 10 * 60_000;

interface ClaimedAction extends Record<string, unknown> {
  id: string;
  order_id: string;
  gateway: GatewayId;
  out_trade_no: string;
  gateway_trade_no: string;
  action: 'capture' | 'release';
  amount_minor: number | null;
  currency: string;
  capture_id: string;
  attempts: number;
}

/** What one send came to: settled (by this worker or already), refused for good, or to be sent again. */
type Verdict =
  | { kind: 'captured'; amountMinor: number }
  | { kind: 'released' }
  | { kind: 'failed'; code: string; message: string }
  | { kind: 'retry'; error: string };

export async function processDueAuthorizationActions(
  services: CheckoutServices,
  options: AuthorizationWorkerOptions = {},
): Promise<AuthorizationRunSummary> {
  const leaseMs = options.leaseMs ?? DEFAULT_AUTHORIZATION_LEASE_MS;
  const summary: AuthorizationRunSummary = { examined: 0, captured: 0, released: 0, failed: 0, retried: 0 };
  // Claim: lease, count the attempt and mark `sent` — committed before any call is made.
  const claimed = await services.db.execute<ClaimedAction>(sql`
    with due as (
      select id from authorization_actions
       where status in ('pending', 'sent')
         and next_attempt_at <= now()
         and (lease_until is null or lease_until < now())
       order by next_attempt_at
       limit ${options.limit ?? 20}
       for update skip locked
    )
    update authorization_actions a
       set lease_until = now() + (${leaseMs}::bigint * interval '1 millisecond'),
           attempts = a.attempts + 1,
           status = 'sent'
      from due
     where a.id = due.id
    returning a.id, a.order_id, a.gateway, a.out_trade_no, a.gateway_trade_no, a.action, a.amount_minor, a.currency,
              a.capture_id, a.attempts`);

  for (const action of claimed) {
    summary.examined++;
    const spanAttributes = {
      'payonce.capture_id': action.capture_id,
      'payonce.out_trade_no': action.out_trade_no,
      'payonce.gateway': action.gateway,
    };
    const verdict = await inSpan(`authorizations.${action.action}`, action.order_id, spanAttributes, async () => {
      const verdict = await send(services, action);
      await services.faults?.hit('after_capture_call', {
        procedure: 'authorizations.process',
        gateway: action.gateway,
        orderId: action.order_id,
      });
      await record(services, action, verdict, options);
      return verdict;
    });
    summary[verdict.kind === 'retry' ? 'retried' : verdict.kind]++;
  }
  return summary;
}

/** The gateway's answer to this decision, read as a verdict; a thrown error is in doubt, never final. */
async function send(services: CheckoutServices, action: ClaimedAction): Promise<Verdict> {
  const operations = services.gateways[action.gateway]?.authorizations;
  if (!operations) return { kind: 'retry', error: `${action.gateway} is not configured for authorisations` };
  const trade = { outTradeNo: action.out_trade_no, gatewayTradeNo: action.gateway_trade_no };
  const call = {
    orderId: action.order_id,
    gateway: action.gateway,
    operation: action.action,
    request: { captureId: action.capture_id, ...(action.amount_minor !== null ? { amountMinor: action.amount_minor } : {}) },
  };
  try {
    if (action.action === 'release') return releaseVerdict(await journaledCall(services.db, call, () => operations.release(trade)));
    const request = { ...trade, amountMinor: action.amount_minor ?? 0, currency: action.currency, captureId: action.capture_id };
    return captureVerdict(await journaledCall(services.db, call, () => operations.capture(request)));
  } catch (error) {
    return { kind: 'retry', error: error instanceof Error ? error.message : String(error) };
  }
}

function captureVerdict(outcome: CaptureOutcome): Verdict {
  switch (outcome.kind) {
    case 'captured':
      return { kind: 'captured', amountMinor: outcome.amountMinor };
    case 'released':
      return { kind: 'released' };
    case 'refused':
      return { kind: 'failed', code: outcome.code, message: outcome.message };
    case 'retryable':
    case 'indeterminate':
      return { kind: 'retry', error: `${outcome.code}: ${outcome.message}` };
    default:
      return assertNever(outcome);
  }
}

function releaseVerdict(outcome: ReleaseOutcome): Verdict {
  switch (outcome.kind) {
    case 'released':
      return { kind: 'released' };
    case 'captured':
      // Too late: the money was taken (a capture elsewhere won the race): settled as that capture.
      return { kind: 'captured', amountMinor: outcome.amountMinor };
    case 'retryable':
    case 'indeterminate':
      return { kind: 'retry', error: `${outcome.code}: ${outcome.message}` };
    default:
      return assertNever(outcome);
  }
}

/**
 * The verdict, committed: a capture or release settles the order through the same path as its
 * notification (which settles the decision row with it); a refusal ends the decision and leaves the
 * order authorised for a person; anything else is sent again later.
 */
async function record(services: CheckoutServices, action: ClaimedAction, verdict: Verdict, options: AuthorizationWorkerOptions) {
  const trade = { gateway: action.gateway, outTradeNo: action.out_trade_no, gatewayTradeNo: action.gateway_trade_no };
  switch (verdict.kind) {
    case 'captured':
      await services.db.transaction((tx) =>
        settleSucceededCharge(tx, { ...trade, amountMinor: verdict.amountMinor, currency: action.currency, source: 'response' }),
      );
      return;
    case 'released':
      await services.db.transaction(async (tx) => {
        const settled = await settleVoidedAuthorization(tx, trade);
        // Released at the gateway but not an authorisation we hold any more: the decision ends here.
        if (settled !== 'voided') await endAction(tx, action, `RELEASED_BUT_${settled.toUpperCase()}`);
      });
      return;
    case 'failed':
      await services.db.transaction((tx) => endAction(tx, action, `${verdict.code}: ${verdict.message}`));
      return;
    case 'retry': {
      const base = options.backoffMs ?? DEFAULT_AUTHORIZATION_BACKOFF_MS;
      const delay = Math.min(options.maxBackoffMs ?? DEFAULT_MAX_BACKOFF_MS, base * 2 ** Math.max(0, Math.min(action.attempts - 1, 20)));
      await services.db
        .update(authorizationActions)
        .set({
          leaseUntil: null,
          lastError: verdict.error.slice(0, 500),
          nextAttemptAt: sql`now() + (${delay}::bigint * interval '1 millisecond')`,
        })
        .where(and(eq(authorizationActions.id, action.id), inArray(authorizationActions.status, ['sent'])));
      return;
    }
    default:
      assertNever(verdict);
  }
}

/** A decision the gateway refused for good: ended, journaled; the order stays as it is for a person. */
async function endAction(tx: Transaction, action: ClaimedAction, reason: string): Promise<void> {
  const error = reason.slice(0, 500);
  const [done] = await tx
    .update(authorizationActions)
    .set({ status: 'failed', lastError: error, leaseUntil: null, settledAt: sql`now()` })
    .where(and(eq(authorizationActions.id, action.id), eq(authorizationActions.status, 'sent')))
    .returning({ id: authorizationActions.id });
  if (done) await journal(tx, { orderId: action.order_id, kind: 'authorization.refused', data: { captureId: action.capture_id, error } });
}
