/**
 * The sandbox's Stripe Charges (https://docs.stripe.com/api/charges) and the PaymentMethods behind
 * them, read-only as a PaymentIntents integration sees them:
 *
 *   GET /v1/charges/{id}   one charge attempt of a PaymentIntent, succeeded or failed
 *   GET /v1/charges        newest first: payment_intent, limit, starting_after, ending_before
 *
 * Charges are made by sandbox/stripe.ts (chargeIntent) in psp_sandbox.stripe_charges; the Charge
 * object is rendered from that row as it is now — captured and amount_captured after a capture,
 * amount_refunded from the refunds of that charge — with its PaymentIntent's metadata and
 * description. A PaymentMethod is stored when a confirm makes it, so `expand[]=payment_method` can
 * show it later (sandbox/stripe-expand.ts).
 */
import type postgres from 'postgres';
import type { Sql, Tx } from './store';
import { readInteger, readString, rejectUnknown, StripeParamError, type FormHash } from './stripe-form';
import { isBackwards, pageOf, readCursor } from './stripe-lists';
import { chargeObject, errorBody, type ChargeObject, type PaymentIntentObject, type PaymentMethodObject } from './stripe-objects';

/**
 * Added to the Stripe module's schema. As in sandbox/stripe.ts, each change is made only when it is
 * missing: ALTER TABLE locks its table even when there is nothing to do, and several sandboxes start
 * on one database in the tests.
 */
export const CHARGES_SCHEMA_SQL = `
-- PaymentMethods as the API renders them, kept for expand[]=payment_method.
CREATE TABLE IF NOT EXISTS psp_sandbox.stripe_payment_methods (
  id          text PRIMARY KEY,
  account_id  text NOT NULL,
  object      jsonb NOT NULL
);
DO $$
BEGIN
  -- Insertion order of charges: "newest first" for GET /v1/charges, and its pagination cursor.
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'psp_sandbox'
                   AND table_name = 'stripe_charges' AND column_name = 'seq') THEN
    ALTER TABLE psp_sandbox.stripe_charges ADD COLUMN seq bigserial;
  END IF;
  IF to_regclass('psp_sandbox.stripe_charges_newest') IS NULL THEN
    CREATE INDEX stripe_charges_newest ON psp_sandbox.stripe_charges (account_id, seq DESC);
  END IF;
END
$$;
`;

const MAX_LIMIT = 100;

interface Answer {
  status: number;
  body: unknown;
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

function noSuchCharge(id: string, param: string, status: number): Answer {
  return {
    status,
    body: errorBody({ type: 'invalid_request_error', code: 'resource_missing', param, message: `No such charge: '${id}'` }),
  };
}

export async function savePaymentMethod(tx: Tx, accountId: string, paymentMethod: PaymentMethodObject): Promise<void> {
  await tx`
    INSERT INTO psp_sandbox.stripe_payment_methods (id, account_id, object)
    VALUES (${paymentMethod.id}, ${accountId}, ${tx.json(paymentMethod as unknown as postgres.JSONValue)})
    ON CONFLICT (id) DO NOTHING`;
}

export async function paymentMethodById(db: Sql | Tx, accountId: string, id: string): Promise<PaymentMethodObject | undefined> {
  const [row] = await db<{ object: PaymentMethodObject }[]>`
    SELECT object FROM psp_sandbox.stripe_payment_methods WHERE id = ${id} AND account_id = ${accountId}`;
  return row?.object;
}

interface ChargeRow {
  id: string;
  seq: string;
  amount: string;
  status: 'succeeded' | 'failed';
  failure_code: string | null;
  decline_code: string | null;
  payment_method: string;
  captured: boolean;
  amount_captured: string | null;
  created: string;
  intent: PaymentIntentObject;
  refunded: string;
}

const CHARGE_COLUMNS = (db: Sql | Tx) => db`
  c.id, c.seq, c.amount, c.status, c.failure_code, c.decline_code, c.payment_method, c.captured, c.amount_captured,
  extract(epoch FROM c.created_at)::bigint AS created, i.object AS intent,
  (SELECT coalesce(sum((r.object ->> 'amount')::bigint), 0) FROM psp_sandbox.stripe_refunds r
    WHERE r.charge = c.id AND r.status IN ('succeeded', 'pending')) AS refunded`;

/** The Charge a row is now: its own amounts and capture, its PaymentIntent's metadata and description. */
function render(row: ChargeRow): ChargeObject {
  const error = row.intent.last_payment_error;
  const failed =
    row.status === 'failed'
      ? {
          code: row.failure_code ?? 'card_declined',
          declineCode: row.decline_code ?? row.failure_code ?? 'generic_decline',
          // The decline's words are on the PaymentIntent while this is still its latest failure.
          message: error?.charge === row.id ? error.message : 'Your card was declined.',
          paymentMethod: row.payment_method,
        }
      : undefined;
  const charge = chargeObject({
    id: row.id,
    intent: row.intent,
    amountRefunded: Number(row.refunded),
    created: Number(row.created),
    failed,
  });
  const amountCaptured = row.status === 'succeeded' && row.captured ? Number(row.amount_captured ?? row.amount) : 0;
  return {
    ...charge,
    amount: Number(row.amount),
    amount_captured: amountCaptured,
    captured: row.status === 'succeeded' && row.captured,
    payment_method: row.payment_method,
    refunded: amountCaptured > 0 && Number(row.refunded) >= amountCaptured,
  };
}

export async function chargeById(db: Sql | Tx, accountId: string, id: string): Promise<ChargeObject | undefined> {
  const [row] = await db<ChargeRow[]>`
    SELECT ${CHARGE_COLUMNS(db)} FROM psp_sandbox.stripe_charges c
      JOIN psp_sandbox.stripe_payment_intents i ON i.id = c.payment_intent
     WHERE c.id = ${id} AND c.account_id = ${accountId}`;
  return row ? render(row) : undefined;
}

/** GET /v1/charges/{id}. `expand` is read by the caller (sandbox/stripe-expand.ts). */
export async function retrieveCharge(sql: Sql, accountId: string, id: string, params: FormHash): Promise<Answer> {
  try {
    rejectUnknown(params, []);
  } catch (err) {
    if (err instanceof StripeParamError) return paramRefusal(err);
    throw err;
  }
  const charge = await chargeById(sql, accountId, id);
  return charge ? { status: 200, body: charge } : noSuchCharge(id, 'id', 404);
}

/** GET /v1/charges: newest first, optionally one PaymentIntent's; strongly consistent like every list. */
export async function listCharges(sql: Sql, accountId: string, params: FormHash): Promise<Answer> {
  let limit: number;
  let paymentIntent: string | null;
  let cursor: ReturnType<typeof readCursor>;
  try {
    rejectUnknown(params, ['payment_intent', 'limit', 'starting_after', 'ending_before']);
    limit = readInteger(params.limit, 'limit') ?? 10;
    if (limit < 1 || limit > MAX_LIMIT) throw new StripeParamError(`Invalid limit: must be between 1 and ${MAX_LIMIT}`, 'limit');
    paymentIntent = readString(params.payment_intent, 'payment_intent') ?? null;
    cursor = readCursor(params);
  } catch (err) {
    if (err instanceof StripeParamError) return paramRefusal(err);
    throw err;
  }
  let seq: string | null = null;
  if (cursor) {
    const [row] = await sql<{ seq: string }[]>`
      SELECT seq FROM psp_sandbox.stripe_charges WHERE id = ${cursor.id} AND account_id = ${accountId}`;
    if (!row) return noSuchCharge(cursor.id, cursor.param, 400);
    seq = row.seq;
  }
  const backwards = isBackwards(cursor);
  const rows = await sql<ChargeRow[]>`
    SELECT ${CHARGE_COLUMNS(sql)} FROM psp_sandbox.stripe_charges c
      JOIN psp_sandbox.stripe_payment_intents i ON i.id = c.payment_intent
     WHERE c.account_id = ${accountId}
       AND (${paymentIntent}::text IS NULL OR c.payment_intent = ${paymentIntent}::text)
       AND (${seq}::bigint IS NULL OR ${backwards ? sql`c.seq > ${seq}::bigint` : sql`c.seq < ${seq}::bigint`})
     ORDER BY c.seq ${backwards ? sql`ASC` : sql`DESC`}
     LIMIT ${limit + 1}`;
  const page = pageOf(rows, limit, cursor);
  return { status: 200, body: { object: 'list', data: page.data.map(render), has_more: page.hasMore, url: '/v1/charges' } };
}
