/**
 * The sandbox's Stripe Events API (https://docs.stripe.com/api/events) and the list of event types a
 * webhook endpoint may subscribe to:
 *
 *   GET /v1/events        newest first, going back 30 days: limit, starting_after, ending_before,
 *                         type (one type, or a group with `*`: payment_intent.*), types[] (up to 20;
 *                         not with type), created[gt|gte|lt|lte] or created=<unix>, delivery_success
 *   GET /v1/events/{id}   one event of the last 30 days — what a webhook handler re-fetches before
 *                         acting, as Stripe advises, so that only Stripe's own copy is believed
 *
 * Events are stored by sandbox/stripe.ts (emitEvent) in the transaction of what caused them, with the
 * exact JSON that is delivered. The API renders that JSON with `pending_webhooks` as it is now: the
 * endpoints that have not yet acknowledged it.
 */
import type { Sql } from './store';
import {
  readBoolean,
  readHash,
  readInteger,
  readString,
  readStringArray,
  rejectUnknown,
  StripeParamError,
  type FormHash,
} from './stripe-form';
import { errorBody, type EventObject, type StripeErrorBody } from './stripe-objects';

/** Added to the Stripe module's schema: list order (the pagination cursor) and the account's newest first. */
export const EVENTS_SCHEMA_SQL = `
ALTER TABLE psp_sandbox.stripe_events ADD COLUMN IF NOT EXISTS seq bigserial;
CREATE INDEX IF NOT EXISTS stripe_events_newest ON psp_sandbox.stripe_events (account_id, seq DESC);
`;

/** "List events, going back up to 30 days"; retrieve likewise ("if it was created in the last 30 days"). */
const RETENTION = '30 days';
const MAX_LIMIT = 100;
/** "An array of up to 20 strings containing specific event names." */
const MAX_TYPES = 20;

/**
 * The event types a webhook endpoint may name in enabled_events (besides '*'): Stripe's, for the
 * objects this sandbox emulates and the ones a checkout commonly subscribes to next to them. A name
 * outside the list is refused, as Stripe refuses a type it does not have.
 * [unverified] the full list is Stripe's several hundred types; these are the ones documented for
 * PaymentIntents, Charges, Refunds, disputes, PaymentMethods and Customers.
 */
export const WEBHOOK_EVENT_TYPES: readonly string[] = [
  'payment_intent.amount_capturable_updated',
  'payment_intent.canceled',
  'payment_intent.created',
  'payment_intent.partially_funded',
  'payment_intent.payment_failed',
  'payment_intent.processing',
  'payment_intent.requires_action',
  'payment_intent.succeeded',
  'charge.captured',
  'charge.dispute.closed',
  'charge.dispute.created',
  'charge.dispute.funds_reinstated',
  'charge.dispute.funds_withdrawn',
  'charge.dispute.updated',
  'charge.expired',
  'charge.failed',
  'charge.pending',
  'charge.refund.updated',
  'charge.refunded',
  'charge.succeeded',
  'charge.updated',
  'refund.created',
  'refund.failed',
  'refund.updated',
  'payment_method.attached',
  'payment_method.automatically_updated',
  'payment_method.detached',
  'payment_method.updated',
  'customer.created',
  'customer.deleted',
  'customer.updated',
  'balance.available',
];

const KNOWN_TYPES = new Set(WEBHOOK_EVENT_TYPES);

/**
 * Stripe's refusal of an enabled_events entry it does not know: the entry's index as the param and
 * every type it would have taken in the message.
 */
export function unknownEnabledEvent(index: number, type: string): StripeParamError | undefined {
  if (type === '*' || KNOWN_TYPES.has(type)) return undefined;
  return new StripeParamError(
    `Invalid enabled_events[${index}]: must be one of ${['*', ...WEBHOOK_EVENT_TYPES].join(', ')}`,
    `enabled_events[${index}]`,
  );
}

interface Answer {
  status: number;
  body: unknown;
}

function refusal(status: number, error: StripeErrorBody): Answer {
  return { status, body: errorBody(error) };
}

function paramRefusal(err: StripeParamError): Answer {
  return refusal(400, {
    type: 'invalid_request_error',
    message: err.message,
    ...(err.param !== undefined ? { param: err.param } : {}),
    ...(err.code !== undefined ? { code: err.code } : {}),
  });
}

interface EventRow {
  seq: string;
  payload: string;
  pending: number;
}

/** The stored event as the API shows it now: `pending_webhooks` counts endpoints still waiting for it. */
function render(row: EventRow): EventObject {
  const event = JSON.parse(row.payload) as EventObject;
  return { ...event, pending_webhooks: Number(row.pending) };
}

const NOT_ACKNOWLEDGED = (sql: Sql) => sql`
  (SELECT count(*)::int FROM psp_sandbox.notifications n
    WHERE n.gateway = 'stripe' AND n.notify_id LIKE e.id || ':%' AND n.state <> 'acknowledged')`;

/** GET /v1/events/{id}: an event of this account from the last 30 days, or Stripe's 404. */
export async function retrieveEvent(sql: Sql, accountId: string, id: string, params: FormHash): Promise<Answer> {
  try {
    rejectUnknown(params, ['expand']);
  } catch (err) {
    if (err instanceof StripeParamError) return paramRefusal(err);
    throw err;
  }
  const [row] = await sql<EventRow[]>`
    SELECT e.seq, e.payload, ${NOT_ACKNOWLEDGED(sql)} AS pending FROM psp_sandbox.stripe_events e
     WHERE e.id = ${id} AND e.account_id = ${accountId} AND e.created_at > now() - ${RETENTION}::interval`;
  if (!row) {
    return refusal(404, { type: 'invalid_request_error', code: 'resource_missing', param: 'id', message: `No such event: '${id}'` });
  }
  return { status: 200, body: render(row) };
}

interface ListQuery {
  limit: number;
  startingAfter: string | undefined;
  endingBefore: string | undefined;
  /** SQL LIKE patterns the type must match one of; empty: any type. */
  typePatterns: string[];
  created: { gt: number | null; gte: number | null; lt: number | null; lte: number | null };
  deliverySuccess: boolean | undefined;
}

function readCreated(value: FormHash[string] | undefined): ListQuery['created'] {
  const out = { gt: null as number | null, gte: null as number | null, lt: null as number | null, lte: null as number | null };
  if (value === undefined) return out;
  if (typeof value === 'string') {
    const exact = readInteger(value, 'created') ?? null;
    return { ...out, gte: exact, lte: exact };
  }
  const hash = readHash(value, 'created') ?? {};
  rejectUnknown(hash, ['gt', 'gte', 'lt', 'lte'], 'created');
  for (const bound of ['gt', 'gte', 'lt', 'lte'] as const) out[bound] = readInteger(hash[bound], `created[${bound}]`) ?? null;
  return out;
}

/** `payment_intent.*` is every payment_intent event; any other `*` stands for any run of characters. */
function likePattern(type: string): string {
  return type.replace(/[\\%_]/g, (ch) => `\\${ch}`).replaceAll('*', '%');
}

function readListQuery(params: FormHash): ListQuery {
  rejectUnknown(params, ['limit', 'starting_after', 'ending_before', 'type', 'types', 'created', 'delivery_success', 'expand']);
  const limit = readInteger(params.limit, 'limit') ?? 10;
  if (limit < 1 || limit > MAX_LIMIT) throw new StripeParamError(`Invalid limit: must be between 1 and ${MAX_LIMIT}`, 'limit');
  const startingAfter = readString(params.starting_after, 'starting_after');
  const endingBefore = readString(params.ending_before, 'ending_before');
  if (startingAfter !== undefined && endingBefore !== undefined) {
    // [unverified] wording; Stripe takes one cursor at a time.
    throw new StripeParamError('You may only specify one of these parameters: ending_before, starting_after.', 'ending_before');
  }
  const type = readString(params.type, 'type');
  const types = readStringArray(params.types, 'types');
  if (type !== undefined && types !== undefined) {
    throw new StripeParamError('You may pass either `type` or `types`, but not both.', 'types');
  }
  if (types !== undefined && types.length > MAX_TYPES) {
    throw new StripeParamError(`Invalid types: must have at most ${MAX_TYPES} elements`, 'types');
  }
  const typePatterns = type !== undefined ? [likePattern(type)] : (types ?? []).map((t) => likePattern(t));
  return {
    limit,
    startingAfter,
    endingBefore,
    typePatterns,
    created: readCreated(params.created),
    deliverySuccess: readBoolean(params.delivery_success, 'delivery_success'),
  };
}

/**
 * GET /v1/events: newest first. starting_after pages towards older events, ending_before towards
 * newer ones (the page just before the cursor, still newest first); has_more says whether more lie
 * beyond the page in the direction of travel. delivery_success=true keeps events every endpoint
 * acknowledged; false, those still pending or given up on somewhere.
 */
export async function listEvents(sql: Sql, accountId: string, params: FormHash): Promise<Answer> {
  let query: ListQuery;
  try {
    query = readListQuery(params);
  } catch (err) {
    if (err instanceof StripeParamError) return paramRefusal(err);
    throw err;
  }
  const cursorId = query.startingAfter ?? query.endingBefore;
  let cursor: string | null = null;
  if (cursorId !== undefined) {
    const [row] = await sql<{ seq: string }[]>`
      SELECT seq FROM psp_sandbox.stripe_events WHERE id = ${cursorId} AND account_id = ${accountId}`;
    if (!row) {
      const param = query.startingAfter !== undefined ? 'starting_after' : 'ending_before';
      return refusal(400, { type: 'invalid_request_error', code: 'resource_missing', param, message: `No such event: '${cursorId}'` });
    }
    cursor = row.seq;
  }
  const backwards = query.endingBefore !== undefined;
  const { gt, gte, lt, lte } = query.created;
  const pending = NOT_ACKNOWLEDGED(sql);
  const created = sql`(e.payload::jsonb ->> 'created')::bigint`;
  const rows = await sql<EventRow[]>`
    SELECT e.seq, e.payload, ${pending} AS pending FROM psp_sandbox.stripe_events e
     WHERE e.account_id = ${accountId}
       AND e.created_at > now() - ${RETENTION}::interval
       AND (${cursor}::bigint IS NULL OR ${backwards ? sql`e.seq > ${cursor}::bigint` : sql`e.seq < ${cursor}::bigint`})
       AND (${query.typePatterns.length === 0} OR e.type LIKE ANY(${query.typePatterns}::text[]))
       AND (${gt}::bigint IS NULL OR ${created} > ${gt}::bigint)
       AND (${gte}::bigint IS NULL OR ${created} >= ${gte}::bigint)
       AND (${lt}::bigint IS NULL OR ${created} < ${lt}::bigint)
       AND (${lte}::bigint IS NULL OR ${created} <= ${lte}::bigint)
       AND (${query.deliverySuccess ?? null}::boolean IS NULL OR (${pending} = 0) = ${query.deliverySuccess ?? null}::boolean)
     ORDER BY e.seq ${backwards ? sql`ASC` : sql`DESC`}
     LIMIT ${query.limit + 1}`;
  const page = rows.slice(0, query.limit);
  if (backwards) page.reverse();
  return { status: 200, body: { object: 'list', data: page.map(render), has_more: rows.length > query.limit, url: '/v1/events' } };
}
