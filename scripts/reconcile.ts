/**
 * `npm run reconcile -- --date YYYY-MM-DD [--gateway alipay|wechatpay|stripe|2c2p]`: 对账 for one day —
 * each configured gateway's statement downloaded and matched against our payments and refunds
 * (server/reconciliation). Prints each gateway's result and every mismatch; a day with none says so.
 * The same runs the scheduled job makes, recorded the same way, so the console shows them too.
 *
 * Fees are checked against each gateway's contract where one is set (ALIPAY_FEE, …; the sandbox's
 * credentials carry its own). Configured like the app (the gateways' variables; DATABASE_URL or the embedded PostgreSQL, database
 * `payonce` or --database NAME). With no gateway variables set, the PSP sandbox's credentials are used
 * (PSP_SANDBOX_URL, default http://127.0.0.1:4010 — `npm run dev`'s), as the app gets them there.
 * Exit 0 clean, 1 mismatches (or a statement that could not be fetched), 2 could not run.
 */
import { userInfo } from 'node:os';
import { parseArgs } from 'node:util';
import { openDatabase } from '@/db/client';
import { runMigrations } from '@/db/migrate';
import { createCheckoutIdempotencyStore, type CheckoutServices } from '@/server/checkout/services';
import { DEFAULT_IDEMPOTENCY_OPTIONS } from '@payonce/idempotency';
import { feeContractsFromEnv, gatewaysFromEnv } from '@/server/payments';
import { sandboxCredentialsToEnv } from '@/server/payments/sandbox-credentials';
import { GATEWAY_IDS, type GatewayId } from '@/server/payments/gateway-ids';
import { reconcileDay, type DayReconciliation } from '@/server/reconciliation/reconcile-day';
import { resolveDatabase } from './stack';

const { values } = parseArgs({ options: { date: { type: 'string' }, gateway: { type: 'string' }, database: { type: 'string' } } });

const money = (minor: number) => (minor / 100).toFixed(2);

function print(result: DayReconciliation): void {
  const head = `${result.gateway.padEnd(9)} ${result.date}  ${result.status.toUpperCase()}`;
  if (result.status === 'failed' || result.status === 'no_statement') return console.log(`${head}  (${result.error})`);
  const fees = `fees ${money(result.feesMinor)} ${result.feesChecked ? 'checked against the contract' : '(not checked: no fee contract set)'}`;
  console.log(`${head}  ${result.lines} lines, ${result.matched} matched, ${fees}`);
  for (const m of result.mismatches) {
    const ours = m.ours ? `ours ${m.ours.amountMinor} ${m.ours.currency}` : 'not in our books';
    const theirs = m.theirs ? `gateway ${m.theirs.amountMinor} ${m.theirs.currency}` : 'not on the statement';
    const fee = m.kind === 'fee_differs' ? `; fee ${m.theirs?.feeMinor ?? '?'}, contract ${m.ours?.feeMinor ?? '?'}` : '';
    console.log(`  ${m.kind.padEnd(16)} ${m.reference}  ${m.outTradeNo}  ${ours}; ${theirs}${fee}`);
  }
}

/** The gateways' variables: the environment's, or — none set — the local sandbox's, as `npm run dev` fills them. */
async function gatewayEnv(): Promise<Record<string, string | undefined>> {
  const configured = Object.keys(process.env).some((name) => /^(ALIPAY|WECHATPAY|STRIPE|TWOC2P)_/.test(name));
  if (configured) return process.env;
  const sandboxUrl = process.env.PSP_SANDBOX_URL ?? 'http://127.0.0.1:4010';
  const answer = await fetch(`${sandboxUrl}/sandbox/credentials`, { signal: AbortSignal.timeout(5000) }).catch(() => undefined);
  if (!answer?.ok) return process.env;
  console.log(`(no gateway variables set: using the PSP sandbox's at ${sandboxUrl})`);
  return { ...process.env, ...sandboxCredentialsToEnv((await answer.json()) as Parameters<typeof sandboxCredentialsToEnv>[0]) };
}

let exitCode = 2;
const date = values.date ?? '';
const gateways = (values.gateway ? [values.gateway] : GATEWAY_IDS) as GatewayId[];
const database = await resolveDatabase(values.database ?? 'payonce', () => {}, values.database !== undefined);
const handle = openDatabase(database.url, { max: 2 });
try {
  const real =
    /^\d{4}-\d{2}-\d{2}$/.test(date) &&
    !Number.isNaN(Date.parse(`${date}T00:00:00Z`)) &&
    new Date(`${date}T00:00:00Z`).toISOString().startsWith(date);
  if (!real) throw new Error(`--date YYYY-MM-DD (a real day) is required${date ? `, got ${date}` : ''}`);
  const unknown = gateways.filter((g) => !GATEWAY_IDS.includes(g));
  if (unknown.length) throw new Error(`--gateway: one of ${GATEWAY_IDS.join(', ')}`);
  await runMigrations(database.url);
  const env = await gatewayEnv();
  const services: CheckoutServices = {
    db: handle.db,
    idempotencyStore: createCheckoutIdempotencyStore(handle.sql),
    idempotencyOptions: DEFAULT_IDEMPOTENCY_OPTIONS,
    gateways: gatewaysFromEnv(env),
    feeContracts: feeContractsFromEnv(env),
    publicBaseUrl: process.env.PUBLIC_BASE_URL ?? 'http://127.0.0.1:3000',
  };
  const results: DayReconciliation[] = [];
  for (const gateway of gateways.filter((g) => services.gateways[g])) {
    const result = await reconcileDay(services, gateway, date, `cli:${userInfo().username}`);
    print(result);
    results.push(result);
  }
  if (results.length === 0) throw new Error('no gateway is configured (set its variables as for the app)');
  const clean = results.every((r) => r.status === 'clean' || r.status === 'no_statement');
  console.log(clean ? `clean: every line of ${date} matched both ways` : `${date}: mismatches to resolve (shown in the console)`);
  exitCode = clean ? 0 : 1;
} catch (error) {
  console.error(`reconcile could not run: ${error instanceof Error ? error.message : String(error)}`);
} finally {
  await handle.sql.end({ timeout: 5 });
  await database.embedded?.stop();
}
process.exit(exitCode);
