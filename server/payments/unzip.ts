/**
 * Reads the files of a zip archive (APPNOTE.TXT 4.3: the end record, the central directory, each
 * local header), stored or deflated — what gateways ship statements in (Alipay's 对账单). Names are
 * decoded with `nameEncoding` unless the entry says UTF-8 (general purpose bit 11): Alipay's are GBK.
 */
import { inflateRawSync } from 'node:zlib';

export interface ZipEntry {
  name: string;
  data: Buffer;
}

const END_OF_CENTRAL_DIRECTORY = 0x06054b50;
const CENTRAL_FILE_HEADER = 0x02014b50;
const LOCAL_FILE_HEADER = 0x04034b50;
/** A statement is a few files of some megabytes: anything far larger is not one. */
const MAX_ENTRY_BYTES = 256 * 1024 * 1024;

export function unzip(archive: Buffer, nameEncoding = 'utf-8'): ZipEntry[] {
  const end = findEnd(archive);
  const count = archive.readUInt16LE(end + 10);
  let at = archive.readUInt32LE(end + 16);
  const entries: ZipEntry[] = [];
  for (let i = 0; i < count; i++) {
    if (archive.readUInt32LE(at) !== CENTRAL_FILE_HEADER) throw new Error('zip: broken central directory');
    const flags = archive.readUInt16LE(at + 8);
    const method = archive.readUInt16LE(at + 10);
    const compressed = archive.readUInt32LE(at + 20);
    const size = archive.readUInt32LE(at + 24);
    const nameLength = archive.readUInt16LE(at + 28);
    const extraLength = archive.readUInt16LE(at + 30);
    const commentLength = archive.readUInt16LE(at + 32);
    const local = archive.readUInt32LE(at + 42);
    const rawName = archive.subarray(at + 46, at + 46 + nameLength);
    const name = new TextDecoder(flags & 0x800 ? 'utf-8' : nameEncoding).decode(rawName);
    entries.push({ name, data: readEntry(archive, local, method, compressed, size) });
    at += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

function findEnd(archive: Buffer): number {
  // The end record is the last 22 bytes, or before a comment of up to 65535 bytes.
  for (let at = archive.length - 22; at >= Math.max(0, archive.length - 22 - 0xffff); at--) {
    if (archive.readUInt32LE(at) === END_OF_CENTRAL_DIRECTORY) return at;
  }
  throw new Error('zip: no end of central directory');
}

function readEntry(archive: Buffer, local: number, method: number, compressed: number, size: number): Buffer {
  if (archive.readUInt32LE(local) !== LOCAL_FILE_HEADER) throw new Error('zip: broken local header');
  if (size > MAX_ENTRY_BYTES) throw new Error('zip: entry too large');
  const start = local + 30 + archive.readUInt16LE(local + 26) + archive.readUInt16LE(local + 28);
  const bytes = archive.subarray(start, start + compressed);
  if (method === 0) return Buffer.from(bytes);
  if (method === 8) return inflateRawSync(bytes, { maxOutputLength: MAX_ENTRY_BYTES });
  throw new Error(`zip: compression method ${method} not supported`);
}
