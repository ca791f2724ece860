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

export type GatewayId = 'alipay' | 'wechatpay' | 'stripe' | '2c2p';

/** Sandbox test buyers. A real deployment ignores this; the buyer pays on the gateway's own page. */
export type TestBuyer = 'ok' | 'insufficient_funds' | 'account_restricted';

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
  buyer?: TestBuyer;
  /** Where the gateway sends its asynchronous notification for this charge. */
  notifyUrl: string;
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
 */
export type ChargeOutcome =
  | { kind: 'succeeded'; gatewayTradeNo: string; amountMinor: number; currency: string }
  | { kind: 'declined'; code: string; message: string }
  | { kind: 'retryable'; code: string; message: string }
  | { kind: 'indeterminate'; code: string; message: string };

/** What a query by out_trade_no tells about the gateway's trade. */
export type TradeStatus =
  | { kind: 'not_found' }
  | { kind: 'pending' }
  | { kind: 'succeeded'; gatewayTradeNo: string; amountMinor: number; currency: string }
  | { kind: 'closed' };

export type QueryOutcome =
  | { kind: 'answered'; trade: TradeStatus }
  | { kind: 'unavailable'; code: string; message: string };

/** A notification whose signature has been verified, in PayOnce's terms. */
export interface PaymentNotification {
  gateway: GatewayId;
  /** The dedupe key of the notification within its gateway (design.md §5). */
  eventId: string;
  merchantId: string;
  outTradeNo: string;
  /** Only `succeeded` notifications settle an order; others are acknowledged and ignored. */
  status: 'succeeded' | 'other';
  gatewayTradeNo: string;
  amountMinor: number;
  currency: string;
}

export type NotificationVerdict =
  | { kind: 'verified'; notification: PaymentNotification }
  | { kind: 'rejected'; reason: string };

/** An HTTP answer to a gateway's notification, exactly as that gateway expects it. */
export interface NotificationReply {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface PaymentGateway {
  readonly id: GatewayId;
  /** The merchant identity notifications must carry (Alipay app_id, WeChat mchid, …). */
  readonly merchantId: string;
  charge(request: ChargeRequest): Promise<ChargeOutcome>;
  query(outTradeNo: string): Promise<QueryOutcome>;
  /** Verifies the signature of a raw notification request before anything else reads it. */
  verifyNotification(request: { headers: Headers; rawBody: string }): Promise<NotificationVerdict>;
  /** The reply that tells the gateway to stop (ack) or to deliver again later (nack). */
  notificationReply(ack: boolean): NotificationReply;
}
