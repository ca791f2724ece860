/**
 * The XML of 2C2P's Payment Maintenance API: writing a flat request, and reading an answer — its
 * elements' text by name, and the records of one repeated list (refund status's refundList). Only
 * the subset these messages use: no DOCTYPE, CDATA or processing instructions (nothing is expanded
 * or fetched), attributes read past and ignored.
 */

/** An answer: each element's text by name, and the repeated child records of any list element. */
export interface XmlAnswer {
  name: string;
  fields: Readonly<Record<string, string>>;
  /** refundList → [{ idempotencyID, amount, status, … }, …] */
  lists: Readonly<Record<string, readonly Readonly<Record<string, string>>[]>>;
}

const ESCAPES: Readonly<Record<string, string>> = { '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;' };
const ENTITIES: Readonly<Record<string, string>> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" };

/** <root><a>…</a>…</root>, fields in order; undefined ones left out. */
export function xmlDocument(root: string, fields: readonly (readonly [string, string | undefined])[]): string {
  const lines = fields.flatMap(([name, value]) =>
    value === undefined ? [] : [`  <${name}>${value.replace(/[<>&"']/g, (c) => ESCAPES[c] ?? c)}</${name}>`],
  );
  return `<${root}>\n${lines.join('\n')}\n</${root}>`;
}

interface Node {
  name: string;
  text: string;
  children: Node[];
}

const TOKEN_RE =
  /<!--[\s\S]*?-->|<\?xml[^?]*\?>|<(\/?)([A-Za-z_][\w.-]*)(?:\s+[\w.:-]+\s*=\s*(?:"[^"<]*"|'[^'<]*'))*\s*(\/?)>|([^<]+)|(<)/g;

function decode(text: string): string | null {
  let ok = true;
  const out = text.replace(/&([a-z]+|#\d+|#x[0-9a-fA-F]+);/g, (_, entity: string) => {
    if (entity.startsWith('#x')) return String.fromCodePoint(Number.parseInt(entity.slice(2), 16));
    if (entity.startsWith('#')) return String.fromCodePoint(Number(entity.slice(1)));
    const known = ENTITIES[entity];
    if (known === undefined) ok = false;
    return known ?? '';
  });
  return ok ? out : null;
}

function tree(source: string): Node | null {
  const stack: Node[] = [{ name: '', text: '', children: [] }];
  for (const match of source.replace(/^\uFEFF/, '').matchAll(TOKEN_RE)) {
    const [token, closing, name, selfClosing, text, stray] = match;
    const top = stack.at(-1);
    if (stray !== undefined || !top) return null;
    if (text !== undefined) {
      top.text += text;
    } else if (name !== undefined && closing === '/') {
      if (top.name !== name || stack.length < 2) return null;
      stack.pop();
    } else if (name !== undefined) {
      const node = { name, text: '', children: [] };
      top.children.push(node);
      if (selfClosing !== '/') stack.push(node);
    } else if (!token.startsWith('<!--') && !token.startsWith('<?xml')) {
      return null;
    }
  }
  const document = stack[0];
  if (stack.length !== 1 || !document || document.children.length !== 1 || document.text.trim() !== '') return null;
  return document.children[0] ?? null;
}

function textOf(node: Node): string | null {
  return decode(node.text.trim());
}

function flat(node: Node): Record<string, string> | null {
  const fields: Record<string, string> = {};
  for (const child of node.children) {
    if (child.children.length > 0) continue;
    const text = textOf(child);
    if (text === null) return null;
    if (!Object.hasOwn(fields, child.name)) fields[child.name] = text;
  }
  return fields;
}

/** The answer in `source`, or null when it is not well-formed XML of this subset. */
export function parseXml(source: string): XmlAnswer | null {
  const root = tree(source);
  if (!root) return null;
  const fields = flat(root);
  if (!fields) return null;
  const lists: Record<string, Record<string, string>[]> = {};
  for (const child of root.children) {
    if (child.children.length === 0) continue;
    const records = child.children.map(flat);
    if (records.some((record) => record === null)) return null;
    lists[child.name] = records as Record<string, string>[];
  }
  return { name: root.name, fields, lists };
}
