/**
 * Just enough of Stripe's Search Query Language (https://docs.stripe.com/search) for PaymentIntents:
 *
 *   metadata['out_trade_no']:'PO…'      metadata["k"]:"v"      status:'succeeded'
 *   currency:'cny'      amount:1230      amount>1000      -status:'canceled'
 *
 * clauses joined by AND or by OR (Stripe forbids mixing them), at most 10. Anything else is refused
 * with a 400 naming what is unsupported, rather than silently matching too much or too little.
 */

export type SearchField = { kind: 'metadata'; key: string } | { kind: 'status' } | { kind: 'currency' } | { kind: 'amount' };
export type SearchOperator = ':' | '>' | '<' | '>=' | '<=';

export interface SearchClause {
  negated: boolean;
  field: SearchField;
  operator: SearchOperator;
  value: string | number;
}

export interface SearchQuery {
  join: 'AND' | 'OR';
  clauses: SearchClause[];
}

export class SearchQueryError extends Error {}

const MAX_CLAUSES = 10;
const FIELDS_URL = 'https://docs.stripe.com/search#query-fields-for-payment-intents';

class Scanner {
  position = 0;
  constructor(readonly text: string) {}

  skipSpace(): void {
    while (this.position < this.text.length && /\s/.test(this.text[this.position] ?? '')) this.position += 1;
  }

  done(): boolean {
    this.skipSpace();
    return this.position >= this.text.length;
  }

  peek(): string {
    return this.text[this.position] ?? '';
  }

  fail(what: string): never {
    throw new SearchQueryError(`Invalid search query: ${what} at position ${this.position} of \`${this.text}\`.`);
  }

  /** A single- or double-quoted string; a backslash escapes the next character. */
  quoted(): string {
    const quote = this.peek();
    if (quote !== "'" && quote !== '"') this.fail('expected a quoted string');
    this.position += 1;
    let out = '';
    for (;;) {
      const ch = this.text[this.position];
      if (ch === undefined) this.fail('unterminated string');
      this.position += 1;
      if (ch === '\\') {
        const next = this.text[this.position];
        if (next === undefined) this.fail('unterminated string');
        out += next;
        this.position += 1;
      } else if (ch === quote) {
        return out;
      } else {
        out += ch;
      }
    }
  }

  word(): string {
    const match = /^[A-Za-z_][A-Za-z0-9_.]*/.exec(this.text.slice(this.position));
    if (!match) this.fail('expected a field name');
    this.position += match[0].length;
    return match[0];
  }
}

function parseField(scanner: Scanner): SearchField {
  const name = scanner.word();
  if (name === 'metadata') {
    if (scanner.peek() !== '[') scanner.fail('expected [ after metadata');
    scanner.position += 1;
    const key = scanner.quoted();
    if (scanner.peek() !== ']') scanner.fail('expected ] after the metadata key');
    scanner.position += 1;
    return { kind: 'metadata', key };
  }
  if (name === 'status' || name === 'currency' || name === 'amount') return { kind: name };
  throw new SearchQueryError(
    `Field \`${name}\` is an unsupported search field for resource \`payment_intents\` in this sandbox. See ${FIELDS_URL} for Stripe's list.`,
  );
}

function parseOperator(scanner: Scanner): SearchOperator {
  for (const op of ['>=', '<=', ':', '>', '<'] as const) {
    if (scanner.text.startsWith(op, scanner.position)) {
      scanner.position += op.length;
      return op;
    }
  }
  return scanner.fail('expected one of : > < >= <=');
}

function parseClause(scanner: Scanner): SearchClause {
  scanner.skipSpace();
  const negated = scanner.peek() === '-';
  if (negated) scanner.position += 1;
  const field = parseField(scanner);
  const operator = parseOperator(scanner);
  let value: string | number;
  if (scanner.peek() === "'" || scanner.peek() === '"') {
    value = scanner.quoted();
  } else {
    const match = /^-?\d+/.exec(scanner.text.slice(scanner.position));
    if (!match) scanner.fail('expected a quoted string or a number');
    scanner.position += match[0].length;
    value = Number(match[0]);
  }
  if (field.kind === 'amount') {
    const amount = typeof value === 'number' ? value : /^-?\d+$/.test(value) ? Number(value) : NaN;
    if (!Number.isSafeInteger(amount)) throw new SearchQueryError('Invalid search query: amount must be compared with an integer.');
    value = amount;
  } else {
    if (operator !== ':') throw new SearchQueryError(`Invalid search query: ${field.kind} only supports the : operator.`);
    value = String(value);
  }
  return { negated, field, operator, value };
}

export function parseSearchQuery(text: string): SearchQuery {
  const scanner: Scanner = new Scanner(text);
  if (scanner.done()) throw new SearchQueryError('Invalid search query: the query is empty.');
  const clauses: SearchClause[] = [parseClause(scanner)];
  let join: 'AND' | 'OR' | undefined;
  while (!scanner.done()) {
    const match = /^(AND|OR)\s/.exec(scanner.text.slice(scanner.position));
    if (!match) scanner.fail('expected AND or OR between clauses');
    const word = match[1] as 'AND' | 'OR';
    if (join && join !== word) throw new SearchQueryError('Invalid search query: AND and OR cannot be combined in one query.');
    join = word;
    scanner.position += word.length;
    clauses.push(parseClause(scanner));
    if (clauses.length > MAX_CLAUSES) throw new SearchQueryError(`Invalid search query: at most ${MAX_CLAUSES} clauses are allowed.`);
  }
  return { join: join ?? 'AND', clauses };
}
