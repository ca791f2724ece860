/**
 * The console's 对账 view without a browser: what each kind of mismatch is called, the list by day
 * (newest first, open rows first), who may resolve, a resolution as typed, and one resolution sent
 * and remembered.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Answer, OperatorApi } from '@/client/console/operator-api';
import {
  amountsOf,
  canResolveMismatches,
  groupByDay,
  inView,
  kindWords,
  MISMATCH_KIND_WORDS,
  NOTHING_RESOLVING,
  openCount,
  referenceKind,
  resolutionProblem,
  resolvedElsewhere,
  resolverName,
  resolving,
  rowOffer,
  signedMoney,
  submitResolution,
  type MismatchView,
} from '@/client/console/reconciliation';
import { MISMATCH_KINDS } from '@/server/reconciliation/match';

let next = 0;
function mismatch(changes: Partial<MismatchView> = {}): MismatchView {
  next++;
  return {
    id: `00000000-0000-4000-8000-${String(next).padStart(12, '0')}`,
    gateway: 'alipay',
    statementDate: '2026-12-05',
    kind: 'missing_payment',
    reference: `2026120522${String(next).padStart(18, '0')}`,
    outTradeNo: `PO${next}`,
    orderId: `order-${next}`,
    ours: {
      kind: 'payment',
      orderId: `order-${next}`,
      outTradeNo: `PO${next}`,
      gatewayTradeNo: `T${next}`,
      amountMinor: 6800,
      currency: 'CNY',
    },
    theirs: null,
    firstRunId: 'run-1',
    lastRunId: 'run-1',
    firstSeenAt: '2026-12-06T02:00:00.000Z',
    resolvedAt: null,
    resolvedBy: null,
    resolution: null,
    ...changes,
  };
}

const resolved = (row: MismatchView, by = 'operator:alice'): MismatchView => ({
  ...row,
  resolvedAt: '2026-12-06T03:00:00.000Z',
  resolvedBy: by,
  resolution: 'seen on the next day’s statement',
});

describe('the words for each kind of mismatch', () => {
  it('names every kind the server classes, in Chinese and in English, with where to look', () => {
    for (const kind of MISMATCH_KINDS) {
      for (const lang of ['zh', 'en'] as const) {
        const words = kindWords(kind, lang);
        assert.ok(words.label.length > 0 && words.label !== kind, `${lang} ${kind}`);
        assert.ok(words.check.length > 0, `${lang} ${kind}: where to look`);
      }
    }
    assert.deepEqual(Object.keys(MISMATCH_KIND_WORDS.zh).sort(), [...MISMATCH_KINDS].sort());
  });

  it('says missing_payment as the console’s operators read it: 我方已记账、对账单未见', () => {
    assert.equal(kindWords('missing_payment', 'zh').label, '我方已记账、对账单未见');
    assert.equal(kindWords('unknown_payment', 'zh').label, '渠道有收款、我方无记录');
    assert.equal(kindWords('amount_differs', 'en').label, 'Amount or currency differs');
  });

  it('shows a kind it does not know by its own name, with no advice', () => {
    assert.deepEqual(kindWords('statement_late', 'zh'), { label: 'statement_late', check: '' });
  });

  it('names the operator who resolved it without the prefix the server records', () => {
    assert.equal(resolverName('operator:alice'), 'alice');
    assert.equal(resolverName('cli:root'), 'cli:root');
    assert.equal(resolverName(null), '—');
  });

  it('tells a refund’s reference from a trade’s, by either side or else by the kind', () => {
    assert.equal(referenceKind(mismatch()), 'payment');
    const refund = {
      kind: 'refund' as const,
      outTradeNo: 'PO1',
      gatewayTradeNo: 'T1',
      refundId: 'R1',
      amountMinor: 100,
      feeMinor: 0,
      currency: 'CNY',
    };
    assert.equal(referenceKind(mismatch({ kind: 'unknown_refund', ours: null, theirs: refund })), 'refund');
    assert.equal(referenceKind(mismatch({ kind: 'missing_refund', ours: null, theirs: null })), 'refund');
  });
});

describe('ours beside theirs', () => {
  const line = { kind: 'payment' as const, outTradeNo: 'PO1', gatewayTradeNo: 'T1', feeMinor: 41, currency: 'CNY' };

  it('a payment missing from the statement: ours only', () => {
    assert.deepEqual(amountsOf(mismatch()), { ours: { amountMinor: 6800, currency: 'CNY' } });
  });

  it('an amount that differs: both, the statement’s fee, and theirs less ours', () => {
    const row = mismatch({ kind: 'amount_differs', theirs: { ...line, amountMinor: 6801 } });
    assert.deepEqual(amountsOf(row), {
      ours: { amountMinor: 6800, currency: 'CNY' },
      theirs: { amountMinor: 6801, currency: 'CNY', feeMinor: 41 },
      differenceMinor: 1,
    });
    assert.equal(signedMoney(1, 'CNY'), '+¥0.01');
    assert.equal(signedMoney(-150, 'CNY'), '−¥1.50');
  });

  it('a fee not the contract’s: the contract’s fee beside the statement’s, and theirs less ours', () => {
    const row = mismatch({
      kind: 'fee_differs',
      ours: { ...mismatch().ours!, feeMinor: 41 },
      theirs: { ...line, amountMinor: 6800, feeMinor: 141 },
    });
    assert.deepEqual(amountsOf(row), {
      ours: { amountMinor: 6800, currency: 'CNY', feeMinor: 41 },
      theirs: { amountMinor: 6800, currency: 'CNY', feeMinor: 141 },
      feeDifferenceMinor: 100,
    });
  });

  it('another currency on each side: no difference is worked out across currencies', () => {
    const row = mismatch({ kind: 'amount_differs', theirs: { ...line, amountMinor: 6800, currency: 'USD' } });
    assert.equal(amountsOf(row).differenceMinor, undefined);
  });
});

describe('the list by statement day', () => {
  it('puts the newest day first, and within a day the open rows before the resolved, by gateway as the shop offers them', () => {
    const rows = [
      resolved(mismatch({ statementDate: '2026-12-05', gateway: 'alipay', outTradeNo: 'PO-A' })),
      mismatch({ statementDate: '2026-12-04', gateway: 'alipay', outTradeNo: 'PO-B' }),
      mismatch({ statementDate: '2026-12-05', gateway: '2c2p', outTradeNo: 'PO-C' }),
      mismatch({ statementDate: '2026-12-05', gateway: 'wechatpay', outTradeNo: 'PO-D' }),
      mismatch({ statementDate: '2026-12-05', gateway: 'wechatpay', kind: 'unknown_payment', outTradeNo: 'PO-E' }),
      mismatch({ statementDate: '2026-12-06', gateway: 'stripe', outTradeNo: 'PO-F' }),
    ];
    const days = groupByDay(rows);
    assert.deepEqual(
      days.map((day) => ({ date: day.date, open: day.open, rows: day.rows.map((row) => row.outTradeNo) })),
      [
        { date: '2026-12-06', open: 1, rows: ['PO-F'] },
        { date: '2026-12-05', open: 3, rows: ['PO-E', 'PO-D', 'PO-C', 'PO-A'] },
        { date: '2026-12-04', open: 1, rows: ['PO-B'] },
      ],
    );
  });

  it('keeps a row resolved here in view when the open-only list no longer has it, and prefers it to an older open copy', () => {
    const [a, b, c] = [mismatch(), mismatch(), mismatch()];
    const listed = [a!, b!];
    // c was resolved here and has left the open list; b was resolved here after the list was read.
    const shown = inView(listed, [resolved(c!), resolved(b!)]);
    assert.deepEqual(
      shown.map((row) => [row.id, row.resolvedAt !== null]),
      [
        [a!.id, false],
        [b!.id, true],
        [c!.id, true],
      ],
    );
  });

  it('never lets a stale resolved-here copy replace the server’s resolved one', () => {
    const row = mismatch();
    const theirs = resolved(row, 'operator:bob');
    assert.equal(inView([theirs], [resolved(row, 'operator:alice')])[0]!.resolvedBy, 'operator:bob');
  });

  it('counts the open rows for the tab, and says “at least” when the list stopped at its limit', () => {
    assert.equal(openCount([], 200), undefined);
    assert.equal(openCount([resolved(mismatch())], 200), undefined);
    assert.equal(openCount([mismatch(), mismatch(), resolved(mismatch())], 200), '2');
    assert.equal(openCount([mismatch(), mismatch()], 2), '2+');
  });
});

describe('who may resolve', () => {
  it('an admin resolves an open row; a refunder and a viewer only read it; a resolved row offers nobody a form', () => {
    const open = mismatch();
    assert.equal(canResolveMismatches('admin'), true);
    assert.equal(canResolveMismatches('refunder'), false);
    assert.equal(canResolveMismatches('viewer'), false);
    assert.equal(rowOffer(open, 'admin'), 'resolve');
    assert.equal(rowOffer(open, 'refunder'), 'look_only');
    assert.equal(rowOffer(open, 'viewer'), 'look_only');
    assert.equal(rowOffer(resolved(open), 'admin'), 'resolved');
  });

  it('takes a resolution the server takes: trimmed, 1–500 characters', () => {
    assert.equal(resolutionProblem(''), 'empty');
    assert.equal(resolutionProblem('   \n '), 'empty');
    assert.equal(resolutionProblem('次日对账单已见此笔'), undefined);
    assert.equal(resolutionProblem(`  ${'x'.repeat(500)}  `), undefined);
    assert.equal(resolutionProblem('x'.repeat(501)), 'too_long');
  });
});

/** An OperatorApi that answers every mutation with `answer` and records what it was sent. */
function answering(answer: Answer<unknown>) {
  const sent: { procedure: string; input: unknown; headers: Record<string, string> }[] = [];
  const api: OperatorApi = {
    session: async () => null,
    signIn: async () => ({ kind: 'ok', status: 204, data: null }),
    signOut: async () => {},
    query: async () => {
      throw new Error('not asked');
    },
    mutate: async <T>(procedure: string, input: unknown, headers: Record<string, string>) => {
      sent.push({ procedure, input, headers });
      return answer as Answer<T>;
    },
  };
  return { api, sent };
}

describe('one resolution', () => {
  it('1. is sent once, trimmed, with the CSRF token and no Idempotency-Key; 2. the resolved row comes back', async () => {
    const row = mismatch();
    const { api, sent } = answering({ kind: 'ok', status: 200, data: resolved(row) });
    const outcome = await submitResolution(api, { id: row.id, resolution: '  seen on the next day’s statement \n' }, 'csrf-123');
    assert.deepEqual(sent, [
      {
        procedure: 'operator.resolveMismatch',
        input: { id: row.id, resolution: 'seen on the next day’s statement' },
        headers: { 'X-CSRF-Token': 'csrf-123' },
      },
    ]);
    assert.equal(outcome.kind, 'resolved');
    assert.equal(outcome.kind === 'resolved' && outcome.row.resolvedBy, 'operator:alice');
  });

  it('a 409 MISMATCH_ALREADY_RESOLVED is a refusal that says someone else resolved it; a lost answer is neither', async () => {
    const refused = {
      kind: 'refused',
      status: 409,
      reason: 'MISMATCH_ALREADY_RESOLVED',
      message: 'Already resolved by operator:bob.',
    } as const;
    const first = await submitResolution(answering({ ...refused, retryAfterSeconds: undefined }).api, { id: 'x', resolution: 'y' }, 'c');
    assert.deepEqual(first, {
      kind: 'refused',
      refusal: {
        status: 409,
        reason: 'MISMATCH_ALREADY_RESOLVED',
        message: 'Already resolved by operator:bob.',
        retryAfterSeconds: undefined,
      },
    });
    assert.equal(resolvedElsewhere(first), true);
    const lost = await submitResolution(answering({ kind: 'lost', message: 'fetch failed' }).api, { id: 'x', resolution: 'y' }, 'c');
    assert.deepEqual(lost, { kind: 'lost', message: 'fetch failed' });
    assert.equal(resolvedElsewhere(lost), false);
  });

  it('1. a row on its way is remembered as sending; 2. its answer ends that and keeps the resolved row; 3. sending again clears the last outcome', () => {
    const row = mismatch();
    const sent = resolving(NOTHING_RESOLVING, { kind: 'sent', id: row.id });
    assert.deepEqual(sent.sending, [row.id]);
    const done = resolving(sent, { kind: 'answered', id: row.id, outcome: { kind: 'resolved', row: resolved(row) } });
    assert.deepEqual(done.sending, []);
    assert.deepEqual(
      done.resolvedHere.map((r) => r.id),
      [row.id],
    );
    const lost = resolving(resolving(done, { kind: 'sent', id: 'other' }), {
      kind: 'answered',
      id: 'other',
      outcome: { kind: 'lost', message: 'x' },
    });
    assert.equal(lost.outcomes.other?.kind, 'lost');
    assert.equal(resolving(lost, { kind: 'sent', id: 'other' }).outcomes.other, undefined);
  });

  it('keeps the row someone else resolved, found after the 409, once however often it is found', () => {
    const row = resolved(mismatch(), 'operator:bob');
    const state = resolving(resolving(NOTHING_RESOLVING, { kind: 'found_resolved', row }), { kind: 'found_resolved', row });
    assert.deepEqual(
      state.resolvedHere.map((r) => r.resolvedBy),
      ['operator:bob'],
    );
  });
});
