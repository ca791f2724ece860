/**
 * The fault schedule: every decision of a soak, drawn up front from the seed, one independent PRNG
 * per order (`{seed}:order:{i}`). The same seed gives the same plans — and the plans of a shorter run
 * are a prefix of a longer one's — whatever the timing of the run itself. `scheduleDigest` is printed
 * with the summary so two runs can be compared.
 */
import { createHash } from 'node:crypto';
import type { CartLine } from '@/client/checkout-flow';
import type { TestBuyer } from '@/server/payments/gateway';
import { GATEWAY_IDS, type GatewayId } from '@/server/payments/gateway-ids';
import { FAULT_POINTS, type FaultPoint } from '@/server/demo/faults';
import { Prng } from './prng';

export const GATEWAYS: readonly GatewayId[] = GATEWAY_IDS;
export const SKUS = ['TEA-LONGJING', 'MOONCAKE-BOX', 'MUG-CELADON'] as const;

export type AppFaultAction = { kind: 'throw' } | { kind: 'delay'; ms: number } | { kind: 'crash' };

export type PlannedFault =
  /** Armed on the instance the order's first request of `procedure` goes to, `times: 1`. */
  | { kind: 'app'; procedure: 'checkout.pay' | 'checkout.createOrder'; point: FaultPoint; action: AppFaultAction }
  | { kind: 'sandbox'; action: 'fail_before_charge' | 'slow' | 'timeout_after_charge' | 'drop_after_charge'; delayMs?: number }
  | { kind: 'sandbox'; action: 'duplicate_notifications'; copies: number }
  /** On the first gateway's close (after a decline the customer switches, or the order expires). */
  | { kind: 'sandbox_close'; action: 'fail_before_charge' | 'timeout_after_charge' | 'drop_after_charge'; delayMs?: number }
  /**
   * After the order is paid, it is charged again on `gateway` outside the checkout (a stale client, a
   * mistaken retry): the app must refund it exactly once, through `refundFault` if one is set.
   */
  | { kind: 'stray_charge'; gateway: GatewayId; afterMs: number; refundFault?: StrayRefundFault }
  /** pg_terminate_backend of every app connection, `atMs` after the order started. */
  | { kind: 'pg_terminate'; atMs: number }
  /** The gateway is slowed by `slowMs`; the customer aborts `afterMs` into the payment and never returns. */
  | { kind: 'give_up'; afterMs: number; slowMs: number }
  /** After the order settles, the sandbox's notification tool re-sends `copies` notifications. */
  | { kind: 'late_notification'; afterMs: number; copies: number };

/** What goes wrong with the refund of a stray charge: the gateway fails it, loses its answer, or the app dies after it. */
export type StrayRefundFault = 'fail_before_charge' | 'drop_after_charge' | 'crash_after_refund_call';

export interface OrderPlan {
  index: number;
  gateway: GatewayId;
  cart: CartLine[];
  /** The app instance the first request goes to; later requests alternate (round robin). */
  home: number;
  /** The first buyer; after a decline the customer retries with `ok` if `retryAfterDecline`. */
  buyer: TestBuyer;
  retryAfterDecline: boolean;
  /** The gateway of that retry: the same one, or a switch (the first trade must be closed first). */
  retryGateway: GatewayId;
  /**
   * When the customer is done, the buyer completes the trade of every gateway the order used, late
   * (a QR code scanned from a screenshot, a card page submitted from another device): refused if the
   * trade was closed, settling the order if it was still open and unpaid, refunded otherwise.
   */
  lateCompletion?: { afterMs: number };
  fault?: PlannedFault;
}

export interface ScheduleOptions {
  orders: number;
  faultRate: number;
  seed: string;
  instances: number;
  /** Share of orders whose first buyer is declined. */
  declineRate?: number;
  /** Share of orders whose buyer completes their trades late. */
  lateCompletionRate?: number;
}

const ms = (rng: Prng, min: number, max: number) => rng.int(min, max);

/**
 * What a fault is, by weight. Crashes are a small share (each costs a restart of a few seconds).
 * Delays stay well inside the lease (5 s) minus the gateway timeout (2 s); sandbox delays that are
 * meant to be survived stay under the gateway timeout, those meant to time out exceed it.
 */
function drawFault(rng: Prng): PlannedFault {
  type Maker = () => PlannedFault;
  const pay = (point: FaultPoint, action: AppFaultAction): PlannedFault => ({ kind: 'app', procedure: 'checkout.pay', point, action });
  const entries: [Maker, number][] = [];
  for (const point of FAULT_POINTS.filter((p) => p !== 'after_refund_call')) {
    entries.push([() => pay(point, { kind: 'throw' }), 4]);
    entries.push([() => pay(point, { kind: 'delay', ms: ms(rng, 200, 1500) }), 2]);
    entries.push([() => pay(point, { kind: 'crash' }), 0.75]);
  }
  for (const point of ['after_claim', 'after_commit'] as const) {
    entries.push([() => ({ kind: 'app', procedure: 'checkout.createOrder', point, action: { kind: 'throw' } }), 2]);
  }
  entries.push([() => ({ kind: 'sandbox', action: 'fail_before_charge' }), 8]);
  entries.push([() => ({ kind: 'sandbox', action: 'slow', delayMs: ms(rng, 300, 1500) }), 6]);
  entries.push([() => ({ kind: 'sandbox', action: 'timeout_after_charge', delayMs: ms(rng, 2500, 4000) }), 8]);
  entries.push([() => ({ kind: 'sandbox', action: 'drop_after_charge' }), 8]);
  entries.push([() => ({ kind: 'sandbox', action: 'duplicate_notifications', copies: rng.int(2, 10) }), 8]);
  // An order takes ~100 ms when nothing fails: the moment falls inside it most of the time.
  entries.push([() => ({ kind: 'pg_terminate', atMs: ms(rng, 0, 120) }), 8]);
  entries.push([() => ({ kind: 'give_up', afterMs: ms(rng, 50, 1400), slowMs: ms(rng, 800, 1600) }), 8]);
  entries.push([() => ({ kind: 'late_notification', afterMs: ms(rng, 100, 3000), copies: rng.int(1, 3) }), 8]);
  entries.push([() => ({ kind: 'sandbox_close', action: 'fail_before_charge' }), 3]);
  entries.push([() => ({ kind: 'sandbox_close', action: 'timeout_after_charge', delayMs: ms(rng, 2500, 4000) }), 3]);
  entries.push([() => ({ kind: 'sandbox_close', action: 'drop_after_charge' }), 3]);
  for (const refundFault of [undefined, 'fail_before_charge', 'drop_after_charge', 'crash_after_refund_call'] as const) {
    entries.push([
      () => ({
        kind: 'stray_charge',
        gateway: rng.pick(GATEWAYS),
        afterMs: ms(rng, 0, 2000),
        ...(refundFault ? { refundFault } : {}),
      }),
      3,
    ]);
  }
  return rng.weighted(entries)();
}

export function planOrder(seed: string, index: number, options: Omit<ScheduleOptions, 'orders' | 'seed'>): OrderPlan {
  const rng = new Prng(`${seed}:order:${index}`);
  const gateway = rng.pick(GATEWAYS);
  const lineCount = rng.weighted([
    [1, 3],
    [2, 1],
  ] as const);
  const skus = [...SKUS];
  const cart: CartLine[] = [];
  for (let i = 0; i < lineCount; i++) {
    const sku = skus.splice(rng.int(0, skus.length - 1), 1)[0]!;
    cart.push({ sku, quantity: rng.int(1, 3) });
  }
  const home = rng.int(0, Math.max(1, options.instances) - 1);
  const declined = rng.chance(options.declineRate ?? 0.1);
  const buyer: TestBuyer = declined ? rng.pick(['insufficient_funds', 'account_restricted'] as const) : 'ok';
  const retryAfterDecline = rng.chance(0.8);
  // From forks, so that adding these decisions left every earlier one as it was.
  const lifeRng = rng.fork('life');
  const retryGateway = lifeRng.chance(0.5) ? lifeRng.pick(GATEWAYS.filter((g) => g !== gateway)) : gateway;
  const plan: OrderPlan = { index, gateway, cart, home, buyer, retryAfterDecline, retryGateway };
  if (lifeRng.chance(options.lateCompletionRate ?? 0.15)) plan.lateCompletion = { afterMs: ms(lifeRng, 0, 2000) };
  // Drawn from a fork so that changing the fault rate leaves the other decisions as they were.
  const faultRng = rng.fork('fault');
  if (faultRng.chance(options.faultRate)) plan.fault = drawFault(faultRng);
  return plan;
}

export function buildSchedule(options: ScheduleOptions): OrderPlan[] {
  return Array.from({ length: options.orders }, (_, index) => planOrder(options.seed, index, options));
}

/** A short, stable name for a fault, for counting by kind. */
export function faultLabel(fault: PlannedFault): string {
  switch (fault.kind) {
    case 'app':
      return `app:${fault.procedure === 'checkout.pay' ? '' : 'createOrder:'}${fault.point}:${fault.action.kind}`;
    case 'sandbox':
      return `sandbox:${fault.action}`;
    case 'sandbox_close':
      return `sandbox:close:${fault.action}`;
    case 'stray_charge':
      return `stray_charge${fault.refundFault ? `:refund_${fault.refundFault}` : ''}`;
    default:
      return fault.kind;
  }
}

export function scheduleDigest(plans: readonly OrderPlan[]): string {
  const hash = createHash('sha256');
  for (const plan of plans) hash.update(JSON.stringify(plan)).update('\n');
  return hash.digest('hex').slice(0, 16);
}
