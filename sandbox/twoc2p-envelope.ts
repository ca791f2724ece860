/**
 * The Payment Maintenance API's envelope, as the sandbox's 2C2P side of it: the XML inside, the JWE
 * around the XML and the JWS around the JWE (see sandbox/twoc2p-maintenance.ts for what 2C2P documents).
 *
 * Written with node:crypto rather than jose, on purpose (as sandbox/twoc2p-wire.ts does for HS256): the
 * adapter uses jose, and a second, independent implementation of RSA-OAEP + A256GCM and PS256 checks
 * that the two sides speak the same RFC 7516 / RFC 7515 compact forms, not the same library.
 */
import {
  constants,
  createCipheriv,
  createDecipheriv,
  privateDecrypt,
  publicEncrypt,
  randomBytes,
  sign,
  verify,
  type KeyObject,
} from 'node:crypto';

const b64url = (bytes: Buffer | string) => Buffer.from(bytes).toString('base64url');
const BASE64URL_RE = /^[A-Za-z0-9_-]*$/;

function readHeader(part: string): Record<string, unknown> | null {
  if (!BASE64URL_RE.test(part)) return null;
  try {
    const header: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return typeof header === 'object' && header !== null && !Array.isArray(header) ? (header as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// JWS, PS256 (RSASSA-PSS, SHA-256, MGF1 SHA-256, salt = 32 bytes as RFC 7518 §3.5 requires)

const PSS = { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 } as const;
/** The header of 2C2P's documented sample: {"alg":"PS256","typ":"JWT"}. */
const JWS_HEADER = b64url(JSON.stringify({ alg: 'PS256', typ: 'JWT' }));

export function signPs256(payload: string, privateKey: KeyObject): string {
  const input = `${JWS_HEADER}.${b64url(payload)}`;
  return `${input}.${sign('sha256', Buffer.from(input, 'ascii'), { key: privateKey, ...PSS }).toString('base64url')}`;
}

/** The parts of a compact JWS, or null when the text is not one (or not PS256). */
export function readJws(text: string): { input: string; payload: string; signature: Buffer } | null {
  const parts = text.split('.');
  if (parts.length !== 3) return null;
  const [header = '', payload = '', signature = ''] = parts;
  if (readHeader(header)?.alg !== 'PS256' || !BASE64URL_RE.test(payload) || !BASE64URL_RE.test(signature)) return null;
  return {
    input: `${header}.${payload}`,
    payload: Buffer.from(payload, 'base64url').toString('utf8'),
    signature: Buffer.from(signature, 'base64url'),
  };
}

/** Never throws: a malformed key or signature is simply "not verified". */
export function verifyPs256(jws: { input: string; signature: Buffer }, publicKey: KeyObject): boolean {
  try {
    return verify('sha256', Buffer.from(jws.input, 'ascii'), { key: publicKey, ...PSS }, jws.signature);
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// JWE, RSA-OAEP (SHA-1, as RFC 7518 §4.3 defines "RSA-OAEP") + A256GCM

/** The header of 2C2P's documented sample: {"alg":"RSA-OAEP","enc":"A256GCM"}. */
const JWE_HEADER = b64url(JSON.stringify({ alg: 'RSA-OAEP', enc: 'A256GCM' }));
const OAEP = { padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha1' } as const;

export function encryptRsaOaep(plaintext: string, publicKey: KeyObject): string {
  const cek = randomBytes(32);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', cek, iv);
  cipher.setAAD(Buffer.from(JWE_HEADER, 'ascii'));
  const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  const encryptedKey = publicEncrypt({ key: publicKey, ...OAEP }, cek);
  return [JWE_HEADER, b64url(encryptedKey), b64url(iv), b64url(ciphertext), b64url(cipher.getAuthTag())].join('.');
}

/** The plaintext of a compact JWE for `privateKey`; null for anything that does not decrypt. */
export function decryptRsaOaep(text: string, privateKey: KeyObject): string | null {
  const parts = text.split('.');
  if (parts.length !== 5 || !parts.every((part) => BASE64URL_RE.test(part))) return null;
  const [header = '', encryptedKey = '', iv = '', ciphertext = '', tag = ''] = parts;
  const fields = readHeader(header);
  if (fields?.alg !== 'RSA-OAEP' || fields.enc !== 'A256GCM') return null;
  try {
    const cek = privateDecrypt({ key: privateKey, ...OAEP }, Buffer.from(encryptedKey, 'base64url'));
    if (cek.length !== 32) return null;
    const decipher = createDecipheriv('aes-256-gcm', cek, Buffer.from(iv, 'base64url'));
    decipher.setAAD(Buffer.from(header, 'ascii'));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(ciphertext, 'base64url')), decipher.final()]).toString('utf8');
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// XML: the small subset the maintenance messages use (elements, text, attributes read and ignored)

export interface XmlElement {
  name: string;
  text: string;
  children: XmlElement[];
}

const ENTITIES: Readonly<Record<string, string>> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" };

function decodeEntities(text: string): string | null {
  let failed = false;
  const decoded = text.replace(/&(#x[0-9A-Fa-f]+|#\d+|[a-z]+);?/g, (match, entity: string) => {
    if (!match.endsWith(';')) failed = true;
    if (entity.startsWith('#x')) return String.fromCodePoint(Number.parseInt(entity.slice(2), 16));
    if (entity.startsWith('#')) return String.fromCodePoint(Number(entity.slice(1)));
    const known = ENTITIES[entity];
    if (known === undefined) failed = true;
    return known ?? '';
  });
  return failed ? null : decoded;
}

export function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => `&${Object.keys(ENTITIES).find((k) => ENTITIES[k] === c)};`);
}

const NAME = '[A-Za-z_][A-Za-z0-9_.-]*';
const OPEN_RE = new RegExp(`^<(${NAME})((?:\\s+${NAME}\\s*=\\s*(?:"[^"<]*"|'[^'<]*'))*)\\s*(/?)>`);

/**
 * Parses one XML document. A DOCTYPE, CDATA or processing instruction other than the XML
 * declaration is refused (no entity expansion, no external resources); so is mixed content.
 */
export function parseXml(source: string): XmlElement | null {
  let rest = source.replace(/^\uFEFF/, '').replace(/^\s*<\?xml\s[^?]*\?>/, '');
  const skip = () => {
    for (;;) {
      const trimmed = rest.replace(/^\s+/, '');
      if (!trimmed.startsWith('<!--')) return void (rest = trimmed);
      const end = trimmed.indexOf('-->');
      if (end < 0) return void (rest = trimmed);
      rest = trimmed.slice(end + 3);
    }
  };
  const element = (depth: number): XmlElement | null => {
    if (depth > 8) return null;
    skip();
    const open = OPEN_RE.exec(rest);
    if (!open) return null;
    const name = open[1] ?? '';
    rest = rest.slice(open[0].length);
    if (open[3] === '/') return { name, text: '', children: [] };
    const children: XmlElement[] = [];
    let text = '';
    for (;;) {
      const lt = rest.indexOf('<');
      if (lt < 0) return null;
      text += rest.slice(0, lt);
      rest = rest.slice(lt);
      if (rest.startsWith('<!--')) {
        skip();
        continue;
      }
      if (rest.startsWith(`</${name}`)) {
        const close = new RegExp(`^</${name}\\s*>`).exec(rest);
        if (!close) return null;
        rest = rest.slice(close[0].length);
        break;
      }
      if (rest.startsWith('</') || rest.startsWith('<!') || rest.startsWith('<?')) return null;
      const child = element(depth + 1);
      if (!child) return null;
      children.push(child);
    }
    const decoded = decodeEntities(text);
    if (decoded === null || (children.length > 0 && decoded.trim() !== '')) return null;
    return { name, text: children.length > 0 ? '' : decoded, children };
  };
  const root = element(0);
  skip();
  return root && rest === '' ? root : null;
}

/** A flat element's children as name → text (the first of each name). */
export function fieldsOf(element: XmlElement): Map<string, string> {
  const fields = new Map<string, string>();
  for (const child of element.children) if (!fields.has(child.name)) fields.set(child.name, child.text.trim());
  return fields;
}

/** A text, children in order, or `{ each }`: the same element repeated; undefined is left out. */
export type XmlValue = string | undefined | XmlFields | { each: readonly XmlValue[] };
export type XmlFields = readonly (readonly [string, XmlValue])[];

/** <name>…</name>, children in the order given. */
export function writeXml(name: string, value: XmlValue, indent = ''): string {
  if (value === undefined) return '';
  if (typeof value === 'string') return `${indent}<${name}>${escapeXml(value)}</${name}>`;
  if ('each' in value)
    return value.each
      .map((item) => writeXml(name, item, indent))
      .filter((line) => line !== '')
      .join('\n');
  const inner = value.map(([child, v]) => writeXml(child, v, `${indent}  `)).filter((line) => line !== '');
  return `${indent}<${name}>\n${inner.join('\n')}\n${indent}</${name}>`;
}
