/**
 * The sandbox's WeChat Pay platform certificate (平台证书): a self-signed X.509 v3 certificate for the
 * platform certificate key, the way GET /v3/certificates hands it to merchants in platform-certificate
 * mode. Node can parse certificates (X509Certificate) but not make them, so the DER is written here:
 * one certificate, RSA + sha256WithRSAEncryption, no extensions — exactly what a merchant's client
 * reads out of it (serial number, validity, public key), and no dependency that patches globals
 * (@peculiar/x509 needs a reflect-metadata polyfill installed process-wide).
 *
 * Made once, on the sandbox's first start, and kept with the merchant's other keys.
 */
import { createPrivateKey, createPublicKey, createSign, X509Certificate } from 'node:crypto';

function derLength(length: number): Buffer {
  if (length < 0x80) return Buffer.from([length]);
  const bytes: number[] = [];
  for (let rest = length; rest > 0; rest >>= 8) bytes.unshift(rest & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function der(tag: number, content: Buffer): Buffer {
  return Buffer.concat([Buffer.from([tag]), derLength(content.length), content]);
}

const sequence = (...items: Buffer[]) => der(0x30, Buffer.concat(items));
const set = (...items: Buffer[]) => der(0x31, Buffer.concat(items));

function oid(dotted: string): Buffer {
  const [first = 0, second = 0, ...rest] = dotted.split('.').map(Number);
  const bytes = [first * 40 + second];
  for (const arc of rest) {
    const chunk: number[] = [arc & 0x7f];
    for (let value = arc >> 7; value > 0; value >>= 7) chunk.unshift((value & 0x7f) | 0x80);
    bytes.push(...chunk);
  }
  return der(0x06, Buffer.from(bytes));
}

/** A positive INTEGER from upper-case hex (an X.509 serial is at most 20 octets). */
function integerFromHex(hex: string): Buffer {
  let bytes = Buffer.from(hex.length % 2 === 0 ? hex : `0${hex}`, 'hex');
  if ((bytes[0] ?? 0) & 0x80) bytes = Buffer.concat([Buffer.from([0]), bytes]);
  return der(0x02, bytes);
}

/** UTCTime, YYMMDDHHMMSSZ: RFC 5280 requires it for dates through 2049. */
function utcTime(date: Date): Buffer {
  const iso = date.toISOString();
  return der(
    0x17,
    Buffer.from(
      `${iso.slice(2, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}${iso.slice(11, 13)}${iso.slice(14, 16)}${iso.slice(17, 19)}Z`,
      'ascii',
    ),
  );
}

/** A distinguished name of UTF8String attributes, in the order given. */
function name(attributes: readonly (readonly [string, string])[]): Buffer {
  return sequence(...attributes.map(([type, value]) => set(sequence(oid(type), der(0x0c, Buffer.from(value, 'utf8'))))));
}

const SHA256_WITH_RSA = sequence(oid('1.2.840.113549.1.1.11'), Buffer.from([0x05, 0x00]));

/**
 * The subject of WeChat's platform certificates ("CN=Tenpay.com sign", O=财付通支付科技有限公司),
 * marked as the sandbox's. Self-signed: the real ones are issued by "Tenpay.com Root CA", which a
 * sandbox cannot sign for; merchants' clients only read the public key out of it.
 */
const SUBJECT = [
  ['2.5.4.6', 'CN'],
  ['2.5.4.10', '财付通支付科技有限公司 (sandbox)'],
  ['2.5.4.11', 'Tenpay.com CA Center'],
  ['2.5.4.3', 'Tenpay.com sign (PayOnce sandbox)'],
] as const;

export interface PlatformCertificate {
  /** 40 upper-case hex digits, the form WeChat uses for serial_no and Wechatpay-Serial. */
  serialNo: string;
  pem: string;
  notBefore: Date;
  notAfter: Date;
}

/** A platform certificate for `privateKeyPem`, valid for 5 years like WeChat's. */
export function makePlatformCertificate(privateKeyPem: string, serialNo: string, now: Date): PlatformCertificate {
  const privateKey = createPrivateKey(privateKeyPem);
  const spki = createPublicKey(privateKey).export({ type: 'spki', format: 'der' });
  const notBefore = new Date(Math.floor(now.getTime() / 1000) * 1000);
  const notAfter = new Date(notBefore.getTime() + 5 * 365 * 24 * 3_600_000);
  const subject = name(SUBJECT);
  const tbs = sequence(
    der(0xa0, der(0x02, Buffer.from([2]))), // [0] version v3
    integerFromHex(serialNo),
    SHA256_WITH_RSA,
    subject,
    sequence(utcTime(notBefore), utcTime(notAfter)),
    subject,
    spki,
  );
  const signature = createSign('RSA-SHA256').update(tbs).sign(privateKey);
  const certificate = sequence(tbs, SHA256_WITH_RSA, der(0x03, Buffer.concat([Buffer.from([0]), signature])));
  const body = certificate.toString('base64').replace(/.{1,64}/g, '$&\n');
  const pem = `-----BEGIN CERTIFICATE-----\n${body}-----END CERTIFICATE-----\n`;
  // Parsed back once: a certificate Node cannot read is a bug here, not something to hand out.
  const parsed = new X509Certificate(pem);
  if (parsed.serialNumber.toUpperCase().replace(/^0+/, '') !== serialNo.replace(/^0+/, '')) {
    throw new Error(`platform certificate serial ${parsed.serialNumber} is not ${serialNo}`);
  }
  if (!parsed.verify(parsed.publicKey)) throw new Error('platform certificate does not verify with its own key');
  return { serialNo, pem, notBefore, notAfter };
}
