/**
 * Stripe's cursor pagination (https://docs.stripe.com/api/pagination), shared by every list of the
 * sandbox's Stripe: newest first; `starting_after` pages towards older objects, `ending_before`
 * towards newer ones (the page just before the cursor, still newest first); `has_more` says whether
 * more lie beyond the page in the direction of travel. One cursor at a time.
 */
import { readString, StripeParamError, type FormHash } from './stripe-form';

export interface Cursor {
  /** The object id given as the cursor, and which parameter named it. */
  id: string;
  param: 'starting_after' | 'ending_before';
}

/** The cursor of a list request, if any. [unverified] wording of the refusal of both at once. */
export function readCursor(params: FormHash): Cursor | undefined {
  const startingAfter = readString(params.starting_after, 'starting_after');
  const endingBefore = readString(params.ending_before, 'ending_before');
  if (startingAfter !== undefined && endingBefore !== undefined) {
    throw new StripeParamError('You may only specify one of these parameters: ending_before, starting_after.', 'ending_before');
  }
  if (startingAfter !== undefined) return { id: startingAfter, param: 'starting_after' };
  if (endingBefore !== undefined) return { id: endingBefore, param: 'ending_before' };
  return undefined;
}

/** Whether the page runs towards newer objects: its query sorts ascending and pageOf reverses it. */
export function isBackwards(cursor: Cursor | undefined): boolean {
  return cursor?.param === 'ending_before';
}

/**
 * One page from rows fetched `limit + 1` at a time in the direction of travel (seq DESC, or seq ASC
 * for ending_before), shown newest first.
 */
export function pageOf<T>(rows: T[], limit: number, cursor: Cursor | undefined): { data: T[]; hasMore: boolean } {
  const data = rows.slice(0, limit);
  if (isBackwards(cursor)) data.reverse();
  return { data, hasMore: rows.length > limit };
}
