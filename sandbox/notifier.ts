/**
 * The sandbox's notification delivery loop.
 *
 * The schedule lives in `psp_sandbox.notifications`; this loop only polls it. Nothing is kept in an
 * in-memory timer that a restart would lose: a sandbox started after a crash (or a second sandbox
 * process) picks up whatever is due. Each delivery and its answer go into
 * `psp_sandbox.notification_attempts`, which is what `GET /ledger` reports.
 */
import {
  claimDueNotifications,
  completeScheduledDelivery,
  insertAttempt,
  type ClaimedNotification,
  type DeliveryResult,
  type Sql,
} from './store';

export interface NotificationRequest {
  contentType: string;
  body: string;
  /** Extra headers, e.g. WeChat Pay's Wechatpay-Signature or Stripe-Signature. */
  headers?: Record<string, string>;
}

/** What the loop needs to know about one gateway's notifications. */
export interface GatewayNotifier {
  /** The wait after the n-th failed delivery (index n-1); deliveries = intervals + 1. */
  retryIntervalsMs: readonly number[];
  /** Builds (and signs) one delivery at `now`: fields such as notify_time change per delivery. */
  buildRequest(fields: Record<string, string>, now: Date): NotificationRequest;
  /** Whether the receiver's answer acknowledges the delivery, by this gateway's own rule. */
  isAcknowledged(status: number, body: string): boolean;
}

/** Longest stored reply body; enough to see what a receiver said. */
const MAX_STORED_BODY = 2000;

/**
 * POSTs one delivery. Acknowledged only when the gateway's own rule says so (Alipay: a 2xx whose body
 * is exactly `success`); a timeout or a network error is a failed delivery like any other.
 */
export async function postNotification(
  url: string,
  request: NotificationRequest,
  timeoutMs: number,
  startedAt: Date,
  isAcknowledged: (status: number, body: string) => boolean,
): Promise<DeliveryResult> {
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { ...request.headers, 'content-type': request.contentType },
      body: request.body,
      redirect: 'manual',
      // Covers the whole exchange, body included: a receiver that stalls mid-reply is not an ack.
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await response.text();
    return {
      httpStatus: response.status,
      responseBody: text.slice(0, MAX_STORED_BODY),
      error: null,
      acknowledged: isAcknowledged(response.status, text),
      startedAt,
    };
  } catch (err) {
    return { httpStatus: null, responseBody: null, error: describeError(err), acknowledged: false, startedAt };
  }
}

function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  if (err.name === 'TimeoutError') return 'timeout';
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : '';
  return `${err.message}${cause}`;
}

export interface NotifierOptions {
  sql: Sql;
  gateways: Readonly<Record<string, GatewayNotifier>>;
  /** Multiplies every retry interval (0.001 turns 4 minutes into 240 ms). */
  timeScale: number;
  pollIntervalMs?: number;
  deliveryTimeoutMs?: number;
  maxInFlight?: number;
  /** Extra copies to send of the next delivery of a gateway's notification (a drill's fault). */
  extraCopies?: (gateway: string, outTradeNo: string, firstDelivery: boolean) => number;
  /** Whether the next delivery of a gateway's notification is lost on the way (a drill's fault). */
  loseDelivery?: (gateway: string, outTradeNo: string) => boolean;
}

export interface Notifier {
  /** Polls now instead of at the next tick (after a charge commits). */
  wake(): void;
  /** Stops polling and waits for the deliveries in flight to finish and be recorded. */
  stop(): Promise<void>;
}

export function startNotifier(options: NotifierOptions): Notifier {
  const { sql, gateways, timeScale } = options;
  const pollIntervalMs = options.pollIntervalMs ?? 150;
  const deliveryTimeoutMs = options.deliveryTimeoutMs ?? 5000;
  const maxInFlight = options.maxInFlight ?? 50;
  // The lease outlives a delivery (its timeout) with margin; it only matters if a process dies
  // mid-delivery, when the row becomes claimable again once it runs out.
  const leaseSeconds = Math.ceil(deliveryTimeoutMs / 1000) + 10;

  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  let polling = false;
  let pollAgain = false;
  let timer: NodeJS.Timeout | undefined;
  let lastErrorLoggedAt = 0;

  async function deliver(notification: ClaimedNotification): Promise<void> {
    const gateway = gateways[notification.gateway];
    if (!gateway) return; // Another sandbox build's gateway: leave it for the lease to expire.
    const startedAt = new Date();
    const request = gateway.buildRequest(notification.fields, startedAt);
    const copies = options.extraCopies?.(notification.gateway, notification.outTradeNo, notification.deliveries === 0) ?? 0;
    const duplicates = Array.from({ length: copies }, async () => {
      // A random delay each: the copies and the original arrive in no particular order.
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 250));
      const sentAt = new Date();
      const copy = await postNotification(notification.notifyUrl, request, deliveryTimeoutMs, sentAt, (status, body) =>
        gateway.isAcknowledged(status, body),
      );
      await insertAttempt(sql, notification, 'tool', copy).catch((err: unknown) => logError('recording a copy failed', err));
    });
    if (copies > 0) await new Promise((resolve) => setTimeout(resolve, Math.random() * 250));
    const lost = options.loseDelivery?.(notification.gateway, notification.outTradeNo) ?? false;
    const result: DeliveryResult = lost
      ? { httpStatus: null, responseBody: null, error: 'lost (sandbox fault)', acknowledged: false, startedAt }
      : await postNotification(notification.notifyUrl, request, deliveryTimeoutMs, startedAt, (status, body) =>
          gateway.isAcknowledged(status, body),
        );
    const deliveryNumber = notification.deliveries + 1;
    const interval = gateway.retryIntervalsMs[deliveryNumber - 1];
    const nextDelayMs = interval === undefined ? null : Math.round(interval * timeScale);
    try {
      await completeScheduledDelivery(sql, notification, result, nextDelayMs);
    } catch (err) {
      // Unrecorded: the lease expires and the delivery is repeated (at-least-once).
      logError('recording a delivery failed', err);
    }
    await Promise.all(duplicates);
  }

  function logError(what: string, err: unknown): void {
    const now = Date.now();
    if (now - lastErrorLoggedAt < 10_000) return; // e.g. the database is down: one line per 10 s
    lastErrorLoggedAt = now;
    console.error(`[psp-sandbox] notifier: ${what}:`, err instanceof Error ? err.message : err);
  }

  async function poll(): Promise<void> {
    if (stopped) return;
    if (polling) {
      pollAgain = true;
      return;
    }
    polling = true;
    clearTimeout(timer);
    try {
      const capacity = maxInFlight - inFlight.size;
      if (capacity > 0) {
        const claimed = await claimDueNotifications(sql, capacity, leaseSeconds);
        for (const notification of claimed) {
          const delivery: Promise<void> = deliver(notification).finally(() => inFlight.delete(delivery));
          inFlight.add(delivery);
        }
      }
    } catch (err) {
      if (!stopped) logError('poll failed', err);
    } finally {
      polling = false;
      if (!stopped) {
        const delay = pollAgain ? 0 : pollIntervalMs;
        pollAgain = false;
        timer = setTimeout(() => void poll(), delay);
      }
    }
  }

  timer = setTimeout(() => void poll(), 0);

  return {
    wake() {
      void poll();
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      // Wait for a claim in progress, then for its deliveries to be recorded, so a graceful restart
      // neither loses nor repeats a delivery.
      while (polling) await new Promise((resolve) => setTimeout(resolve, 10));
      await Promise.allSettled([...inFlight]);
    },
  };
}
