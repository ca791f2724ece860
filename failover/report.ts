/** The failover drill's printed report: per failover, then the run's orders, answers and checks. */
import type { ReplicationReport } from './run';

export function printReport(report: ReplicationReport): void {
  const out: string[] = [];
  const say = (line = '') => out.push(line);
  const kind = report.synchronous ? 'synchronous standby' : `asynchronous standby, ${report.lagMs} ms behind at each kill`;
  say('');
  say(`=== PayOnce failover drill — pg_auto_failover, ${kind} ===`);
  for (const p of report.points) {
    say(`${p.label}:`);
    say(
      `  ${p.oldPrimary} killed → ${p.newPrimary} taking writes after ${p.writableAfterMs} ms; first 201 after ${p.firstPaidAfterMs ?? '— (none)'} ms; ` +
        `${p.oldPrimary} back as standby after ${p.rejoinedAfterMs} ms`,
    );
    if (p.commitsInFlight !== undefined) say(`  COMMITs waiting for the standby when the primary died: ${p.commitsInFlight}`);
    say(`  completed keys before the kill: ${p.keysCompletedBefore}, lost: ${p.keysLost}`);
    say(`  shoppers were answered meanwhile: ${formatTally(p.answers)}`);
  }
  say(`orders: ${report.orders.started} (${formatTally(report.orders.outcomes)})`);
  say(`every answer the shoppers got: ${formatTally(report.answers)}`);
  say(
    `losses: ${report.losses.paidOrdersLost} orders told paid and no longer paid, ${report.losses.ordersLost} orders gone, ` +
      `${report.losses.completedKeysLost} completed keys gone`,
  );
  if (report.stats) {
    const s = report.stats;
    say(
      `ground truth: ledger charges ${s.ledgerCharges.succeeded} succeeded; orders charged twice ${s.ordersChargedTwice} ` +
        `(each refunded: ${s.refunds.ledgerSucceeded} refunds at the ledger); emails ${s.emailsSent}`,
    );
  }
  say(`invariants: ${report.violations.length === 0 ? 'all hold' : `${report.violations.length} VIOLATIONS`}`);
  const kinds = [...new Set(report.violations.map((v) => v.kind))];
  for (const k of kinds) {
    const list = report.violations.filter((v) => v.kind === k);
    say(`  ${k.padEnd(24)} ${list.length}`);
    for (const v of list.slice(0, 10)) say(`    ${v.subject}: ${v.detail}`);
  }
  if (report.error) say(`the drill stopped early: ${report.error}`);
  say(`log: ${report.logFile}`);
  console.log(out.join('\n'));
}

function formatTally(tally: Record<string, number>): string {
  const entries = Object.entries(tally);
  return entries.length === 0 ? '—' : entries.map(([k, v]) => `${k} × ${v}`).join(', ');
}
