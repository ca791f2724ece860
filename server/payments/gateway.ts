/**
 * The one interface every payment gateway adapter implements.
 *
 * Adapters translate between PayOnce's closed set of outcomes and one gateway's wire protocol. Gateway
 * SDK types never leave an adapter: the checkout only ever sees the types in this file.
 *
 * Amounts are integer minor units (fen for CNY). `outTradeNo` is the merchant's reference for the
 * order, generated and stored when the order is created and reused for every attempt, so a repeated
 * call for the same attempt is deduplicated by the gateway itself.
 */

import type { GatewayId } from './gateway-ids';

export type { GatewayId };

/** The most tries one gateway call may make: a bound of the configuration (../config/env.ts). */
export { MAX_TRIES_PER_GATEWAY_CALL } from '@/server/config/env';

/**
 * Sandbox test buyers: a barcode or saved card the merchant presents itself, so the charge answers at
 * once. Only the sandbox has them (the `*_TEST_BUYERS` variables); against a real gateway a charge
 * with a test buyer is refused before any call, and the buyer takes their own step (BuyerStep).
 */
export type TestBuyer = 'ok' | 'insufficient_funds' | 'account_restricted';

/**
 * The buyer's own step at the gateway, when the merchant has no barcode or saved card to present:
 *   qr       — the page shows a QR code the buyer scans with the gateway's app (WeChat Pay Native
 *              code_url, Alipay precreate qr_code);
 *   redirect — the buyer's browser goes to the gateway's page and comes back to `returnUrl`
 *              (Alipay page pay, 2C2P's hosted payment page);
 *   card     — the page collects the card with the gateway's own script and confirms the payment from
 *              the browser (Stripe.js confirming a PaymentIntent by its client secret).
 */
export const BUYER_STEPS = ['qr', 'redirect', 'card'] as const;
export type BuyerStep = (typeof BUYER_STEPS)[number];

/**
 * What the page must do for the buyer to pay. It is stored with the 202 answer and replayed to a retry
 * of the same key, so it must stay usable for as long as the trade is open (no one-time secrets that a
 * replay would leak to someone else: keys are private to their customer).
 */
export type BuyerAction =
  /** Render `qrCode` (the text the gateway gave: a weixin:// or https:// URL) as a QR code. */
  | { kind: 'qr'; qrCode: string }
  /** Send the buyer's browser to `url` (GET); the gateway sends them back to the charge's returnUrl. */
  | { kind: 'redirect'; url: string }
  /**
   * Load Stripe.js from `scriptUrl` (https://js.stripe.com/v3/, or the sandbox's copy), mount a card
   * element with `publishableKey`, and confirm the PaymentIntent with `clientSecret`.
   */
  | { kind: 'card'; scriptUrl: string; publishableKey: string; clientSecret: string };

export interface ChargeRequest {
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  /** Shown to the buyer by the gateway ("PayOnce 订单 …"). */
  subject: string;
  /**
   * Which attempt at paying this order this is (1, 2, …). A retry of the same attempt must be
   * deduplicated by the gateway; a new attempt after a terminal decline is a new request.
   */
  attempt: number;
  /** A sandbox test buyer: the charge answers at once. Absent: the buyer takes `buyerStep`. */
  buyer?: TestBuyer;
  /** The buyer's step when there is no test buyer; absent: the gateway's first of `buyerSteps`. */
  buyerStep?: BuyerStep;
  /** Where the gateway sends its asynchronous notification for this charge. */
  notifyUrl: string;
  /** Where a gateway's page sends the buyer back to; the checkout always sets it, redirect steps need it. */
  returnUrl?: string;
}

/**
 * Every answer a gateway can give to a charge, mapped onto one closed set.
 *   succeeded     — money moved; settle the order.
 *   declined      — terminal for this attempt (balance, restricted account, declined card); stored
 *                   and replayed as 402, never retried automatically.
 *   retryable     — the gateway certainly did not charge (connection refused, 429, 5xx before the
 *                   charge); safe to try the same attempt again.
 *   indeterminate — the request may have been processed (timeout after sending, connection dropped);
 *                   settled only by a query or a notification, never by guessing.
 *   awaiting_buyer — the trade is open and waits for the buyer's own step (`action`); the outcome comes
 *                   by notification or query. Like a decline, the trade stays open: it is closed
 *                   before the order tries elsewhere and when the order expires.
 *   authorized    — the money is held for the order, not taken (Stripe's capture_method manual): the
 *                   merchant captures it later, all or part, or releases it (AuthorizationOperations).
 */
export type ChargeOutcome =
  | { kind: 'succeeded'; gatewayTradeNo: string; amountMinor: number; currency: string }
  | { kind: 'authorized'; gatewayTradeNo: string; amountMinor: number; currency: string }
  | { kind: 'awaiting_buyer'; action: BuyerAction }
  | { kind: 'declined'; code: string; message: string }
  | { kind: 'retryable'; code: string; message: string }
  | { kind: 'indeterminate'; code: string; message: string };

/**
 * What a query by out_trade_no tells about the gateway's trade. `succeeded`: money taken (for a
 * captured authorisation, what was captured); `authorized`: held and not captured yet; `closed`:
 * nothing can take money any more (an authorisation released or lapsed included).
 */
export type TradeStatus =
  | { kind: 'not_found' }
  | { kind: 'pending' }
  | { kind: 'succeeded'; gatewayTradeNo: string; amountMinor: number; currency: string }
  | { kind: 'authorized'; gatewayTradeNo: string; amountMinor: number; currency: string }
  | { kind: 'closed' };

export type QueryOutcome = { kind: 'answered'; trade: TradeStatus } | { kind: 'unavailable'; code: string; message: string };

/** A notification whose signature has been verified, in PayOnce's terms. */
export interface PaymentNotification {
  gateway: GatewayId;
  /** The dedupe key of the notification within its gateway (design.md §5). */
  eventId: string;
  merchantId: string;
  outTradeNo: string;
  /**
   * `succeeded` settles an order (or the capture of its authorisation); `authorized` holds the money
   * for it; `canceled` says an authorisation was released or lapsed. Others are acknowledged and ignored.
   */
  status: 'succeeded' | 'authorized' | 'canceled' | 'other';
  gatewayTradeNo: string;
  /**
   * The trade's amount (what the order must be for). A capture may take less: `capturedMinor` is then
   * what was taken.
   */
  amountMinor: number;
  capturedMinor?: number;
  currency: string;
}

export type NotificationVerdict =
  | { kind: 'verified'; notification: PaymentNotification }
  | { kind: 'refund'; notification: RefundNotification }
  | { kind: 'rejected'; reason: string }
  /** Verified, but what it says cannot be read right now (Stripe: the event re-fetched): deliver again later. */
  | { kind: 'unavailable'; reason: string };

/** An HTTP answer to a gateway's notification, exactly as that gateway expects it. */
export interface NotificationReply {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Close every trade of one order at this gateway that could still take the buyer's money: Alipay
 * `alipay.trade.close` (or `alipay.trade.cancel` when the trade may be mid-payment or not created
 * yet), WeChat Pay `…/out-trade-no/{no}/close`, Stripe: cancel each of the order's PaymentIntents
 * that is not final, 2C2P: cancel the payment token(s) of the invoice.
 *
 * Idempotent: closing a closed (or never-created) trade answers `closed` again.
 */
export interface CloseRequest {
  outTradeNo: string;
  amountMinor: number;
  currency: string;
  /**
   * When the trade was last (re)opened: anything of it created earlier was already closed by a
   * confirmed close. Lets an adapter that must list recent objects (Stripe's strongly consistent
   * list behind its lagging search) read a short window instead of a busy hour.
   */
  openedAt?: Date;
}

/** A charge that went through, as the gateway reports it. */
export interface SucceededTrade {
  gatewayTradeNo: string;
  amountMinor: number;
  currency: string;
}

/**
 * Every answer to a close, mapped onto one closed set.
 *   closed           — nothing at this gateway can take money for this out_trade_no any more (closed
 *                      now, closed before, or never created and now blocked).
 *   already_paid     — the buyer paid before the close: settle these charges (usually one), charge nothing.
 *   payment_reversed — the close reversed a payment made at that very instant (Alipay's trade.cancel
 *                      refunds a trade the buyer paid between our query and the cancel). The money is
 *                      on its way back, so that payment's success notification must never pay the
 *                      order (the trade remembers it: order_trades.payment_reversed_at). Like
 *                      `indeterminate`, no new attempt starts until a later close confirms the trade.
 *   indeterminate    — could not close or could not tell (timeout, 5xx, buyer mid-payment): no new
 *                      attempt may start until a later close or query settles it.
 */
export type CloseOutcome =
  | { kind: 'closed' }
  | { kind: 'already_paid'; charges: SucceededTrade[] }
  | { kind: 'payment_reversed'; message: string }
  | { kind: 'indeterminate'; code: string; message: string };

/**
 * Give back money for one successful charge. `refundId` is PayOnce's own identifier, derived from the
 * order and stored before the first call (Alipay out_request_no, WeChat out_refund_no, Stripe
 * Idempotency-Key and metadata, 2C2P's refund reference): sending the same refundId again never makes a
 * second refund.
 */
export interface RefundRequest {
  outTradeNo: string;
  /** The charge to refund, as ChargeOutcome/TradeStatus/notifications reported it. */
  gatewayTradeNo: string;
  /** [A-Za-z0-9], ≤ 32 characters: every gateway's refund-id rule at once. */
  refundId: string;
  amountMinor: number;
  /** The charge's whole amount (WeChat Pay's amount.total). */
  chargeAmountMinor: number;
  currency: string;
  /** Shown to the buyer by the gateway where it has a field for it. */
  reason: string;
  /** Where refund notifications go, for gateways that send them (WeChat Pay). */
  notifyUrl?: string;
}

/**
 * Every answer to a refund, mapped onto one closed set.
 *   succeeded     — the money is on its way back (final at the gateway).
 *   pending       — accepted, not final yet (WeChat PROCESSING): settle by queryRefund or notification.
 *   failed        — refused for good, nothing refunded (refund exceeds charge, trade unknown): a person
 *                   must look; retrying the same refundId will not help.
 *   retryable     — certainly not processed (connection refused, 429, 5xx before processing).
 *   indeterminate — may have been processed: settle with queryRefund — never with another refundId.
 */
export type RefundOutcome =
  | { kind: 'succeeded'; gatewayRefundId: string; amountMinor: number }
  | { kind: 'pending'; gatewayRefundId: string | null }
  | { kind: 'failed'; code: string; message: string }
  | { kind: 'retryable'; code: string; message: string }
  | { kind: 'indeterminate'; code: string; message: string };

export interface RefundQuery {
  outTradeNo: string;
  gatewayTradeNo: string;
  refundId: string;
}

export type RefundStatus =
  | { kind: 'not_found' }
  | { kind: 'pending' }
  | { kind: 'succeeded'; gatewayRefundId: string; amountMinor: number }
  | { kind: 'failed'; code: string; message: string };

export type RefundQueryOutcome = { kind: 'answered'; refund: RefundStatus } | { kind: 'unavailable'; code: string; message: string };

/** A verified notification about a refund (WeChat Pay REFUND.*, Stripe refund.* / charge.refund.*). */
export interface RefundNotification {
  gateway: GatewayId;
  /** The dedupe key of the notification within its gateway. */
  eventId: string;
  merchantId: string;
  outTradeNo: string;
  refundId: string;
  gatewayRefundId: string;
  status: 'succeeded' | 'failed' | 'other';
  amountMinor: number;
  currency: string;
}

/**
 * Authorise, then capture: the charge only holds the money (Stripe's capture_method manual), and the
 * merchant later takes it — all or part, once — or releases the hold.
 */
export interface CaptureRequest {
  outTradeNo: string;
  /** The authorised trade (Stripe: the PaymentIntent). */
  gatewayTradeNo: string;
  /** What to take: at most what was authorised; the rest is released. */
  amountMinor: number;
  currency: string;
  /** Ours, the same for every try of this capture: the gateway's idempotency key is made from it. */
  captureId: string;
}

/**
 * `captured`: the money taken, by this capture or one made before it (a retry, another operator) —
 * `amountMinor` is what the gateway says was taken, which may differ from what this request asked;
 * `released`: the hold is gone (canceled or lapsed), nothing can be taken; `refused`: this request
 * cannot be done as asked (more than authorised) and changed nothing.
 */
export type CaptureOutcome =
  | { kind: 'captured'; amountMinor: number }
  | { kind: 'released'; code: string; message: string }
  | { kind: 'refused'; code: string; message: string }
  | { kind: 'retryable'; code: string; message: string }
  | { kind: 'indeterminate'; code: string; message: string };

export interface ReleaseRequest {
  outTradeNo: string;
  gatewayTradeNo: string;
}

/** `captured`: too late, the money was taken (by a capture that got there first). */
export type ReleaseOutcome =
  | { kind: 'released' }
  | { kind: 'captured'; amountMinor: number }
  | { kind: 'retryable'; code: string; message: string }
  | { kind: 'indeterminate'; code: string; message: string };

/**
 * One line of a gateway's daily statement (对账单), whatever its format: a payment or a refund that
 * the gateway settled that day, with its fee.
 */
export interface StatementLine {
  kind: 'payment' | 'refund';
  outTradeNo: string;
  gatewayTradeNo: string;
  /** A refund: our refund id where the statement carries it (Alipay 退款请求号, WeChat 商户退款单号, Stripe metadata). */
  refundId?: string;
  gatewayRefundId?: string;
  /** Positive for payments and refunds alike: what moved. */
  amountMinor: number;
  /** The fee this line moved: what the gateway took (a payment), negative for what it gave back (a refund's share). */
  feeMinor: number;
  currency: string;
}

/**
 * A day's statement: its lines; `none` when the gateway has no statement for that day (nothing
 * happened, or it is not ready yet — the gateway says which); `unavailable` when it could not be fetched.
 */
export type StatementOutcome =
  | { kind: 'lines'; lines: StatementLine[] }
  | { kind: 'none'; code: string; message: string }
  | { kind: 'unavailable'; code: string; message: string };

/** What a gateway that offers authorise-then-capture does with an authorisation. */
export interface AuthorizationOperations {
  capture(request: CaptureRequest): Promise<CaptureOutcome>;
  release(request: ReleaseRequest): Promise<ReleaseOutcome>;
}

export interface PaymentGateway {
  readonly id: GatewayId;
  /** The merchant identity notifications must carry (Alipay app_id, WeChat mchid, …). */
  readonly merchantId: string;
  /**
   * True when every attempt of an order at this gateway is the same trade, deduplicated by
   * out_trade_no (Alipay, WeChat Pay, 2C2P): a new attempt on the same gateway reopens it instead of
   * opening another, so it is not closed first. False for Stripe: each attempt is its own PaymentIntent.
   */
  readonly oneTradePerOrder: boolean;
  /** The buyer steps this gateway offers, the default first; empty when only test buyers can pay. */
  readonly buyerSteps: readonly BuyerStep[];
  /** True only against the sandbox: the configuration names test buyers (`*_TEST_BUYERS`). */
  readonly hasTestBuyers: boolean;
  charge(request: ChargeRequest): Promise<ChargeOutcome>;
  query(outTradeNo: string): Promise<QueryOutcome>;
  close(request: CloseRequest): Promise<CloseOutcome>;
  refund(request: RefundRequest): Promise<RefundOutcome>;
  queryRefund(request: RefundQuery): Promise<RefundQueryOutcome>;
  /** Verifies the signature of a raw notification request before anything else reads it. */
  verifyNotification(request: { headers: Headers; rawBody: string }): Promise<NotificationVerdict>;
  /** The reply that tells the gateway to stop (ack) or to deliver again later (nack). */
  notificationReply(ack: boolean): NotificationReply;
  /** Present when the gateway can authorise now and capture later (Stripe). */
  readonly authorizations?: AuthorizationOperations;
  /**
   * The statement of one day (`YYYY-MM-DD` in the gateway's own time zone), for 对账. `currencies`:
   * the shop's, for a gateway that issues one statement per currency (2C2P).
   */
  statement?(date: string, options?: { currencies?: readonly string[] }): Promise<StatementOutcome>;
}

/** What a gateway is, besides what it does: its identity and the buyer steps it offers. */
export type GatewayTraits = Pick<PaymentGateway, 'id' | 'merchantId' | 'oneTradePerOrder' | 'buyerSteps' | 'hasTestBuyers'>;

/** A gateway's operations as functions of its own context (its configuration, client and keys). */
export interface GatewayOperations<C> {
  charge(context: C, request: ChargeRequest): Promise<ChargeOutcome>;
  query(context: C, outTradeNo: string): Promise<QueryOutcome>;
  close(context: C, request: CloseRequest): Promise<CloseOutcome>;
  refund(context: C, request: RefundRequest): Promise<RefundOutcome>;
  queryRefund(context: C, request: RefundQuery): Promise<RefundQueryOutcome>;
  verifyNotification(context: C, request: { headers: Headers; rawBody: string }): Promise<NotificationVerdict>;
  notificationReply(ack: boolean): NotificationReply;
}

/** An adapter as the checkout sees it: its traits, and its operations bound to its context. */
export function gatewayOf<C>(traits: GatewayTraits, context: C, operations: GatewayOperations<C>): PaymentGateway {
  return {
    ...traits,
    charge: (request) => operations.charge(context, request),
    query: (outTradeNo) => operations.query(context, outTradeNo),
    close: (request) => operations.close(context, request),
    refund: (request) => operations.refund(context, request),
    queryRefund: (request) => operations.queryRefund(context, request),
    verifyNotification: (request) => operations.verifyNotification(context, request),
    notificationReply: operations.notificationReply,
  };
}
