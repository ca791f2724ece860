/**
 * The seam through which failures are injected into the checkout: named points of the pay flow and
 * the refund worker where the checkout calls `faults.hit(point, site)` when, and only when, a
 * deployment wires an implementation in (`CheckoutServices.faults`). A real deployment wires none,
 * and no fault code runs. Demo mode and the failure drills wire server/demo/faults.ts, which arms
 * throws, delays, crashes and PSP-sandbox faults at these points over /api/faults.
 *
 *   before_claim        the request arrived, nothing is claimed yet
 *   after_claim         the key is claimed, nothing else has happened (also a gateway's notification:
 *                       procedure `webhook.<gateway>`, inside its transaction)
 *   before_gateway_call the attempt is started, the gateway is about to be called
 *   after_gateway_call  the gateway answered (money may have moved), nothing is committed
 *   after_commit        everything is committed, the response has not been sent
 *   after_refund_call   the refund worker's gateway call answered (money may have gone back),
 *                       nothing is committed (procedure `refunds.process`)
 *   after_capture_call  the authorization worker's capture or release answered (money may have been
 *                       taken), nothing is committed (procedure `authorizations.process`)
 */
export const FAULT_POINTS = [
  'before_claim',
  'after_claim',
  'before_gateway_call',
  'after_gateway_call',
  'after_commit',
  'after_refund_call',
  'after_capture_call',
] as const;
export type FaultPoint = (typeof FAULT_POINTS)[number];

/** Where a fault point is hit: the request, and what is known of it there. */
export interface FaultSite {
  procedure: string;
  gateway?: string;
  customerId?: string;
  /** The order the request is about, when it names one: where the fault is journaled. */
  orderId?: string;
  outTradeNo?: string;
}

/** What the checkout calls at each fault point; it may throw, wait, or end the process. */
export interface FaultPoints {
  hit(point: FaultPoint, site: FaultSite): Promise<void>;
}
