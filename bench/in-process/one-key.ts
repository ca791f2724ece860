/**
 * The one-key race: `callers` concurrent calls with ONE key and the same input, all started in the
 * same tick. What matters is how many times the business transaction actually ran — counted as
 * business rows under the race's own tag, not taken from the contender's word — and what each
 * caller got back.
 */
import type postgres from 'postgres';
import { AMOUNT_MINOR, rowsByTag } from './business';
import type { Contender } from './contenders';

export interface OneKeyResult {
  contender: string;
  callers: number;
  /** Business rows written under the race's tag: how many times the work really ran. */
  businessRuns: number;
  /** Callers whose call ran the business transaction and answered. */
  success: number;
  /** Callers answered with a stored answer. */
  replay: number;
  /** Callers refused with the contender's "in progress" error. */
  inProgress: number;
  otherError: number;
  otherErrors: Record<string, number>;
  /** Distinct answer bodies (row ids) among success + replay: 1 when every caller saw the same answer. */
  distinctAnswers: number;
  /** `ran exactly once, nobody got anything else`; null for the unguarded reference. */
  pass: boolean | null;
  note?: string;
}

export async function oneKeyRace(
  sql: postgres.Sql,
  contender: Contender,
  options: { callers: number; tag: string; key: string; guarded: boolean; note?: string },
): Promise<OneKeyResult> {
  const input = { tag: options.tag, amountMinor: AMOUNT_MINOR };
  const settled = await Promise.allSettled(
    Array.from({ length: options.callers }, (_, worker) => contender.call({ key: options.key, worker, input })),
  );
  const result: OneKeyResult = {
    contender: contender.id,
    callers: options.callers,
    businessRuns: (await rowsByTag(sql, options.tag)).get(options.tag) ?? 0,
    success: 0,
    replay: 0,
    inProgress: 0,
    otherError: 0,
    otherErrors: {},
    distinctAnswers: 0,
    pass: null,
    ...(options.note ? { note: options.note } : {}),
  };
  const answers = new Set<string>();
  for (const outcome of settled) {
    if (outcome.status === 'fulfilled') {
      if (outcome.value.outcome === 'ran') result.success++;
      else result.replay++;
      answers.add(outcome.value.body.id);
    } else if (contender.isInProgress(outcome.reason)) {
      result.inProgress++;
    } else {
      result.otherError++;
      const error = outcome.reason as Error;
      const name = `${error?.name ?? 'Error'}: ${String(error?.message ?? error).slice(0, 120)}`;
      result.otherErrors[name] = (result.otherErrors[name] ?? 0) + 1;
    }
  }
  result.distinctAnswers = answers.size;
  if (options.guarded) {
    result.pass = result.businessRuns === 1 && result.otherError === 0 && result.distinctAnswers === 1;
  }
  return result;
}
