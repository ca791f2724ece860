import { envFrom, type RawEnv } from '@/server/config/env';

/**
 * Demo mode (PAYONCE_DEMO=1, `npm run demo`): the surfaces that exist to show the checkout at work,
 * not to run it for real customers, are on —
 *
 *   /mail          the demo mailbox: every customer's confirmation and refund emails
 *   /api/faults    fault injection (faults.ts), for breaking the checkout on purpose
 *   /api/metrics   Prometheus metrics without a token (server/metrics/access.ts)
 *   the page's fault switchboard (/api/demo/drills) and the 幕后 view's list of every customer's orders
 *
 * Off, none of them answers: a deployment made from this template shows no customer another
 * customer's mail and lets no one arm a crash.
 */
export function demoMode(env?: RawEnv): boolean {
  return envFrom(env).PAYONCE_DEMO;
}
