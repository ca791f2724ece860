/**
 * `expand[]` (https://docs.stripe.com/expand): a field holding another object's id comes back as
 * that object, to a depth of four (`latest_charge.payment_intent`), and inside lists as
 * `data.latest_charge`. A field that is null stays null (a Charge not captured yet has no balance
 * transaction). A path that names no expandable field is refused before anything runs.
 */
import type { Sql, Tx } from './store';
import { readStringArray, StripeParamError, type FormHash } from './stripe-form';
import { chargeById, paymentMethodById } from './stripe-charges';
import type { PaymentIntentObject } from './stripe-objects';

export type ExpandableType = 'payment_intent' | 'charge' | 'refund' | 'payment_method' | 'balance_transaction';

/** Which fields of each object can be expanded, and into what. Only what the sandbox can render. */
const EXPANDABLE: Record<ExpandableType, Record<string, ExpandableType>> = {
  payment_intent: { latest_charge: 'charge', payment_method: 'payment_method' },
  charge: { payment_intent: 'payment_intent', balance_transaction: 'balance_transaction' },
  refund: { charge: 'charge', payment_intent: 'payment_intent' },
  payment_method: {},
  balance_transaction: {},
};

/** "You can expand … up to four levels deep." */
const MAX_DEPTH = 4;

/** The root a response's expansions start from: an object, or a list of them (`data.…`). */
export interface ExpandRoot {
  type: ExpandableType;
  list: boolean;
}

/** [unverified] wording: Stripe's refusal of a path that is not expandable. */
function notExpandable(path: string): StripeParamError {
  return new StripeParamError(`This property cannot be expanded (${path}).`, 'expand');
}

/** The paths of `expand[]`, checked against the root object; empty when none was sent. */
export function readExpand(params: FormHash, root: ExpandRoot): string[] {
  const paths = readStringArray(params.expand, 'expand') ?? [];
  for (const path of paths) {
    let segments = path.split('.');
    if (root.list) {
      if (segments[0] !== 'data') throw notExpandable(path);
      segments = segments.slice(1);
    }
    if (segments.length === 0 || segments.length > MAX_DEPTH) throw notExpandable(path);
    let type: ExpandableType | undefined = root.type;
    for (const segment of segments) {
      type = type ? EXPANDABLE[type][segment] : undefined;
      if (!type) throw notExpandable(path);
    }
  }
  return [...new Set(paths)];
}

async function load(db: Sql | Tx, accountId: string, type: ExpandableType, id: string): Promise<unknown> {
  switch (type) {
    case 'charge':
      return chargeById(db, accountId, id);
    case 'payment_method':
      return paymentMethodById(db, accountId, id);
    case 'payment_intent': {
      const [row] = await db<{ object: PaymentIntentObject }[]>`
        SELECT object FROM psp_sandbox.stripe_payment_intents WHERE id = ${id} AND account_id = ${accountId}`;
      return row?.object;
    }
    case 'refund': {
      const [row] = await db<{ object: unknown }[]>`
        SELECT object FROM psp_sandbox.stripe_refunds WHERE id = ${id} AND account_id = ${accountId}`;
      return row?.object;
    }
    case 'balance_transaction':
      return undefined;
  }
}

async function expandPath(db: Sql | Tx, accountId: string, object: Record<string, unknown>, type: ExpandableType, segments: string[]) {
  const [field, ...rest] = segments;
  if (field === undefined) return;
  const target = EXPANDABLE[type][field];
  if (!target) return;
  let value = object[field];
  if (typeof value === 'string') {
    // An object that cannot be found (a balance transaction) stays an id, as the sandbox cannot render it.
    value = (await load(db, accountId, target, value)) ?? value;
    object[field] = value;
  }
  if (rest.length > 0 && value !== null && typeof value === 'object') {
    await expandPath(db, accountId, value as Record<string, unknown>, target, rest);
  }
}

/** The response body with every path expanded (a copy; the stored objects are not touched). */
export async function expandBody(db: Sql | Tx, accountId: string, body: unknown, root: ExpandRoot, paths: string[]): Promise<unknown> {
  if (paths.length === 0 || body === null || typeof body !== 'object') return body;
  const copy = structuredClone(body) as Record<string, unknown>;
  const objects = root.list ? ((copy.data as Record<string, unknown>[] | undefined) ?? []) : [copy];
  for (const path of paths) {
    const segments = root.list ? path.split('.').slice(1) : path.split('.');
    for (const object of objects) await expandPath(db, accountId, object, root.type, segments);
  }
  return copy;
}
