/**
 * Demo mode (PAYONCE_DEMO=1, `npm run demo`): the local showcase. It turns on fault injection and
 * the page's fault switchboard, the /mail demo mailbox, and the 幕后 view's list of every customer's
 * orders. Never on in a real deployment.
 */
export function demoMode(env: Record<string, string | undefined> = process.env): boolean {
  return env.PAYONCE_DEMO === '1';
}
