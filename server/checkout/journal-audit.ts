/**
 * Verifies the payment journal's hash chains outside the database: each stream must run 1, 2, 3…
 * with no gap, each row must name the previous row's hash, and each hash must be sha256 of the
 * previous hash and the row's canonical content, rebuilt here from the stored fields exactly as
 * append_payment_event() built it. The first row that fails is reported; everything after it in its
 * stream is suspect too.
 *
 * What a chain cannot show alone: rows cut off the END of a stream leave a shorter, valid chain. Keep
 * the heads (`npm run audit -- --heads FILE` writes them, `--against FILE` compares) where the
 * database's administrators cannot rewrite them to catch that as well.
 */
import { createHash } from 'node:crypto';
import type postgres from 'postgres';

export const GENESIS_HASH = '0'.repeat(64);

export interface BrokenLink {
  id: number;
  stream: string;
  seq: number;
  reason: 'seq_gap' | 'prev_hash_mismatch' | 'hash_mismatch' | 'stream_truncated' | 'stream_missing';
  detail: string;
}

export interface JournalAudit {
  rows: number;
  streams: number;
  broken: BrokenLink | undefined;
  /** Each stream's last seq and hash: what `--heads` saves. */
  heads: Map<string, { seq: number; hash: string }>;
}

interface Row {
  id: string;
  stream: string;
  seq: number;
  order_id: string | null;
  at_text: string;
  kind: string;
  data_text: string;
  prev_hash: string;
  hash: string;
}

export function eventHash(prevHash: string, row: Omit<Row, 'id' | 'prev_hash' | 'hash'>): string {
  const content = [row.stream, String(row.seq), row.order_id ?? '', row.at_text, row.kind, row.data_text].join('\n');
  return createHash('sha256').update(`${prevHash}\n${content}`, 'utf8').digest('hex');
}

export async function auditJournal(
  sql: postgres.Sql,
  options: {
    onProgress?: (rows: number) => void;
    against?: Map<string, { seq: number; hash: string }>;
    /** Only these streams (default: all). */
    streams?: string[];
  } = {},
): Promise<JournalAudit> {
  const heads = new Map<string, { seq: number; hash: string }>();
  let rows = 0;
  let broken: BrokenLink | undefined;
  let previous: { stream: string; seq: number; hash: string } | undefined;

  const check = (row: Row): BrokenLink | undefined => {
    const id = Number(row.id);
    const sameStream = previous?.stream === row.stream;
    const expectedSeq = sameStream ? previous!.seq + 1 : 1;
    const expectedPrev = sameStream ? previous!.hash : GENESIS_HASH;
    if (row.seq !== expectedSeq) {
      return {
        id,
        stream: row.stream,
        seq: row.seq,
        reason: 'seq_gap',
        detail: `expected seq ${expectedSeq}: a row before it was deleted`,
      };
    }
    if (row.prev_hash !== expectedPrev) {
      return { id, stream: row.stream, seq: row.seq, reason: 'prev_hash_mismatch', detail: "does not name the previous row's hash" };
    }
    if (eventHash(row.prev_hash, row) !== row.hash) {
      return { id, stream: row.stream, seq: row.seq, reason: 'hash_mismatch', detail: 'its content was changed after it was written' };
    }
    return undefined;
  };

  // A cursor: a journal of millions of rows is read a batch at a time, never all at once.
  const cursor = sql<Row[]>`
    select id::text, stream, seq, order_id::text, kind, prev_hash, hash, data::text as data_text,
           to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as at_text
      from payment_events
     where ${options.streams ? sql`stream = any(${options.streams})` : sql`true`}
     order by stream, seq`.cursor(2000);
  for await (const batch of cursor) {
    for (const row of batch) {
      rows++;
      if (!broken) broken = check(row);
      previous = { stream: row.stream, seq: row.seq, hash: row.hash };
      heads.set(row.stream, { seq: row.seq, hash: row.hash });
    }
    options.onProgress?.(rows);
  }

  if (!broken && options.against) {
    for (const [stream, saved] of options.against) {
      if (options.streams && !options.streams.includes(stream)) continue;
      const head = heads.get(stream);
      if (!head) {
        broken = { id: 0, stream, seq: saved.seq, reason: 'stream_missing', detail: 'the whole stream is gone' };
        break;
      }
      if (head.seq < saved.seq || (head.seq === saved.seq && head.hash !== saved.hash)) {
        broken = {
          id: 0,
          stream,
          seq: head.seq,
          reason: 'stream_truncated',
          detail: `the saved head was seq ${saved.seq}; the stream now ends at seq ${head.seq}`,
        };
        break;
      }
    }
  }
  return { rows, streams: heads.size, broken, heads };
}
