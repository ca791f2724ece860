/**
 * The sandbox's Stripe balance: balance transactions (https://docs.stripe.com/api/balance_transactions),
 * the statement a Stripe merchant reconciles against, read the way stripe-node reads them:
 *
 *   GET /v1/balance_transactions       newest first: limit, starting_after, ending_before,
 *                                      created (exact or gt/gte/lt/lte), type, source, currency;
 *                                      payout is accepted and ignored (the sandbox makes no payouts)
 *   GET /v1/balance_transactions/{id}  retrieve
 *   expand[]                           data.source (source on retrieve) and deeper, e.g.
 *                                      data.source.payment_intent
 *
 * Built from the ledger (sandbox/statements.ts): each captured charge is one `charge` transaction
 * (reporting_category charge, source ch_…), each succeeded refund one `refund` transaction (negative
 * amount, reporting_category refund, source re_…). A charge's transaction id is `txn_` plus the
 * charge id's own suffix, so the Charge object can name it without storing it; a refund's is the
 * one its Refund object was created with. The Charge and Refund objects carry `balance_transaction`
 * (withChargeBalanceTransactions below fills it on every Charge the API renders), and
 * `expand[]=…balance_transaction` on them gives this object.
 *
 * Fees (statements.ts FEE_RULES): 3.4 % of a charge, rounded half up, in one fee_details entry of type
 * stripe_fee; a refund has no fee (Stripe keeps the charge's fee). [unverified]: balances stay in the
 * charge's own currency (no conversion, exchange_rate null, balance_type payments); available_on is
 * 00:00 UTC two days after the transaction (the usual card payout delay; it varies by country) and
 * status is available from then on, pending before; description is the PaymentIntent's for a charge,
 * "REFUND FOR CHARGE (…)" for a refund.
 */
import type { Sql, Tx } from './store';
import { readLines, paymentLineFee, type PaymentLine, type StatementLines } from './statements';
import { chargeById } from './stripe-charges';
import { expandBody as expandObjects, readExpand, type ExpandRoot } from './stripe-expand';
import { readHash, readInteger, readString, readStringArray, rejectUnknown, StripeParamError, type FormHash } from './stripe-form';
import { readCursor, type Cursor } from './stripe-lists';
import { chargeObject, errorBody, type ChargeObject, type PaymentIntentObject } from './stripe-objects';

type Db = Sql | Tx;

export interface BalanceTransactionObject {
  id: string;
  object: 'balance_transaction';
  amount: number;
  available_on: number;
  balance_type: 'payments';
  created: number;
  currency: string;
  description: string | null;
  exchange_rate: null;
  fee: number;
  fee_details: { amount: number; application: null; currency: string; description: string; type: 'stripe_fee' }[];
  net: number;
  reporting_category: 'charge' | 'refund';
  source: string | ChargeObject | Record<string, unknown>;
  status: 'available' | 'pending';
  type: 'charge' | 'refund';
}

interface Answer {
  status: number;
  body: unknown;
}

/** The balance transaction a Charge's money made: `txn_` and the charge's own suffix. */
export function chargeBalanceTransactionId(chargeId: string): string {
  return `txn_${chargeId.slice('ch_'.length)}`;
}

/** Two days after the transaction's UTC day began. */
function availableOn(created: number): number {
  return Math.floor(created / 86_400) * 86_400 + 2 * 86_400;
}

interface Entry {
  /** Sort key: the instant, in milliseconds. */
  atMs: number;
  object: BalanceTransactionObject;
  /** How to render its source: a stored Charge or Refund, or an injected payment's. */
  sourceKind: 'charge' | 'refund';
  phantom?: PaymentLine;
}

/** Every balance transaction of an account in a span (null: all), oldest first. */
async function balanceEntries(db: Db, accountId: string, from: Date | null, to: Date | null): Promise<Entry[]> {
  const lines: StatementLines = await readLines(db, { gateway: 'stripe', merchantIds: [accountId], from, to, asOf: new Date() });
  const intents = lines.payments.filter((line) => !line.phantom).map((line) => line.gatewayTradeNo);
  const charges = await db<{ id: string; payment_intent: string; description: string | null }[]>`
    SELECT c.id, c.payment_intent, i.object ->> 'description' AS description
      FROM psp_sandbox.stripe_charges c JOIN psp_sandbox.stripe_payment_intents i ON i.id = c.payment_intent
     WHERE c.account_id = ${accountId} AND c.payment_intent = ANY(${intents}::text[]) AND c.status = 'succeeded' AND c.captured`;
  const refunds = await db<{ id: string; balance_transaction: string | null; charge: string }[]>`
    SELECT id, object ->> 'balance_transaction' AS balance_transaction, charge FROM psp_sandbox.stripe_refunds
     WHERE account_id = ${accountId} AND id = ANY(${lines.refunds.map((line) => line.gatewayRefundId)}::text[])`;
  const now = Math.floor(Date.now() / 1000);
  const entry = (
    line: { at: Date; currency: string },
    fields: Omit<
      BalanceTransactionObject,
      'object' | 'created' | 'available_on' | 'status' | 'currency' | 'balance_type' | 'exchange_rate'
    >,
  ) => {
    const created = Math.floor(line.at.getTime() / 1000);
    const object: BalanceTransactionObject = {
      id: fields.id,
      object: 'balance_transaction',
      amount: fields.amount,
      available_on: availableOn(created),
      balance_type: 'payments',
      created,
      currency: line.currency.toLowerCase(),
      description: fields.description,
      exchange_rate: null,
      fee: fields.fee,
      fee_details: fields.fee_details,
      net: fields.net,
      reporting_category: fields.reporting_category,
      source: fields.source,
      status: availableOn(created) <= now ? 'available' : 'pending',
      type: fields.type,
    };
    return object;
  };
  const out: Entry[] = [];
  for (const payment of lines.payments) {
    const charge = payment.phantom ? undefined : charges.find((c) => c.payment_intent === payment.gatewayTradeNo);
    const chargeId = payment.phantom ? payment.gatewayTradeNo : charge?.id;
    if (!chargeId) continue;
    const amount = Number(payment.amountMinor);
    const fee = Number(paymentLineFee('stripe', payment));
    const currency = payment.currency.toLowerCase();
    out.push({
      atMs: payment.at.getTime(),
      sourceKind: 'charge',
      ...(payment.phantom ? { phantom: payment } : {}),
      object: entry(payment, {
        id: chargeBalanceTransactionId(chargeId),
        amount,
        description: charge?.description ?? null,
        fee,
        fee_details:
          fee === 0 ? [] : [{ amount: fee, application: null, currency, description: 'Stripe processing fees', type: 'stripe_fee' }],
        net: amount - fee,
        reporting_category: 'charge',
        source: chargeId,
        type: 'charge',
      }),
    });
  }
  for (const refund of lines.refunds) {
    const stored = refunds.find((r) => r.id === refund.gatewayRefundId);
    if (!stored) continue;
    const charge = charges.find((c) => c.id === stored.charge);
    const amount = -Number(refund.amountMinor);
    out.push({
      atMs: refund.at.getTime(),
      sourceKind: 'refund',
      object: entry(refund, {
        id: stored.balance_transaction ?? `txn_${refund.gatewayRefundId.slice('re_'.length)}`,
        amount,
        description: charge?.description ? `REFUND FOR CHARGE (${charge.description})` : null,
        fee: 0,
        fee_details: [],
        net: amount,
        reporting_category: 'refund',
        source: refund.gatewayRefundId,
        type: 'refund',
      }),
    });
  }
  return out.sort((a, b) => a.atMs - b.atMs || a.object.id.localeCompare(b.object.id));
}

// ---------------------------------------------------------------------------------------------
// Parameters

const MAX_LIMIT = 100;

/** The types stripe-node 23 lists for BalanceTransaction.type (a filter on any of them is valid). */
const TYPES = new Set(
  (
    'adjustment advance advance_funding anticipation_repayment application_fee application_fee_refund charge ' +
    'climate_order_purchase climate_order_refund connect_collection_transfer contribution fee_credit_funding ' +
    'inbound_transfer inbound_transfer_reversal issuing_authorization_hold issuing_authorization_release ' +
    'issuing_dispute issuing_dispute_provisional_credit issuing_dispute_provisional_credit_reversal ' +
    'issuing_transaction obligation_outbound obligation_reversal_inbound payment payment_failure_refund ' +
    'payment_network_reserve_hold payment_network_reserve_release payment_refund payment_reversal ' +
    'payment_unreconciled payout payout_cancel payout_failure payout_minimum_balance_hold ' +
    'payout_minimum_balance_release refund refund_failure reserve_hold reserve_release reserve_transaction ' +
    'reserved_funds stripe_balance_payment_debit stripe_balance_payment_debit_reversal stripe_fee stripe_fx_fee ' +
    'tax_fee tax_fund topup topup_reversal transfer transfer_cancel transfer_failure transfer_refund'
  ).split(' '),
);

interface CreatedFilter {
  gt: number | null;
  gte: number | null;
  lt: number | null;
  lte: number | null;
}

function readCreated(params: FormHash): CreatedFilter {
  const created = params.created;
  const out: CreatedFilter = { gt: null, gte: null, lt: null, lte: null };
  if (created === undefined) return out;
  if (typeof created === 'string') {
    const exact = readInteger(created, 'created') ?? null;
    return { gt: null, gte: exact, lt: null, lte: exact };
  }
  const hash = readHash(created, 'created') ?? {};
  rejectUnknown(hash, ['gt', 'gte', 'lt', 'lte'], 'created');
  for (const bound of ['gt', 'gte', 'lt', 'lte'] as const) out[bound] = readInteger(hash[bound], `created[${bound}]`) ?? null;
  return out;
}

/** [unverified] wording, as in stripe-expand.ts: Stripe's refusal of a path that is not expandable. */
function notExpandable(path: string): StripeParamError {
  return new StripeParamError(`This property cannot be expanded (${path}).`, 'expand');
}

/** expand[] of a balance transaction answer: `source` (under `data.` in a list) and, below it, what a Charge or a Refund can expand. */
function readSourceExpand(params: FormHash, list: boolean): string[][] {
  const paths = readStringArray(params.expand, 'expand') ?? [];
  return paths.map((path) => {
    const segments = path.split('.');
    const rest = list ? (segments[0] === 'data' ? segments.slice(1) : null) : segments;
    if (!rest || rest[0] !== 'source') throw notExpandable(path);
    const below = rest.slice(1);
    if (below.length > 0) {
      const fits = (['charge', 'refund'] as const).some((type) => {
        try {
          readExpand({ expand: [below.join('.')] }, { type, list: false });
          return true;
        } catch {
          return false;
        }
      });
      if (!fits) throw notExpandable(path);
    }
    return below;
  });
}

function paramRefusal(err: StripeParamError): Answer {
  return {
    status: 400,
    body: errorBody({
      type: 'invalid_request_error',
      message: err.message,
      ...(err.param !== undefined ? { param: err.param } : {}),
      ...(err.code !== undefined ? { code: err.code } : {}),
    }),
  };
}

function noSuchTransaction(id: string, param: string, status: number): Answer {
  return {
    status,
    body: errorBody({ type: 'invalid_request_error', code: 'resource_missing', param, message: `No such balance_transaction: '${id}'` }),
  };
}

// ---------------------------------------------------------------------------------------------
// Sources

/** A Charge for a payment Stripe never made (an injected unknown_payment), shaped like the real ones. */
function phantomCharge(line: PaymentLine): ChargeObject {
  const chargeId = line.gatewayTradeNo;
  const suffix = chargeId.slice('ch_'.length);
  const created = Math.floor(line.at.getTime() / 1000);
  const amount = Number(line.amountMinor);
  const intent: PaymentIntentObject = {
    id: `pi_${suffix}`,
    object: 'payment_intent',
    amount,
    amount_received: amount,
    currency: line.currency.toLowerCase(),
    status: 'succeeded',
    capture_method: 'automatic',
    description: null,
    metadata: { out_trade_no: line.outTradeNo },
    payment_method: `pm_${suffix}`,
    latest_charge: chargeId,
    last_payment_error: null,
    automatic_payment_methods: null,
    canceled_at: null,
    cancellation_reason: null,
    created,
  };
  return chargeObject({ id: chargeId, intent, amountRefunded: 0, created });
}

async function renderSource(db: Db, accountId: string, entry: Entry, below: string[][]): Promise<unknown> {
  const id = String(entry.object.source);
  let source: Record<string, unknown> | undefined;
  if (entry.phantom) source = phantomCharge(entry.phantom);
  else if (entry.sourceKind === 'charge') source = await chargeById(db, accountId, id);
  else {
    const [row] = await db<{ object: Record<string, unknown> }[]>`
      SELECT object FROM psp_sandbox.stripe_refunds WHERE id = ${id} AND account_id = ${accountId}`;
    source = row?.object;
  }
  if (!source) return id;
  const root: ExpandRoot = { type: entry.sourceKind, list: false };
  const paths = below
    .filter((segments) => segments.length > 0)
    .map((segments) => segments.join('.'))
    .filter((path) => {
      try {
        readExpand({ expand: [path] }, root);
        return true;
      } catch {
        return false;
      }
    });
  return paths.length > 0 ? expandBody(db, accountId, source, root, paths) : withChargeBalanceTransactions(source);
}

// ---------------------------------------------------------------------------------------------
// The endpoints

/** GET /v1/balance_transactions */
export async function listBalanceTransactions(db: Db, accountId: string, params: FormHash): Promise<Answer> {
  let limit: number;
  let created: CreatedFilter;
  let type: string | undefined;
  let source: string | undefined;
  let currency: string | undefined;
  let cursor: Cursor | undefined;
  let expand: string[][];
  try {
    rejectUnknown(params, ['limit', 'starting_after', 'ending_before', 'created', 'type', 'source', 'payout', 'currency', 'expand']);
    limit = readInteger(params.limit, 'limit') ?? 10;
    if (limit < 1 || limit > MAX_LIMIT) throw new StripeParamError(`Invalid limit: must be between 1 and ${MAX_LIMIT}`, 'limit');
    created = readCreated(params);
    type = readString(params.type, 'type');
    if (type !== undefined && !TYPES.has(type)) {
      throw new StripeParamError(`Invalid type: must be one of ${[...TYPES].join(', ')}`, 'type');
    }
    source = readString(params.source, 'source');
    currency = readString(params.currency, 'currency')?.toLowerCase();
    readString(params.payout, 'payout');
    cursor = readCursor(params);
    expand = readSourceExpand(params, true);
  } catch (err) {
    if (err instanceof StripeParamError) return paramRefusal(err);
    throw err;
  }
  const lower = created.gte ?? (created.gt !== null ? created.gt + 1 : null);
  const upper = created.lt ?? (created.lte !== null ? created.lte + 1 : null);
  const entries = (
    await balanceEntries(db, accountId, lower === null ? null : new Date(lower * 1000), upper === null ? null : new Date(upper * 1000))
  ).filter(
    (e) =>
      (lower === null || e.object.created >= lower) &&
      (upper === null || e.object.created < upper) &&
      (type === undefined || e.object.type === type) &&
      (source === undefined || e.object.source === source) &&
      (currency === undefined || e.object.currency === currency),
  );
  const newestFirst = [...entries].reverse();
  let page: Entry[];
  let hasMore: boolean;
  if (!cursor) {
    page = newestFirst.slice(0, limit);
    hasMore = newestFirst.length > limit;
  } else {
    const anchor =
      entries.find((e) => e.object.id === cursor.id) ??
      (await balanceEntries(db, accountId, null, null)).find((e) => e.object.id === cursor.id);
    if (!anchor) return noSuchTransaction(cursor.id, cursor.param, 400);
    const isOlder = (e: Entry) => e.atMs < anchor.atMs || (e.atMs === anchor.atMs && e.object.id.localeCompare(anchor.object.id) < 0);
    const isNewer = (e: Entry) => e.atMs > anchor.atMs || (e.atMs === anchor.atMs && e.object.id.localeCompare(anchor.object.id) > 0);
    if (cursor.param === 'starting_after') {
      const older = newestFirst.filter(isOlder);
      page = older.slice(0, limit);
      hasMore = older.length > limit;
    } else {
      // The page just before the cursor, still newest first.
      const newer = newestFirst.filter(isNewer);
      page = newer.slice(Math.max(0, newer.length - limit));
      hasMore = newer.length > limit;
    }
  }
  const data = [];
  for (const entry of page) {
    const object: BalanceTransactionObject = { ...entry.object };
    if (expand.length > 0) object.source = (await renderSource(db, accountId, entry, expand)) as BalanceTransactionObject['source'];
    data.push(object);
  }
  return { status: 200, body: { object: 'list', data, has_more: hasMore, url: '/v1/balance_transactions' } };
}

/** GET /v1/balance_transactions/{id} */
export async function retrieveBalanceTransaction(db: Db, accountId: string, id: string, params: FormHash): Promise<Answer> {
  let expand: string[][];
  try {
    rejectUnknown(params, ['expand']);
    expand = readSourceExpand(params, false);
  } catch (err) {
    if (err instanceof StripeParamError) return paramRefusal(err);
    throw err;
  }
  const entry = id.startsWith('txn_') ? (await balanceEntries(db, accountId, null, null)).find((e) => e.object.id === id) : undefined;
  if (!entry) return noSuchTransaction(id, 'id', 404);
  const object: BalanceTransactionObject = { ...entry.object };
  if (expand.length > 0) object.source = (await renderSource(db, accountId, entry, expand)) as BalanceTransactionObject['source'];
  return { status: 200, body: object };
}

// ---------------------------------------------------------------------------------------------
// balance_transaction on Charge objects

/**
 * Every captured, succeeded Charge inside `value` names its balance transaction. The Charge objects
 * are rendered in several places (stripe-objects.ts, stripe-charges.ts, events); filling the field
 * on the way out keeps one rule for all of them. Mutates and returns `value`.
 */
export function withChargeBalanceTransactions<T>(value: T): T {
  if (Array.isArray(value)) {
    for (const item of value) withChargeBalanceTransactions(item);
    return value;
  }
  if (value === null || typeof value !== 'object') return value;
  const object = value as Record<string, unknown>;
  if (
    object.object === 'charge' &&
    object.balance_transaction === null &&
    object.captured === true &&
    object.status === 'succeeded' &&
    typeof object.id === 'string'
  ) {
    object.balance_transaction = chargeBalanceTransactionId(object.id);
  }
  for (const child of Object.values(object)) withChargeBalanceTransactions(child);
  return value;
}

/** The same for an answer's JSON text (Stripe's, pretty-printed with two spaces). */
export function withChargeBalanceTransactionsText(body: string): string {
  if (!body.includes('"object": "charge"')) return body;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return body;
  }
  return JSON.stringify(withChargeBalanceTransactions(parsed), null, 2);
}

/**
 * expand[] as sandbox/stripe-expand.ts does it, plus what it cannot load: a path ending in
 * `balance_transaction` gives the balance transaction itself.
 */
export async function expandBody(db: Db, accountId: string, body: unknown, root: ExpandRoot, paths: string[]): Promise<unknown> {
  const expanded = withChargeBalanceTransactions(
    await expandObjects(db, accountId, withChargeBalanceTransactions(structuredClone(body)), root, paths),
  );
  const wanted = paths.filter((path) => path.split('.').at(-1) === 'balance_transaction');
  if (wanted.length === 0 || expanded === null || typeof expanded !== 'object') return expanded;
  const byId = new Map((await balanceEntries(db, accountId, null, null)).map((e) => [e.object.id, e.object] as const));
  const objects = root.list ? ((expanded as { data?: unknown[] }).data ?? []) : [expanded];
  for (const path of wanted) {
    const segments = root.list ? path.split('.').slice(1) : path.split('.');
    for (const object of objects) replaceAlong(object, segments, byId);
  }
  return expanded;
}

function replaceAlong(value: unknown, segments: string[], byId: ReadonlyMap<string, BalanceTransactionObject>): void {
  const [field, ...rest] = segments;
  if (field === undefined || value === null || typeof value !== 'object') return;
  const object = value as Record<string, unknown>;
  if (rest.length > 0) {
    replaceAlong(object[field], rest, byId);
    return;
  }
  const id = object[field];
  if (typeof id === 'string') object[field] = byId.get(id) ?? id;
}
